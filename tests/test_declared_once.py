"""Facts declared once and read everywhere: the request's flags come from GenerationRequest, the page's
JavaScript names no policy (it reads the served schemas and /api/info), one grammar for policy specs."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from engine.errors import RequestError
from engine.policies import POLICIES, PolicySpec, parse_params, policy_params
from engine.request import GenerationRequest
from tools import bench, generate, record

ROOT = Path(__file__).resolve().parent.parent
STATIC_JS = ROOT / "static" / "js"
TEACHING_TEXT = STATIC_JS / "model" / "narration.js"  # the one module that speaks of policies by name


@pytest.mark.parametrize("command, fields", [(generate, ("temperature", "top_k", "top_p", "seed", "max_new_tokens")),
                                             (record, ("temperature", "top_k", "top_p", "seed", "max_new_tokens")),
                                             (bench, ("temperature", "seed", "max_new_tokens"))],
                         ids=["generate", "record", "bench"])
def test_every_request_flag_has_the_requests_default_stated_in_help(command, fields):
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    defaults = parser.parse_args([] if command is bench else ["out-or-prompt"])
    text = parser.format_help()
    for name in fields:
        default = GenerationRequest.model_fields[name].default
        assert getattr(defaults, name) == default, name
    assert re.search(r"--max-new-tokens MAX_NEW_TOKENS\s+most tokens generated \(1 to 8192; default: 128\)", text)


def test_no_javascript_module_but_the_teaching_text_names_a_policy():
    quoted = re.compile("|".join(rf"([\"'`]){re.escape(name)}\1" for name in POLICIES))
    named = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in sorted(STATIC_JS.rglob("*.js")) if path != TEACHING_TEXT
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if quoted.search(line)]
    assert named == []


def test_policy_specs_and_param_flags_share_one_grammar_and_one_check():
    spec = PolicySpec.parse(" talon:mu=0.05: budget = 30 ")
    assert (spec.label, spec.policy) == ("talon:mu=0.05: budget = 30", "talon")
    assert spec.params == {"mu": "0.05", "budget": "30"}
    assert parse_params(["mu=0.05", "budget = 30"]) == spec.params
    for broken in ("talon:mu", "talon:=1"):
        with pytest.raises(RequestError, match="expected key=value"):
            PolicySpec.parse(broken)
    with pytest.raises(RequestError, match="expects key=value"):
        parse_params(["mu"])
    # Text is read as the schema's types; JSON values are taken as they are, under the same bounds.
    assert policy_params("talon", spec.params) == policy_params("talon", {"mu": 0.05, "budget": 30}, text=False)
    for params, text in (({"mu": "7"}, True), ({"mu": 7}, False)):
        with pytest.raises(RequestError, match="less than or equal") as problem:
            policy_params("talon", params, text=text)
        assert problem.value.field == "params.mu"
    with pytest.raises(RequestError, match="finite"):
        policy_params("cast", {"c1": "inf"})
    with pytest.raises(RequestError, match="valid number"):
        policy_params("talon", {"mu": "0.05"}, text=False)


def test_the_page_reads_the_request_the_default_policy_and_the_presentations_from_the_server():
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import ServerSettings
    from engine.policies import DEFAULT_POLICY
    from engine.request import request_schema

    with TestClient(create_app(ServerSettings(replay_only=True))) as client:
        request = client.get("/api/request").json()
        info = client.get("/api/info").json()
        policies = client.get("/api/policies").json()
    assert request == request_schema()
    assert request["properties"]["temperature"]["minimumAboveZero"] == 0.01
    default = GenerationRequest.model_fields["max_new_tokens"].default
    assert request["properties"]["max_new_tokens"]["default"] == default
    assert info["default_policy"] == DEFAULT_POLICY, "a replay-only server still says which policy a form starts on"
    assert [name for name, schema in policies.items() if not schema["presentation"]["drafts"]] == ["ar"]
    assert [name for name, schema in policies.items() if schema["presentation"]["reranks"]] == ["eagle"]
    assert policies["chain"]["presentation"]["symbols"] == {"γ": "gamma"}
    for name, cls in POLICIES.items():
        symbols = policies[name]["presentation"]["symbols"]
        assert set(symbols.values()) <= set(cls.Params.model_fields), name
