"""What-if (engine/whatif.py): one step of a run re-run from its prefix, under the same or another policy."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine.errors import RequestError
from engine.request import GenerationRequest
from engine.whatif import WhatIfRequest
from tiny_models import TINY_VOCAB, tiny_engine

SETUP = {"prompt": "the cat sat on the mat", "policy": "talon", "max_new_tokens": 20, "temperature": 0.0, "seed": 0}


@pytest.fixture(scope="module")
def engine():
    return tiny_engine(seed=0)  # float32, greedy: the precision the page runs in


@pytest.fixture(scope="module")
def original(engine):
    events = []
    engine.run(GenerationRequest(**SETUP), events.append)
    return [event.model_dump() for event in events]


def prefix_before(events: list[dict], step: int) -> list[int]:
    return [token for event in events if event["type"] == "text" and event["step"] < step for token in event["tokens"]]


def step_events(events: list[dict], step: int) -> list[dict]:
    return [event for event in events if event.get("step") == step]


def what_if(engine, original, step: int, **changes) -> list[dict]:
    events = []
    request = WhatIfRequest(**{**SETUP, **changes}, step=step, prefix=prefix_before(original, step))
    engine.what_if(request, events.append)
    return [event.model_dump() for event in events]


def comparable(event: dict) -> dict:
    """An event without what differs between two runs of the same step: ids, times, and float noise."""
    dropped = {"run_id", "draft_ms", "draft_forward_ms", "verify_ms", "other_ms", "walk"}
    return {key: _rounded(value) for key, value in event.items() if key not in dropped}


def _rounded(value):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    return value


def test_what_if_with_the_runs_own_policy_redrafts_and_verifies_each_step_as_the_run_did(engine, original):
    steps = sorted({event["step"] for event in original if event["type"] == "step_metrics"})
    assert len(steps) >= 3
    for step in steps:
        again = [event for event in what_if(engine, original, step) if event.get("step") is not None]
        assert [event["type"] for event in again] == [event["type"] for event in step_events(original, step)]
        assert [comparable(event) for event in again] == [comparable(event) for event in step_events(original, step)]


def test_what_if_is_a_one_step_run_of_its_own_that_says_so(engine, original):
    events = what_if(engine, original, 2)
    started, finished = events[0], events[-1]
    metrics = next(event for event in events if event["type"] == "step_metrics")
    assert started["type"] == "run_started" and started["what_if_step"] == 2
    assert started["run_id"] not in {event["run_id"] for event in original}
    assert finished["type"] == "run_finished" and finished["steps"] == 1
    assert finished["stop_reason"] == "what_if"
    text = next(event for event in events if event["type"] == "text")
    assert finished["tokens"] == text["tokens"] and finished["tau"] == metrics["emitted"] == len(text["tokens"])
    assert metrics["new_tokens"] == len(prefix_before(original, 2)) + metrics["emitted"]


def test_raising_talons_mu_regates_the_step_with_fewer_kept_nodes(engine):
    # The tiny random draft is nearly uniform: at μ = 0.03 any layer past the forced one fills talon's budget, so
    # the step is short (4 tokens leave room for 3 layers) and μ is raised to where the gate bites.
    setup = {**SETUP, "max_new_tokens": 4}
    kept, layer_two = {}, {}
    for mu in (0.03, 0.9):
        events = []
        engine.what_if(WhatIfRequest(**setup, params={"mu": mu}, step=1, prefix=[]), events.append)
        kept[mu] = next(event.tree_size for event in events if event.type == "step_metrics")
        layer = next(event for event in events if event.type == "draft_layer" and event.depth == 2)
        layer_two[mu] = sum(candidate.kept for candidate in layer.candidates)
        assert layer.threshold == pytest.approx(mu * layer.anchor)
    assert kept[0.9] < kept[0.03] and layer_two[0.9] < layer_two[0.03]


def test_another_policy_redrafts_the_step_from_the_same_prefix(engine, original):
    events = what_if(engine, original, 2, policy="chain", params={"gamma": 3})
    tree = next(event for event in events if event["type"] == "tree")
    assert events[0]["policy"] == "chain" and len(tree["nodes"]) - 1 <= 3
    original_tree = next(event for event in step_events(original, 2) if event["type"] == "tree")
    assert tree["nodes"][0]["token"] == original_tree["nodes"][0]["token"], "the same root: the same prefix"


def test_a_what_if_leaves_the_next_run_as_it_would_have_been(engine, original):
    what_if(engine, original, 3, params={"mu": 0.9, "budget": 4})
    events = []
    engine.run(GenerationRequest(**SETUP), events.append)
    assert events[-1].tokens == original[-1]["tokens"]


def test_a_prefix_token_outside_the_vocabulary_is_refused_naming_its_place(engine):
    request = WhatIfRequest(**SETUP, step=2, prefix=[5, TINY_VOCAB])
    with pytest.raises(RequestError) as err:
        engine.what_if(request)
    assert err.value.field == "prefix.1" and str(TINY_VOCAB) in str(err.value)


@pytest.mark.parametrize("fields, wrong", [
    ({"step": 1, "prefix": list(range(20))}, "prefix"),  # no room left for the step under max_new_tokens
    ({"step": 4, "prefix": [1]}, "prefix"),  # three steps cannot have emitted one token
    ({"step": 0, "prefix": []}, "step"),
    ({"step": 1, "prefix": [-1]}, "prefix"),
    ({"step": 1, "prefix": ["1"]}, "prefix"),
])
def test_a_what_if_that_cannot_be_a_step_of_the_run_is_refused_naming_the_field(fields, wrong):
    with pytest.raises(ValidationError) as err:
        WhatIfRequest(**SETUP, **fields)
    assert err.value.errors()[0]["loc"][0] == wrong
