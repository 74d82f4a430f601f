"""One model, many clients: runs take turns in arrival order, and waiting ones learn their place.

With `places` > 1 (the server's `max_batch`) that many runs hold the model at once, decoded together
in one batch (app/batching.py); the rest wait in line as ever."""

from __future__ import annotations

import asyncio
from collections import Counter
from contextlib import asynccontextmanager
from typing import AsyncIterator, Awaitable, Callable, Hashable


class LineFull(RuntimeError):
    pass


class _Ticket:
    def __init__(self, client: Hashable) -> None:
        self.client = client
        self.ready = asyncio.Event()  # this ticket holds the model
        self.moved = asyncio.Event()  # the line moved; the position may have changed


class RunLine:
    """A fair FIFO turn for the engine, with positions for the waiting.

    `max_waiting` bounds the line; `max_per_client` bounds the places (waiting or
    holding the model) one client address may take, so no client fills the line;
    `holders` runs hold the model at once (1: one run at a time).
    """

    def __init__(self, max_waiting: int = 16, max_per_client: int | None = None, holders: int = 1):
        assert holders >= 1, holders
        self.max_waiting = max_waiting
        self.max_per_client = max_per_client
        self.holders = holders
        self._holders: list[_Ticket] = []
        self._waiting: list[_Ticket] = []
        self._places: Counter = Counter()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def busy(self) -> bool:
        """Every place at the model is taken."""
        return len(self._holders) >= self.holders

    @property
    def holding(self) -> int:
        """Runs holding the model now."""
        return len(self._holders)

    def places(self, client: Hashable) -> int:
        return self._places[client]

    @asynccontextmanager
    async def turn(self, on_position: Callable[[int], Awaitable[None]], client: Hashable = None) -> AsyncIterator[None]:
        """Holds the model for the body; calls `on_position` with the place in line while waiting."""
        ticket = self._join(client)
        try:
            while not ticket.ready.is_set():
                # Cleared before the await: a move during `on_position` must wake the wait below.
                ticket.moved.clear()
                await on_position(self._waiting.index(ticket) + 1)
                if not ticket.ready.is_set():
                    await ticket.moved.wait()
            yield
        finally:
            self._leave(ticket)

    def _join(self, client: Hashable) -> _Ticket:
        if self.busy and len(self._waiting) >= self.max_waiting:
            raise LineFull(f"{len(self._waiting)} runs are already waiting; try again shortly")
        if self.max_per_client is not None and client is not None and self._places[client] >= self.max_per_client:
            raise LineFull(f"{client} already has {self._places[client]} runs waiting or running "
                           f"(at most {self.max_per_client} per client address)")
        ticket = _Ticket(client)
        self._places[client] += 1
        self._waiting.append(ticket)
        self._advance()
        return ticket

    def _leave(self, ticket: _Ticket) -> None:
        if ticket in self._holders:
            self._holders.remove(ticket)
        elif ticket in self._waiting:
            self._waiting.remove(ticket)
        self._places[ticket.client] -= 1
        if self._places[ticket.client] <= 0:
            del self._places[ticket.client]
        self._advance()

    def _advance(self) -> None:
        while len(self._holders) < self.holders and self._waiting:
            holder = self._waiting.pop(0)
            self._holders.append(holder)
            holder.ready.set()
        for ticket in [*self._holders, *self._waiting]:
            ticket.moved.set()
