"""The bench report (`results.json`): typed, versioned records, and the summaries that fill them.

`specscope bench` writes one `BenchReport`; `tools/plots.py`, the /results page
(static/js/model/results.js) and the tests read its declared fields. Like the
events (engine/events.py), it carries a version:

    1  reports written before versioning: no `report_version` key (read as 1), and
       no `acceptance_by_depth` or `accept_lengths` (None: not measured then)
    2  adds per-depth acceptance and the acceptance-length histogram, from the
       runs' step records; later, compatibly, `bench --batch`'s fields (`batch`,
       `batch_sweep`, each result's `tokens_per_s_per_request`), which a batch-1
       report leaves out, so it is written exactly as before; and the memory's
       readings (`memory_gb_s`, `memory_note`) and each result's `speedup_interval`,
       None in a report written before them

Per policy it keeps the totals against `ar`, the per-category sums and per-prompt
rows behind them (as Spec-Bench reports), the step shapes (tree sizes, per-depth
acceptance, tokens per step) and, for the whole run, the cost table's curve, so
that the charts need nothing but results.json.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, model_validator

from engine.costs import CostTable
from engine.events import StepMetrics

REPORT_VERSION = 2
READABLE_REPORT_VERSIONS = (1, 2)
UNVERSIONED = 1  # what a report without `report_version` is: one written before versioning


class Divergence(BaseModel):
    """Where one output first left `ar`'s, and the target's top-2 logit gap there under `ar`'s prefix."""

    question_id: Any
    position: int
    top2_gap: float


class CategorySummary(BaseModel):
    """One policy over one category's prompts: sums of tokens and seconds, so it reads like the whole run."""

    prompts: int  # the category's sample size
    new_tokens: int
    wall_s: float
    tokens_per_s: float
    speedup_vs_ar: float | None  # against ar's speed over the same prompts
    tau: float | None  # None where the policy has no steps (Hugging Face's baselines)


class PromptRow(BaseModel):
    """One policy on one prompt."""

    question_id: Any
    category: str
    new_tokens: int
    steps: int | None
    wall_s: float
    tokens_per_s: float
    speedup_vs_ar: float | None
    tau: float | None
    identical_to_ar: bool | None  # None where outputs were not compared (temperature > 0)
    first_difference: int | None  # the first position differing from ar's output


class DepthAcceptance(BaseModel):
    """How often the target accepted a draft at one depth, counted over steps, as vLLM and SGLang report it.

    `rate` is unconditional (accepted at d over steps whose tree reached d); `conditional_rate` is given
    the path was accepted to d - 1 (accepted at d over steps that reached d and accepted d - 1 drafts)."""

    depth: int
    drafted: int  # steps whose verified tree holds a draft at this depth
    reached: int  # of those, steps that accepted every draft above it
    accepted: int  # steps that accepted a draft at this depth
    rate: float
    conditional_rate: float | None  # None where no step reached this depth


class PolicyResult(BaseModel):
    """One column of the bench: a policy's totals, its breakdowns and its step shapes."""

    policy: str  # the label as given, parameters included: `talon:mu=0.05`
    params: dict[str, Any]
    tau: float | None  # tokens emitted per step; None: Hugging Face's baselines take no steps
    delta: float | None  # draft forwards per step
    c: float | None  # draft forward time over one target forward
    tokens_per_s: float
    speedup_vs_ar: float | None
    new_tokens: int
    steps: int | None
    share_draft: float | None  # shares of the step time (draft + verify + other = 1)
    share_verify: float | None
    share_other: float | None
    share_outside_forwards: float | None  # outside the drafter's and the target's model forwards
    identical_to_ar: bool | None
    divergences: list[Divergence]
    by_category: dict[str, CategorySummary]
    per_prompt: list[PromptRow]
    tree_sizes: list[tuple[int, int, int]]  # (verified tree size, steps, tokens emitted by them), by size
    acceptance_by_depth: list[DepthAcceptance] | None = None  # None: a version-1 report
    accept_lengths: list[tuple[int, int]] | None = None  # (tokens emitted in a step, steps), bonus counted; None: v1
    # At batch > 1: the mean of each request's own tokens/s (its tokens over its time from joining to leaving);
    # `tokens_per_s` is then the whole batch's: every request's tokens over the batches' wall time.
    tokens_per_s_per_request: float | None = None
    # Where 95% of the speedups over the same prompts resampled fall (`speedup_interval`): how far this run's
    # prompts pin the ratio down. None: ar itself, fewer than 3 prompts, or batch > 1.
    speedup_interval: tuple[float, float] | None = None


