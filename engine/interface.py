"""What a front end may know of an engine: describe it, validate a request, run one.

The web app depends on this Protocol, not on SpecEngine: the real engine and
the tests' tiny one both satisfy it, and nothing else about decoding crosses
into the app.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Protocol

from pydantic import BaseModel

from engine.events import RunFinished
from engine.request import GenerationRequest
from engine.whatif import WhatIfRequest

Emit = Callable[[Any], None]


class EngineInfo(BaseModel):
    """What a page shows about the loaded engine and offers its users."""

    target: str
    draft: str | None = None
    device: str
    dtype: str
    drafters: list[str]
    default_drafter: str
    default_policy: str
    default_policy_note: str = ""  # why: measured fastest here (with the evidence), or not measured
    costs: Literal["measured", "synthetic", "assumed"]
    costs_note: str | None = None  # what to tell a user when the costs were not measured here
    suffix_memory_tokens: int = 0  # the suffix memory's budget per policy (engine/drafters/memory.py); 0: none


class Engine(Protocol):
    def describe(self) -> EngineInfo:
        """The loaded models, drafters and defaults."""

    def validate(self, request: GenerationRequest) -> Any:
        """Checks a request against this engine; raises RequestError naming the field at fault."""

    def new_memory(self) -> Any:
        """A fresh, empty suffix memory for one client (None when the engine keeps none)."""

    def run(self, request: GenerationRequest, emit: Emit | None = None,
            cancelled: Callable[[], bool] | None = None, detail: bool = True,
            memory: Any = "engine") -> RunFinished:
        """Generates for one request, reporting through `emit`; stops within a step once `cancelled()`.
        `memory`: the suffix memory (engine/drafters/memory.py's MemoryBank) this run drafts from and joins;
        None for none; by default the engine's own."""

    def what_if(self, request: WhatIfRequest, emit: Emit | None = None,
                cancelled: Callable[[], bool] | None = None) -> RunFinished:
        """Re-runs one step of a run from its prefix under the request's policy and parameters (engine/whatif.py)."""
