"""Only this machine's pages drive the model: a Host allow-list, an Origin check and security headers.

A page on another site cannot read our answers (no CORS), but it can make a
visitor's browser talk to us. Two ways matter:

* DNS rebinding: evil.example resolves to 127.0.0.1 after the page loaded, so the
  page's requests reach us with `Host: evil.example` (and a matching Origin). The
  Host allow-list refuses them: a browser always sends the name it resolved.
* Cross-site WebSocket: a page on evil.example opens ws://localhost:8000/ws.
  Browsers always send Origin with a WebSocket handshake; it must name an allowed
  host and the very host:port the socket was opened on. Clients that send no
  Origin (scripts) are not browsers driven by another site, and are served.

Every HTTP response carries a Content-Security-Policy without inline script,
and refuses framing, MIME sniffing and referrers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("specscope.app")

LOCAL_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD_BINDS = ("", "0.0.0.0", "::")
ANY_HOST = "*"
DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


@dataclass(frozen=True)
class HostPort:
    host: str  # lower case, no brackets, no trailing dot
    port: int | None


def parse_host(value: str, scheme: str = "http") -> HostPort | None:
    """`Host` header or URL netloc -> HostPort; None if it is not one.

    >>> parse_host("[::1]:8000")
    HostPort(host='::1', port=8000)
    >>> parse_host("LocalHost.")
    HostPort(host='localhost', port=80)
    """
    try:
        parts = urlsplit(f"//{value}")
        host, port = parts.hostname, parts.port
    except ValueError:
        return None
    if not host or parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    return HostPort(host.rstrip("."), port if port is not None else DEFAULT_PORTS.get(scheme))


@dataclass(frozen=True)
class AllowList:
    """The host names this server answers to; "*" among them turns the Host check off (behind a proxy
    that checks it), never the Origin check."""

    names: frozenset[str]

    @classmethod
    def build(cls, bind_host: str, extra: Iterable[str]) -> "AllowList":
        """Loopback names, the interface the server binds (unless a wildcard) and the configured extras."""
        names = set(LOCAL_NAMES)
        if bind_host not in WILDCARD_BINDS:
            names.add(bind_host.strip("[]").lower())
        names.update(name.strip().strip("[]").lower().rstrip(".") for name in extra if name.strip())
        return cls(frozenset(names))

    def allows(self, host: str) -> bool:
        return ANY_HOST in self.names or host in self.names

    def __str__(self) -> str:
        return ", ".join(sorted(self.names))


class HostGuard:
    """Refuses HTTP requests and WebSocket handshakes whose Host (or a WebSocket's Origin) is not allowed."""

    def __init__(self, app: ASGIApp, allowed: AllowList):
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        problem = self.problem(headers.get("host"), headers.get("origin"), scope["type"], scope.get("scheme", "http"))
        if problem is None:
            await self.app(scope, receive, send)
            return
        client = scope.get("client")
        log.info("refused %s from %s: %s", scope["type"], client[0] if client else "?", problem)
        if scope["type"] == "http":
            await _plain_response(send, 400, problem)
        else:
            await receive()  # websocket.connect
            # Before the handshake completes this is an HTTP 403; the code is what ASGI test clients see.
            await send({"type": "websocket.close", "code": 1008, "reason": problem[:120]})

    def problem(self, host: str | None, origin: str | None, kind: str, scheme: str) -> str | None:
        """Why a request with these headers is refused, or None."""
        asked = parse_host(host or "", scheme)
        if asked is None or not self.allowed.allows(asked.host):
            return (f"Host {host!r} is not served here: this server answers {self.allowed} "
                    f"(add names with --allowed-hosts or SPECSCOPE_ALLOWED_HOSTS)")
        if kind == "websocket" and origin is not None:
            parts = urlsplit(origin)
            source = parse_host(parts.netloc, parts.scheme) if parts.scheme in ("http", "https") else None
            if source is None or source != asked:
                return f"cross-origin WebSocket refused: Origin {origin!r} is not this server's page"
        return None


def content_security_policy(host: str | None) -> str:
    # connect-src names ws: and wss: on the page's own host because older browsers do not count them as 'self'.
    sockets = f" ws://{host} wss://{host}" if host else ""
    return ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
            f"font-src 'self'; connect-src 'self'{sockets}; object-src 'none'; base-uri 'none'; "
            "form-action 'self'; frame-ancestors 'none'")


class SecurityHeaders:
    """Adds the security headers to every HTTP response (pages, JSON, static files, errors)."""

    def __init__(self, app: ASGIApp, allowed: AllowList):
        self.app = app
        self.allowed = allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        own_host = self._own_host(_headers(scope).get("host"), scope.get("scheme", "http"))
        extra = [(name.encode(), value.encode()) for name, value in self.headers(own_host)]

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                message["headers"] = [*message.get("headers", []), *(h for h in extra if h[0] not in present)]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _own_host(self, host: str | None, scheme: str) -> str | None:
        """The page's host:port for connect-src, only when it is an allowed one (never reflect a foreign Host)."""
        parsed = parse_host(host or "", scheme)
        if parsed is None or ANY_HOST in self.allowed.names or not self.allowed.allows(parsed.host):
            return None
        name = f"[{parsed.host}]" if ":" in parsed.host else parsed.host
        return f"{name}:{parsed.port}" if parsed.port is not None else name

    @staticmethod
    def headers(own_host: str | None) -> list[tuple[str, str]]:
        return [
            ("content-security-policy", content_security_policy(own_host)),
            ("x-content-type-options", "nosniff"),
            ("x-frame-options", "DENY"),
            ("referrer-policy", "no-referrer"),
            ("cross-origin-opener-policy", "same-origin"),
            ("cross-origin-resource-policy", "same-origin"),
        ]


def _headers(scope: Scope) -> dict[str, str]:
    return {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope.get("headers", [])}


async def _plain_response(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
