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

Lookups round up, in every axis. The context goes to the next measured
context (CAST's select(c)), likewise the batch, and n to the next measured n.
CAST's table holds every n = 1 … N (its key design 1: f(B, c, n) sampled at
c = kL and n = 1 … N), and so does `specscope profile` up to its limit: a
forward's time is a staircase in n on a GPU, whose kernels tile the tokens
(17 cost what 32 do), and a line on a CPU. Between two measured n all a table knows is cost(a) ≤ cost(n) ≤ cost(b);
a linear interpolation would invent a slope across a step, so that 17 looked
cheaper than 32 and a cost-aware policy stopped at 17 where 32 came free.
Rounding up reads cost(b): exact on a table of every n, and elsewhere an
upper bound that never makes a node look cheaper than it may be. Past the
largest measured n the cost grows with the mean slope of the last measured
octave (n_max/2 … n_max), which spans whole steps of a staircase.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import LoadError
from engine.models.base import LanguageModel
from engine.models.device import device_name
from engine.models.embedded import cache_root

TABLE_VERSION = 2  # 2: n is measured at every value up to a limit and looked up rounding up (1: interpolated)


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
    # Lookups' derived rows, made once: a policy prices thousands of candidates a run. Keyed by the source
    # object's id and holding it, so a row replaced by a new list (not edited in place) is derived again.
    _derived: dict[tuple[str, int], tuple[Any, Any]] = field(default_factory=dict, repr=False, compare=False)
    _priced: dict[tuple[int, float], tuple[Any, float]] = field(default_factory=dict, repr=False, compare=False)

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
        key = (id(row), n)  # a policy asks the same few cells many times a step (cast: ~80)
        entry = self._priced.get(key)
        if entry is None or entry[0] is not row:
            if len(self._priced) > 4096:  # fractional n from a policy's arithmetic: keep it bounded
                self._priced.clear()
            entry = self._priced[key] = (row, _step_up(self.ns, self._once("monotone", row, _non_decreasing), n))
        return entry[1]

    def prices(self, count: int, context: int, batch: int = 1, model: str = "target") -> list[float]:
        """[cost(0), cost(1), …, cost(count)] at this context and batch: the price list of taking the first k of
        `count` items, made once per row and length (cast walks one at every layer and at every rerank).

        >>> table = CostTable.assumed()
        >>> table.prices(2, 512) == [0.0, table.cost(1, 512), table.cost(2, 512)]
        True
        """
        costs = self.target if model == "target" else self.draft_costs()
        row = costs.ms[_bucket(self.batches, batch)][_bucket(self.contexts, context)]
        return self._once(f"prices {count}", row, lambda row: [0.0] + [
            _step_up(self.ns, self._once("monotone", row, _non_decreasing), n) for n in range(1, count + 1)])

    def _once(self, kind: str, source: Any, derive: Any) -> Any:
        """derive(source), computed once per source object."""
        key = (kind, id(source))
        entry = self._derived.get(key)
        if entry is None or entry[0] is not source:
            entry = self._derived[key] = (source, derive(source))
        return entry[1]

    def draft_cost(self, n: float, context: int, batch: int = 1) -> float:
        return self.cost(n, context, batch, model="draft")

    def verify_cost(self, n: float, context: int, batch: int = 1) -> float:
        return self.cost(n, context, batch, model="target")

    def draft_costs(self) -> ModelCosts:
        """The draft's grid; without a measured draft, an assumed fraction of the target's.

        `specscope profile` measures a draft LM or, without one, the EAGLE-3 head (tools/profile.py); a table
        without either (a first-load calibration's, an n-gram drafter's) assumes: FACTS measured a one-layer
        head at c ≈ 0.04–0.16 of a target forward, so 0.1 of the target's grid stands in (a head is one
        decoder layer plus the LM head, so its cost grows with n like the target's).
        """
        if self.draft is not None:
            return self.draft
        ratio = float(self.meta.get("assumed_draft_ratio", 0.1))
        return self._once(f"assumed draft {ratio}", self.target.ms, lambda grids: ModelCosts(
            name="assumed", ms=[[[ratio * ms for ms in row] for row in grid] for grid in grids], source="assumed"))

    @property
    def n_grid(self) -> str:
        """Which n were measured, in words: every n up to a limit, or a grid (then lookups round n up)."""
        if self.ns == list(range(1, len(self.ns) + 1)):
            return f"every n from 1 to {self.ns[-1]}"
        return f"n in {{{', '.join(map(str, self.ns))}}}, each n read at the next measured one"

    def select_context(self, context: int) -> int:
        """CAST's select(c): the measured context this lookup reads."""
        return self.contexts[_bucket(self.contexts, context)]

    def summary(self, batch: int = 1) -> list[str]:
        """Short lines: verify cost of n tokens over one, and c = draft/target time for one token."""
        lines = [f"measured {self.n_grid}"]
        b = _bucket(self.batches, batch)
        shown = [k for k, n in enumerate(self.ns) if n & (n - 1) == 0 or k == len(self.ns) - 1]  # 1, 2, 4, …, last
        for c, context in enumerate(self.contexts):
            row = self.target.ms[b][c]
            ratios = ", ".join(f"n={self.ns[k]}: {row[k] / row[0]:.2f}x" for k in shown)
            lines.append(f"target B={self.batches[b]} ctx={context}: n=1 {row[0]:.1f} ms; {ratios}")
            draft = self.draft_costs()
            c_ratio = draft.ms[b][c][0] / row[0]
            lines.append(f"draft  B={self.batches[b]} ctx={context}: n=1 {draft.ms[b][c][0]:.2f} ms; "
                         f"c = {c_ratio:.3f} ({draft.source})")
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "version": TABLE_VERSION, "key": self.key, "device": self.device, "dtype": self.dtype,
            "batches": self.batches, "contexts": self.contexts, "ns": self.ns, "n_grid": self.n_grid,
            "context_step": self.context_step,
            "target": self.target.to_json(), "draft": self.draft.to_json() if self.draft else None,
            "meta": self.meta,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CostTable":
        version = data.get("version")
        if version == 1:
            raise ValueError("cost table version 1 measured n only at 1, 2, 4, … and interpolated between them, "
                             "which hides the steps of a GPU's costs; version 2 measures every n: "
                             "re-run specscope profile")
        if version != TABLE_VERSION:
            raise ValueError(f"cost table version {version!r}, expected {TABLE_VERSION}: re-run specscope profile")
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
               ns: tuple[int, ...] = tuple(range(1, 129)), contexts: tuple[int, ...] = (128, 512, 1024),
               batches: tuple[int, ...] = (1,), name: str = "synthetic") -> "CostTable":
        """A table with cost λ·n + δ at every context and batch (draft: its own λ, δ; default 0.1× the target's),
        at every n up to 128 by default, as `specscope profile` measures.

        >>> CostTable.linear(2.0, 10.0).cost(3, context=300), CostTable.linear(2.0, 10.0).cost(200, context=300)
        (16.0, 410.0)
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


def _step_up(xs: list[int], ys: list[float], x: float) -> float:
    """ys at the smallest xs ≥ x; past the last, a slope goes on: the last octave's (xs[-1]/2 … xs[-1]),
    or the whole table's where that is steeper. A noisy table whose smoothed row leaves its last
    octave flat must not price a tree twice the measured size as free.

    >>> xs, ys = [1, 16, 32, 64], [10.0, 10.0, 12.0, 16.0]
    >>> _step_up(xs, ys, 17), _step_up(xs, ys, 32), _step_up(xs, ys, 0.5), _step_up(xs, ys, 96)
    (12.0, 12.0, 10.0, 20.0)
    >>> _step_up([1, 32, 64], [10.0, 73.0, 73.0], 127)  # flat last octave: the whole table's 1 ms a token
    136.0
    """
    k = bisect.bisect_left(xs, x)
    if k < len(xs):
        return ys[k]
    low = max(bisect.bisect_right(xs, xs[-1] / 2) - 1, 0)
    if xs[low] == xs[-1]:
        return ys[-1]
    octave = (ys[-1] - ys[low]) / (xs[-1] - xs[low])
    whole = (ys[-1] - ys[0]) / (xs[-1] - xs[0])
    return ys[-1] + max(octave, whole) * (x - xs[-1])


def _non_decreasing(row: list[float]) -> list[float]:
    """The non-decreasing row nearest the measured one (least squares: isotonic regression by pooling adjacent
    violators): a forward of more tokens never costs less, so a measured dip is timing noise, and so is a
    spike, which a running maximum would carry up to every larger n (one slow 3-token sample made 3 and 4
    tokens look like 1.4 one-token forwards in a table where the kernel takes 1.2). A run of values out of
    order is replaced by its mean.

    >>> _non_decreasing([3.0, 2.5, 4.0])
    [2.75, 2.75, 4.0]
    >>> _non_decreasing([8.0, 8.5, 11.5, 9.0, 9.5, 12.0])
    [8.0, 8.5, 10.0, 10.0, 10.0, 12.0]
    """
    blocks: list[list[float]] = []  # [sum, count] of each pooled run, their means increasing
    for value in row:
        blocks.append([value, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    return [total / count for total, count in blocks for _ in range(int(count))]


def cost_dir() -> Path:
    return cache_root() / "costs"


def saved_table_path(device: str, model: str, dtype: str) -> Path:
    """Where `specscope profile` saves the table of this device, model and dtype."""
    return cost_dir() / f"{table_key(device, model, dtype)}.json"


def table_path_for(lm: LanguageModel) -> Path:
    """Where the cost table of this model, on its device and in its dtype, is saved: `specscope profile`
    writes it, `load_engine` reads it, `bench --record-default` records the fastest policy in it."""
    return saved_table_path(device_name(lm.device), lm.name, str(lm.dtype))


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


def costs_note(table: CostTable, forward: str | None = None, batch: int = 1) -> str | None:
    """What a user should hear about the costs cast and talon-adaptive read; None when they were measured
    here through the forward this run verifies with (`forward`: "native", "lean" or "plain"), at a batch
    the table holds (a larger one reads the largest measured row, which prices its trees as if alone).

    >>> table = CostTable.assumed()
    >>> table.target.source, table.meta["forward"] = "measured", "lean"
    >>> costs_note(table, forward="native")[:52]
    'the cost table was measured through the lean forward'
    >>> costs_note(table, forward="lean") is None
    True
    >>> costs_note(table, forward="lean", batch=4)[:47]
    'the cost table measures batches up to 1, not 4:'
    """
    if not table.measured:
        return ("costs are assumed, not measured on this machine: cast and talon-adaptive size their trees from "
                "a generic CPU profile; run `specscope profile` to measure this device")
    measured_through = table.meta.get("forward")
    if forward and measured_through and measured_through != forward:
        return (f"the cost table was measured through the {measured_through} forward, but this run verifies "
                f"through the {forward} one: run `specscope profile` again so cast and talon-adaptive price "
                "trees at what they now cost")
    if batch > max(table.batches):
        return (f"the cost table measures batches up to {max(table.batches)}, not {batch}: cast, chain and "
                f"talon-adaptive price a batch's trees as if each ran alone; run `specscope profile --batches "
                f"1,2,4,{max(batch, 8)}` to measure the batch's forwards")
    return None


MEMORY_DRIFT = 0.25  # a run's memory speed this far from the table's (either way) reprices wide forwards
MEMORY_SWING = 1 + 2 * MEMORY_DRIFT  # readings this far apart within one run: two machines, one average


def memory_note(table: CostTable, read_gb_s: list[float], priced: bool = True) -> str | None:
    """What a user should hear when the memory read at `read_gb_s` (sampled before a run and after each of its
    prompts, one read each: tools/floors.py) at another speed than the cost table was measured at, where
    `priced` (the run's policies priced trees from that table), or when the readings lie MEMORY_SWING apart;
    None otherwise, or where the table recorded no speed and the readings held still.

    Why it matters: a one-token forward on a CPU streams the weights, so its time follows the memory's
    speed, while a wide forward's is mostly arithmetic, which does not. The table's prices are ratios to
    one token (t₁), so on a shared VM whose memory reads 35 GB/s at one hour and 66 at the next, a
    4-token forward the table prices at 1.13 t₁ costs 1.55 t₁ (measured on an AMD EPYC, 2026-12-06):
    chain, cast and talon-adaptive then size trees for the other machine. And on that VM the speed moves
    within seconds (28.8–52.2 GB/s over one two-minute `specscope bench`, read after every prompt), so one
    run's ratios, every policy's against `ar`, average over a slower and a faster machine.

    >>> table = CostTable.assumed()
    >>> table.meta["floors"] = {"target": {"read_gb_s": 35.3}}
    >>> memory_note(table, [38.0, 41.0]) is None
    True
    >>> memory_note(table, [66.0, 61.2])[:62]
    'memory read at 66.0 and 61.2 GB/s around this run, the cost ta'
    >>> memory_note(table, [66.0, 61.2], priced=False) is None
    True
    >>> note = memory_note(table, [29.9, 47.7, 31.0], priced=False)  # policies that read no table: the swing alone
    >>> note[:60]
    'memory read at 29.9–47.7 GB/s during this run (3 readings): '
    >>> note[-75:]
    'within the run every ratio here averages over a slower and a faster machine'
    """
    floors = table.meta.get("floors", {}).get("target", {})
    measured_at = floors.get("read_gb_s")  # the median of the reads between the table's timed passes
    if not read_gb_s:
        return None
    off = priced and bool(measured_at) and any(abs(speed / measured_at - 1) > MEMORY_DRIFT for speed in read_gb_s)
    swing = max(read_gb_s) / min(read_gb_s)
    moved = swing > MEMORY_SWING
    if not off and not moved:
        return None
    speeds = (f"at {' and '.join(f'{speed:.1f}' for speed in read_gb_s)} GB/s around this run" if len(read_gb_s) <= 2
              else f"at {min(read_gb_s):.1f}–{max(read_gb_s):.1f} GB/s during this run ({len(read_gb_s)} readings)")
    said = [f"memory read {speeds}" + (f", the cost table's at {measured_at:.1f}" if off else ""),
            ": a one-token forward's time follows the memory's speed and a wide one's does not, so "]
    if off:
        said.append("cast, talon-adaptive and chain sized trees by ratios that did not hold here; run `specscope "
                    "profile` again while the memory reads at this speed")
    if moved:
        said.append(("; and " if off else "") + f"with the speed moving {swing:.1f}× within the run every ratio "
                    "here averages over a slower and a faster machine")
    return "".join(said)


FASTEST = "fastest_policy"  # meta key: the policy `specscope bench --record-default` measured fastest here
FASTEST_EVIDENCE = "fastest_policy_evidence"  # meta key: the speedups, prompts, date and load behind it


def record_fastest(table: CostTable, policy: str, evidence: dict[str, Any]) -> None:
    """Makes `policy` the table's default, with the measurement that chose it."""
    table.meta[FASTEST] = policy
    table.meta[FASTEST_EVIDENCE] = evidence


def fastest_policy_note(table: CostTable, default: str) -> str:
    """Why `default` is the default policy, in one sentence for the command line and the page.

    >>> fastest_policy_note(CostTable.assumed(), "talon")
    'talon: not measured on this device (run `specscope bench --record-default` to choose the fastest)'
    """
    policy = table.meta.get(FASTEST)
    evidence = table.meta.get(FASTEST_EVIDENCE) or {}
    if policy != default:
        return f"{default}: not measured on this device (run `specscope bench --record-default` to choose the fastest)"
    speedups = evidence.get("speedup_vs_ar", {})
    ranked = ", ".join(f"{name} {speedup:.2f}×" for name, speedup in
                       sorted(speedups.items(), key=lambda item: -item[1]))
    where = f" on {evidence['prompts']} prompts from {evidence['source']}" if "prompts" in evidence else ""
    when = f", {evidence['date']}" if "date" in evidence else ""
    load = f", load average {evidence['load_average']:.1f}" if evidence.get("load_average") is not None else ""
    return f"{policy}: measured fastest on this device{where}{when}{load} (speedup vs ar: {ranked})"
