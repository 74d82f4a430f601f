"""The /ws protocol against a tiny in-code model: ordering, cancel, bad input, fairness between clients."""

from __future__ import annotations

import json
import logging
import threading
import time

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import ServerSettings
from app.ws import CLOSE_IDLE, CLOSE_TOO_MANY_CONNECTIONS
from engine.request import GenerationRequest
from tiny_models import tiny_engine

SMALL = {"policy": "talon", "params": {"budget": 8, "top_k": 3}, "max_new_tokens": 6}
LONG = 900  # far more tokens than a test waits for, within the tiny model's context
STEP_ORDER = ["draft_layer", "tree", "verify", "text", "step_metrics"]


@pytest.fixture(scope="module")
def engine():
    return tiny_engine(seed=0)


@pytest.fixture(scope="module")
def client(engine):
    with TestClient(create_app(ServerSettings(), engine_factory=lambda settings: engine)) as client:
        yield client


class SlowSteps:
    """The tiny engine with every step lasting at least 50 ms, so that how soon a cancel lands can be
    counted in steps however fast the machine is (the app sees engines only through engine.interface.Engine)."""

    def __init__(self, engine):
        self.engine = engine

    def describe(self):
        return self.engine.describe()

    def validate(self, request):
        return self.engine.validate(request)

    def new_memory(self):
        return self.engine.new_memory()

    def run(self, request, emit=None, cancelled=None, detail=True, memory="engine"):
        def slow(event):
            if event.type == "step_metrics":
                time.sleep(0.05)
            emit(event)
        return self.engine.run(request, slow, cancelled, detail, memory)


@pytest.fixture(scope="module")
def slow_client(engine):
    with TestClient(create_app(ServerSettings(), engine_factory=lambda settings: SlowSteps(engine))) as client:
        yield client


class HeldSteps(SlowSteps):
    """The tiny engine whose runs stop after each step's step_metrics until the test lets them go: while held,
    a run surely holds the model, however loaded the machine (a 50 ms step is a window a busy CI can miss)."""

    def __init__(self, engine):
        super().__init__(engine)
        self.go = threading.Event()

    def run(self, request, emit=None, cancelled=None, detail=True, memory="engine"):
        def held(event):
            emit(event)
            if event.type == "step_metrics":
                assert self.go.wait(timeout=60), "the test never let the run go"
        return self.engine.run(request, held, cancelled, detail, memory)


@pytest.fixture
def held_client(engine):
    steps = HeldSteps(engine)
    with TestClient(create_app(ServerSettings(), engine_factory=lambda settings: steps)) as client:
        try:
            yield client, steps
        finally:
            steps.go.set()  # never leave the engine's thread waiting on a failed test


