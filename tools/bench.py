"""`specscope bench`: every policy over the same prompts in one process, measured against `ar`.

Runs are interleaved prompt by prompt (each prompt through every policy in
turn), so a slow patch of the machine hurts all policies alike. Speedup is
tokens/s over `ar`'s tokens/s from the same run. At temperature 0 every output
is compared with `ar`'s; where one differs, the first differing position and
the target's top-2 logit gap there are recorded, so that a rounding near-tie
can be told apart from a bug.

Drafts may copy from earlier runs (the engine's suffix memory, one per policy and
parameters, so no policy drafts from another's answer to the same prompt); the
warm-up is not remembered. `--passes 2` runs the drafting policies over the
prompts a second time, as a repeated workload, reported as "talon · pass 2".

As Spec-Bench does, the report breaks every policy down by prompt category
(tokens/s, speedup and τ over that category's prompts) and keeps the per-prompt
rows behind them. It also keeps, per policy, how many tokens each verified tree
size emitted (step counts and emitted sums per size: a few hundred numbers at
most), per-depth acceptance and tokens per step from the same step records, and
the engine's cost table's curve, so that the charts (`--plots`, tools/plots.py)
need nothing but results.json.

`--batch B` runs the prompts B at a time through the engine's batch scheduler
(engine/batch.py): each policy takes a group of B prompts in turn, all B join one
batch and each leaves when done, so every step verifies the group's trees in one
target forward. A policy's tokens/s is then the whole batch's (every request's
tokens over the groups' wall time), its speedup is against `ar` at the same batch,
and `tokens_per_s_per_request` is the mean of each request's own speed; the
per-prompt rows read each request's own time. `--batch 1,2,4` runs the whole bench
at each size, each with a fresh suffix memory (no size drafts from another's answers),
and adds the sweep (`batch_sweep`, the speedup-against-batch chart);
results.json holds the first size's report and batch-B/ each other size's.
`--batch 1` is the bench as it always was.

This module runs the bench; the report's records and summaries are tools/report.py,
its markdown tools/report_markdown.py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

import torch
from tqdm import tqdm

from engine.batch import Batch
from engine.costs import record_fastest
from engine.engine import SpecEngine
from engine.errors import RequestError
from engine.events import RunFinished, StepMetrics
from engine.loading import load_engine
from engine.models.device import clock
from engine.options import EngineOptions
from engine import policies
from engine.policies import POLICIES
from engine.request import GenerationRequest
from engine.timing import Timings
from tools.floors import MemoryProbe
from tools.hf_baseline import is_hf_baseline, run_hf_baseline
from tools.plots import write_plots
from tools.report import (INTERVAL_DRAWS, INTERVAL_LEVEL, REPORT_VERSION, BatchPoint, BenchReport, Breakdown,
                          Divergence, PolicyResult, SpeedupInterval, broken_down, cost_curve, report_json,
                          speedup_interval)
from tools.report_markdown import markdown_table


class PolicySpec(policies.PolicySpec):
    """One column of the bench: a policy with parameters, `name:key=value:key=value` (engine/policies/spec.py's
    grammar), or one of Hugging Face's baselines, which take none."""

    @classmethod
    def parse(cls, text: str, field: str = "policies") -> "PolicySpec":
        spec = super().parse(text, field)
        if is_hf_baseline(spec.policy):
            if spec.params:
                raise RequestError(f"{text!r}: Hugging Face baselines take no parameters", field=field)
        else:
            policies.policy_params(spec.policy, spec.params)  # fails early, naming the policy or parameter
        return spec


