"""The `/ws` endpoint: validates client messages and relays each run's events; it never decodes.

Limits (docs/websocket.md, "Limits and close codes"): a few connections and places
in line per client address, a deadline on every send, a bounded backlog per run,
an idle timeout, and a cap on each run's tokens and seconds.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, WebSocket
from pydantic import BaseModel

from app.line import LineFull
from app.protocol import (CancelMessage, Queued, RunMessage, WhatIfMessage, check_params_strictly, error_event,
                          parse_client_message, policy_named_in)
from app.relay import TERMINAL_EVENTS, BacklogLimits, Outbox, RunControl, relay_run
from app.settings import ServerSettings
from engine.errors import RequestError, SpecscopeError
from engine.request import GenerationRequest

log = logging.getLogger("specscope.app")
router = APIRouter()

CLOSE_TOO_SLOW = 4000
CLOSE_IDLE = 4001
CLOSE_TOO_MANY_CONNECTIONS = 4002
CLOSE_DEADLINE_S = 1.0  # how long a close frame may wait to leave; past it the transport is dropped


class ClientGone(Exception):
    """The socket is closed, or the client stopped reading."""


@router.websocket("/ws")
async def websocket_endpoint(websocket: WebSocket) -> None:
    # Host and Origin were checked by app.security.HostGuard before the handshake reached here.
    await websocket.accept()
    await ClientSession(websocket).serve()


@dataclass
class _ActiveRun:
    control: RunControl
    started: bool = False  # holds the model (no longer waiting in line)
    ended: bool = False  # its last message is on its way: the connection may start another run
    task: asyncio.Task | None = None


class ClientSession:
    """One browser tab: at most one run at a time, cancelled when the tab goes away."""

    def __init__(self, websocket: WebSocket):
        self.websocket = websocket
        self.state = websocket.app.state
        self.settings: ServerSettings = self.state.settings
        self.address = websocket.client.host if websocket.client else "unknown"
        self.active: _ActiveRun | None = None
        self.memory = self._suffix_memory()
        self._send_lock = asyncio.Lock()
        self._gone = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._idle_since = self._loop.time()

    def _suffix_memory(self) -> Any:
        """Whose earlier runs this tab's drafts may copy from (settings.suffix_memory_scope): its own, from a
        memory that lives as long as the tab; every client's (the engine's); or none."""
        engine, scope = self.state.engine, self.settings.suffix_memory_scope
        if engine is None or scope == "off":
            return None
        return "engine" if scope == "shared" else engine.new_memory()

    async def serve(self) -> None:
        connections: Counter = self.state.connections
        if connections[self.address] >= self.settings.max_connections_per_client:
            await self.drop(CLOSE_TOO_MANY_CONNECTIONS, f"too many connections from {self.address}: "
                                                        f"at most {self.settings.max_connections_per_client}")
            return
        connections[self.address] += 1
        try:
            while (message := await self._next_message()) is not None:
                self._idle_since = self._loop.time()
                await self._handle(message.get("text"))
        except ClientGone:
            pass
        finally:
            connections[self.address] -= 1
            if connections[self.address] <= 0:
                del connections[self.address]
            await self._stop_active(notify=False)

    async def _next_message(self) -> dict | None:
        """The next client frame; None once the client left, was dropped or stayed idle too long."""
        receive = asyncio.ensure_future(self.websocket.receive())
        gone = asyncio.ensure_future(self._gone.wait())
        try:
            while True:
                done, _ = await asyncio.wait({receive, gone}, timeout=self._idle_check_in(),
                                             return_when=asyncio.FIRST_COMPLETED)
                if receive in done:
                    message = receive.result()
                    return None if message["type"] == "websocket.disconnect" else message
                if gone in done:
                    return None
                if not self._busy() and self._loop.time() - self._idle_since >= self.settings.idle_timeout:
                    await self.drop(CLOSE_IDLE, f"idle for {self.settings.idle_timeout:g} s")
                    return None
        finally:
            for waiter in (receive, gone):
                waiter.cancel()

    def _idle_check_in(self) -> float:
        if self._busy():  # look again soon: the idle time counts from the run's end
            return min(self.settings.idle_timeout, 1.0)
        return max(0.0, self._idle_since + self.settings.idle_timeout - self._loop.time())

    def _busy(self) -> bool:
        return self.active is not None and not self.active.ended and not self.active.task.done()

    async def send(self, model: BaseModel) -> None:
        await self.send_text(model.model_dump_json())

    async def send_text(self, text: str) -> None:
        """Sends one message within the send deadline; a client that cannot take it in time is dropped."""
        async with self._send_lock:
            if self._gone.is_set():
                raise ClientGone
            try:
                await asyncio.wait_for(self.websocket.send_text(text), self.settings.send_timeout)
            except asyncio.TimeoutError:
                await self.drop(CLOSE_TOO_SLOW, f"too slow: a message waited {self.settings.send_timeout:g} s to leave")
                raise ClientGone from None
            except Exception:  # whatever the transport raised, the client is gone
                self._gone.set()
                raise ClientGone from None

    async def drop(self, code: int, reason: str) -> None:
        """Closes the socket with a code and reason; a client that does not even take the close frame
        within its deadline is left to the transport (app.transport aborts it)."""
        if self._gone.is_set():
            return
        self._gone.set()
        if self.active is not None:
            self.active.control.cancel.set()  # the model is freed within one step, whatever the close does
        if code != CLOSE_IDLE:
            log.info("closing the socket of %s (%d): %s", self.address, code, reason)
        try:
            await asyncio.wait_for(self.websocket.close(code, reason[:120]), CLOSE_DEADLINE_S)
        except Exception:  # already closed, or the close frame cannot leave: nothing more to say
            pass

    async def _handle(self, text: str | None) -> None:
        if text is None:
            await self.send(error_event("send JSON text frames, not binary"))
            return
        try:
            message = parse_client_message(text)
        except RequestError as err:
            await self.send(error_event(str(err), err.field, policy_named_in(text)))
            return
        if isinstance(message, CancelMessage):
            await self._stop_active(notify=True)
        elif isinstance(message, (RunMessage, WhatIfMessage)):
            await self._start(message.to_request())

    async def _start(self, request: GenerationRequest) -> None:
        previous = self.active if self.active is not None and not self.active.task.done() else None
        if self._busy() and not previous.control.cancel.is_set():
            await self.send(error_event("a run is already in progress on this connection; cancel it first",
                                        "type", request.policy or ""))
            return
        # After a cancel, the new run joins the line at once; its messages follow the old run's last one.
        run = _ActiveRun(RunControl(self.state.stopping, self.settings.max_run_seconds))
        run.task = asyncio.create_task(self._run(request, run, previous))
        self.active = run

    async def _run(self, request: GenerationRequest, run: _ActiveRun, previous: _ActiveRun | None) -> None:
        limits = BacklogLimits(self.settings.max_backlog_events, self.settings.max_backlog_bytes)
        outbox = Outbox(limits, on_overflow=run.control.cancel.set)
        delivery = asyncio.create_task(self._deliver(outbox, run, previous))
        try:
            await self._execute(request, run, outbox)
        except asyncio.CancelledError:
            if not run.control.cancel.is_set():
                raise
            outbox.put(error_event("cancelled before it started", None, request.policy or ""))
        finally:
            outbox.finish()
            await asyncio.wait({delivery})
            self._idle_since = self._loop.time()

    async def _execute(self, request: GenerationRequest, run: _ActiveRun, outbox: Outbox) -> None:
        """Checks the request, waits in line and runs it; every message for the run goes through `outbox`."""
        problem = self._check(request)
        if problem is not None:
            outbox.put(error_event(str(problem), problem.field, request.policy or ""))
            return

        async def tell_position(position: int) -> None:
            outbox.put(Queued(position=position))

        try:
            async with self.state.line.turn(tell_position, client=self.address):
                run.started = True
                await relay_run(self.state.engine, self.state.executor, request, run.control, outbox, self.memory,
                                self.state.batching)
        except LineFull as err:
            outbox.put(error_event(str(err), None, request.policy or ""))
        except SpecscopeError as err:
            outbox.put(error_event(str(err), err.field, request.policy or ""))
        except asyncio.CancelledError:
            raise
        except Exception as err:  # an engine bug must not take the server down; the client hears of it
            log.exception("run failed")
            outbox.put(error_event(f"internal error: {type(err).__name__}: {err}", None, request.policy or ""))

    async def _deliver(self, outbox: Outbox, run: _ActiveRun, previous: _ActiveRun | None) -> None:
        """Sends the run's messages as they come, once the previous run's are all out; a client that cannot
        keep up is dropped and its run cancelled."""
        if previous is not None:
            await asyncio.wait({previous.task})
        try:
            while (message := await outbox.get()) is not None:
                kind, text = message
                # Over before its last message leaves: a client may send its next run the moment it reads it.
                run.ended |= kind in TERMINAL_EVENTS
                await self.send_text(text)
        except ClientGone:
            run.control.cancel.set()
            outbox.close()
            return
        if outbox.overflowed:
            limits = outbox.limits
            await self.drop(CLOSE_TOO_SLOW, f"too slow: fell more than {limits.events} messages or "
                                            f"{limits.bytes >> 20} MiB behind")

    def _check(self, request: GenerationRequest) -> SpecscopeError | None:
        """Refuses a bad request before it waits in line: the server's own limits, then the engine's check
        (prompt and max_new_tokens against the context included; run() checks again)."""
        engine = self.state.engine
        if engine is None:
            return RequestError("this server replays recorded traces only; it has no model loaded", field=None)
        if request.max_new_tokens > self.settings.max_run_tokens:
            return RequestError(f"max_new_tokens {request.max_new_tokens} is above this server's limit of "
                                f"{self.settings.max_run_tokens} per run (max_run_tokens)", field="max_new_tokens")
        try:
            check_params_strictly(request.policy or engine.describe().default_policy, request.params)
            engine.validate(request)
        except SpecscopeError as err:
            return err
        return None

    async def _stop_active(self, notify: bool) -> None:
        """Cancel: a running run stops within one step and ends with run_finished; a waiting one leaves the line."""
        run = self.active
        if run is None or run.task.done():
            return
        run.control.cancel.set()
        if run.started:
            if not notify:
                # Shielded: if the server tears this connection down, the run still winds up and frees the model.
                await asyncio.gather(asyncio.shield(run.task), return_exceptions=True)
            return
        run.task.cancel()
        if not notify:
            await asyncio.gather(run.task, return_exceptions=True)