class BatchPoint(BaseModel):
    """One policy at one batch size of `bench --batch B1,B2,…`: against `ar` at the same batch."""

    policy: str
    batch: int
    tokens_per_s: float  # the batch's total
    tokens_per_s_per_request: float
    speedup_vs_ar: float | None
    tau: float | None
    identical_to_ar: bool | None


class CostCurve(BaseModel):
    """The target's forward time of n tokens over one, per measured context (batch 1), from the cost table."""

    source: str  # "measured" by `specscope profile`, else "assumed" or "synthetic"
    device: str
    dtype: str
    ns: list[int]
    contexts: list[int]
    ms: list[list[float]]  # [contexts][ns]
    ratio: list[list[float]]  # [contexts][ns]: ms over the same context's ms at n = 1


class SpeedupInterval(BaseModel):
    """How each result's `speedup_interval` was drawn (`speedup_interval`), for whoever says what it means."""

    level: float  # the central share of the resampled speedups it spans
    draws: int  # resamples of the prompts


class BenchReport(BaseModel):
    report_version: Literal[READABLE_REPORT_VERSIONS]
    target: str
    draft: str | None
    drafter: str
    device: str
    dtype: str
    costs: str  # the cost table's source: measured, synthetic or assumed
    prompts: int
    max_new_tokens: int
    temperature: float
    seed: int
    categories: list[str]
    cost_curve: CostCurve | None
    results: list[PolicyResult]
    source: str | None = None  # the prompt file, or the shipped split
    note: str | None = None  # a line the bench was given, e.g. how busy the machine was
    memory_gb_s: list[float] | None = None  # the memory's read speed before the run and after each prompt (tools/floors.py)
    memory_note: str | None = None  # said where it moved within the run or was off the cost table's (engine/costs.py)
    batch: int = 1  # requests verified in one forward (`bench --batch`)
    batch_sweep: list[BatchPoint] | None = None  # every policy at every batch size of `--batch B1,B2,…`
    interval: SpeedupInterval | None = None  # how the results' speedup_interval were drawn; None: none were

    @model_validator(mode="before")
    @classmethod
    def _version_of_unversioned(cls, data: Any) -> Any:
        if isinstance(data, dict) and "report_version" not in data:
            return {"report_version": UNVERSIONED, **data}
        return data

    @model_validator(mode="after")
    def _step_shapes_from_version_2(self) -> "BenchReport":
        if self.report_version >= 2:
            missing = [r.policy for r in self.results if r.acceptance_by_depth is None or r.accept_lengths is None]
            if missing:
                raise ValueError(f"a version-{self.report_version} report keeps per-depth acceptance and tokens "
                                 f"per step for every policy; missing for {', '.join(missing)}")
        return self

    def result(self, label: str) -> PolicyResult:
        return next(r for r in self.results if r.policy == label)


def read_report(path: str | Path) -> BenchReport:
    return BenchReport.model_validate_json(Path(path).read_text(encoding="utf-8"))


BATCH_FIELDS = {"batch": 1, "batch_sweep": None}  # the report's `--batch` fields at their batch-1 values
BATCH_RESULT_FIELDS = ("tokens_per_s_per_request",)


def report_json(report: BenchReport) -> str:
    """results.json's text: indented, in the declared order; a batch-1 report without the batch fields, as
    reports were written before `--batch`."""
    data = report.model_dump(mode="json")
    if all(data[name] == value for name, value in BATCH_FIELDS.items()):
        for name in BATCH_FIELDS:
            del data[name]
        for result in data["results"]:
            for name in BATCH_RESULT_FIELDS:
                if result[name] is None:
                    del result[name]
    return json.dumps(data, indent=2) + "\n"


# ---------------------------------------------------------------- what one policy's runs leave behind