@dataclass
class Tally:
    spec: PolicySpec
    params: dict[str, Any] = field(default_factory=dict)
    new_tokens: int = 0
    steps: int = 0
    draft_forwards: float = 0.0
    wall_s: float = 0.0
    times: Timings = field(default_factory=Timings)
    c_values: list[float] = field(default_factory=list)
    outputs: dict[Any, list[int]] = field(default_factory=dict)
    request_speeds: list[float] = field(default_factory=list)  # each request's own tokens/s

    @property
    def external(self) -> bool:
        """A Hugging Face baseline: tokens and time only, no steps to count."""
        return is_hf_baseline(self.spec.policy)

    def add_external(self, question_id: Any, tokens: list[int], wall_s: float) -> None:
        self.new_tokens += len(tokens)
        self.wall_s += wall_s
        self.outputs[question_id] = tokens

    def add(self, question_id: Any, result: RunFinished, counted_s: float | None = None) -> None:
        """One request's run; `counted_s`: the time it adds to the policy's (a batch's group counts its wall
        time once, on its first request), its own by default."""
        self.new_tokens += result.new_tokens
        self.steps += result.steps
        self.draft_forwards += result.delta * result.steps
        self.wall_s += result.wall_s if counted_s is None else counted_s
        self.request_speeds.append(result.tokens_per_s)
        self.times = self.times + Timings.of(result)
        if result.c is not None:
            self.c_values.append(result.c)
        self.outputs[question_id] = result.tokens

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s else 0.0


class Prompt(NamedTuple):
    """One bench prompt: its id, its first turn and its Spec-Bench category (task kind for the shipped set)."""

    question_id: Any
    text: str
    category: str = ""


SHIPPED_PROMPTS = Path(__file__).parent / "data" / "prompts" / "prompts.jsonl"
HELD_OUT_SHARE = 0.05  # the share train-head never trains on


