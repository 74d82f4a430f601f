"""`specscope profile`: measures forward time of the target and the draft, writes a cost table.

For every batch size B, context length (multiples of a step L) and number of
new tokens n, the model runs one forward of B×n tokens on a cache that
already holds the context, under the mask a tree verify uses, through the
cached LM the engine verifies with (the lean forward of engine/models/fastlm.py
where it runs the model): at B > 1 its batched forward over B sessions, as
engine/batch.py verifies B requests (a bare model: Hugging Face's batched
forward). n takes every value from 1 to a limit (64 on a CPU, 128 on a
GPU), as CAST's table does: a GPU's cost is a staircase in n that no sparse
grid can show, and lookups between measured n round up rather than
interpolate (engine/costs.py). `--ns` measures a chosen grid instead (dense
where the costs step); the table says which it holds.
Each cell gets warm-up runs, then the median of repeated timed runs
(synchronised on GPU). The table is saved under a key of device, model and
dtype (default `~/.cache/specscope/costs/<key>.json`), where `load_engine`
finds it for cast and talon-adaptive (engine/costs.py `resolve_costs`). It
also records the memory and compute floors measured on the device
(tools/floors.py), their rates sampled between the timed passes of batch 1,
printed beside it with each time's ratio to them. The timers and the grid are
engine/profiling.py's, with which a first load that finds nothing measured
measures a small table (engine/calibration.py).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from engine.calibration import is_calibration
from engine.costs import FASTEST, FASTEST_EVIDENCE, MEMORY_DRIFT, CostTable, resolve_costs
from engine.drafters.eagle_head import EagleHeadDrafter
from engine.loading import load_engine
from engine.options import EngineOptions
from engine.profiling import (DEFAULT_BATCHES, DEFAULT_CONTEXTS, N_MAX_CPU, N_MAX_GPU, Grid, measure_costs,
                              model_and_name)
from tools.floors import Floors, RateSampler, model_floors



def profile(target: Any, draft: Any | None = None, grid: Grid = Grid(), progress: bool = True,
            device_label: str | None = None, floors: bool = True, head: EagleHeadDrafter | None = None) -> CostTable:
    """engine/profiling.py's `measure_costs`, and with `floors` each model's memory and compute floors in the
    table's meta (tools/floors.py), their rates sampled between the target's timed passes of batch 1."""
    target_model = model_and_name(target)[0]
    param = next(target_model.parameters())
    rates = RateSampler(param.dtype, param.device) if floors else None
    table = measure_costs(target, draft, grid, progress, device_label, head, rates)
    if rates is not None:
        target_floors = rates.floors(target_model, grid.statistic)
        table.meta["floors"] = {"target": target_floors.to_json()}
        if draft is not None:
            table.meta["floors"]["draft"] = model_floors(model_and_name(draft)[0], target_floors.read_gb_s,
                                                         target_floors.gemm_gflops).to_json()
    return table


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
    parser.add_argument("--replace", action="store_true",
                        help="save this table in place of the saved one even where it measures less (fewer batches, "
                             "contexts, n or no draft): by default a narrower run, such as the floors' five n, "
                             "prints its times and keeps the saved table the policies price trees with")
    parser.add_argument("--pick-default", action="store_true",
                        help="then run a short interleaved bench (4 held-out prompts × 64 tokens, every policy) and "
                             "record the fastest as the default policy, as `specscope bench --record-default` does")


def command(args: argparse.Namespace, engine: Any | None = None) -> int:
    """Handler of `specscope profile`: loads the engine, measures, saves, prints the summary."""
    if engine is None:  # no first-load calibration: the table it would price trees with is being measured
        engine = load_engine(EngineOptions(**{"calibrate": False, **EngineOptions.given_in(args)}))
    draft = None if args.no_draft else engine.draft_lm
    head = None if args.no_draft or "head" not in engine.drafters else engine.drafters["head"]()  # if no draft LM
    grid = grid_from_args(args, engine.target.device.type)
    table = profile(engine.target, draft, grid, head=head)
    _keep_recorded_default(engine.costs, table)
    path = args.out or engine.cost_table_path
    missing = None if args.out or args.replace else measured_less(resolve_costs(None, path), table)
    if missing:
        print(f"kept the saved table {path}: this run measured less ({missing}), so it was not saved; "
              f"--replace saves it in its place, --out PATH elsewhere")
    else:
        print(f"wrote {table.save(path)}")
    load = table.meta.get("load_average")
    if load is not None and load > (os.cpu_count() or 1):
        print(f"  warning: load average {load:.1f} on {os.cpu_count()} cores while measuring: times are inflated "
              f"and noisy; re-run on a quiet machine (or with --statistic min)")
    for line in table.summary():
        print("  " + line)
    for line in floor_lines(table):
        print("  " + line)
    if args.pick_default and missing:
        print("no default picked: it is recorded with the table, and this one was not saved")
    elif args.pick_default:
        _pick_default(engine, table, path)
    return 0


def measured_less(saved: CostTable, new: CostTable) -> str | None:
    """What a saved, measured table has that `new` did not measure (batches, contexts, n, a draft), in words; None
    where `new` covers it, so replacing it loses nothing. An assumed table (none saved, or one of an older format) and
    a first-load calibration's are always replaced.

    >>> from engine.costs import ModelCosts
    >>> def table(batches, contexts, ns, draft=True):
    ...     costs = ModelCosts(name="m", ms=[[[1.0] * len(ns)] * len(contexts)] * len(batches), source="measured")
    ...     return CostTable(device="d", dtype="bfloat16", batches=batches, contexts=contexts, ns=ns, target=costs,
    ...                      draft=costs if draft else None)
    >>> wide = table([1, 4], [128, 512, 1024], [1, 2, 3, 4, 8, 16, 32, 64])
    >>> measured_less(wide, table([1], [512], [1, 4, 16, 32, 64], draft=False))
    'batches 4; contexts 128, 1024; n 2, 3, 8; the draft'
    >>> measured_less(wide, table([1, 2, 4], [128, 512, 1024], list(range(1, 65)))) is None
    True
    """
    if not saved.measured or is_calibration(saved.meta):
        return None
    lacking = [(what, sorted(set(had) - set(got))) for what, had, got in
               (("batches", saved.batches, new.batches), ("contexts", saved.contexts, new.contexts),
                ("n", saved.ns, new.ns))]
    words = [f"{what} {', '.join(map(str, values))}" for what, values in lacking if values]
    if saved.draft is not None and new.draft is None:
        words.append("the draft")
    return "; ".join(words) or None


def _keep_recorded_default(old: CostTable, new: CostTable) -> None:
    """A re-measured table keeps the default policy a bench recorded in the one it replaces; a first-load
    calibration's is dropped (it priced trees with the old costs), so the next load measures again."""
    if is_calibration(old.meta):
        return
    for key in (FASTEST, FASTEST_EVIDENCE):
        if key in old.meta:
            new.meta[key] = old.meta[key]


