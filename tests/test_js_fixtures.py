"""The front end's test fixtures are events of the engine's schema, and the recorded ones are what the
engine emits today: a renamed field, a new required one or a changed walk fails here, not in a browser."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import recorded_fixtures
from engine.events import EVENT_ADAPTER

JS = Path(__file__).resolve().parent / "js"
FIXTURE_MODULES = ("fixtures.mjs", "recorded.mjs")

# Prints every exported array of events of a module as JSON: {export name: [event, ...]}.
DUMP = """
const module = await import(new URL(process.argv[1], "file://" + process.cwd() + "/").href);
const runs = Object.fromEntries(Object.entries(module).filter(
  ([, value]) => Array.isArray(value) && value.length && value.every((e) => e && typeof e.type === "string")));
process.stdout.write(JSON.stringify(runs));
"""


def exported_runs(module: str) -> dict[str, list[dict[str, Any]]]:
    node = shutil.which("node")
    assert node is not None, "node is not installed: `make browser` installs it"
    result = subprocess.run([node, "--input-type=module", "-e", DUMP, f"tests/js/{module}"], cwd=JS.parent.parent,
                            capture_output=True, text=True, timeout=60, check=True)
    return json.loads(result.stdout)


def drift(given: Any, parsed: Any, where: str = "") -> list[str]:
    """Where a fixture says something the schema does not read back: a key it does not know, or a value
    that comes back different. Keys the fixture leaves out are the schema's defaults."""
    if isinstance(given, dict):
        if not isinstance(parsed, dict):
            return [f"{where}: an object where the schema has {type(parsed).__name__}"]
        out = [f"{where}.{key}: not in the schema" for key in given if key not in parsed]
        return out + [d for key in given if key in parsed for d in drift(given[key], parsed[key], f"{where}.{key}")]
    if isinstance(given, list):
        if not isinstance(parsed, list) or len(given) != len(parsed):
            return [f"{where}: a list of {len(given)} read back as {parsed!r}"]
        return [d for i, (a, b) in enumerate(zip(given, parsed)) for d in drift(a, b, f"{where}[{i}]")]
    if given != parsed and not (isinstance(given, (int, float)) and isinstance(parsed, (int, float))
                                and abs(given - parsed) <= 1e-12 * max(1.0, abs(given))):
        return [f"{where}: {given!r} read back as {parsed!r}"]
    return []


@pytest.mark.parametrize("module", FIXTURE_MODULES)
def test_every_fixture_event_reads_back_unchanged_through_the_event_schema(module):
    runs = exported_runs(module)
    assert runs, f"{module} exports no runs of events"
    problems = []
    for name, events in runs.items():
        for i, event in enumerate(events):
            parsed = EVENT_ADAPTER.validate_python(event).model_dump(mode="json")
            problems += [f"{name}[{i}] ({event['type']}){d}" for d in drift(event, parsed)]
    assert not problems, "\n".join(problems[:20])


def test_the_recorded_fixtures_are_what_the_engine_emits_today():
    fresh = recorded_fixtures.module_text(recorded_fixtures.recorded_runs())
    assert fresh == recorded_fixtures.OUT.read_text(encoding="utf-8"), (
        "tests/js/recorded.mjs drifted from the engine's events: re-record it with "
        "`python tests/recorded_fixtures.py` and check the node tests against it")


def test_the_recorded_runs_cover_gating_rerank_and_sampled_rejection():
    runs = exported_runs("recorded.mjs")
    reasons = {c["reason"] for e in runs["talonGreedy"] if e["type"] == "draft_layer" for c in e["candidates"]}
    assert {"topk", "threshold"} <= reasons and reasons & {"below_threshold", "budget"}
    assert any(e["type"] == "tree" and e["pruned"] for e in runs["eagleGreedy"])
    rules = {check["rule"] for e in runs["chainSampled"] if e["type"] == "verify" for n in e["walk"] for check in n["checks"]}
    assert rules == {"sampled"}
    assert any(not check["accepted"] for e in runs["chainSampled"] if e["type"] == "verify"
               for n in e["walk"] for check in n["checks"])
