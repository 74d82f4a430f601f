"""A server that batches (`--max-batch`, app/batching.py): runs from different clients share one batch,
each client hears only its own run, outputs equal each run alone, and a cancel still stops within a step."""

from __future__ import annotations

from contextlib import ExitStack

import pytest
from fastapi.testclient import TestClient

from app.main import create_app, max_batch_of
from app.settings import ServerSettings
from engine.request import GenerationRequest
from test_app_ws import LONG, receive_run, receive_until, run_message
from tiny_models import tiny_engine

PROMPTS = ["hello", "the cat sat on the mat", "abcabcabcabc", "one two three"]


@pytest.fixture(scope="module")
def engine():
    return tiny_engine(seed=0)


@pytest.fixture(scope="module")
def batching(engine):
    with TestClient(create_app(ServerSettings(max_batch=4), engine_factory=lambda settings: engine)) as client:
        assert client.app.state.batching is not None and client.app.state.line.holders == 4
        yield client


def test_four_clients_share_one_batch_and_each_hears_only_its_own_run_equal_to_it_alone(batching, engine, monkeypatch):
    batch, sizes = batching.app.state.batching.batch, []
    step = batch.step
    monkeypatch.setattr(batch, "step", lambda: (step(), sizes.append(batch.running)))
    with ExitStack() as stack:
        sockets = [stack.enter_context(batching.websocket_connect("/ws")) for _ in PROMPTS]
        for ws, prompt in zip(sockets, PROMPTS):
            ws.send_json(run_message(prompt, max_new_tokens=12))
        heard = [receive_run(ws) for ws in sockets]
    assert max(sizes) >= 2  # runs from different clients were verified in one forward
    shared = [m["shared"] for messages in heard for m in messages if m["type"] == "step_metrics"]
    assert max(shared) >= 2 and max(shared) <= 4  # and each run's steps say so (the page's shared-note)
    for prompt, messages in zip(PROMPTS, heard):
        assert not any(m["type"] == "queued" for m in messages)  # four places: nobody waits in line
        finished = messages[-1]
        assert finished["type"] == "run_finished"
        assert next(m for m in messages if m["type"] == "run_started")["prompt"] == prompt
        assert len({m["run_id"] for m in messages if "run_id" in m}) == 1
        request = GenerationRequest(**{k: v for k, v in run_message(prompt, max_new_tokens=12).items() if k != "type"})
        assert finished["tokens"] == engine.run(request, memory=None).tokens


def test_a_fifth_client_waits_for_a_place_and_is_told_its_position(engine):
    settings = ServerSettings(max_batch=2)
    with TestClient(create_app(settings, engine_factory=lambda settings: engine)) as client, ExitStack() as stack:
        sockets = [stack.enter_context(client.websocket_connect("/ws")) for _ in range(3)]
        for ws in sockets[:2]:
            ws.send_json(run_message(max_new_tokens=LONG))
            receive_until(ws, "step_metrics")
        sockets[2].send_json(run_message(max_new_tokens=4))
        assert sockets[2].receive_json() == {"type": "queued", "position": 1}
        for ws in sockets[:2]:
            ws.send_json({"type": "cancel"})
            assert receive_run(ws)[-1]["stop_reason"] == "cancelled"
        assert receive_run(sockets[2])[-1]["type"] == "run_finished"


def test_a_cancel_in_a_batch_stops_that_run_within_a_step_and_the_others_go_on(batching, engine):
    with ExitStack() as stack:
        cancelled, other = (stack.enter_context(batching.websocket_connect("/ws")) for _ in range(2))
        cancelled.send_json(run_message("stop me", max_new_tokens=LONG))
        other.send_json(run_message("keep going", max_new_tokens=24))
        receive_until(cancelled, "step_metrics")
        cancelled.send_json({"type": "cancel"})
        stopped = receive_run(cancelled)
        finished = receive_run(other)[-1]
    assert stopped[-1]["stop_reason"] == "cancelled"
    assert finished["stop_reason"] in ("max_new_tokens", "eos")
    request = GenerationRequest(**{k: v for k, v in run_message("keep going", max_new_tokens=24).items() if k != "type"})
    assert finished["tokens"] == engine.run(request, memory=None).tokens


def test_a_client_that_vanishes_mid_run_holds_no_one_back(batching):
    with batching.websocket_connect("/ws") as staying:
        with batching.websocket_connect("/ws") as leaving:
            leaving.send_json(run_message("gone soon", max_new_tokens=LONG))
            receive_until(leaving, "step_metrics")
        staying.send_json(run_message("still here", max_new_tokens=8))
        assert receive_run(staying)[-1]["type"] == "run_finished"


def test_without_a_measured_cost_table_a_server_runs_one_run_at_a_time(engine):
    assert max_batch_of(ServerSettings(), engine) == 1 and max_batch_of(ServerSettings(max_batch=3), engine) == 3
    with TestClient(create_app(ServerSettings(), engine_factory=lambda settings: engine)) as client:
        assert client.app.state.batching is None and client.app.state.line.holders == 1


def test_a_what_if_joins_the_batch_and_re_runs_its_step_as_it_ran(batching):
    from test_app_whatif import RUN, of_step, what_if_of

    with batching.websocket_connect("/ws") as ws:
        ws.send_json(RUN)
        run = receive_run(ws)
        ws.send_json(what_if_of(run, 2))
        again = receive_run(ws)
    assert again[0]["type"] == "run_started" and again[0]["what_if_step"] == 2
    assert {m["step"] for m in again if "step" in m} == {2}
    assert of_step(again, "text", 2)["tokens"] == of_step(run, "text", 2)["tokens"]
