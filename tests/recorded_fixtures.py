"""The front end's recorded test fixtures: tiny-model runs through the real engine and event schema.

`python tests/recorded_fixtures.py` writes them to tests/js/recorded.mjs, which the node tests import;
tests/test_js_fixtures.py re-records them and fails when the file and the engine's events drift apart.

The runs are deterministic (float64 tiny model, fixed seeds) up to the last digits of their floats, which
another CPU's kernels round differently: the test compares floats to 1e-9 and checks that no recorded
decision is a near-tie that rounding could flip (a request that makes one must change, not the check).
Only what a clock measures is not deterministic: every step's timings are replaced by fixed numbers, and
the run's totals, τ's companions c, wall time and tokens/s are recomputed from them, so the recorded run
stays self-consistent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from engine.engine import SpecEngine
from engine.request import GenerationRequest
from tiny_models import tiny_engine

OUT = Path(__file__).resolve().parent / "js" / "recorded.mjs"
PROMPT = "the cat sat on the mat. the cat"

# name in the JS module → the request recorded. Greedy talon (gating, budget), greedy eagle (rerank),
# sampled chain (rejection sampling with residuals), greedy cast (cost-aware widths; `calibrate` off, as its
# calibration reads the clock). A sharp tiny target (sharpness 8), so that TALON's gate prunes.
REQUESTS = {
    "talonGreedy": dict(policy="talon", max_new_tokens=4, temperature=0.0, params={"budget": 24, "top_k": 3, "mu": 0.5}),
    "eagleGreedy": dict(policy="eagle", max_new_tokens=6, temperature=0.0, params={"depth": 3, "top_k": 3, "total": 8}),
    "chainSampled": dict(policy="chain", max_new_tokens=8, temperature=1.0, seed=3, params={"gamma": 3}),
    "castGreedy": dict(policy="cast", max_new_tokens=4, temperature=0.0, params={"calibrate": False}),
}

# Fixed timings of one step (ms): a draft forward, the verify forward, the rest.
DRAFT_FORWARD_MS, VERIFY_MS, OTHER_MS, POLICY_MS = 1.0, 10.0, 0.5, 0.25


def record(engine: SpecEngine, name: str, request: dict[str, Any]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    engine.run(GenerationRequest(prompt=PROMPT, **request), lambda event: events.append(event.model_dump(mode="json")))
    return [{**event, "run_id": name} for event in steady(events)]


def steady(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events with clock readings replaced: fixed per-step timings, the run's totals from them."""
    steps = [e for e in events if e["type"] == "step_metrics"]
    for step in steps:
        step.update(draft_forward_ms=DRAFT_FORWARD_MS * step["draft_forwards"], verify_ms=VERIFY_MS,
                    other_ms=OTHER_MS, draft_ms=DRAFT_FORWARD_MS * step["draft_forwards"] + POLICY_MS)
    for event in events:
        if event["type"] == "run_finished":
            totals = {key: sum(step[key] for step in steps)
                      for key in ("draft_ms", "draft_forward_ms", "verify_ms", "other_ms")}
            forwards = sum(step["draft_forwards"] for step in steps)
            wall_s = sum(totals[key] for key in ("draft_ms", "verify_ms", "other_ms")) / 1000
            event.update(totals, wall_s=wall_s, tokens_per_s=event["new_tokens"] / wall_s,
                         c=DRAFT_FORWARD_MS / VERIFY_MS if forwards else None)
    return events


def recorded_runs() -> dict[str, list[dict[str, Any]]]:
    engine = tiny_engine(dtype=torch.float64, sharpness=8.0)
    return {name: record(engine, name, request) for name, request in REQUESTS.items()}


def module_text(runs: dict[str, list[dict[str, Any]]]) -> str:
    lines = ["// Recorded by `python tests/recorded_fixtures.py` from tiny-model runs (tests/recorded_fixtures.py);",
             "// do not edit by hand: tests/test_js_fixtures.py fails when this file and the engine drift apart."]
    for name, events in runs.items():
        lines.append(f"export const {name} = [")
        lines += [f"  {json.dumps(event, ensure_ascii=False, sort_keys=True)}," for event in events]
        lines.append("];")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    OUT.write_text(module_text(recorded_runs()), encoding="utf-8")
    print(f"wrote {OUT}", file=sys.stderr)
