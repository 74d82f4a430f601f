"""Cost tables: measured forward time of the target and of the draft, in ms.

A table holds, for each model, a grid of median forward times indexed
[batch][context][n]: B sequences, each with `context` tokens already cached,
feeding n new tokens (a chain or a tree of n nodes costs the same: the mask
changes, not the matmuls). `specscope profile` measures it on the current
device, model and dtype; cost-aware policies read it through `CostTable.cost`.

Which table a run reads is decided in one place, `resolve_costs`: the file
the options name, else the one `specscope profile` saved for this device,
model and dtype, else an assumed table (a linear fit to a CPU's numbers) whose
source says "assumed", so that every output can say the costs were not measured.

Lookups follow CAST's select(c): the context is rounded up to the next
measured context (a longer cache never costs less, so rounding up errs on the
safe side), likewise the batch; n is interpolated linearly between measured
values and extrapolated from the last two beyond them.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.embedded import cache_root
from engine.errors import LoadError

TABLE_VERSION = 1


@dataclass
class ModelCosts:
    """One model's grid: ms[b][c][k] for batches[b], contexts[c], ns[k]."""

    name: str
    ms: list[list[list[float]]]
    source: str = "measured"  # "measured" | "synthetic" (tests) | "assumed" (nothing was measured)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ms": self.ms, "source": self.source}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ModelCosts":
        return cls(name=data["name"], ms=data["ms"], source=data.get("source", "measured"))


@dataclass
class CostTable:
    device: str
    dtype: str
    batches: list[int]
    contexts: list[int]
    ns: list[int]
    target: ModelCosts
    draft: ModelCosts | None = None
    context_step: int = 128
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return table_key(self.device, self.target.name, self.dtype)

    @property
    def measured(self) -> bool:
        return self.target.source == "measured"

    def cost(self, n: float, context: int, batch: int = 1, model: str = "target") -> float:
        """ms of one forward of n new tokens on `context` cached tokens, for `batch` sequences."""
        if n <= 0:
            return 0.0
        costs = self.target if model == "target" else self.draft_costs()
        row = costs.ms[_bucket(self.batches, batch)][_bucket(self.contexts, context)]
        return _interpolate(self.ns, _non_decreasing(row), n)

    def draft_cost(self, n: float, context: int, batch: int = 1) -> float:
        return self.cost(n, context, batch, model="draft")

    def verify_cost(self, n: float, context: int, batch: int = 1) -> float:
        return self.cost(n, context, batch, model="target")

    def draft_costs(self) -> ModelCosts:
        """The draft's grid; without a measured draft, an assumed fraction of the target's.

        A feature-level head or an n-gram drafter is no CachedLM the profiler can time; FACTS measured a
        one-layer head at c ≈ 0.04–0.16 of a target forward, so 0.1 of the target's grid stands in (a head
        is one decoder layer plus the LM head, so its cost grows with n like the target's).
        """
        if self.draft is not None:
            return self.draft
        ratio = float(self.meta.get("assumed_draft_ratio", 0.1))
        ms = [[[ratio * ms for ms in row] for row in grid] for grid in self.target.ms]
        return ModelCosts(name="assumed", ms=ms, source="assumed")

    def select_context(self, context: int) -> int:
        """CAST's select(c): the measured context this lookup reads."""
        return self.contexts[_bucket(self.contexts, context)]

    def summary(self, batch: int = 1) -> list[str]:
        """Short lines: verify cost of n tokens over one, and c = draft/target time for one token."""
        lines = []
        b = _bucket(self.batches, batch)
        for c, context in enumerate(self.contexts):
            row = self.target.ms[b][c]
            ratios = ", ".join(f"n={n}: {ms / row[0]:.2f}x" for n, ms in zip(self.ns, row))
            lines.append(f"target B={self.batches[b]} ctx={context}: n=1 {row[0]:.1f} ms; {ratios}")
            draft = self.draft_costs()
            c_ratio = draft.ms[b][c][0] / row[0]
            lines.append(f"draft  B={self.batches[b]} ctx={context}: n=1 {draft.ms[b][c][0]:.2f} ms; "
                         f"c = {c_ratio:.3f} ({draft.source})")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "version": TABLE_VERSION, "key": self.key, "device": self.device, "dtype": self.dtype,
            "batches": self.batches, "contexts": self.contexts, "ns": self.ns, "context_step": self.context_step,
            "target": self.target.to_json(), "draft": self.draft.to_json() if self.draft else None,
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CostTable":
        if data.get("version") != TABLE_VERSION:
            raise ValueError(f"cost table version {data.get('version')!r}, expected {TABLE_VERSION}: re-run specscope profile")
        return cls(device=data["device"], dtype=data["dtype"], batches=data["batches"], contexts=data["contexts"],
                   ns=data["ns"], context_step=data.get("context_step", 128),
                   target=ModelCosts.from_json(data["target"]),
                   draft=ModelCosts.from_json(data["draft"]) if data.get("draft") else None,
                   meta=data.get("meta", {}))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(self.to_json(), indent=1), encoding="utf-8")
        partial.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "CostTable":
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))

    @classmethod
    def linear(cls, lam: float, delta: float, draft_lam: float | None = None, draft_delta: float | None = None,
               ns: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128), contexts: tuple[int, ...] = (128, 512, 1024),
               batches: tuple[int, ...] = (1,), name: str = "synthetic") -> "CostTable":
        """A table with cost λ·n + δ at every context and batch (draft: its own λ, δ; default 0.1× the target's).

        >>> CostTable.linear(2.0, 10.0).cost(3, context=300)
        16.0
        """
        draft_lam = 0.1 * lam if draft_lam is None else draft_lam
        draft_delta = 0.1 * delta if draft_delta is None else draft_delta

        def grid(slope: float, offset: float) -> list[list[list[float]]]:
            return [[[slope * n + offset for n in ns] for _ in contexts] for _ in batches]

        return cls(device="synthetic", dtype="none", batches=list(batches), contexts=list(contexts), ns=list(ns),
                   target=ModelCosts(name, grid(lam, delta), "synthetic"),
                   draft=ModelCosts(name + "-draft", grid(draft_lam, draft_delta), "synthetic"))

    @classmethod
    def assumed(cls) -> "CostTable":
        """Stands in when nothing was measured: FACTS' fp32 SmolLM2-135M numbers on 2 CPU cores
        (43 ms for n=1, ~1.6 ms per extra token), draft c = 0.1."""
        table = cls.linear(lam=1.6, delta=42.0, name="assumed")
        table.target.source = table.draft.source = "assumed"
        table.device = table.dtype = "assumed"
        return table