@dataclass
class Breakdown:
    """What the bench keeps of one policy beyond its totals: a row per prompt and the step shapes."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    tree_sizes: dict[int, list[int]] = field(default_factory=dict)  # verified tree size -> [steps, emitted]
    depths: Counter = field(default_factory=Counter)  # (tree depth, accepted drafts) -> steps
    lengths: Counter = field(default_factory=Counter)  # tokens emitted -> steps

    def add_row(self, question_id: Any, category: str, new_tokens: int, wall_s: float, steps: int | None) -> None:
        self.rows.append({"question_id": question_id, "category": category, "new_tokens": new_tokens,
                          "steps": steps, "wall_s": wall_s})

    def add_step(self, step: StepMetrics) -> None:
        counts = self.tree_sizes.setdefault(step.tree_size, [0, 0])
        counts[0] += 1
        counts[1] += step.emitted
        self.depths[step.depth, step.accepted] += 1
        self.lengths[step.emitted] += 1


def acceptance_by_depth(depths: Counter) -> list[DepthAcceptance]:
    """Per depth d ≥ 1, over steps counted as (tree depth, accepted drafts) -> steps: how many drafted at d,
    reached d (accepted d - 1), and accepted at d.

    >>> steps = Counter({(2, 2): 1, (2, 1): 1, (2, 0): 2, (1, 1): 1})  # five steps
    >>> [(a.depth, a.drafted, a.reached, a.accepted, a.rate, a.conditional_rate) for a in acceptance_by_depth(steps)]
    [(1, 5, 5, 3, 0.6, 0.6), (2, 4, 2, 1, 0.25, 0.5)]
    """
    deepest = max((depth for depth, _ in depths), default=0)
    out = []
    for d in range(1, deepest + 1):
        drafted = sum(n for (depth, _), n in depths.items() if depth >= d)
        reached = sum(n for (depth, accepted), n in depths.items() if depth >= d and accepted >= d - 1)
        accepted = sum(n for (depth, got), n in depths.items() if got >= d)
        out.append(DepthAcceptance(depth=d, drafted=drafted, reached=reached, accepted=accepted,
                                   rate=accepted / drafted, conditional_rate=accepted / reached if reached else None))
    return out


def accept_lengths(lengths: Counter) -> list[tuple[int, int]]:
    """(tokens emitted in a step, steps) by tokens: accepted drafts and the target's own token (recovered or
    bonus) counted together, as τ counts them; a step whose text ended at an accepted draft has no own token.

    >>> accept_lengths(Counter({3: 2, 1: 5}))
    [(1, 5), (3, 2)]
    """
    return sorted(lengths.items())


def broken_down(breakdown: Breakdown, ar_rows: list[dict[str, Any]], identical_to_ar: bool | None,
                divergences: list[Divergence], has_steps: bool) -> dict[str, Any]:
    """Per-prompt rows, per-category sums over them, and the step shapes, for one policy's result."""
    diverged = {d.question_id: d.position for d in divergences}
    ar_speed = {row["question_id"]: _speed(row) for row in ar_rows}
    per_prompt = []
    for row in breakdown.rows:
        speed = _speed(row)
        reference = ar_speed.get(row["question_id"])
        per_prompt.append(PromptRow(
            **row, tokens_per_s=speed, speedup_vs_ar=speed / reference if reference else None,
            tau=row["new_tokens"] / row["steps"] if row["steps"] else None,
            identical_to_ar=None if identical_to_ar is None else row["question_id"] not in diverged,
            first_difference=diverged.get(row["question_id"])))
    return {"by_category": by_category(breakdown.rows, ar_rows), "per_prompt": per_prompt,
            "tree_sizes": [(size, steps, emitted) for size, (steps, emitted) in sorted(breakdown.tree_sizes.items())],
            "acceptance_by_depth": acceptance_by_depth(breakdown.depths) if has_steps else [],
            "accept_lengths": accept_lengths(breakdown.lengths) if has_steps else []}


def _speed(row: dict[str, Any]) -> float:
    return row["new_tokens"] / row["wall_s"] if row["wall_s"] else 0.0


