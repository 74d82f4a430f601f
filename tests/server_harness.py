"""A real uvicorn over the tiny engine, in a thread or a subprocess, and a raw WebSocket client that can
misbehave (never read, send invalid UTF-8, stop mid-handshake), for the tests of hostile clients."""

from __future__ import annotations

import base64
import os
import socket
import struct
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

import uvicorn

from app.main import create_app
from app.serve import uvicorn_config
from app.settings import ServerSettings

BIG_RUN = {"type": "run", "prompt": "x", "policy": "talon", "params": {"budget": 512, "top_k": 64},
           "max_new_tokens": 900}
SHORT_RUN = {"type": "run", "prompt": "hi", "policy": "talon", "params": {"budget": 8, "top_k": 3},
             "max_new_tokens": 2}


@dataclass
class Running:
    port: int
    server: uvicorn.Server

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"


def bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def server_in_thread(engine: Any, **settings: Any) -> Iterator[Running]:
    """uvicorn with app.serve's configuration in a thread of this process (so caplog sees its logs)."""
    sock = bound_socket()
    port = sock.getsockname()[1]
    config = ServerSettings(host="127.0.0.1", port=port, **settings)
    server = uvicorn.Server(uvicorn_config(create_app(config, engine_factory=lambda _: engine), config,
                                           log_config=None))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the test server did not start"
        time.sleep(0.02)
    try:
        yield Running(port, server)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        assert not thread.is_alive(), "the test server did not stop"


def raw_socket(port: int, receive_buffer: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)  # before connect: sets the window
    sock.connect(("127.0.0.1", port))
    return sock


def handshake(sock: socket.socket, port: int) -> None:
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, "the server closed during the handshake"
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head


def frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """One masked client frame (RFC 6455 5.2)."""
    mask = os.urandom(4)
    length = len(payload)
    if length < 126:
        header = struct.pack("!BB", 0x80 | opcode, 0x80 | length)
    elif length < 1 << 16:
        header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, length)
    else:
        header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, length)
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """(opcode, payload) of the next unmasked server frame."""
    first, second = _read_exactly(sock, 2)
    length = second & 0x7F
    if length == 126:
        length = struct.unpack("!H", _read_exactly(sock, 2))[0]
    elif length == 127:
        length = struct.unpack("!Q", _read_exactly(sock, 8))[0]
    return first & 0x0F, _read_exactly(sock, length)


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def serve_tiny_engine(port: int) -> None:
    """`python tests/server_harness.py PORT`: the tiny engine behind `specscope serve`'s uvicorn setup, in the
    main thread (so SIGTERM reaches uvicorn's own handler, as in production)."""
    import torch

    from tiny_models import tiny_engine

    torch.set_num_threads(1)
    engine = tiny_engine(seed=0)
    settings = ServerSettings(host="127.0.0.1", port=port)
    uvicorn.Server(uvicorn_config(create_app(settings, engine_factory=lambda _: engine), settings)).run()


if __name__ == "__main__":
    import sys

    serve_tiny_engine(int(sys.argv[1]))
