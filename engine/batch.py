"""Several requests decoded together: each step drafts every request's tree, one target forward verifies
them all, and each request finishes its step on its own.

The contract:

    joining: `submit` (from any thread) checks the request as `SpecEngine.run` does and queues it; it
        joins at the start of the next step, first come first served, while fewer than `max_batch` run;
    leaving: a request leaves at the end of the step that finished it (EOS, max-new-tokens) or, once
        `cancelled()` says so, before its next step: its place is free at the next step (continuous
        batching), and its ticket holds its RunFinished;
    drafting: the members' trees grow a layer at a time together, and each layer's draft forwards (an EAGLE-3
        head's) run in one call for the whole batch, each request getting the bits of its own forward;
    policies: before each step every policy hears how many requests share its verify forward
        (`Policy.see_batch`): cast and talon-adaptive read the cost table's rows at that batch, the
        rows `specscope profile` measures through the same batched forward;
    isolation: each request has its own target session (a KV cache of its own over the one model's
        weights), its own drafter session, policy, generator, tree and suffix-memory scope, and its
        events go to its own `emit` only: they are the events it gets when run alone, but for the
        times (`verify_ms` is the shared forward's, `wall_s` runs from joining to leaving);
    losslessness: a request's tree is verified against logits of the same tree alone (FastLM's lean
        forward computes the same products over more rows; greedy output equals the request's run alone,
        and sampling keeps the target's distribution);
    failure: a request whose drafting or finishing raises leaves with the error on its ticket; the
        others go on. A target forward that raises fails every request of that step;
    the model: one step holds the engine's model (its lock) from the first draft to the last finish, so
        a run alone (`SpecEngine.run`) may take it between two steps: they share weights, never a cache;
    driving: one thread calls `step()` (or `run()`, steps until nothing is left to do).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Generator, Literal

from engine.drafters.base import DraftForward, Drafter, run_draft_forwards
from engine.drafters.memory import MemoryBank
from engine.engine import Drafted, Prepared, SpecEngine, _Run
from engine.events import RunFinished
from engine.interface import Emit
from engine.models.base import LanguageModel
from engine.models.device import clock
from engine.request import GenerationRequest
from engine.whatif import WhatIfRequest

DEFAULT_MAX_BATCH = 8


@dataclass
class Ticket:
    """A submitted request's place in the batch: done once it has left, with its result or its error."""

    request: GenerationRequest
    on_done: Callable[["Ticket"], None] | None = None  # called in the driving thread once it is done
    result: RunFinished | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def settle(self, result: RunFinished | None = None, error: BaseException | None = None) -> None:
        self.result, self.error = result, error
        self.done.set()
        if self.on_done is not None:
            self.on_done(self)

    def outcome(self, timeout: float | None = None) -> RunFinished:
        """The request's RunFinished once it has left (raising what made it fail)."""
        if not self.done.wait(timeout):
            raise TimeoutError("the request has not finished")
        if self.error is not None:
            raise self.error
        return self.result


@dataclass
class _Waiting:
    ticket: Ticket
    prepared: Prepared
    emit: Emit | None
    cancelled: Callable[[], bool] | None
    detail: bool
    bank: MemoryBank | None
    what_if: WhatIfRequest | None = None


@dataclass(eq=False)
class _Member:
    """A running request and the sessions it holds until it leaves."""

    ticket: Ticket
    run: _Run
    target: LanguageModel
    drafter: Drafter | None
    drafter_name: str | None


