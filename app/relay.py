"""Runs the engine off the event loop and hands its events to one client through a bounded outbox.

The engine runs in the worker thread and must never wait for a client: it puts
each event into the run's `Outbox`, which never blocks. The outbox holds the
events the client has not yet taken, as JSON text, within two limits (events
and bytes):

    past a quarter of either limit, the client has fallen behind: the per-candidate
        detail (`draft_layer`, `tree`, `verify`) is dropped for the rest of the run,
        said once with a `detail_dropped` message; text and step summaries go on;
    past either limit, the client is too slow: the outbox drops everything,
        the run is cancelled (the engine stops within one step) and the socket
        is closed with a reason.

The model is released when the engine finishes, not when the client has read
the run: `relay_run` returns then, and delivery goes on from the outbox.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from pydantic import BaseModel

from app.protocol import DetailDropped
from engine.events import RunError, RunFinished
from engine.interface import Engine
from engine.request import GenerationRequest
from engine.whatif import WhatIfRequest

if TYPE_CHECKING:
    from app.batching import BatchDriver

log = logging.getLogger("specscope.app")

DETAIL_EVENTS = frozenset({"draft_layer", "tree", "verify"})
TERMINAL_EVENTS = frozenset({"run_finished", "error"})


@dataclass(frozen=True)
class BacklogLimits:
    events: int
    bytes: int

    @property
    def shed_events(self) -> int:
        return self.events // 4

    @property
    def shed_bytes(self) -> int:
        return self.bytes // 4


class Outbox:
    """One run's messages on their way from the engine thread to the socket, in order and bounded.

    `put` is called from any thread and never blocks; `get` is awaited on the event loop.
    Sizes are counted in characters of JSON (bytes for the ASCII JSON mostly is).
    """

    def __init__(self, limits: BacklogLimits, on_overflow: Callable[[], None]):
        self.limits = limits
        self._on_overflow = on_overflow
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._items: deque[tuple[str, str]] = deque()  # (type, JSON text)
        self._size = 0
        self._finished = False  # no more messages will come
        self._closed = False  # nobody reads any more: puts are dropped
        self._waiter: asyncio.Future | None = None
        self.overflowed = False
        self.shedding = False
        self.detail_dropped = 0
        self.terminal_seen = False
        self.peak_events = 0
        self.peak_size = 0

    def put(self, message: BaseModel) -> None:
        kind = getattr(message, "type", "")
        with self._lock:
            if self._closed or (self.shedding and kind in DETAIL_EVENTS):
                self.detail_dropped += kind in DETAIL_EVENTS
                return
        text = message.model_dump_json()  # outside the lock: the loop keeps taking messages meanwhile
        with self._lock:
            if self._closed:
                return
            if kind in DETAIL_EVENTS and self._behind(len(text)):
                self.shedding = True
                self.detail_dropped += 1
                notice = DetailDropped(run_id=message.run_id, step=message.step, message=self._shed_reason())
                kind, text = notice.type, notice.model_dump_json()
            if len(self._items) + 1 > self.limits.events or self._size + len(text) > self.limits.bytes:
                self._overflow()
            else:
                self._append(kind, text)
                self.terminal_seen |= kind in TERMINAL_EVENTS
        self._wake()

    def finish(self) -> None:
        """No more messages: `get` returns None once the outbox is empty."""
        with self._lock:
            self._finished = True
        self._wake()

    def close(self) -> None:
        """The client is gone: drop what is queued and whatever comes."""
        with self._lock:
            self._closed = True
            self._items.clear()
            self._size = 0
        self._wake()

    async def get(self) -> tuple[str, str] | None:
        """The next message as (type, JSON text), or None when the run's messages are all out (or the
        client fell too far behind)."""
        while True:
            with self._lock:
                if self._items:
                    kind, text = self._items.popleft()
                    self._size -= len(text)
                    return kind, text
                if self._finished or self._closed:
                    return None
                self._waiter = self._loop.create_future()
            await self._waiter

    @property
    def backlog(self) -> tuple[int, int]:
        return len(self._items), self._size

    def _behind(self, incoming: int) -> bool:
        return (len(self._items) >= self.limits.shed_events or self._size >= self.limits.shed_bytes
                or self._size + incoming > self.limits.bytes)

    def _shed_reason(self) -> str:
        return (f"the client fell {len(self._items)} messages ({self._size} bytes) behind; per-candidate detail "
                f"(draft_layer, tree, verify) is no longer sent for this run")

    def _append(self, kind: str, text: str) -> None:
        self._items.append((kind, text))
        self._size += len(text)
        self.peak_events = max(self.peak_events, len(self._items))
        self.peak_size = max(self.peak_size, self._size)

    def _overflow(self) -> None:
        self.overflowed = True
        self._closed = True
        self._items.clear()
        self._size = 0
        self._on_overflow()

    def _wake(self) -> None:
        with self._lock:
            waiter, self._waiter = self._waiter, None
        if waiter is not None:
            self._loop.call_soon_threadsafe(_resolve, waiter)


def _resolve(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(None)


class RunControl:
    """What stops a run: its client's cancel, the server shutting down, or the server's time limit."""

    def __init__(self, stopping: threading.Event, max_seconds: float):
        self.cancel = threading.Event()
        self.stopping = stopping
        self.max_seconds = max_seconds
        self.deadline: float | None = None
        self.timed_out = False

    def start_clock(self) -> None:
        self.deadline = time.monotonic() + self.max_seconds

    def cancelled(self) -> bool:
        if self.cancel.is_set() or self.stopping.is_set():
            return True
        if self.deadline is not None and time.monotonic() > self.deadline:
            self.timed_out = True
            return True
        return False


async def relay_run(engine: Engine, executor: Executor, request: GenerationRequest, control: RunControl,
                    outbox: Outbox, memory: Any = "engine", batching: "BatchDriver | None" = None) -> None:
    """Runs one request in the worker thread, its events going into `outbox`; returns when the engine
    has finished, while the client may still be reading. Engine errors (a RequestError) propagate.
    `memory`: the suffix memory the run drafts from (`Engine.run`'s). With `batching` the run joins the
    server's batch (app/batching.py) and shares its verify forwards with the other runs in it."""
    loop = asyncio.get_running_loop()

    def emit(event: BaseModel) -> None:
        if control.timed_out and getattr(event, "type", "") == "run_finished":
            event = _time_limit_error(event, control.max_seconds)
        outbox.put(event)

    def work() -> RunFinished:
        if isinstance(request, WhatIfRequest):  # one step of a run, re-run: a run of its own in the line
            return engine.what_if(request, emit, control.cancelled)
        return engine.run(request, emit, control.cancelled, memory=memory)

    control.start_clock()
    if batching is not None:
        future = batching.submit(request, emit, control.cancelled, memory)
    else:
        future = loop.run_in_executor(executor, work)
    try:
        finished = await asyncio.shield(future)
    except asyncio.CancelledError:
        # The server is tearing this run down: stop the engine and wait for it, so the next run starts clean.
        control.cancel.set()
        await asyncio.gather(future, return_exceptions=True)
        raise
    if finished is not None and not outbox.terminal_seen:
        emit(finished)
    _log_finished(finished, control)


def _time_limit_error(finished: RunFinished, max_seconds: float) -> RunError:
    return RunError(run_id=finished.run_id, policy=finished.policy, field=None,
                    message=f"stopped after {max_seconds:g} s, this server's limit per run (max_run_seconds), "
                            f"with {finished.new_tokens} tokens generated")


def _log_finished(finished: RunFinished | None, control: RunControl) -> None:
    if finished is not None:
        reason = "time limit" if control.timed_out else finished.stop_reason
        log.info("run %s (%s) finished: %s, %d tokens, %.1f tokens/s", finished.run_id, finished.policy,
                 reason, finished.new_tokens, finished.tokens_per_s)
