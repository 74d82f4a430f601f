"""Twenty clients for a minute against a real uvicorn over the tiny engine: no crash, every run ends in
run_finished or an error, and every run's events come in order, whatever the clients do meanwhile
(cancel, leave mid-run, send garbage)."""

from __future__ import annotations

import asyncio
import json
import os
import logging
import random
import re
import time
from collections import Counter
from itertools import dropwhile, groupby

import pytest
from websockets.asyncio.client import connect
from websockets.sync.client import connect as connect_sync

from server_harness import server_in_thread
from tiny_models import tiny_engine

CLIENTS = 20
SECONDS = int(os.environ.get("LOAD_SECONDS_FOR_DEBUGGING", 60))
STEP_ORDER = re.compile(r"(draft_layer )*(tree )?(verify )?text (policy_adjusted )*step_metrics ")
POLICIES = [("ar", {}), ("chain", {"gamma": 3}), ("eagle", {"depth": 3, "top_k": 3, "total": 12}),
            ("talon", {"budget": 16, "top_k": 4}), ("talon-adaptive", {"budget": 16, "top_k": 4, "window": 2}),
            ("cast", {"top_k": 4, "max_total": 16})]
GARBAGE = ["{not json", '{"type": "run", "prompt": "x", "temperature": true}', '{"type": "launch"}',
           '{"type": "run", "prompt": "x", "policy": "talon", "params": {"budget": 0}}']


def ordering_violations(messages: list[dict]) -> list[str]:
    """What is out of order in one run's messages: `queued` only first, then run_started, each step's
    events together and in the engine's order, steps 1, 2, 3, ..., and exactly one terminal event, last."""
    kinds = [m["type"] for m in messages]
    body = kinds[len(kinds) - len(list(dropwhile_queued(kinds))):]
    problems = []
    if "queued" in body:
        problems.append("queued after the run began")
    if sum(k in ("run_finished", "error") for k in body) != 1 or body[-1] not in ("run_finished", "error"):
        problems.append(f"not exactly one terminal event, at the end: {body[-3:]}")
    if body[0] not in ("run_started", "error") or (body[0] == "error" and len(body) > 1):
        problems.append(f"begins with {body[0]}")
    steps = [(step, " ".join(m["type"] for m in group) + " ")
             for step, group in groupby((m for m in messages if "step" in m), key=lambda m: m["step"])]
    if [step for step, _ in steps] != list(range(1, len(steps) + 1)):
        problems.append(f"steps out of order: {[step for step, _ in steps]}")
    problems += [f"step {step}: {order}" for step, order in steps if not STEP_ORDER.fullmatch(order)]
    finished = messages[-1]
    emitted = sum(len(m["tokens"]) for m in messages if m["type"] == "text")
    if finished["type"] == "run_finished" and emitted != finished["new_tokens"]:
        problems.append(f"text events carry {emitted} tokens, run_finished says {finished['new_tokens']}")
    return problems


def dropwhile_queued(kinds: list[str]):
    return dropwhile(lambda kind: kind == "queued", kinds)


async def one_run(ws, rng: random.Random, tally: Counter) -> list[dict]:
    policy, params = rng.choice(POLICIES)
    await ws.send(json.dumps({"type": "run", "prompt": rng.choice(["hello", "abcabc", "count to ten", "q"]),
                              "policy": policy, "params": params, "max_new_tokens": rng.randint(2, 40),
                              "temperature": rng.choice([0, 0.8]), "seed": rng.randrange(1000)}))
    cancel_after_step = rng.random() < 0.15
    messages = []
    while not messages or messages[-1]["type"] not in ("run_finished", "error"):
        messages.append(json.loads(await asyncio.wait_for(ws.recv(), timeout=90)))
        if cancel_after_step and messages[-1]["type"] == "step_metrics":
            cancel_after_step = False
            tally["cancels"] += 1
            await ws.send(json.dumps({"type": "cancel"}))
    return messages


async def client(url: str, seed: int, deadline: float, tally: Counter, violations: list[str]) -> None:
    rng = random.Random(seed)
    turn = 0
    while time.monotonic() < deadline:
        async with connect(url, open_timeout=30, max_size=None) as ws:
            while time.monotonic() < deadline:
                turn += 1
                roll = rng.random()
                if turn == 1 or roll < 0.05:
                    await ws.send(rng.choice(GARBAGE))
                    reply = json.loads(await asyncio.wait_for(ws.recv(), timeout=30))
                    tally["garbage answered"] += reply["type"] == "error"
                    continue
                if (turn == 2 and seed % 5 == 0) or roll < 0.10:  # leave in the middle of a run
                    await ws.send(json.dumps({"type": "run", "prompt": "leaving", "max_new_tokens": 40}))
                    tally["left mid-run"] += 1
                    break
                messages = await one_run(ws, rng, tally)
                tally[messages[-1]["type"]] += 1
                violations.extend(ordering_violations(messages))


@pytest.fixture(scope="module")
def engine():
    return tiny_engine(seed=0)


def test_twenty_clients_for_a_minute_get_every_run_ended_in_order_and_nothing_crashes(engine, caplog):
    caplog.set_level(logging.WARNING)
    tally, violations = Counter(), []
    # Every client shares 127.0.0.1 here, so the per-address caps are raised to let all twenty in.
    caps = {"max_connections_per_client": 3 * CLIENTS, "max_runs_per_client": 2 * CLIENTS, "max_waiting": 2 * CLIENTS}
    with server_in_thread(engine, **caps) as server:
        async def crowd() -> None:
            deadline = time.monotonic() + SECONDS
            await asyncio.gather(*(client(server.url, seed, deadline, tally, violations) for seed in range(CLIENTS)))

        asyncio.run(crowd())
        with connect_sync(server.url) as ws:  # the server is as good as new afterwards
            ws.send(json.dumps({"type": "run", "prompt": "after", "max_new_tokens": 3}))
            while (last := json.loads(ws.recv(timeout=30)))["type"] not in ("run_finished", "error"):
                pass
    runs = tally["run_finished"] + tally["error"]
    assert last["type"] == "run_finished"
    assert violations == []
    assert runs >= CLIENTS, tally
    assert tally["run_finished"] > tally["error"], tally
    assert tally["garbage answered"] > 0 and tally["cancels"] > 0 and tally["left mid-run"] > 0, tally
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR], "the server logged errors"
