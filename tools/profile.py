"""`specscope profile`: measures forward time of the target and the draft, writes a cost table.

For every batch size B, context length (multiples of a step L) and number of
new tokens n, the model runs one forward of B×n tokens on a cache that
already holds the context, under the same 4-D float mask a tree verify uses.
n takes every value from 1 to a limit (64 on a CPU, 128 on a GPU), as CAST's
table does: a GPU's cost is a staircase in n that no sparse grid can show, and
lookups between measured n round up rather than interpolate (engine/costs.py).
`--ns` measures a chosen grid instead (dense where the costs step); the table
says which it holds.
Each cell gets warm-up runs, then the median of repeated timed runs
(synchronised on GPU). The table is saved under a key of device, model and
dtype (default `~/.cache/specscope/costs/<key>.json`), where `load_engine`
finds it for cast and talon-adaptive (engine/costs.py `resolve_costs`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from engine import kvcache
from engine.costs import CostTable, ModelCosts, saved_table_path
from engine.device import clock, device_name
from engine.loading import load_engine
from engine.options import EngineOptions
from engine.tree import attention_bias, tree_attention_allowed

N_MAX_CPU, N_MAX_GPU = 64, 128  # every n up to this is measured by default
DEFAULT_CONTEXTS = (128, 512, 1024)
DEFAULT_BATCHES = (1, 2, 4)


@dataclass(frozen=True)
class Grid:
    """What to measure: every (batch, context, n) cell, `repeats` timed runs after `warmup`."""

    ns: tuple[int, ...] = tuple(range(1, N_MAX_CPU + 1))
    contexts: tuple[int, ...] = DEFAULT_CONTEXTS
    batches: tuple[int, ...] = DEFAULT_BATCHES
    context_step: int = 128
    repeats: int = 3
    warmup: int = 1
    statistic: str = "median"  # or "min": on a machine shared with other jobs, closer to the uncontended time

    @property
    def cells(self) -> int:
        return len(self.ns) * len(self.contexts) * len(self.batches)


def _filled_cache(model: torch.nn.Module, context: int, batch: int, device: torch.device) -> kvcache.Cache:
    """A cache holding `context` positions for `batch` rows: one prefill, repeated along the batch.

    The values are those of random tokens; timing does not depend on them.
    """
    cache = kvcache.new_cache(model.config)
    vocab = int(model.config.vocab_size)
    ids = torch.randint(0, vocab, (1, context), device=device)  # [1, C]
    with torch.inference_mode():
        model(input_ids=ids, use_cache=True, **kvcache.cache_argument(model, cache))
    kvcache.repeat_rows(cache, batch)
    return cache


def _chain_inputs(n: int, context: int, batch: int, vocab: int, dtype: torch.dtype, device: torch.device):
    """Token ids [B, n], position ids [B, n] and the additive mask [B, 1, n, C + n] of an n-token chain."""
    ids = torch.randint(0, vocab, (batch, n), device=device)
    positions = (torch.arange(n, device=device) + context).expand(batch, n)
    allowed = tree_attention_allowed([-1] + list(range(n - 1)), prefix_len=context)  # [n, C + n]
    mask = attention_bias(allowed, dtype).to(device).expand(batch, 1, n, context + n)
    return ids, positions, mask


def time_forward(model: torch.nn.Module, cache: kvcache.Cache, n: int, context: int, batch: int) -> float:
    """ms of one forward of n new tokens per row on a cache of `context` positions (left as it was)."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    ids, positions, mask = _chain_inputs(n, context, batch, int(model.config.vocab_size), dtype, device)
    start = clock(device)
    with torch.inference_mode():
        model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True,
              **kvcache.cache_argument(model, cache))
    elapsed = (clock(device) - start) * 1000
    kvcache.crop(cache, context)  # the next run starts from the same context
    return elapsed


def measure_row(model: torch.nn.Module, cache: kvcache.Cache, ns: tuple[int, ...], context: int, batch: int,
                repeats: int, warmup: int, tick: Callable[[str], None], statistic: str = "median") -> list[float]:
    """Median (or minimum) ms for every n at one (batch, context).

    Repeats are the outer loop: on a shared machine a burst of load then lands on one run of
    many n, which the median discards, rather than on every run of one n.
    """
    times: dict[int, list[float]] = {n: [] for n in ns}
    for run in range(warmup + repeats):
        for n in ns:
            elapsed = time_forward(model, cache, n, context, batch)
            if run >= warmup:
                times[n].append(elapsed)
            if run == warmup + repeats - 1:
                tick(f"B={batch} ctx={context} n={n}")
    summarise = min if statistic == "min" else statistics.median
    return [summarise(times[n]) for n in ns]


