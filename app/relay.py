"""Runs the engine off the event loop: a worker thread emits into an asyncio.Queue that we relay."""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Executor
from typing import Awaitable, Callable

from pydantic import BaseModel

from engine.events import RunFinished
from engine.interface import Engine
from engine.request import GenerationRequest

log = logging.getLogger("specscope.app")

_DONE = object()


async def relay_run(
    engine: Engine,
    executor: Executor,
    request: GenerationRequest,
    cancel: threading.Event,
    send: Callable[[BaseModel], Awaitable[None]],
) -> RunFinished | None:
    """Streams one run's events to `send`, in order; returns the engine's RunFinished.

    If sending fails (the client left), the run is cancelled and its remaining
    events are drained unsent: the engine stops within one step and the model is
    free for the next run only once it has.
    """
    loop = asyncio.get_running_loop()
    events: asyncio.Queue = asyncio.Queue()

    def work() -> RunFinished:
        try:
            return engine.run(request, lambda event: loop.call_soon_threadsafe(events.put_nowait, event), cancel.is_set)
        finally:
            loop.call_soon_threadsafe(events.put_nowait, _DONE)

    future = loop.run_in_executor(executor, work)
    deliver = _Delivery(send, cancel)
    try:
        while (event := await events.get()) is not _DONE:
            await deliver(event)
    except asyncio.CancelledError:
        # The server is tearing this connection down: stop the engine and wait for it, so the next run starts clean.
        cancel.set()
        _log_finished(await asyncio.shield(future))
        raise
    finished = await future
    if finished is not None and not deliver.sent_finished:
        await deliver(finished)
    _log_finished(finished)
    return finished


def _log_finished(finished: RunFinished | None) -> None:
    if finished is not None:
        log.info("run %s (%s) finished: %s, %d tokens, %.1f tokens/s", finished.run_id, finished.policy,
                 finished.stop_reason, finished.new_tokens, finished.tokens_per_s)


class _Delivery:
    """Sends events until the client is gone; then cancels the run and drops the rest."""

    def __init__(self, send: Callable[[BaseModel], Awaitable[None]], cancel: threading.Event):
        self._send = send
        self._cancel = cancel
        self.gone = False
        self.sent_finished = False

    async def __call__(self, event: BaseModel) -> None:
        self.sent_finished |= getattr(event, "type", None) == "run_finished"
        if self.gone:
            return
        try:
            await self._send(event)
        except Exception:  # whatever the transport raised, the run has no reader any more
            self.gone = True
            self._cancel.set()