def held_out_prompts(limit: int | None = None) -> list[Prompt]:
    """The shipped prompt set's held-out split (never trained on), one per task kind in turn."""
    from tools.training.selfdistill import is_held_out

    by_kind: dict[str, list[Prompt]] = {}
    with open(SHIPPED_PROMPTS, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if is_held_out(record["id"], HELD_OUT_SHARE):
                by_kind.setdefault(record["kind"], []).append(Prompt(record["id"], record["prompt"], record["kind"]))
    interleaved = _round_robin(list(by_kind.values()))
    return interleaved[:limit] if limit else interleaved


def read_prompts(path: str | Path, limit: int | None = None) -> list[Prompt]:
    """(question_id, first turn, category) from a Spec-Bench-format JSON-lines file, one category in turn,
    so that the first N cover every category rather than the file's first."""
    by_category: dict[str, list[Prompt]] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            turns = record.get("turns")
            if not turns or not isinstance(turns[0], str):
                raise ValueError(f"{path}:{number}: expected a 'turns' list of strings")
            category = str(record.get("category", ""))
            by_category.setdefault(category, []).append(Prompt(record.get("question_id", number), turns[0], category))
    prompts = _round_robin(list(by_category.values()))
    return prompts[:limit] if limit else prompts


def _round_robin(groups: list[list[Any]]) -> list[Any]:
    """[[a1, a2], [b1]] -> [a1, b1, a2]."""
    return [row for layer in itertools.zip_longest(*groups) for row in layer if row is not None]


def run_bench(engine: SpecEngine, prompts: list[Prompt | tuple[Any, str]], specs: list[PolicySpec],
              max_new_tokens: int, temperature: float = 0.0, seed: int = 0, drafter: str | None = None,
              progress: bool = True, passes: int = 1, batch: int = 1, memory: Any = "engine",
              between: Callable[[], None] | None = None) -> BenchReport:
    """Runs every spec on every prompt (`ar` added first if missing) and summarises against `ar`; `passes`
    beyond the first run the drafting specs over the prompts again (`repeated`); `batch` > 1 runs them
    that many at a time through one batch (`_run_group`). `memory`: the suffix memory the runs draft from and
    join (the engine's own by default; `Engine.run`'s argument). `between()` after every spec has run a prompt
    (a group of `batch`), outside every timed run: the bench reads the memory's speed there."""
    prompts = [Prompt(*prompt) for prompt in prompts]
    if not any(spec.policy == "ar" for spec in specs):
        specs = [PolicySpec("ar", "ar", {})] + specs
    if temperature > 0 and any(is_hf_baseline(spec.policy) for spec in specs):
        raise RequestError("the Hugging Face baselines decode greedily: use temperature 0", field="policies")
    if batch < 1:
        raise RequestError(f"--batch {batch}: at least 1", field="batch")
    if batch > 1 and any(is_hf_baseline(spec.policy) for spec in specs):
        raise RequestError("the Hugging Face baselines decode one request at a time: use --batch 1", field="policies")
    runner = Batch(engine, max_batch=batch) if batch > 1 else None
    rounds = [specs] + [repeated(specs, number) for number in range(2, passes + 1)]
    tallies = [[Tally(spec) for spec in round_specs] for round_specs in rounds]
    breakdowns = [[Breakdown() for _ in round_specs] for round_specs in rounds]
    _warm_up(engine, specs, drafter, runner)
    bar = tqdm(total=len(prompts) * sum(map(len, rounds)), desc="bench", unit="run", disable=not progress)
    for round_tallies, round_breakdowns in zip(tallies, breakdowns):
        for start in range(0, len(prompts), batch):
            group = prompts[start:start + batch]
            for tally, breakdown in zip(round_tallies, round_breakdowns):
                if runner is None:
                    _run_one(engine, tally, breakdown, group[0], max_new_tokens, temperature, seed, drafter, memory)
                else:
                    _run_group(runner, tally, breakdown, group, max_new_tokens, temperature, seed, drafter, memory)
                bar.update(len(group))
            if between is not None:
                between()
    bar.close()
    tallies, breakdowns = sum(tallies, []), sum(breakdowns, [])
    baseline = next(t for t in tallies if t.spec.policy == "ar")
    ar_rows = breakdowns[tallies.index(baseline)].rows
    prompt_text = {prompt.question_id: prompt.text for prompt in prompts}
    results = []
    for tally, breakdown in zip(tallies, breakdowns):
        result = _summarise(engine, tally, baseline, temperature, prompt_text, batch)
        result.update(broken_down(breakdown, ar_rows, result["identical_to_ar"], result["divergences"],
                                  has_steps=not tally.external))
        if batch == 1 and tally is not baseline:  # a batch's requests share their time: no prompt has its own
            result["speedup_interval"] = speedup_interval(breakdown.rows, ar_rows)
        results.append(PolicyResult(**result))
    info = engine.describe()
    return BenchReport(report_version=REPORT_VERSION, target=info.target, draft=info.draft,
                       drafter=drafter or engine.default_drafter, device=info.device, dtype=info.dtype,
                       costs=info.costs, prompts=len(prompts), max_new_tokens=max_new_tokens,
                       temperature=temperature, seed=seed,
                       categories=list(dict.fromkeys(prompt.category for prompt in prompts)),
                       cost_curve=cost_curve(engine.costs), results=results, batch=batch,
                       interval=SpeedupInterval(level=INTERVAL_LEVEL, draws=INTERVAL_DRAWS)
                       if any(r.speedup_interval for r in results) else None)


def repeated(specs: list[PolicySpec], number: int) -> list[PolicySpec]:
    """Pass `number` of the specs that draft, labelled by it: with the suffix memory on (the default), each
    drafts from its own runs of the passes before, as a repeated workload would."""
    return [PolicySpec(f"{spec.label} · pass {number}", spec.policy, spec.params) for spec in specs
            if not is_hf_baseline(spec.policy) and POLICIES[spec.policy].drafts]


def _run_one(engine: SpecEngine, tally: Tally, breakdown: Breakdown, prompt: Prompt, max_new_tokens: int,
             temperature: float, seed: int, drafter: str | None, memory: Any = "engine") -> None:
    """One spec on one prompt, counted in its tally and breakdown."""
    if tally.external:
        tokens, wall_s = run_hf_baseline(engine, tally.spec.policy, prompt.text, max_new_tokens)
        tally.add_external(prompt.question_id, tokens, wall_s)
        breakdown.add_row(prompt.question_id, prompt.category, len(tokens), wall_s, steps=None)
        return
    request = _request(tally.spec, prompt, max_new_tokens, temperature, seed, drafter)
    result = engine.run(request, detail=False, emit=_step_recorder(breakdown), memory=memory)
    tally.add(prompt.question_id, result)
    breakdown.add_row(prompt.question_id, prompt.category, result.new_tokens, result.wall_s, result.steps)
    tally.params = tally.params or engine.validate(request).params.model_dump()


def _run_group(runner: Batch, tally: Tally, breakdown: Breakdown, group: list[Prompt], max_new_tokens: int,
               temperature: float, seed: int, drafter: str | None, memory: Any = "engine") -> None:
    """One spec on a group of prompts through one batch: all join at once, each leaves when done; the
    group's wall time is counted once, each request's own time in its row."""
    requests = [_request(tally.spec, prompt, max_new_tokens, temperature, seed, drafter) for prompt in group]
    device = runner.engine.target.device
    began = clock(device)
    tickets = [runner.submit(request, emit=_step_recorder(breakdown), detail=False, memory=memory)
               for request in requests]
    runner.run()
    wall_s = clock(device) - began
    for i, (prompt, ticket) in enumerate(zip(group, tickets)):
        result = ticket.outcome(0)
        tally.add(prompt.question_id, result, counted_s=wall_s if i == 0 else 0.0)
        breakdown.add_row(prompt.question_id, prompt.category, result.new_tokens, result.wall_s, result.steps)
    tally.params = tally.params or runner.engine.validate(requests[0]).params.model_dump()


def _request(spec: PolicySpec, prompt: Prompt, max_new_tokens: int, temperature: float, seed: int,
             drafter: str | None) -> GenerationRequest:
    return GenerationRequest(prompt=prompt.text, policy=spec.policy, params=spec.params,
                             max_new_tokens=max_new_tokens, temperature=temperature, seed=seed, drafter=drafter)


def _step_recorder(breakdown: Breakdown):
    """An emit callback that keeps each step's shape (tree size and depth, accepted, emitted); detail is off,
    so only steps arrive."""
    def record(event: Any) -> None:
        if isinstance(event, StepMetrics):
            breakdown.add_step(event)
    return record


def _warm_up(engine: SpecEngine, specs: list[PolicySpec], drafter: str | None, runner: Batch | None = None) -> None:
    """One short run per policy so first-call costs (allocation, kernel selection) are not timed; at batch
    B, B at once through the bench's batch (its sessions are then allocated too)."""
    for spec in specs:
        if is_hf_baseline(spec.policy):
            run_hf_baseline(engine, spec.policy, "Hello", 8)
            continue
        request = GenerationRequest(prompt="Hello", policy=spec.policy, params=spec.params, max_new_tokens=8,
                                    drafter=drafter)
        if runner is None:
            engine.run(request, detail=False, memory=None)
            continue
        for _ in range(runner.max_batch):
            runner.submit(request, detail=False, memory=None)
        runner.run()


def _summarise(engine: SpecEngine, tally: Tally, baseline: Tally, temperature: float,
               prompt_text: dict[Any, str], batch: int = 1) -> dict[str, Any]:
    steps = max(tally.steps, 1)
    times = tally.times
    step_ms = times.total_ms
    result = {
        "policy": tally.spec.label, "params": tally.params,
        "tau": tally.new_tokens / steps, "delta": tally.draft_forwards / steps,
        "c": sum(tally.c_values) / len(tally.c_values) if tally.c_values else None,
        "tokens_per_s": tally.tokens_per_s,
        "speedup_vs_ar": tally.tokens_per_s / baseline.tokens_per_s if baseline.tokens_per_s else None,
        "new_tokens": tally.new_tokens, "steps": tally.steps,
        "share_draft": times.draft_ms / step_ms if step_ms else 0.0,
        "share_verify": times.verify_ms / step_ms if step_ms else 0.0,
        "share_other": times.other_ms / step_ms if step_ms else 0.0,
        "share_outside_forwards": 1 - (times.draft_forward_ms + times.verify_ms) / step_ms if step_ms else 0.0,
        "identical_to_ar": None, "divergences": [],
        "tokens_per_s_per_request": (sum(tally.request_speeds) / len(tally.request_speeds)
                                     if batch > 1 and tally.request_speeds else None),
    }
    if tally.external:
        result.update({key: None for key in ("tau", "delta", "steps", "share_draft", "share_verify", "share_other",
                                             "share_outside_forwards")})
    if temperature == 0:
        result["divergences"] = [
            _divergence(engine, question_id, prompt_text[question_id], baseline.outputs[question_id], tokens)
            for question_id, tokens in tally.outputs.items() if tokens != baseline.outputs[question_id]]
        result["identical_to_ar"] = not result["divergences"]
    return result


def _divergence(engine: SpecEngine, question_id: Any, prompt: str, reference: list[int],
                tokens: list[int]) -> Divergence:
    """Where an output first leaves `ar`'s, and the target's top-2 logit gap there under `ar`'s prefix."""
    position = next((i for i, (a, b) in enumerate(zip(reference, tokens)) if a != b), min(len(reference), len(tokens)))
    ids = engine.codec.encode_prompt(prompt) + reference[:position]
    with torch.inference_mode():
        logits = engine.target.model(torch.tensor([ids], device=engine.target.device)).logits[0, -1].float()  # [V]
    top2 = torch.topk(logits, 2).values
    return Divergence(question_id=question_id, position=position, top2_gap=float(top2[0] - top2[1]))


def batch_sweep(reports: list[BenchReport]) -> list[BatchPoint]:
    """Every policy at every batch size, from one report per size (`--batch B1,B2,…`)."""
    return [BatchPoint(policy=r.policy, batch=report.batch, tokens_per_s=r.tokens_per_s,
                       tokens_per_s_per_request=r.tokens_per_s_per_request or r.tokens_per_s,
                       speedup_vs_ar=r.speedup_vs_ar, tau=r.tau, identical_to_ar=r.identical_to_ar)
            for report in reports for r in report.results]


def batch_sizes(text: str) -> list[int]:
    """`--batch`: one size or a comma-separated list, each at least 1."""
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise RequestError(f"--batch {text!r}: sizes are whole numbers, e.g. 1,2,4", field="batch") from None
    if not sizes or min(sizes) < 1:
        raise RequestError(f"--batch {text!r}: every size at least 1", field="batch")
    return list(dict.fromkeys(sizes))


def fastest_policy(report: BenchReport) -> tuple[str, dict[str, Any]]:
    """The engine policy (run with its default parameters) of highest tokens/s in a report, and the evidence.

    Hugging Face's baselines are measured for scale but are no policy a request can name."""
    candidates = [r for r in report.results if r.policy in POLICIES and r.speedup_vs_ar is not None]
    if not candidates:
        raise RequestError("no engine policy with default parameters was benchmarked", field="policies")
    best = max(candidates, key=lambda r: r.tokens_per_s)
    evidence = {
        "speedup_vs_ar": {r.policy: round(r.speedup_vs_ar, 3) for r in candidates},
        "tau": {r.policy: round(r.tau, 3) for r in candidates if r.tau is not None},
        "source": report.source or "?", "prompts": report.prompts, "max_new_tokens": report.max_new_tokens,
        "drafter": report.drafter, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": _load_average(),
    }
    return best.policy, evidence


def record_default(engine: SpecEngine, report: BenchReport, path: Path) -> str:
    """Writes the report's fastest policy into the engine's cost table (saved at `path`) as the default."""
    policy, evidence = fastest_policy(report)
    record_fastest(engine.costs, policy, evidence)
    engine.costs.save(path)
    return policy


def cost_table_path(engine: SpecEngine, given: Path | None) -> Path:
    """Where the engine's cost table lives: the file named on the command line, else the device's saved one."""
    return Path(given) if given is not None else engine.cost_table_path


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def write_report(report: BenchReport, out_dir: str | Path, charts: list[tuple[str, str]] = ()) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(report_json(report), encoding="utf-8")
    (out / "results.md").write_text(markdown_table(report, charts), encoding="utf-8")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompts", default=None,
                        help="Spec-Bench-format JSON lines (question_id, category, turns); default: the shipped "
                             "prompt set's held-out split, never used to train the head")
    parser.add_argument("--policies", default=None,
                        help=f"comma-separated among {', '.join(POLICIES)} (default: ar and the engine's default "
                             "policy); parameters after colons, e.g. "
                             "talon:mu=0.05:budget=40; hf-generate and hf-prompt-lookup add Hugging Face's own "
                             "greedy decoding for scale")
    GenerationRequest.add_arguments(parser, fields=("temperature", "seed", "max_new_tokens"))
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts, one category in turn")
    parser.add_argument("--passes", type=int, default=1,
                        help="run the prompts this many times in one process: later passes repeat the drafting "
                             "policies, labelled '· pass N', each drafting from its own earlier runs through the "
                             "suffix memory (--suffix-memory-tokens 0 turns it off) (default: 1)")
    parser.add_argument("--batch", default="1",
                        help="requests verified together in one target forward (engine/batch.py): prompts run that "
                             "many at a time, speedup against ar at the same batch; a list (1,2,4,8) runs the bench "
                             "at each and draws speedup against batch size (default: 1, one request at a time)")
    parser.add_argument("--out", default=None, help="folder for results.md and results.json (default: runs/bench-…)")
    parser.add_argument("--plots", action="store_true",
                        help="also write SVG charts beside results.md (speedup, τ per category, τ against tree size, "
                             "the cost curve), linked from it")
    parser.add_argument("--note", default=None,
                        help="a line kept in results.json and shown with the results, e.g. how busy the machine was")
    parser.add_argument("--record-default", action="store_true",
                        help="make the fastest policy measured here the default of generate, bench and the page, "
                             "recorded with this device's cost table (with the speedups, prompts and date)")


