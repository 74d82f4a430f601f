"""The front end's test fixtures are events of the engine's schema, and the recorded ones are what the
engine emits today: a renamed field, a new required one or a changed walk fails here, not in a browser.
"Today" is up to float rounding, which differs between CPUs; the recording holds no decision close enough
to its bar for that rounding to flip, so one file holds on every CPU."""

from __future__ import annotations

import json
import math
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


# Float64 runs of the same model on two CPUs (an AMD Zen 5, an Intel Xeon) differ in the last digits, as their
# kernels sum in different orders (5e-15 relative at most between the two). 1e-9 is far above that and far below
# any change a reader would see; the absolute floor is for values near 0, where a residual's p − q cancels.
REL_TOL, ABS_TOL = 1e-9, 1e-12


def differences(committed: Any, fresh: Any, where: str = "") -> list[str]:
    """Where the fresh recording departs from the committed one: structure, strings, ints and booleans exactly,
    floats to REL_TOL. Both sides come through JSON, where node writes 1.0 as 1, so a float may face an int."""
    if isinstance(committed, dict) and isinstance(fresh, dict):
        if committed.keys() != fresh.keys():
            return [f"{where}: keys {sorted(committed)} are now {sorted(fresh)}"]
        return [d for key in sorted(committed) for d in differences(committed[key], fresh[key], f"{where}.{key}")]
    if isinstance(committed, list) and isinstance(fresh, list):
        if len(committed) != len(fresh):
            return [f"{where}: {len(committed)} items are now {len(fresh)}"]
        return [d for i, (a, b) in enumerate(zip(committed, fresh)) for d in differences(a, b, f"{where}[{i}]")]
    if _is_number(committed) and _is_number(fresh) and (isinstance(committed, float) or isinstance(fresh, float)):
        if math.isclose(committed, fresh, rel_tol=REL_TOL, abs_tol=ABS_TOL):
            return []
    elif type(committed) is type(fresh) and committed == fresh:
        return []
    return [f"{where}: {committed!r} is now {fresh!r}"]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def test_the_recorded_fixtures_match_the_engine_structurally_and_to_1e9_in_floats():
    fresh = json.loads(json.dumps(recorded_fixtures.recorded_runs()))
    found = differences(exported_runs("recorded.mjs"), fresh)
    assert not found, (
        "tests/js/recorded.mjs drifted from the engine's events: re-record it with "
        "`python tests/recorded_fixtures.py` and check the node tests against it. First differences "
        f"({len(found)} in all):\n" + "\n".join(found[:10]))


# A decision decided by less than this (relative) could go the other way on another CPU; the recording must not
# hold one, or the comparison above would hold on one CPU only. Only what the events record is checked: the
# drafter's cut below its k-th child, a sampled draft's race and the recovered token's draw leave no numbers.
MARGIN = 1e-6

# What a policy's gate compares with the layer's threshold: TALON a path score with μ·m_d, chain a free match's q
# with free_q. (EAGLE's and CAST's layer threshold is the frontier's lowest score, reported, not a gate.)
GATED_BY = {"talon": "score", "talon-adaptive": "score", "chain": "q"}


def near_tie(a: float, b: float) -> bool:
    """Whether a and b are within MARGIN of each other, relatively; equal zeros (a residual's) are no tie."""
    return abs(a - b) < MARGIN * max(abs(a), abs(b))


def split_near_tie(above: list[float], below: list[float]) -> bool:
    """Whether the lowest of the values on one side of a cut is within MARGIN of the highest on the other."""
    return bool(above and below) and near_tie(min(above), max(below))


