"""The /ws `what_if` message: one step of a run re-run under another policy, validated like a run, in line like one."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import ServerSettings
from test_app_ws import receive_run
from tiny_models import TINY_VOCAB, tiny_engine

RUN = {"type": "run", "prompt": "hello there", "policy": "talon", "params": {"budget": 8, "top_k": 3},
       "max_new_tokens": 8}


@pytest.fixture(scope="module")
def client():
    engine = tiny_engine(seed=0)
    with TestClient(create_app(ServerSettings(), engine_factory=lambda settings: engine)) as client:
        yield client


def what_if_of(run: list[dict], step: int, **changes) -> dict:
    """The what-if of `step` of a run the client saw: its request, changed, and the tokens before the step."""
    prefix = [token for m in run if m["type"] == "text" and m["step"] < step for token in m["tokens"]]
    return {**RUN, **changes, "type": "what_if", "step": step, "prefix": prefix}


def of_step(messages: list[dict], kind: str, step: int) -> dict:
    return next(m for m in messages if m["type"] == kind and m["step"] == step)


def test_what_if_streams_one_step_under_its_own_run_id_and_the_same_step_number(client):
    with client.websocket_connect("/ws") as ws:
        ws.send_json(RUN)
        run = receive_run(ws)
        ws.send_json(what_if_of(run, 2))
        again = receive_run(ws)
    assert again[0]["type"] == "run_started" and again[0]["what_if_step"] == 2
    assert again[-1]["type"] == "run_finished" and again[-1]["stop_reason"] in ("what_if", "eos", "max_new_tokens")
    assert {m["step"] for m in again if "step" in m} == {2}
    assert again[0]["run_id"] != run[0]["run_id"]
    assert of_step(again, "verify", 2)["accepted_path"] == of_step(run, "verify", 2)["accepted_path"]
    assert of_step(again, "text", 2)["tokens"] == of_step(run, "text", 2)["tokens"]


def test_what_if_under_another_policy_drafts_that_policys_tree(client):
    with client.websocket_connect("/ws") as ws:
        ws.send_json(RUN)
        run = receive_run(ws)
        ws.send_json(what_if_of(run, 1, policy="chain", params={"gamma": 2}))
        again = receive_run(ws)
    assert again[0]["policy"] == "chain" and again[0]["params"]["gamma"] == 2
    assert len(of_step(again, "tree", 1)["nodes"]) <= 3


@pytest.mark.parametrize("changes, field, words", [
    ({"prefix": [1, TINY_VOCAB]}, "prefix.1", "vocabulary"),
    ({"prefix": [1, True]}, "prefix.1", "valid integer"),
    ({"prefix": [-3]}, "prefix.0", "greater than or equal to 0"),
    ({"prefix": list(range(8))}, "prefix", "max_new_tokens"),
    ({"step": 5, "prefix": [1]}, "prefix", "at least 4"),
    ({"step": 0}, "step", "greater than or equal to 1"),
    ({"step": "2"}, "step", "valid integer"),
    ({"params": {"mu": 2}}, "params.mu", "less than or equal"),
    ({"params": {"depth": 3}}, "params.depth", "unknown parameter"),
    ({"policy": "nope"}, "policy", "unknown policy"),
    ({"max_new_tokens": 9000}, "max_new_tokens", "less than or equal"),
    ({"path": "/etc/passwd"}, "path", "unknown field"),
])
def test_a_bad_what_if_names_its_field_and_the_connection_serves_the_next_message(client, changes, field, words):
    message = {**RUN, "type": "what_if", "step": 1, "prefix": [], **changes}
    with client.websocket_connect("/ws") as ws:
        ws.send_text(json.dumps(message))
        error = ws.receive_json()
        assert error["type"] == "error" and error["field"] == field, error
        assert words in error["message"]
        ws.send_json({**RUN, "type": "what_if", "step": 1, "prefix": []})
        assert receive_run(ws)[-1]["type"] == "run_finished"


def test_a_what_if_above_the_servers_token_limit_is_refused_before_it_waits():
    engine = tiny_engine(seed=0)
    app = create_app(ServerSettings(max_run_tokens=4), engine_factory=lambda settings: engine)
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        ws.send_json({**RUN, "type": "what_if", "step": 1, "prefix": []})
        error = ws.receive_json()
    assert error["type"] == "error" and error["field"] == "max_new_tokens" and "max_run_tokens" in error["message"]


def test_a_what_if_while_this_connections_run_goes_on_is_refused_and_the_run_goes_on(client):
    with client.websocket_connect("/ws") as ws:
        ws.send_json({**RUN, "max_new_tokens": 900, "params": {"budget": 60}})
        assert ws.receive_json()["type"] == "run_started"
        ws.send_json({**RUN, "type": "what_if", "step": 1, "prefix": []})
        refused = receive_run(ws)[-1]
        assert refused["type"] == "error" and refused["field"] == "type" and refused["run_id"] == ""
        ws.send_json({"type": "cancel"})
        assert receive_run(ws)[-1]["stop_reason"] == "cancelled"


def test_a_replay_only_server_says_a_what_if_needs_the_model():
    app = create_app(ServerSettings(replay_only=True), engine_factory=pytest.fail)
    with TestClient(app) as client, client.websocket_connect("/ws") as ws:
        ws.send_json({**RUN, "type": "what_if", "step": 1, "prefix": []})
        error = ws.receive_json()
    assert error["type"] == "error" and "no model loaded" in error["message"]