def policy_specs(text: str) -> list[PolicySpec]:
    """`--policies`: comma-separated specs, each `name:key=value:…`."""
    return [PolicySpec.parse(part) for part in text.split(",") if part.strip()]


def command(args: argparse.Namespace) -> int:
    if args.policies is not None:
        specs = policy_specs(args.policies)
    prompts = read_prompts(args.prompts, args.limit) if args.prompts else held_out_prompts(args.limit)
    if not prompts:
        raise RequestError(f"{args.prompts} holds no prompts", field="prompts")
    engine = load_engine(EngineOptions.from_args(args))
    if args.policies is None:
        specs = [PolicySpec.parse(name) for name in dict.fromkeys(["ar", engine.default_policy])]
        print(f"policies: ar and the default, {engine.default_policy_note}")
    if args.passes < 1:
        raise RequestError(f"--passes {args.passes}: at least 1", field="passes")
    sizes = batch_sizes(args.batch)
    if args.record_default and sizes[0] != 1:
        raise RequestError("--record-default records the fastest policy of one request at a time: start --batch "
                           "with 1", field="batch")
    # The memory's speed, read before the runs and after each prompt's: on a shared VM it moves within seconds, and
    # with it what a one-token forward costs against a wide one (engine/costs.py's memory_note says what that means).
    probe = MemoryProbe(engine.target.device)
    memory_gb_s = [probe.read()]
    # A sweep gives every size a fresh suffix memory: no size drafts from another size's answers to the same prompts.
    reports = [run_bench(engine, prompts, specs, args.max_new_tokens, args.temperature, args.seed, args.drafter,
                         passes=args.passes, batch=size, memory=engine.new_memory() if len(sizes) > 1 else "engine",
                         between=lambda: memory_gb_s.append(probe.read()))
               for size in sizes]
    del probe  # its 512 MiB
    names, largest = [spec.policy for spec in specs], max(each.batch for each in reports)
    note = engine.costs_note_for(names, largest)
    drift = engine.memory_note_for(names, memory_gb_s, largest)  # results.md says it under its header
    for each in reports:
        each.source = Path(args.prompts).name if args.prompts else "the shipped prompt set's held-out split"
        each.note = args.note
        each.memory_gb_s, each.memory_note = memory_gb_s, drift
    report = reports[0]
    if len(reports) > 1:
        report.batch_sweep = batch_sweep(reports)
    out = Path(args.out or Path("runs") / time.strftime("bench-%Y%m%d-%H%M%S"))
    for each in reports[1:]:
        write_report(each, out / f"batch-{each.batch}", write_plots(each, out / f"batch-{each.batch}")
                     if args.plots else [])
    charts = write_plots(report, out) if args.plots else []
    write_report(report, out, charts)
    print(markdown_table(report, charts))
    if note:
        print(f"note: {note}")
    if args.record_default:
        path = cost_table_path(engine, args.cost_table)
        record_default(engine, report, path)
        print(f"default policy: {engine.default_policy_note}; recorded in {path}")
    print(f"wrote {out / 'results.md'} and {out / 'results.json'}" + (f" and {len(charts)} charts" if charts else ""))
    return 0
