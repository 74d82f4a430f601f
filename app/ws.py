"""The `/ws` endpoint: validates client messages and relays each run's events; it never decodes."""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from fastapi import APIRouter, WebSocket
from pydantic import BaseModel

from app.line import LineFull
from app.protocol import CancelMessage, Queued, RunMessage, error_event, parse_client_message, policy_named_in
from app.relay import relay_run
from engine.errors import RequestError, SpecscopeError
from engine.request import GenerationRequest

log = logging.getLogger("specscope.app")
router = APIRouter()


@router.websocket("/ws")
async def websocket_endpoint(websocket: WebSocket) -> None:
    if not same_origin(websocket.headers.get("origin"), websocket.headers.get("host")):
        # Another site's page must not drive this server's model from a visitor's browser.
        await websocket.close(code=1008, reason="cross-origin WebSocket refused")
        return
    await websocket.accept()
    await ClientSession(websocket).serve()


def same_origin(origin: str | None, host: str | None) -> bool:
    """Browsers always send Origin; clients without one (scripts, tests) are not a cross-site risk."""
    if origin is None:
        return True
    return host is not None and urlsplit(origin).netloc == host


@dataclass
class _ActiveRun:
    cancel: threading.Event = field(default_factory=threading.Event)
    started: bool = False  # holds the model (no longer waiting in line)
    task: asyncio.Task | None = None


class ClientSession:
    """One browser tab: at most one run at a time, cancelled when the tab goes away."""

    def __init__(self, websocket: WebSocket):
        self.websocket = websocket
        self.state = websocket.app.state
        self.active: _ActiveRun | None = None
        self._send_lock = asyncio.Lock()

    async def serve(self) -> None:
        try:
            while True:
                message = await self.websocket.receive()
                if message["type"] == "websocket.disconnect":
                    break
                await self._handle(message.get("text"))
        finally:
            await self._stop_active(notify=False)

    async def send(self, model: BaseModel) -> None:
        async with self._send_lock:
            await self.websocket.send_text(model.model_dump_json())

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
        elif isinstance(message, RunMessage):
            await self._start(message.to_request())

    async def _start(self, request: GenerationRequest) -> None:
        if self.active is not None and not self.active.task.done():
            await self.send(error_event("a run is already in progress on this connection; cancel it first",
                                        "type", request.policy))
            return
        problem = self._check(request)
        if problem is not None:
            await self.send(error_event(str(problem), problem.field, request.policy or ""))
            return
        run = _ActiveRun()
        run.task = asyncio.create_task(self._run(request, run))
        self.active = run

    def _check(self, request: GenerationRequest) -> SpecscopeError | None:
        """Refuses a bad request before it waits in line, with the engine's own check (run() checks again)."""
        if self.state.engine is None:
            return RequestError("this server replays recorded traces only; it has no model loaded", field=None)
        try:
            self.state.engine.validate(request)
        except SpecscopeError as err:
            return err
        return None

    async def _run(self, request: GenerationRequest, run: _ActiveRun) -> None:
        try:
            async with self.state.line.turn(lambda position: self._send_quietly(Queued(position=position))):
                run.started = True
                await relay_run(self.state.engine, self.state.executor, request, run.cancel, self.send)
        except LineFull as err:
            await self._send_quietly(error_event(str(err), None, request.policy))
        except SpecscopeError as err:
            await self._send_quietly(error_event(str(err), err.field, request.policy or ""))
        except asyncio.CancelledError:
            raise
        except Exception as err:  # an engine bug must not take the server down; the client hears of it
            log.exception("run failed")
            await self._send_quietly(error_event(f"internal error: {type(err).__name__}: {err}", None,
                                                 request.policy or ""))

    async def _stop_active(self, notify: bool) -> None:
        """Cancel: a running run stops within one step and ends with run_finished; a waiting one leaves the line."""
        run = self.active
        if run is None or run.task.done():
            return
        run.cancel.set()
        if run.started:
            if not notify:
                # Shielded: if the server tears this connection down, the run still winds up and frees the model.
                await asyncio.gather(asyncio.shield(run.task), return_exceptions=True)
            return
        run.task.cancel()
        await asyncio.gather(run.task, return_exceptions=True)
        if notify:
            await self._send_quietly(error_event("cancelled before it started", None))

    async def _send_quietly(self, model: BaseModel) -> None:
        try:
            await self.send(model)
        except Exception:  # the client left; nobody to tell
            pass