def by_category(rows: list[dict[str, Any]], ar_rows: list[dict[str, Any]]) -> dict[str, CategorySummary]:
    """Tokens/s, speedup vs ar and τ over each category's prompts: sums of tokens, seconds and steps,
    so a category reads like the whole run does (ar's speed over the same prompts is the reference).

    >>> rows = [{"category": "a", "new_tokens": 10, "wall_s": 1.0, "steps": 4},
    ...         {"category": "a", "new_tokens": 10, "wall_s": 3.0, "steps": 6}]
    >>> ar = [{"category": "a", "new_tokens": 20, "wall_s": 8.0, "steps": 20}]
    >>> by_category(rows, ar)["a"]
    CategorySummary(prompts=2, new_tokens=20, wall_s=4.0, tokens_per_s=5.0, speedup_vs_ar=2.0, tau=2.0)
    """
    def sums(selected: list[dict[str, Any]]) -> dict[str, Any]:
        tokens = sum(row["new_tokens"] for row in selected)
        wall_s = sum(row["wall_s"] for row in selected)
        steps = None if any(row["steps"] is None for row in selected) else sum(row["steps"] for row in selected)
        return {"prompts": len(selected), "new_tokens": tokens, "wall_s": wall_s,
                "tokens_per_s": tokens / wall_s if wall_s else 0.0, "tau": tokens / steps if steps else None}

    out = {}
    for category in dict.fromkeys(row["category"] for row in rows):
        mine = sums([row for row in rows if row["category"] == category])
        ar = sums([row for row in ar_rows if row["category"] == category])
        speedup = mine["tokens_per_s"] / ar["tokens_per_s"] if ar["tokens_per_s"] else None
        out[category] = CategorySummary(**mine, speedup_vs_ar=speedup)
    return out


INTERVAL_DRAWS = 2000  # bootstrap resamples of the prompts behind a speedup's interval
INTERVAL_LEVEL = 0.95


def speedup_interval(rows: list[dict[str, Any]], ar_rows: list[dict[str, Any]], draws: int = INTERVAL_DRAWS,
                     level: float = INTERVAL_LEVEL, seed: int = 0) -> tuple[float, float] | None:
    """The central `level` of a policy's speedup over ar when its prompts are drawn again with replacement (a
    percentile bootstrap, `draws` times, seeded: the same report, the same interval), each draw's speedup read as
    the run's is, tokens over seconds summed over the drawn prompts, ar's over the same prompts. It says how much
    the ratio owes to which prompts were run: a run whose prompts speed up alike pins it, one whose speedup
    hangs on one copy-heavy prompt does not. None under 3 prompts (nothing to resample).

    >>> ar = [{"question_id": i, "new_tokens": 10, "wall_s": 1.0} for i in range(4)]
    >>> alike = [{"question_id": i, "new_tokens": 10, "wall_s": 0.5} for i in range(4)]
    >>> speedup_interval(alike, ar)
    (2.0, 2.0)
    >>> one_copy = [{**row, "wall_s": 0.2 if row["question_id"] == 0 else 1.0} for row in ar]
    >>> [round(end, 2) for end in speedup_interval(one_copy, ar)]  # the run's own ratio, 1.25, rests on prompt 0
    [1.0, 2.5]
    """
    ar = {row["question_id"]: row for row in ar_rows}
    pairs = [(row, ar[row["question_id"]]) for row in rows if row["question_id"] in ar]
    if len(pairs) < 3:
        return None
    draw = random.Random(seed)
    speedups = []
    for _ in range(draws):
        tokens = seconds = ar_tokens = ar_seconds = 0.0
        for mine, theirs in draw.choices(pairs, k=len(pairs)):
            tokens, seconds = tokens + mine["new_tokens"], seconds + mine["wall_s"]
            ar_tokens, ar_seconds = ar_tokens + theirs["new_tokens"], ar_seconds + theirs["wall_s"]
        if seconds and ar_tokens:
            speedups.append(tokens / seconds * ar_seconds / ar_tokens)
    if not speedups:
        return None
    speedups.sort()
    tail = (1 - level) / 2
    return speedups[int(tail * len(speedups))], speedups[math.ceil((1 - tail) * len(speedups)) - 1]


def cost_curve(table: CostTable) -> CostCurve:
    """The target's forward time of n tokens over one token, per measured context (batch 1), from the cost
    table the engine's cost-aware policies read ("measured" by `specscope profile`, else "assumed")."""
    grid = table.target.ms[0]  # [contexts][ns] at the smallest batch
    return CostCurve(source=table.target.source, device=table.device, dtype=table.dtype, ns=list(table.ns),
                     contexts=list(table.contexts), ms=grid, ratio=[[ms / row[0] for ms in row] for row in grid])
