"""The outbox between the engine thread and a socket: ordered, never blocking, bounded, shedding detail first."""

from __future__ import annotations

import asyncio
import threading

from app.relay import BacklogLimits, Outbox
from engine.events import Candidate, DraftLayer, StepMetrics, TextDelta

HEADER = {"run_id": "r", "policy": "talon"}


def layer(step: int, candidates: int = 40) -> DraftLayer:
    candidate = Candidate(parent=0, token=1, text="a", depth=1, q=0.5, score=0.5, source="draft-lm", kept=True,
                          expanded=True, reason="topk")
    return DraftLayer(**HEADER, step=step, depth=1, candidates=[candidate] * candidates)


def text(step: int) -> TextDelta:
    return TextDelta(**HEADER, step=step, tokens=[1], text="a", accepted=0)


def metrics(step: int) -> StepMetrics:
    return StepMetrics(**HEADER, step=step, accepted=0, emitted=1, tree_size=1, depth=1, width=1, draft_forwards=1,
                       draft_ms=1, draft_forward_ms=1, verify_ms=1, other_ms=1, new_tokens=step)


async def drain(outbox: Outbox) -> list[str]:
    taken = []
    while (message := await outbox.get()) is not None:
        taken.append(message[1])
    return taken


def test_a_client_that_falls_behind_loses_detail_first_and_keeps_text_and_summaries():
    async def scenario() -> tuple[Outbox, list[str], int]:
        overflows = []
        outbox = Outbox(BacklogLimits(events=64, bytes=1 << 20), on_overflow=lambda: overflows.append(1))
        for step in range(1, 12):  # nobody reads meanwhile
            for event in (layer(step), layer(step), text(step), metrics(step)):
                outbox.put(event)
        outbox.finish()
        return outbox, await drain(outbox), len(overflows)

    outbox, taken, overflows = asyncio.run(scenario())
    kinds = [message.split('"type":"')[1].split('"')[0] for message in taken]
    dropped_at = kinds.index("detail_dropped")
    assert 0 < dropped_at < len(kinds) - 1 and kinds.count("detail_dropped") == 1
    assert "draft_layer" not in kinds[dropped_at:]
    assert kinds.count("text") == 11 and kinds.count("step_metrics") == 11
    assert overflows == 0 and not outbox.overflowed
    assert outbox.peak_events <= 64


def test_a_client_still_behind_after_detail_is_dropped_overflows_once_and_the_outbox_stays_bounded():
    async def scenario() -> tuple[Outbox, list[str], int]:
        overflows = []
        outbox = Outbox(BacklogLimits(events=32, bytes=1 << 20), on_overflow=lambda: overflows.append(1))
        for step in range(1, 100):
            for event in (layer(step), text(step), metrics(step)):
                outbox.put(event)
        return outbox, await drain(outbox), len(overflows)

    outbox, taken, overflows = asyncio.run(scenario())
    assert outbox.overflowed and overflows == 1
    assert taken == [] and outbox.backlog == (0, 0)  # what was queued is dropped: the client is being closed
    assert outbox.peak_events <= 32


def test_one_detail_message_larger_than_the_shedding_mark_still_reaches_a_client_that_keeps_up():
    async def scenario() -> list[str]:
        outbox = Outbox(BacklogLimits(events=64, bytes=64 << 10), on_overflow=lambda: None)
        outbox.put(layer(1, candidates=200))  # about 40 KB: over a quarter of the byte limit on its own
        outbox.finish()
        return await drain(outbox)

    taken = asyncio.run(scenario())
    assert len(taken) == 1 and '"draft_layer"' in taken[0]


def test_messages_put_from_the_engine_thread_arrive_in_order_and_put_never_waits_for_the_reader():
    async def scenario() -> list[str]:
        outbox = Outbox(BacklogLimits(events=100_000, bytes=1 << 30), on_overflow=lambda: None)
        reader = asyncio.create_task(drain(outbox))

        def engine_thread() -> None:
            for step in range(1, 2001):
                outbox.put(text(step))
            outbox.finish()

        thread = threading.Thread(target=engine_thread)
        thread.start()
        taken = await reader
        thread.join()
        return taken

    taken = asyncio.run(scenario())
    assert [int(message.split('"step":')[1].split(",")[0]) for message in taken] == list(range(1, 2001))
