"""results.md: a bench report (tools/report.py) as markdown tables, as `specscope bench` prints it."""

from __future__ import annotations

import statistics
from typing import Any

from tools.report import BenchReport, PolicyResult


def memory_reading(speeds: list[float]) -> str:
    """The header's words for the memory's readings (before the run, after each prompt): as they came for one
    or two, their range and median for more (static/js/model/results.js says them alike on the page).

    >>> memory_reading([35.6, 33.4])
    'memory read at 35.6 → 33.4 GB/s'
    >>> memory_reading([32.6, 47.7, 29.9, 43.6])
    'memory read at 29.9–47.7 GB/s (median 38.1 of 4 readings)'
    """
    if len(speeds) <= 2:
        return "memory read at " + " → ".join(f"{speed:.1f}" for speed in speeds) + " GB/s"
    return (f"memory read at {min(speeds):.1f}–{max(speeds):.1f} GB/s "
            f"(median {statistics.median(speeds):.1f} of {len(speeds)} readings)")


def markdown_table(report: BenchReport, charts: list[tuple[str, str]] = ()) -> str:
    """results.md: the summary table, then per category and per prompt, then links to `charts`
    ((title, file name) pairs written beside it)."""
    batched = report.batch > 1  # tokens/s is the batch's total; each request's own speed beside it
    header = (f"target {report.target} · drafter {report.drafter} · {report.device} {report.dtype} · "
              f"{report.prompts} prompts × {report.max_new_tokens} new tokens · temperature {report.temperature}"
              + (f" · batch {report.batch}" if batched else "")
              + (f" · {memory_reading(report.memory_gb_s)}" if report.memory_gb_s else ""))
    notes = [f"Note: {text}" for text in (report.note, report.memory_note) if text]
    lines = [header, ""] + ([*notes, ""] if notes else []) + [
             "| policy | τ | δ | c | tokens/s " + ("| tokens/s per request " if batched else "")
             + "| speedup vs ar | steps | draft / verify / other | outside forwards | identical to ar |",
             "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if batched else "")]
    for r in report.results:
        identical = "—" if r.identical_to_ar is None else ("yes" if r.identical_to_ar else
                                                           f"no ({len(r.divergences)})")
        shares = "—" if r.share_draft is None else (
            f"{r.share_draft:.0%} / {r.share_verify:.0%} / {r.share_other:.0%}")
        per_request = f"| {_cell(r.tokens_per_s_per_request, '.1f')} " if batched else ""
        lines.append(f"| {r.policy} | {_cell(r.tau, '.2f')} | {_cell(r.delta, '.2f')} | {_cell(r.c, '.3f')} "
                     f"| {r.tokens_per_s:.1f} {per_request}| {_speedup(r)} | {_cell(r.steps, 'd')} | {shares} "
                     f"| {_cell(r.share_outside_forwards, '.0%')} | {identical} |")
    if report.interval is not None:
        lines += ["", f"Speedup (low–high): where {report.interval.level:.0%} of the speedups fall when the run's "
                      f"prompts are drawn again with replacement ({report.interval.draws} draws): how far these prompts "
                      "pin the ratio down."]
    if report.batch_sweep:
        lines += _sweep_table(report)
    if report.categories:
        lines += _category_tables(report) + _prompt_table(report)
    if charts:
        lines += ["", "## Charts"]
        for title, name in charts:
            lines += ["", f"![{title}]({name})"]
    return "\n".join(lines) + "\n"


def _speedup(result: PolicyResult) -> str:
    """A summary row's speedup, with its interval where the bench drew one (tools/report.py's speedup_interval)."""
    if result.speedup_interval is None:
        return f"{result.speedup_vs_ar:.2f}×"
    low, high = result.speedup_interval
    return f"{result.speedup_vs_ar:.2f}× ({low:.2f}–{high:.2f})"


def _sweep_table(report: BenchReport) -> list[str]:
    """`--batch B1,B2,…`: one row per policy, per batch size its speedup over ar at that batch · total tokens/s."""
    sizes = list(dict.fromkeys(point.batch for point in report.batch_sweep))
    lines = ["", "## Speedup vs ar against batch size (speedup · tokens/s in total · per request · τ)", "",
             "| policy | " + " | ".join(f"batch {size}" for size in sizes) + " |", "|---" * (len(sizes) + 1) + "|"]
    for policy in dict.fromkeys(point.policy for point in report.batch_sweep):
        at = {point.batch: point for point in report.batch_sweep if point.policy == policy}
        cells = [f"{_cell(at[size].speedup_vs_ar, '.2f', '×')} · {at[size].tokens_per_s:.1f} · "
                 f"{at[size].tokens_per_s_per_request:.1f} · {_cell(at[size].tau, '.2f')}" if size in at else "—"
                 for size in sizes]
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    return lines


def _category_tables(report: BenchReport) -> list[str]:
    """Spec-Bench's layout: one row per policy, one column per category, the whole run last."""
    categories = report.categories
    head = "| policy | " + " | ".join(name or "—" for name in categories) + " | all |"
    rule = "|---" * (len(categories) + 2) + "|"
    lines = []
    for title, key, spec, unit in (("speedup vs ar", "speedup_vs_ar", ".2f", "×"), ("τ", "tau", ".2f", ""),
                                   ("tokens/s", "tokens_per_s", ".1f", "")):
        lines += ["", f"## {title} per category", "", head, rule]
        for r in report.results:
            cells = [_cell(getattr(r.by_category[name], key), spec, unit) if name in r.by_category else "—"
                     for name in categories]
            lines.append(f"| {r.policy} | " + " | ".join(cells) + f" | {_cell(getattr(r, key), spec, unit)} |")
    return lines


def _prompt_table(report: BenchReport) -> list[str]:
    """One row per prompt, one column per policy: speedup vs ar on that prompt, and τ where it has steps."""
    results = report.results
    lines = ["", "## Per prompt (speedup vs ar · τ)", "",
             "| question | category | " + " | ".join(r.policy for r in results) + " |",
             "|---|---" + "|---" * len(results) + "|"]
    for i, row in enumerate(results[0].per_prompt):
        cells = []
        for r in results:
            mine = r.per_prompt[i]
            tau = "" if mine.tau is None else f" · {mine.tau:.2f}"
            cells.append(f"{_cell(mine.speedup_vs_ar, '.2f', '×')}{tau}")
        lines.append(f"| {row.question_id} | {row.category or '—'} | " + " | ".join(cells) + " |")
    return lines


def _cell(value: Any, spec: str, unit: str = "") -> str:
    return "—" if value is None else format(value, spec) + unit
