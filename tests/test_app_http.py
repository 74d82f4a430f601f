"""The page, its JSON endpoints, settings and the boundary between engine and web."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.serve import add_arguments, settings_from_args
from app.settings import ServerSettings
from engine.events import parse_event
from engine.policies import policy_schemas
from tiny_models import tiny_engine

import shipped_traces

TEST_IDS = ["prompt", "policy", "run", "stop", "tree", "output", "metrics", "status", "step-timeline",
            "compare-toggle", "compare-run", "compare-table"]


@pytest.fixture(scope="module")
def client():
    engine = tiny_engine(seed=0)
    with TestClient(create_app(ServerSettings(), engine_factory=lambda settings: engine)) as client:
        yield client


def test_page_carries_every_stable_test_hook(client):
    html = client.get("/").text
    for test_id in TEST_IDS:
        assert f'data-testid="{test_id}"' in html, test_id


def test_page_names_the_server_model(client):
    assert "tiny-target" in client.get("/").text


def test_policies_endpoint_serves_the_engine_schemas_with_defaults(client):
    served = client.get("/api/policies").json()
    assert served == policy_schemas()
    assert served["talon"]["properties"]["mu"]["default"] == 0.03


def test_info_lists_only_server_loaded_drafters(client):
    info = client.get("/api/info").json()
    assert info["drafters"] == ["draft-lm", "prompt-lookup", "suffix"]
    assert info["default_policy"] == "talon" and "not measured on this device" in info["default_policy_note"]


def test_static_files_are_served_and_paths_cannot_escape(client):
    assert client.get("/static/js/model/events.js").status_code == 200
    assert client.get("/static/../app/settings.py").status_code == 404
    assert client.get("/static/%2e%2e/app/settings.py").status_code == 404


def test_shipped_traces_are_listed_and_parse_as_engine_events(client):
    listed = client.get("/api/traces").json()
    assert listed, "ship at least one trace for replay with no model"
    assert [entry["name"] for entry in listed] == shipped_traces.names()
    for entry in listed:
        assert client.get(entry["url"]).status_code == 200
        try:
            events = [parse_event(line) for line in shipped_traces.lines(entry["name"])]
        except ValueError as err:
            pytest.fail(f"{entry['name']} no longer matches the event schema; re-record it with "
                        f"`python -m tools.record static/traces/{entry['name']}.jsonl --policy ...`: {err}")
        assert events[0].type == "run_started" and events[-1].type == "run_finished"
        starts = [event for event in events if event.type == "run_started"]
        assert entry["policies"] == [event.policy for event in starts]
        temperatures = sorted({event.temperature for event in starts})
        assert entry["temperature"] == (temperatures[0] if len(temperatures) == 1 else temperatures)


def test_command_line_overrides_environment_which_overrides_defaults(monkeypatch):
    monkeypatch.setenv("SPECSCOPE_PORT", "9001")
    monkeypatch.setenv("SPECSCOPE_HOST", "0.0.0.0")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    settings = settings_from_args(parser.parse_args(["--host", "127.0.0.2", "--device", "cpu"]))
    assert (settings.host, settings.port, settings.device, settings.target) == ("127.0.0.2", 9001, "cpu", None)


def test_default_settings_bind_localhost_8000(monkeypatch):
    for name in ("SPECSCOPE_HOST", "SPECSCOPE_PORT"):
        monkeypatch.delenv(name, raising=False)
    assert (ServerSettings().host, ServerSettings().port) == ("127.0.0.1", 8000)


def test_the_command_line_has_a_serve_subcommand():
    from cli.main import build_parser

    args = build_parser().parse_args(["serve", "--port", "8123", "--replay-only"])
    assert args.command == "serve" and args.port == 8123 and args.replay_only is True
    assert callable(args.func)


def test_engine_never_imports_the_web_stack():
    code = ("import sys, engine.engine, engine.events, engine.request, engine.policies, engine.loading; "
            "print(sorted(m for m in ('fastapi', 'starlette', 'uvicorn', 'app') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_cli_wiring_of_serve_loads_no_web_stack_until_it_runs():
    code = ("import sys, cli.main; cli.main.build_parser(); "
            "print(sorted(m for m in ('fastapi', 'starlette', 'uvicorn') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_server_limits_come_from_flags_and_environment(monkeypatch):
    monkeypatch.setenv("SPECSCOPE_ALLOWED_HOSTS", "lab.example, projector.lan")
    monkeypatch.setenv("SPECSCOPE_SEND_TIMEOUT", "2.5")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    from_env = settings_from_args(parser.parse_args([]))
    assert from_env.allowed_hosts == ["lab.example", "projector.lan"] and from_env.send_timeout == 2.5
    assert from_env.api_docs is False
    given = settings_from_args(parser.parse_args(["--allowed-hosts", "a.example,b.example", "--api-docs",
                                                  "--max-run-tokens", "64", "--max-run-seconds", "30"]))
    assert given.allowed_hosts == ["a.example", "b.example"] and given.api_docs is True
    assert (given.max_run_tokens, given.max_run_seconds) == (64, 30.0)


def test_uvicorn_runs_the_hardened_protocols_with_bounded_messages_and_shutdown():
    from app.serve import MAX_MESSAGE_BYTES, uvicorn_config
    from app.transport import GuardedHttp, GuardedWebSockets

    settings = ServerSettings(handshake_timeout=4, shutdown_timeout=2)
    config = uvicorn_config(object(), settings)
    assert issubclass(config.http, GuardedHttp) and config.http.handshake_timeout == 4
    assert config.ws is GuardedWebSockets
    assert config.ws_max_size == MAX_MESSAGE_BYTES and config.timeout_graceful_shutdown == 2
    assert config.proxy_headers is False  # per-address caps must see the socket's address, not X-Forwarded-For
