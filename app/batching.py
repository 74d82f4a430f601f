"""Runs from different clients decoded together: one engine batch (engine/batch.py), driven on the
server's one engine thread.

The contract:

    a run holding one of the line's `max_batch` places (app/line.py) is submitted to the batch and
        joins it at the next step; the batch verifies every member's tree in one target forward;
    the driver steps the batch on the engine thread (the executor's one worker) while any run is in it
        or waiting to join, and gives the thread back when none is, so the next run wakes it again;
    each run's events go to its own outbox only, as a run alone's do; an outbox never blocks, so a
        slow or vanished client holds no one back (its outbox overflows and cancels its run alone);
    a cancelled run (its client's cancel, shutdown, the time limit) leaves before its next step;
    a run's end resolves its future on the event loop: with its RunFinished, or the error that ended it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Executor
from typing import Any, Callable

from engine.batch import Batch
from engine.interface import Emit, Engine
from engine.request import GenerationRequest

log = logging.getLogger("specscope.app")


class BatchDriver:
    """The server's engine batch and the loop that steps it; see the module docstring."""

    def __init__(self, engine: Engine, executor: Executor, max_batch: int):
        self.batch = Batch(engine, max_batch)  # engine/batch.py builds on the engine, which never imports it
        self.max_batch = max_batch
        self.executor = executor
        self._lock = threading.Lock()
        self._driving = False

    def submit(self, request: GenerationRequest, emit: Emit, cancelled: Callable[[], bool],
               memory: Any = "engine") -> asyncio.Future:
        """Queues the run (on the event loop); the future resolves when it has left the batch. A RequestError
        is raised here."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def settled(ticket: Any) -> None:  # in the engine thread
            loop.call_soon_threadsafe(_resolve, future, ticket)

        self.batch.submit(request, emit, cancelled, memory=memory, on_done=settled)
        self._wake()
        return future

    def _wake(self) -> None:
        with self._lock:
            if self._driving:
                return
            self._driving = True
        self.executor.submit(self._drive)

    def _drive(self) -> None:
        """Steps the batch until nothing runs or waits (a run submitted meanwhile keeps it going)."""
        while True:
            with self._lock:
                if self.batch.idle:
                    self._driving = False
                    return
            try:
                self.batch.step()
            except Exception:  # a fault outside any one run's step (each run's own errors end that run alone)
                log.exception("the batch failed a step")
                with self._lock:
                    self._driving = False
                raise


def _resolve(future: asyncio.Future, ticket: Any) -> None:
    if future.done():
        return
    if ticket.error is not None:
        future.set_exception(ticket.error)
    else:
        future.set_result(ticket.result)