def _pick_default(engine: Any, table: CostTable, path: Path) -> None:
    """A short interleaved bench of every policy on the new table; the fastest becomes the default."""
    from engine.policies import POLICIES
    from engine.policies.base import PolicyContext
    from tools.bench import PolicySpec, held_out_prompts, markdown_table, record_default, run_bench

    engine.context = PolicyContext(costs=table)
    report = run_bench(engine, held_out_prompts(4), [PolicySpec.parse(name) for name in POLICIES], 64)
    report.source = "the shipped prompt set's held-out split"
    print(markdown_table(report))
    record_default(engine, report, path)
    print(f"default policy: {engine.default_policy_note}; recorded in {path}")


def _sampled(floors: Floors, statistic: str) -> str:
    """How the rates were taken: sampled between the timed passes (with the best sample), or once."""
    if not floors.samples:
        return " (best of 5, measured once)"
    summary = "best" if statistic == "min" else "median"
    spread = ""
    if floors.read_gb_s_worst and floors.read_gb_s_best > (1 + MEMORY_DRIFT) * floors.read_gb_s_worst:
        spread = (f"; the memory read from {floors.read_gb_s_worst:.1f} to {floors.read_gb_s_best:.1f} GB/s while "
                  "the table was measured, and a wide forward's cost against one token's moves with it, so its "
                  "ratios mix two machines: measure again when the machine is steadier")
    return (f" ({summary} of {floors.samples} samples taken between the timed passes; best {floors.read_gb_s_best:.1f}"
            f" GB/s, {floors.gemm_gflops_best:.0f} GFLOP/s{spread})")


def floor_lines(table: CostTable, model: str = "target") -> list[str]:
    """The measured batch-1 times beside the memory and compute floors the table's meta holds
    (nothing for a table measured before floors were recorded)."""
    data = table.meta.get("floors", {}).get(model)
    if not data or 1 not in table.batches:
        return []
    floors = Floors.from_json(data)
    costs = table.target if model == "target" else table.draft
    lines = [f"{model} floors on this device ({table.meta.get('forward', 'plain')} forward): weights "
             f"{floors.weight_bytes / 1e6:.1f} MB read at {floors.read_gb_s:.1f} GB/s = "
             f"{floors.memory_ms(0, 0):.2f} ms; {floors.gemm_dtype or table.dtype} GEMM {floors.gemm_gflops:.0f} GFLOP/s"
             + _sampled(floors, table.meta.get("statistic", "median")),
             f"{'ctx':>6} {'n':>4} {'measured':>10} {'memory floor':>13} {'compute floor':>14} "
             f"{'×memory':>8} {'×compute':>9}"]
    for c, context in enumerate(table.contexts):
        for n, ms in zip(table.ns, costs.ms[table.batches.index(1)][c]):
            memory, compute = floors.memory_ms(n, context), floors.compute_ms(n, context)
            lines.append(f"{context:>6} {n:>4} {ms:>7.2f} ms {memory:>10.2f} ms {compute:>11.2f} ms "
                         f"{ms / memory:>7.2f}× {ms / compute:>8.2f}×")
    return lines
