"""What the lesson plan (docs/lecture.md) promises of the shipped lessons: TALON's budget stops a step's
growth (a full tree's draft forwards are its depth, no layer past the budget), and every trace was recorded
with a cost table measured through the forward it ran."""

from __future__ import annotations

import pytest

import shipped_traces

TALON_TRACES = [name for name in shipped_traces.names()
                if any(e["type"] == "run_started" and e["policy"] == "talon" for e in shipped_traces.events(name))]


def talon_steps(name: str) -> list[tuple[dict, dict]]:
    """(run_started, step_metrics) of every talon step in a trace."""
    started, steps = None, []
    for event in shipped_traces.events(name):
        if event["type"] == "run_started":
            started = event
        elif event["type"] == "step_metrics" and started["policy"] == "talon":
            steps.append((started, event))
    return steps


@pytest.mark.parametrize("name", TALON_TRACES)
def test_every_talon_step_with_a_full_budget_drafted_one_forward_per_layer(name):
    full = [(started, step) for started, step in talon_steps(name) if step["tree_size"] == started["params"]["budget"]]
    assert full, "a lesson with talon fills its budget at least once"
    for _, step in full:
        assert step["draft_forwards"] == step["depth"], step


@pytest.mark.parametrize("name", shipped_traces.names())
def test_every_lesson_was_recorded_with_a_measured_cost_table(name):
    sources = {e["costs"]["source"] for e in shipped_traces.events(name) if e["type"] == "run_started"}
    assert sources == {"measured"}, sources
