"""`specscope record`: runs written as one trace, one after another or, with --batch, decoded together."""

from __future__ import annotations

import json

from engine.request import GenerationRequest
from tiny_models import tiny_engine
from tools.record import record


def runs_of(path) -> dict[str, list[dict]]:
    """The trace's events by run, as the page's splitRuns groups them."""
    runs: dict[str, list[dict]] = {}
    for line in path.read_text().splitlines():
        event = json.loads(line)
        runs.setdefault(event["run_id"], []).append(event)
    return runs


def test_a_batch_trace_holds_each_run_whole_its_steps_shared_and_its_output_the_runs_alone(tmp_path):
    engine = tiny_engine(seed=0)
    requests = [GenerationRequest(prompt="the cat sat on the mat", policy=policy, max_new_tokens=12)
                for policy in ("ar", "chain", "talon")]
    record(engine, requests, str(tmp_path / "alone.jsonl"))
    record(engine, requests, str(tmp_path / "batch.jsonl"), batch=True)
    alone, together = runs_of(tmp_path / "alone.jsonl"), runs_of(tmp_path / "batch.jsonl")
    assert len(together) == 3
    for events in together.values():
        assert events[0]["type"] == "run_started" and events[-1]["type"] == "run_finished"
    finished = lambda runs: [e[-1]["tokens"] for e in runs.values()]  # noqa: E731
    assert finished(together) == finished(alone)
    shared = [e["shared"] for events in together.values() for e in events if e["type"] == "step_metrics"]
    assert max(shared) == 3 and all(1 <= s <= 3 for s in shared)
    assert {e["shared"] for events in alone.values() for e in events if e["type"] == "step_metrics"} == {1}
