"""The acceptance walk in `verify` events carries the numbers acceptance used, and costs nothing with detail off."""

from __future__ import annotations

import json

import pytest
import torch

import engine.engine as engine_module
from engine.events import Verification, parse_event
from engine.request import GenerationRequest
from tiny_models import tiny_engine


@pytest.fixture(scope="module")
def engine():
    return tiny_engine(seed=3, dtype=torch.float64, draft_noise=0.6)


def run_recording_acceptance(engine, request, monkeypatch) -> tuple[list[Verification], list]:
    """The run's verify events, and every Acceptance the engine's acceptance functions returned."""
    returned = []
    for name in ("accept_greedy", "accept_sampled"):
        original = getattr(engine_module, name)

        def recording(*args, original=original, **kwargs):
            returned.append(original(*args, **kwargs))
            return returned[-1]

        monkeypatch.setattr(engine_module, name, recording)
    events = []
    engine.run(request, events.append)
    return [e for e in events if isinstance(e, Verification)], returned


@pytest.mark.parametrize("policy", ["chain", "talon"])
def test_sampled_walk_reports_the_draws_ratios_and_residuals_acceptance_used(engine, policy, monkeypatch):
    request = GenerationRequest(prompt="the cat sat on the", policy=policy, temperature=1.0, seed=7,
                                max_new_tokens=40)
    verifies, accepted = run_recording_acceptance(engine, request, monkeypatch)
    assert len(verifies) == len(accepted) > 0
    rules, rejections = set(), 0
    for event, acceptance in zip(verifies, accepted):
        assert [node.node for node in event.walk] == acceptance.path
        for node, visit in zip(event.walk, acceptance.visits):
            for check, used in zip(node.checks, visit.checks, strict=True):
                assert (check.child, check.token, check.rule, check.accepted) == (used.child, used.token, used.rule,
                                                                                    used.accepted)
                assert (check.p, check.q, check.ratio, check.u) == (used.p, used.q, used.ratio, used.u)
                assert check.accepted == (check.u < check.ratio)
                if check.rule == "sampled":
                    assert check.ratio == pytest.approx(min(1.0, check.p / check.q))
                rules.add(check.rule)
                rejections += not check.accepted
            assert node.drawn == visit.drawn
            if visit.left is not None:
                top = torch.topk(visit.left, len(node.residual_top))
                assert [t.token for t in node.residual_top] == top.indices.tolist()
                assert [t.p for t in node.residual_top] == pytest.approx(top.values.tolist())
        assert event.walk[-1].drawn == event.emitted.token
    assert rejections > 0, "the run should reject some drafts, so residual draws are exercised"
    assert rules == ({"sampled"} if policy == "chain" else {"deterministic"})


def test_greedy_walk_follows_the_argmax(engine, monkeypatch):
    request = GenerationRequest(prompt="the cat sat on the", policy="talon", max_new_tokens=24)
    verifies, _ = run_recording_acceptance(engine, request, monkeypatch)
    for event in verifies:
        for node in event.walk:
            best = node.top[0].token
            assert all(check.rule == "greedy" and check.u is None for check in node.checks)
            assert [c.accepted for c in node.checks] == [c.token == best and not any(
                earlier.token == best for earlier in node.checks[:i]) for i, c in enumerate(node.checks)]
        assert event.walk[-1].drawn == event.walk[-1].top[0].token == event.emitted.token


def test_detail_off_builds_no_per_candidate_events(engine):
    events = []
    engine.run(GenerationRequest(prompt="abc", policy="talon", max_new_tokens=12), events.append, detail=False)
    assert {e.type for e in events} == {"run_started", "text", "step_metrics", "run_finished"}


def test_version_1_traces_still_read():
    line = {"schema_version": 1, "run_id": "r", "policy": "talon", "type": "verify", "step": 1, "nodes": [],
            "emitted": {"parent": 0, "token": 5, "text": "x", "p": 0.9, "kind": "bonus"}, "accepted_path": [0]}
    event = parse_event(json.dumps(line))
    assert event.schema_version == 1 and event.walk is None