def wait_until(condition, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the server never got there"
        time.sleep(0.005)


def run_message(prompt: str = "hello", **overrides) -> dict:
    return {"type": "run", "prompt": prompt, **SMALL, **overrides}


def receive_run(ws) -> list[dict]:
    """Messages up to and including the run's last one (run_finished or error)."""
    messages = []
    while True:
        messages.append(ws.receive_json())
        if messages[-1]["type"] in ("run_finished", "error"):
            return messages


def receive_until(ws, kind: str) -> dict:
    while True:
        message = ws.receive_json()
        assert message["type"] != "error", message
        if message["type"] == kind:
            return message


def test_run_streams_events_in_step_order_and_ends_with_run_finished(client):
    with client.websocket_connect("/ws") as ws:
        ws.send_json(run_message())
        messages = receive_run(ws)
    types = [m["type"] for m in messages]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert types.count("run_finished") == 1
    steps = [m["step"] for m in messages if "step" in m]
    assert steps == sorted(steps)
    for step in set(steps):
        phases = [STEP_ORDER.index(m["type"]) for m in messages if m.get("step") == step and m["type"] in STEP_ORDER]
        assert phases == sorted(phases), f"step {step} out of order"
    finished = messages[-1]
    assert finished["new_tokens"] == sum(len(m["tokens"]) for m in messages if m["type"] == "text")


def test_streamed_output_equals_the_engine_run_directly(client, engine):
    request = run_message("same prompt")
    with client.websocket_connect("/ws") as ws:
        ws.send_json(request)
        streamed = receive_run(ws)[-1]
    direct = engine.run(GenerationRequest(**{k: v for k, v in request.items() if k != "type"}), lambda event: None)
    assert streamed["tokens"] == direct.tokens


def test_cancel_stops_the_run_within_a_step(slow_client):
    with slow_client.websocket_connect("/ws") as ws:
        ws.send_json(run_message(max_new_tokens=LONG))
        receive_until(ws, "step_metrics")
        ws.send_json({"type": "cancel"})
        messages = receive_run(ws)
    finished = messages[-1]
    assert finished["type"] == "run_finished"
    assert finished["stop_reason"] == "cancelled"
    # The cancel arrives while the engine works on some later step; it stops at the next check.
    assert sum(m["type"] == "step_metrics" for m in messages) <= 3


DEEP = '{"type": "run", "prompt": "hi", "params": {"x": ' + '{"a": ' * 200 + '1' + '}' * 200 + '}}'


@pytest.mark.parametrize("message, field, words", [
    ("{not json", None, "malformed JSON"),
    ('["run"]', None, "JSON object"),
    ('{"type": "launch"}', "type", "run"),
    ('{"type": "run"}', "prompt", "required"),
    ('{"type": "run", "prompt": "hi", "temperature": -1}', "temperature", "greater than or equal to 0"),
    ('{"type": "run", "prompt": "hi", "temperature": 1e-320}', "temperature", "at least 0.01"),
    ('{"type": "run", "prompt": "hi", "temperature": true}', "temperature", "valid number"),
    ('{"type": "run", "prompt": "hi", "temperature": NaN}', "temperature", "finite"),
    ('{"type": "run", "prompt": "hi", "max_new_tokens": 0}', "max_new_tokens", "greater than or equal to 1"),
    ('{"type": "run", "prompt": "hi", "max_new_tokens": true}', "max_new_tokens", "valid integer"),
    ('{"type": "run", "prompt": "hi", "model": "/etc/passwd"}', "model", "unknown field"),
    ('{"type": "run", "prompt": "hi", "policy": "nope"}', "policy", "unknown policy"),
    ('{"type": "run", "prompt": "hi", "policy": "talon", "params": {"mu": 5}}', "params.mu", "less than or equal"),
    ('{"type": "run", "prompt": "hi", "policy": "talon", "params": {"alpha": 1}}', "params.alpha", "unknown parameter"),
    ('{"type": "run", "prompt": "hi", "policy": "talon", "params": {"budget": true}}', "params.budget", "integer"),
    ('{"type": "run", "prompt": "hi", "policy": "talon", "params": {"mu": Infinity}}', "params.mu", "finite"),
    ('{"type": "run", "prompt": "hi", "policy": "talon-adaptive", '
     '"params": {"budget": 64, "budget_min": 64, "budget_max": 32}}',
     "params.budget_max", "is above budget_max 32"),
    ('{"type": "run", "prompt": "hi", "policy": "talon-adaptive", "params": {"mu": 0.4, "mu_min": 0.4, "mu_max": 0.3}}',
     "params.mu_max", "mu_min 0.4 is above mu_max 0.3"),
    ('{"type": "run", "prompt": "hi", "drafter": "../../weights.bin"}', "drafter", "unknown drafter"),
    (DEEP, None, "nested too deeply"),
    ('{"type": "run", "prompt": "a\\ud800b"}', "prompt", "lone surrogate"),
    ('{"type": "run", "prompt": "a\ud800b"}', "prompt", "lone surrogate"),
])
def test_invalid_request_gets_an_error_naming_the_field_and_the_next_run_works(client, message, field, words):
    with client.websocket_connect("/ws") as ws:
        ws.send_text(message)
        error = ws.receive_json()
        assert error["type"] == "error"
        assert error["field"] == field
        assert words in error["message"]
        ws.send_json(run_message(max_new_tokens=2))
        assert receive_run(ws)[-1]["type"] == "run_finished"


def test_binary_frame_gets_an_error_and_the_connection_stays_up(client):
    with client.websocket_connect("/ws") as ws:
        ws.send_bytes(b"\x00\x01")
        assert ws.receive_json()["type"] == "error"
        ws.send_json(run_message(max_new_tokens=2))
        assert receive_run(ws)[-1]["type"] == "run_finished"


def test_second_run_on_a_busy_connection_is_refused_and_the_first_finishes(held_client):
    # The first run is held after its first step, so it is surely still going when the second arrives.
    client, steps = held_client
    with client.websocket_connect("/ws") as ws:
        ws.send_json(run_message(max_new_tokens=3))
        assert ws.receive_json()["type"] == "run_started"
        ws.send_json(run_message(max_new_tokens=3))
        messages = receive_run(ws)
        errors = [m for m in messages if m["type"] == "error"]
        assert errors and "already in progress" in errors[0]["message"]
        steps.go.set()
        assert receive_run(ws)[-1]["type"] == "run_finished"


def test_two_clients_are_served_in_arrival_order_and_the_waiting_one_is_told_its_place(client):
    with client.websocket_connect("/ws") as first, client.websocket_connect("/ws") as second:
        first.send_json(run_message("first", max_new_tokens=8))
        assert first.receive_json()["type"] == "run_started"
        second.send_json(run_message("second", max_new_tokens=2))
        assert second.receive_json() == {"type": "queued", "position": 1}
        first_messages = receive_run(first)
        second_messages = receive_run(second)
    assert first_messages[-1]["type"] == "run_finished"
    assert second_messages[0]["type"] == "run_started"
    assert second_messages[0]["prompt"] == "second"
    assert second_messages[-1]["type"] == "run_finished"


def test_cancel_while_waiting_leaves_the_line(client):
    with client.websocket_connect("/ws") as first, client.websocket_connect("/ws") as second:
        first.send_json(run_message("first", max_new_tokens=6))
        assert first.receive_json()["type"] == "run_started"
        second.send_json(run_message("second"))
        assert second.receive_json()["type"] == "queued"
        second.send_json({"type": "cancel"})
        assert second.receive_json()["message"] == "cancelled before it started"
        assert receive_run(first)[-1]["type"] == "run_finished"


def test_a_client_that_disconnects_has_its_run_cancelled(client, caplog):
    caplog.set_level(logging.INFO, logger="specscope.app")
    with client.websocket_connect("/ws") as leaving:
        leaving.send_json(run_message("left", max_new_tokens=LONG))
        receive_until(leaving, "step_metrics")
    with client.websocket_connect("/ws") as next_client:
        next_client.send_json(run_message("next", max_new_tokens=2))
        messages = receive_run(next_client)
    assert messages[-1]["type"] == "run_finished"
    assert any("finished: cancelled" in record.getMessage() for record in caplog.records)


def test_replay_only_server_refuses_runs_but_serves_the_page():
    app = create_app(ServerSettings(replay_only=True), engine_factory=pytest.fail)
    with TestClient(app) as client:
        assert client.get("/").status_code == 200
        assert client.get("/api/info").json()["replay_only"] is True
        with client.websocket_connect("/ws") as ws:
            ws.send_json(run_message())
            error = ws.receive_json()
    assert error["type"] == "error" and "replays recorded traces only" in error["message"]


def test_server_messages_parse_as_engine_events(client):
    from engine.events import parse_event

    with client.websocket_connect("/ws") as ws:
        ws.send_json(run_message(max_new_tokens=2))
        for message in receive_run(ws):
            assert parse_event(json.dumps(message)).type == message["type"]


def test_a_page_from_another_origin_cannot_open_the_socket(client):
    from starlette.websockets import WebSocketDisconnect

    with pytest.raises(WebSocketDisconnect) as refused:
        with client.websocket_connect("/ws", headers={"origin": "https://evil.example"}) as ws:
            ws.receive_json()
    assert refused.value.code == 1008
    with client.websocket_connect("/ws", headers={"origin": "http://testserver"}) as ws:
        ws.send_json(run_message(max_new_tokens=2))
        assert receive_run(ws)[-1]["type"] == "run_finished"


def test_cancel_then_run_at_once_runs_the_new_one_after_the_old_ones_run_finished(client):
    with client.websocket_connect("/ws") as ws:
        ws.send_json(run_message("old", max_new_tokens=LONG))
        receive_until(ws, "step_metrics")
        ws.send_json({"type": "cancel"})
        ws.send_json(run_message("new", max_new_tokens=3))
        old = receive_run(ws)
        new = [m for m in receive_run(ws) if m["type"] != "queued"]  # it joins the line behind the old run
    assert old[-1]["type"] == "run_finished" and old[-1]["stop_reason"] == "cancelled"
    assert new[0]["type"] == "run_started" and new[0]["prompt"] == "new"
    assert new[-1]["type"] == "run_finished" and new[-1]["stop_reason"] != "cancelled"


def test_a_run_cancelled_while_it_waits_for_the_old_one_is_told_so_after_the_old_ones_run_finished(held_client):
    # The old run is held after its first step, so it holds the model until the new one has surely joined the
    # line and left it again: the line's own count says when each has happened.
    client, steps = held_client
    line = client.app.state.line
    with client.websocket_connect("/ws") as ws:
        ws.send_json(run_message("old", max_new_tokens=LONG))
        receive_until(ws, "step_metrics")
        ws.send_json({"type": "cancel"})
        ws.send_json(run_message("new", max_new_tokens=3))
        wait_until(lambda: line.waiting == 1)  # it joined the line behind the old run
        ws.send_json({"type": "cancel"})
        wait_until(lambda: line.waiting == 0)  # and left it, cancelled, before the old run let go of the model
        steps.go.set()
        old = receive_run(ws)
        new = receive_run(ws)
    assert old[-1]["type"] == "run_finished" and old[-1]["stop_reason"] == "cancelled"
    assert {m["type"] for m in new[:-1]} <= {"queued"}
    assert new[-1]["type"] == "error" and new[-1]["message"] == "cancelled before it started"


def settings_client(engine, **settings) -> TestClient:
    return TestClient(create_app(ServerSettings(**settings), engine_factory=lambda _: engine))


def test_one_address_cannot_open_more_than_its_connections(engine):
    from starlette.websockets import WebSocketDisconnect

    with settings_client(engine, max_connections_per_client=2) as client:
        with client.websocket_connect("/ws"), client.websocket_connect("/ws") as second:
            with client.websocket_connect("/ws") as third:
                with pytest.raises(WebSocketDisconnect) as closed:
                    third.receive_json()
            second.send_json(run_message(max_new_tokens=2))
            assert receive_run(second)[-1]["type"] == "run_finished"
        with client.websocket_connect("/ws") as again:  # a closed connection frees its place
            again.send_json(run_message(max_new_tokens=2))
            assert receive_run(again)[-1]["type"] == "run_finished"
    assert closed.value.code == CLOSE_TOO_MANY_CONNECTIONS and "at most 2" in closed.value.reason


def test_one_address_cannot_take_more_than_its_places_in_line(engine):
    with settings_client(engine, max_runs_per_client=1) as client:
        with client.websocket_connect("/ws") as first, client.websocket_connect("/ws") as second:
            first.send_json(run_message(max_new_tokens=LONG))
            assert first.receive_json()["type"] == "run_started"
            second.send_json(run_message(max_new_tokens=2))
            refused = second.receive_json()
            first.send_json({"type": "cancel"})
            receive_run(first)
    assert refused["type"] == "error" and "at most 1 per client address" in refused["message"]


def test_a_run_asking_for_more_tokens_than_the_server_allows_is_refused_naming_the_limit(engine):
    with settings_client(engine, max_run_tokens=100) as client, client.websocket_connect("/ws") as ws:
        ws.send_json(run_message(max_new_tokens=101))
        error = ws.receive_json()
    assert error["type"] == "error" and error["field"] == "max_new_tokens"
    assert "limit of 100" in error["message"] and "max_run_tokens" in error["message"]


def test_a_run_past_the_servers_time_limit_is_stopped_with_an_error_naming_the_limit(engine):
    with settings_client(engine, max_run_seconds=0.3) as client, client.websocket_connect("/ws") as ws:
        ws.send_json(run_message(max_new_tokens=LONG))
        messages = receive_run(ws)
        ws.send_json(run_message(max_new_tokens=2))  # the connection stays usable
        assert receive_run(ws)[-1]["type"] == "run_finished"
    error = messages[-1]
    assert error["type"] == "error" and "max_run_seconds" in error["message"] and error["run_id"]
    assert messages[0]["type"] == "run_started" and "run_finished" not in [m["type"] for m in messages]


def test_an_idle_socket_is_closed_but_not_while_its_run_goes_on(engine):
    from starlette.websockets import WebSocketDisconnect

    with settings_client(engine, idle_timeout=0.3) as client, client.websocket_connect("/ws") as ws:
        ws.send_json(run_message(max_new_tokens=120))  # longer than the idle timeout
        assert receive_run(ws)[-1]["type"] == "run_finished"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
    assert closed.value.code == CLOSE_IDLE and "idle" in closed.value.reason


@pytest.mark.parametrize("overrides, field", [({"prompt": "p" * 1100}, "prompt"),
                                              ({"max_new_tokens": 1023}, "max_new_tokens")])
def test_a_request_beyond_the_models_context_is_refused_before_it_waits_in_line(client, overrides, field):
    with client.websocket_connect("/ws") as holder, client.websocket_connect("/ws") as ws:
        holder.send_json(run_message(max_new_tokens=LONG))
        assert holder.receive_json()["type"] == "run_started"
        ws.send_json(run_message(**overrides))
        first = ws.receive_json()
        holder.send_json({"type": "cancel"})
        receive_run(holder)
    assert first["type"] == "error" and first["field"] == field and "context" in first["message"]


def test_a_client_that_sends_its_next_run_the_moment_it_reads_run_finished_is_never_refused(client):
    with client.websocket_connect("/ws") as ws:
        for attempt in range(40):
            ws.send_json(run_message(f"run {attempt}", max_new_tokens=2))
            last = receive_run(ws)[-1]
            assert last["type"] == "run_finished", (attempt, last)
