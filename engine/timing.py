"""Where a step's time goes: one record for every report, and the meter a drafter keeps.

A step's wall time splits into drafting (drafter and policy), of which the
drafter's model forwards are a part, the target's verify forward, and the
rest (acceptance, cache compaction, events). `Timings` is that split; the
step events, the run's summary, what a policy observes and the benchmark's
tallies all carry it, flat in JSON. Clocks wait for the device (engine/models/device.py).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch
from pydantic import BaseModel

from engine.models.device import clock


class Timings(BaseModel):
    draft_ms: float = 0.0  # the whole drafting phase: drafter and policy
    draft_forward_ms: float = 0.0  # of which inside the drafter's model forwards
    verify_ms: float = 0.0  # the target's forward over the tree
    other_ms: float = 0.0  # acceptance, cache compaction, bookkeeping, events

    @property
    def total_ms(self) -> float:
        return self.draft_ms + self.verify_ms + self.other_ms

    @classmethod
    def of(cls, record: "Timings") -> "Timings":
        """The timings part of a record that carries more (a step event, a run summary)."""
        return cls(**{name: getattr(record, name) for name in cls.model_fields})

    def __add__(self, other: "Timings") -> "Timings":
        return Timings(**{name: getattr(self, name) + getattr(other, name) for name in Timings.model_fields})


@dataclass
class ForwardMeter:
    """A drafter's model forwards so far (δ counts them) and the time inside them (c reads it)."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    forwards: int = 0
    ms: float = 0.0

    @contextmanager
    def timed(self, forwards: int = 1) -> Iterator[None]:
        """Counts and times one model forward (`forwards`: a call that runs several, one after another)."""
        start = clock(self.device)
        try:
            yield
        finally:
            self.record((clock(self.device) - start) * 1000, forwards)

    def record(self, ms: float, forwards: int = 1) -> None:
        """Counts one model forward of `ms` (a forward shared with other requests' drafters counts its whole time,
        as a batch's verify does), or `forwards` run in one call of `ms`."""
        self.forwards += forwards
        self.ms += ms

    def reading(self) -> tuple[int, float]:
        return self.forwards, self.ms