class Batch:
    """Requests decoded together on one engine's target: see the module docstring's contract."""

    def __init__(self, engine: SpecEngine, max_batch: int = DEFAULT_MAX_BATCH):
        assert max_batch >= 1, max_batch
        self.engine = engine
        self.max_batch = max_batch
        self._waiting: deque[_Waiting] = deque()
        self._lock = threading.Lock()  # the queue: `submit` may come from any thread
        self._members: list[_Member] = []
        # Sessions of requests that left, kept for the next to join (their caches are allocated already).
        self._targets: list[LanguageModel] = []
        self._drafters: dict[str, list[Drafter]] = {}

    def submit(self, request: GenerationRequest, emit: Emit | None = None,
               cancelled: Callable[[], bool] | None = None, detail: bool = True,
               memory: MemoryBank | None | Literal["engine"] = "engine",
               on_done: Callable[[Ticket], None] | None = None) -> Ticket:
        """Queues a request to join at the next step; arguments as `SpecEngine.run`'s (a WhatIfRequest runs its
        one step as `SpecEngine.what_if` does: in detail, with no suffix memory). `on_done(ticket)` is called
        in the driving thread once it has left. A RequestError (the request does not fit the engine) is raised
        here, before it queues."""
        prepared = self.engine.validate(request)
        ticket = Ticket(request, on_done)
        what_if = request if isinstance(request, WhatIfRequest) else None
        bank = None if what_if else self.engine.bank_for(memory)
        with self._lock:
            self._waiting.append(_Waiting(ticket, prepared, emit, cancelled, detail or what_if is not None, bank,
                                          what_if))
        return ticket

    @property
    def running(self) -> int:
        """Requests in the batch now."""
        return len(self._members)

    @property
    def idle(self) -> bool:
        """Nothing runs and nothing waits."""
        with self._lock:
            return not self._members and not self._waiting

    def run(self) -> None:
        """Steps until every submitted request has left (requests submitted meanwhile included)."""
        while not self.idle:
            self.step()

    def step(self) -> None:
        """Admits the waiting requests that fit, then one step of every running request."""
        with self.engine._turn():
            self._admit()
            if self._members:
                self._step_members()

    def _admit(self) -> None:
        """Prefills waiting requests into the free places (one cancelled already leaves before its first
        step, as every member is asked before each step)."""
        while len(self._members) < self.max_batch:
            with self._lock:
                if not self._waiting:
                    return
                waiting = self._waiting.popleft()
            self._join(waiting)

    def _join(self, waiting: _Waiting) -> None:
        prepared = waiting.prepared
        target = self._targets.pop() if self._targets else self.engine.target.session()
        name = prepared.drafter
        drafter = None
        if name is not None:
            free = self._drafters.get(name)
            drafter = free.pop() if free else self.engine.drafter_session(name)
        run = self.engine._new_run(prepared, waiting.emit, waiting.cancelled, waiting.detail, waiting.what_if,
                                   bank=waiting.bank, target=target, drafter=drafter)
        member = _Member(waiting.ticket, run, target, drafter, name)
        try:
            run.begin()
        except Exception as error:
            self._fail(member, error)
            return
        self._members.append(member)

    def _step_members(self) -> None:
        """Every member that is to go on drafts (the others leave), one forward verifies all the trees,
        every member finishes its step."""
        for member in list(self._members):
            if not member.run.ready():
                self._leave(member)
        for member in self._members:  # cost-aware policies read the cost table's rows at this batch
            member.run.policy.see_batch(len(self._members))
        drafted = self._draft_members()
        if not drafted:
            return
        device = self.engine.target.device
        began = clock(device)
        try:
            outputs = self.engine.target.forward_batch([step.verify for _, step in drafted])
        except Exception as error:
            for member, _ in drafted:
                self._fail(member, error)
            return
        verify_ms = (clock(device) - began) * 1000
        for (member, step), output in zip(drafted, outputs):
            try:
                member.run.finish(step, output, verify_ms, shared=len(drafted))
            except Exception as error:
                self._fail(member, error)
                continue
            if member.run.stop is not None:
                self._leave(member)

    def _draft_members(self) -> list[tuple[_Member, Drafted]]:
        """Every member's tree, grown a layer at a time together: each round, every member still growing hands
        out its next draft forward and one call runs them all (run_draft_forwards), so the draft model's
        weights are read once per layer for the batch, not once per request. A member whose drafting raises
        leaves with its error; a shared call that raises fails the members whose forwards it ran."""
        drafted: dict[_Member, Drafted] = {}
        growing = [(member, member.run.drafting()) for member in self._members]
        while growing:
            waiting: list[tuple[_Member, Generator, DraftForward]] = []
            for member, steps in growing:
                try:
                    waiting.append((member, steps, next(steps)))
                except StopIteration as done:
                    drafted[member] = done.value
                except Exception as error:
                    self._fail(member, error)
            try:
                run_draft_forwards([forward for _, _, forward in waiting])
            except Exception as error:
                for member, _, _ in waiting:
                    self._fail(member, error)
                waiting = []
            growing = [(member, steps) for member, steps, _ in waiting]
        return [(member, drafted[member]) for member in list(self._members) if member in drafted]

    def _leave(self, member: _Member) -> None:
        """A request that stopped: its last event, its ticket done, its sessions free for the next."""
        try:
            result = member.run.finished()
        except Exception as error:
            self._fail(member, error)
            return
        self._remove(member)
        self._targets.append(member.target)
        if member.drafter is not None:
            self._drafters.setdefault(member.drafter_name, []).append(member.drafter)
        member.ticket.settle(result)

    def _fail(self, member: _Member, error: BaseException) -> None:
        """A request that raised leaves with the error; its sessions, in an unknown state, are dropped."""
        member.run.release()
        self._remove(member)
        member.ticket.settle(error=error)

    def _remove(self, member: _Member) -> None:
        if member in self._members:
            self._members.remove(member)
