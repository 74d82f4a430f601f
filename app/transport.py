"""uvicorn's HTTP and WebSocket protocols, hardened against clients that stall (app.serve passes them to uvicorn).

Three things uvicorn leaves open, closed here:

* A connection that never finishes its request (or its WebSocket upgrade) is kept
  forever: here the request's head must arrive within `handshake_timeout`, or the
  connection gets a 408 and is closed.
* Closing a transport waits for its write buffer to drain, which never happens for
  a peer that stopped reading; the connection then outlives its socket's use and
  holds graceful shutdown. Here every close arms an abort `CLOSE_GRACE_S` later.
* A text frame that is not UTF-8 makes uvicorn log an ERROR traceback (any client
  can fill the log with them). Here it is closed with 1007, as RFC 6455 asks, and
  one INFO line.

These subclass uvicorn internals (httptools' parser callbacks, the websockets-sansio
protocol); tests/test_app_server.py exercises each against a real uvicorn.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.exceptions import InvalidState

log = logging.getLogger("specscope.app")

CLOSE_GRACE_S = 2.0  # a closing connection's last bytes get this long to leave before the socket is aborted
REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class ClosingDeadline:
    """A transport whose close() is followed by abort() after a grace period, unless it closed by then."""

    def __init__(self, transport: asyncio.Transport, grace_s: float = CLOSE_GRACE_S):
        self._transport = transport
        self._grace_s = grace_s
        self._abort_armed = False

    @classmethod
    def wrap(cls, transport: Any) -> "ClosingDeadline":
        return transport if isinstance(transport, cls) else cls(transport)

    def close(self) -> None:
        self._transport.close()
        if not self._abort_armed:
            self._abort_armed = True
            asyncio.get_running_loop().call_later(self._grace_s, self._abort)

    def _abort(self) -> None:
        # Harmless on a transport that closed cleanly meanwhile (asyncio and uvloop both ignore it).
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedHttp(HttpToolsProtocol):
    """HTTP with a deadline on each request's head (request line and headers) and closes that cannot hang."""

    handshake_timeout = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._head_deadline: asyncio.TimerHandle | None = None
        super().connection_made(ClosingDeadline.wrap(transport))
        self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_head_deadline()

    def on_headers_complete(self) -> None:
        self._disarm_head_deadline()
        super().on_headers_complete()

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        self._head_deadline = self.loop.call_later(self.handshake_timeout, self._head_timed_out)

    def _disarm_head_deadline(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_timed_out(self) -> None:
        self._head_deadline = None
        if self.transport.is_closing():
            return
        log.info("closing a connection from %s: no complete request within %g s",
                 self.client[0] if self.client else "?", self.handshake_timeout)
        self.transport.write(REQUEST_TIMEOUT)
        self.transport.close()


class GuardedWebSockets(WebSocketsSansIOProtocol):
    """WebSockets whose closes cannot hang and whose invalid UTF-8 is a 1007 close without a traceback."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(ClosingDeadline.wrap(transport))

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type == "text" and not self.close_sent and not _is_utf8(self.frames):
            self.frames = []
            log.info("closing the socket of %s (1007): a text frame was not valid UTF-8",
                     self.client[0] if self.client else "?")
            try:
                self.conn.send_close(1007, "text frame is not valid UTF-8")
            except InvalidState:  # the peer is already closing: nothing more to read
                return
            self.handle_parser_exception()
            return
        super().send_receive_event_to_app()


def _is_utf8(frames: list[bytes]) -> bool:
    try:
        b"".join(frames).decode()
    except UnicodeDecodeError:
        return False
    return True


def protocols(handshake_timeout: float) -> tuple[type[GuardedHttp], type[GuardedWebSockets]]:
    """The protocol classes for one server's settings (uvicorn instantiates them itself)."""
    http = type("GuardedHttp", (GuardedHttp,), {"handshake_timeout": handshake_timeout})
    return http, GuardedWebSockets
