"""One model, many clients: runs take turns in arrival order, and waiting ones learn their place."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable


class LineFull(RuntimeError):
    pass


class _Ticket:
    def __init__(self) -> None:
        self.ready = asyncio.Event()  # this ticket holds the model
        self.moved = asyncio.Event()  # the line moved; the position may have changed


class RunLine:
    """A fair FIFO turn for the single engine, with positions for the waiting."""

    def __init__(self, max_waiting: int = 16):
        self.max_waiting = max_waiting
        self._holder: _Ticket | None = None
        self._waiting: list[_Ticket] = []

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def busy(self) -> bool:
        return self._holder is not None

    @asynccontextmanager
    async def turn(self, on_position: Callable[[int], Awaitable[None]]) -> AsyncIterator[None]:
        """Holds the model for the body; calls `on_position` with the place in line while waiting."""
        ticket = self._join()
        try:
            while not ticket.ready.is_set():
                await on_position(self._waiting.index(ticket) + 1)
                ticket.moved.clear()
                await ticket.moved.wait()
            yield
        finally:
            self._leave(ticket)

    def _join(self) -> _Ticket:
        if self.busy and len(self._waiting) >= self.max_waiting:
            raise LineFull(f"{len(self._waiting)} runs are already waiting; try again shortly")
        ticket = _Ticket()
        self._waiting.append(ticket)
        self._advance()
        return ticket

    def _leave(self, ticket: _Ticket) -> None:
        if ticket is self._holder:
            self._holder = None
        elif ticket in self._waiting:
            self._waiting.remove(ticket)
        self._advance()

    def _advance(self) -> None:
        if self._holder is None and self._waiting:
            self._holder = self._waiting.pop(0)
            self._holder.ready.set()
        for ticket in [self._holder, *self._waiting]:
            if ticket is not None:
                ticket.moved.set()