def measure_model(model: torch.nn.Module, grid: Grid, tick: Callable[[str], None] = lambda _: None
                  ) -> list[list[list[float]]]:
    """ms[b][c][k] over grid.batches × grid.contexts × grid.ns."""
    device = next(model.parameters()).device
    table = []
    for batch in grid.batches:
        rows = []
        for context in grid.contexts:
            cache = _filled_cache(model, context, batch, device)
            rows.append(measure_row(model, cache, grid.ns, context, batch, grid.repeats, grid.warmup, tick,
                                    grid.statistic))
        table.append(rows)
    return table


def profile(target: Any, draft: Any | None = None, grid: Grid = Grid(), progress: bool = True,
            device_label: str | None = None) -> CostTable:
    """Measures the target (and the draft, when it is a model) and returns their cost table.

    `target` and `draft` are CachedLMs (anything with `.model` and `.name`) or bare models.
    """
    from tqdm import tqdm

    target_model, target_name = _model_and_name(target)
    models = [(target_model, target_name)]
    if draft is not None:
        models.append(_model_and_name(draft))
    bar = tqdm(total=grid.cells * len(models), desc="profile", unit="cell", disable=not progress)
    measured = []
    for model, name in models:
        def tick(label: str, name: str = name) -> None:
            bar.set_postfix_str(f"{name} {label}")
            bar.update()
        measured.append(ModelCosts(name=name, ms=measure_model(model, grid, tick)))
    bar.close()
    param = next(target_model.parameters())
    return CostTable(
        device=device_label or device_name(param.device), dtype=str(param.dtype).replace("torch.", ""),
        batches=list(grid.batches), contexts=list(grid.contexts), ns=list(grid.ns),
        target=measured[0], draft=measured[1] if draft is not None else None, context_step=grid.context_step,
        meta={"repeats": grid.repeats, "warmup": grid.warmup, "statistic": grid.statistic,
              "threads": torch.get_num_threads(), "load_average": _load_average(),
              "torch": torch.__version__, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
    )


def _load_average() -> float | None:
    """The 1-minute load average while measuring: a table taken on a busy machine says so."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def _model_and_name(lm: Any) -> tuple[torch.nn.Module, str]:
    if isinstance(lm, torch.nn.Module):
        return lm.eval(), getattr(lm.config, "name_or_path", "") or type(lm).__name__
    return lm.model, lm.name


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError("values must be positive integers")
    return values


def grid_from_args(args: argparse.Namespace, device_type: str = "cpu") -> Grid:
    """The grid the CLI asked for: every n up to --n-max (by default 64 on a CPU, 128 on a GPU) or the --ns
    given, capped at --n-max; contexts rounded up to multiples of the step L."""
    step = args.context_step
    contexts = tuple(sorted({-(-c // step) * step for c in args.contexts}))
    n_max = args.n_max or (N_MAX_CPU if device_type == "cpu" else N_MAX_GPU)
    ns = tuple(n for n in args.ns if n <= n_max) if args.ns else tuple(range(1, n_max + 1))
    ns = ns or (1,)
    return Grid(ns=ns, contexts=contexts, batches=args.batches, context_step=step,
                repeats=args.repeats, warmup=args.warmup, statistic=args.statistic)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None, help="table path (default: the user cache, keyed)")
    parser.add_argument("--ns", type=_int_list, default=None,
                        help="measure only these new-token counts, e.g. 1,2,…,16,24,32 (default: every n up to --n-max)")
    parser.add_argument("--n-max", type=int, default=None,
                        help=f"every n up to this is measured (default {N_MAX_CPU} on a CPU, {N_MAX_GPU} on a GPU)")
    parser.add_argument("--contexts", type=_int_list, default=DEFAULT_CONTEXTS, help="cached tokens, e.g. 128,512")
    parser.add_argument("--context-step", type=int, default=128, help="contexts are multiples of this step (L)")
    parser.add_argument("--batches", type=_int_list, default=DEFAULT_BATCHES, help="batch sizes, e.g. 1,2,4")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per cell (median)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per cell first")
    parser.add_argument("--statistic", choices=("median", "min"), default="median",
                        help="summary of the timed runs; min suits a machine shared with other jobs")
    parser.add_argument("--no-draft", action="store_true", help="measure the target only")


def command(args: argparse.Namespace, engine: Any | None = None) -> int:
    """Handler of `specscope profile`: loads the engine, measures, saves, prints the summary."""
    if engine is None:
        engine = load_engine(EngineOptions.from_args(args))
    draft = None if args.no_draft else engine.draft_lm
    grid = grid_from_args(args, engine.target.device.type)
    table = profile(engine.target, draft, grid)
    path = table.save(args.out or saved_table_path(table.device, engine.target.name, table.dtype))
    print(f"wrote {path}")
    load = table.meta.get("load_average")
    if load is not None and load > (os.cpu_count() or 1):
        print(f"  warning: load average {load:.1f} on {os.cpu_count()} cores while measuring: times are inflated "
              f"and noisy; re-run on a quiet machine (or with --statistic min)")
    for line in table.summary():
        print("  " + line)
    return 0