def layer_near_ties(event: dict[str, Any], params: dict[str, Any]) -> list[str]:
    """A draft layer's close calls: the drafter's order of siblings by q, the kept/pruned and expanded cuts by
    path score, the gate's threshold, and CAST's width ratios against C1 and its depth ratio against C2."""
    candidates, found = event["candidates"], []
    by_parent: dict[int, list[float]] = {}
    for c in candidates:
        by_parent.setdefault(c["parent"], []).append(c["q"])
    found += [f"siblings under node {parent}: q {a!r} and {b!r}" for parent, qs in by_parent.items()
              for a, b in zip(qs, qs[1:]) if near_tie(a, b)]
    kept = [c["score"] for c in candidates if c["kept"]]
    pruned = [c["score"] for c in candidates if not c["kept"]]
    if split_near_tie(kept, pruned):
        found.append(f"kept score {min(kept)!r} and pruned {max(pruned)!r}")
    grown = [c["score"] for c in candidates if c["expanded"]]
    resting = [c["score"] for c in candidates if c["kept"] and not c["expanded"]]
    if split_near_tie(grown, resting):
        found.append(f"expanded score {min(grown)!r} and unexpanded {max(resting)!r}")
    gated = GATED_BY.get(event["policy"])
    if gated and event["threshold"] is not None:
        found += [f"{gated} {c[gated]!r} at the threshold {event['threshold']!r}" for c in candidates
                  if near_tie(c[gated], event["threshold"])]
    # A CAST layer the depth rule stopped reports C2 as its decisions' threshold, so C1 is read from the request.
    for c in candidates:
        detail = c["detail"]
        if "ratio" in detail and near_tie(detail["ratio"], params["c1"]):
            found.append(f"token {c['token']}: width ratio {detail['ratio']!r} at C1 {params['c1']!r}")
        if "depth_ratio" in detail and near_tie(detail["depth_ratio"], detail["depth_threshold"]):
            found.append(f"token {c['token']}: depth ratio {detail['depth_ratio']!r} "
                         f"at C2 {detail['depth_threshold']!r}")
    return found


def tree_near_ties(event: dict[str, Any], params: dict[str, Any]) -> list[str]:
    """The rerank's cut: the lowest path score verified against the highest dropped, and CAST's ratios against C3."""
    verified = [n["score"] for n in event["nodes"] if n["depth"] > 0]
    dropped = [c["score"] for c in event["pruned"]]
    found = [f"rerank: verified score {min(verified)!r} and pruned {max(dropped)!r}"] \
        if split_near_tie(verified, dropped) else []
    return found + [f"rerank of token {c['token']}: ratio {c['detail']['ratio']!r} at C3 {c['threshold']!r}"
                    for c in event["pruned"]
                    if "ratio" in c["detail"] and near_tie(c["detail"]["ratio"], c["threshold"])]


def verify_near_ties(event: dict[str, Any], params: dict[str, Any]) -> list[str]:
    """The acceptance walk's close calls: the order of the target's top tokens (its argmax decides a greedy
    check and the recovered or bonus token), the residual's, and every uniform draw against its ratio."""
    found = []
    for visit in event["walk"]:
        for odds in ("top", "residual_top"):
            ps = [t["p"] for t in visit[odds] or []]
            found += [f"node {visit['node']} {odds}: p {a!r} and {b!r}" for a, b in zip(ps, ps[1:]) if near_tie(a, b)]
        found += [f"node {visit['node']} child {check['child']}: u {check['u']!r} at the ratio {check['ratio']!r}"
                  for check in visit["checks"] if check["u"] is not None and near_tie(check["u"], check["ratio"])]
    return found


NEAR_TIES_OF = {"draft_layer": layer_near_ties, "tree": tree_near_ties, "verify": verify_near_ties}


def near_ties(events: list[dict[str, Any]]) -> list[str]:
    params = next(e["params"] for e in events if e["type"] == "run_started")
    return [f"step {e['step']} {e['type']}" + (f" depth {e['depth']}" if "depth" in e else "") + f": {tie}"
            for e in events if e["type"] in NEAR_TIES_OF for tie in NEAR_TIES_OF[e["type"]](e, params)]


def test_every_recorded_decision_is_at_least_1e6_from_its_threshold_or_a_tie():
    found = [f"{name} {tie}" for name, events in exported_runs("recorded.mjs").items() for tie in near_ties(events)]
    assert not found, ("a recorded decision is a near-tie another CPU's rounding could flip; change the requests in "
                       "tests/recorded_fixtures.py and re-record:\n" + "\n".join(found[:20]))


def test_the_recorded_runs_cover_gating_rerank_and_sampled_rejection():
    runs = exported_runs("recorded.mjs")
    reasons = {c["reason"] for e in runs["talonGreedy"] if e["type"] == "draft_layer" for c in e["candidates"]}
    assert {"topk", "threshold"} <= reasons and reasons & {"below_threshold", "budget"}
    assert any(e["type"] == "tree" and e["pruned"] for e in runs["eagleGreedy"])
    rules = {check["rule"] for e in runs["chainSampled"] if e["type"] == "verify" for n in e["walk"] for check in n["checks"]}
    assert rules == {"sampled"}
    assert any(not check["accepted"] for e in runs["chainSampled"] if e["type"] == "verify"
               for n in e["walk"] for check in n["checks"])