def table_key(device: str, model: str, dtype: str) -> str:
    """A file-name-safe key for (device, model, dtype).

    >>> table_key("AMD EPYC 9B45 (cpu)", "SmolLM2-135M-Instruct", "torch.float32")
    'amd-epyc-9b45-cpu__smollm2-135m-instruct__float32'
    """
    def clean(text: str) -> str:
        return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")

    return "__".join([clean(device), clean(model), clean(dtype.replace("torch.", ""))])


def _bucket(grid: list[int], value: float) -> int:
    """Index of the smallest grid value ≥ value, clamped to the last (CAST's select).

    >>> _bucket([128, 512, 1024], 300), _bucket([128, 512, 1024], 5000), _bucket([128, 512], 10)
    (1, 2, 0)
    """
    return min(bisect.bisect_left(grid, value), len(grid) - 1)


def _interpolate(xs: list[int], ys: list[float], x: float) -> float:
    """Piecewise-linear through (xs, ys), extended linearly past both ends.

    >>> _interpolate([1, 2, 4], [10.0, 12.0, 20.0], 3), _interpolate([1, 2, 4], [10.0, 12.0, 20.0], 6)
    (16.0, 28.0)
    """
    if len(xs) == 1:
        return ys[0]
    k = min(max(bisect.bisect_right(xs, x) - 1, 0), len(xs) - 2)
    slope = (ys[k + 1] - ys[k]) / (xs[k + 1] - xs[k])
    return max(ys[k] + slope * (x - xs[k]), 0.0)


def _non_decreasing(row: list[float]) -> list[float]:
    """Running maximum: a forward of more tokens never costs less; measured dips are timing noise.

    >>> _non_decreasing([3.0, 2.5, 4.0])
    [3.0, 3.0, 4.0]
    """
    out, best = [], float("-inf")
    for value in row:
        best = max(best, value)
        out.append(best)
    return out


def cost_dir() -> Path:
    return cache_root() / "costs"


def saved_table_path(device: str, model: str, dtype: str) -> Path:
    """Where `specscope profile` saves the table of this device, model and dtype."""
    return cost_dir() / f"{table_key(device, model, dtype)}.json"


def resolve_costs(path: Path | None, saved: Path) -> CostTable:
    """The cost table a run reads: `path` if given, else the table saved at `saved`, else the assumed one."""
    if path is not None:
        try:
            return CostTable.load(path)
        except (OSError, ValueError, KeyError) as err:
            raise LoadError(f"cannot read the cost table {path}: {err}", field="cost_table") from None
    if saved.exists():
        try:
            return CostTable.load(saved)
        except (ValueError, KeyError):
            pass  # an older table format: re-measuring is the cure, and `costs_note` says how
    return CostTable.assumed()


def costs_note(table: CostTable) -> str | None:
    """What a user should hear about the costs cast and talon-adaptive read; None when they were measured."""
    if table.measured:
        return None
    return ("costs are assumed, not measured on this machine: cast and talon-adaptive size their trees from "
            "a generic CPU profile; run `specscope profile` to measure this device")
