"""`specscope bench`: every policy over the same prompts in one process, measured against `ar`.

Runs are interleaved prompt by prompt (each prompt through every policy in
turn), so a slow patch of the machine hurts all policies alike. Speedup is
tokens/s over `ar`'s tokens/s from the same run. At temperature 0 every output
is compared with `ar`'s; where one differs, the first differing position and
the target's top-2 logit gap there are recorded, so that a rounding near-tie
can be told apart from a bug.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from engine.engine import SpecEngine
from engine.errors import RequestError
from engine.events import RunFinished
from engine.loading import load_engine
from engine.options import EngineOptions
from engine.policies import POLICIES, make_policy
from engine.request import GenerationRequest
from engine.timing import Timings
from tools.hf_baseline import is_hf_baseline, run_hf_baseline


@dataclass
class PolicySpec:
    """One column of the bench: a policy with parameters, written `name:key=value:key=value`."""

    label: str
    policy: str
    params: dict[str, str]

    @classmethod
    def parse(cls, text: str) -> "PolicySpec":
        name, *pairs = text.strip().split(":")
        params = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep:
                raise RequestError(f"{text!r}: expected key=value after ':', got {pair!r}", field="policies")
            params[key.strip()] = value.strip()
        if is_hf_baseline(name):
            if params:
                raise RequestError(f"{text!r}: Hugging Face baselines take no parameters", field="policies")
            return cls(label=text.strip(), policy=name, params=params)
        make_policy(name, params)  # fails early, naming the policy or parameter
        return cls(label=text.strip(), policy=name, params=params)


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

    @property
    def external(self) -> bool:
        """A Hugging Face baseline: tokens and time only, no steps to count."""
        return is_hf_baseline(self.spec.policy)

    def add_external(self, question_id: Any, tokens: list[int], wall_s: float) -> None:
        self.new_tokens += len(tokens)
        self.wall_s += wall_s
        self.outputs[question_id] = tokens

    def add(self, question_id: Any, result: RunFinished) -> None:
        self.new_tokens += result.new_tokens
        self.steps += result.steps
        self.draft_forwards += result.delta * result.steps
        self.wall_s += result.wall_s
        self.times = self.times + Timings.of(result)
        if result.c is not None:
            self.c_values.append(result.c)
        self.outputs[question_id] = result.tokens

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.wall_s if self.wall_s else 0.0


SHIPPED_PROMPTS = Path(__file__).parent / "data" / "prompts" / "prompts.jsonl"
HELD_OUT_SHARE = 0.05  # the share train-head never trains on


def held_out_prompts(limit: int | None = None) -> list[tuple[Any, str]]:
    """The shipped prompt set's held-out split (never trained on), one per task kind in turn."""
    from tools.training.selfdistill import is_held_out

    by_kind: dict[str, list[tuple[Any, str]]] = {}
    with open(SHIPPED_PROMPTS, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            if is_held_out(record["id"], HELD_OUT_SHARE):
                by_kind.setdefault(record["kind"], []).append((record["id"], record["prompt"]))
    interleaved = _round_robin(list(by_kind.values()))
    return interleaved[:limit] if limit else interleaved


def read_prompts(path: str | Path, limit: int | None = None) -> list[tuple[Any, str]]:
    """(question_id, first turn) pairs from a Spec-Bench-format JSON-lines file, one category in turn,
    so that the first N cover every category rather than the file's first."""
    by_category: dict[str, list[tuple[Any, str]]] = {}
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            turns = record.get("turns")
            if not turns or not isinstance(turns[0], str):
                raise ValueError(f"{path}:{number}: expected a 'turns' list of strings")
            by_category.setdefault(str(record.get("category", "")), []).append(
                (record.get("question_id", number), turns[0]))
    prompts = _round_robin(list(by_category.values()))
    return prompts[:limit] if limit else prompts


def _round_robin(groups: list[list[Any]]) -> list[Any]:
    """[[a1, a2], [b1]] -> [a1, b1, a2]."""
    return [row for layer in itertools.zip_longest(*groups) for row in layer if row is not None]


def run_bench(engine: SpecEngine, prompts: list[tuple[Any, str]], specs: list[PolicySpec], max_new_tokens: int,
              temperature: float = 0.0, seed: int = 0, drafter: str | None = None,
              progress: bool = True) -> dict[str, Any]:
    """Runs every spec on every prompt (`ar` added first if missing) and summarises against `ar`."""
    if not any(spec.policy == "ar" for spec in specs):
        specs = [PolicySpec("ar", "ar", {})] + specs
    if temperature > 0 and any(is_hf_baseline(spec.policy) for spec in specs):
        raise RequestError("the Hugging Face baselines decode greedily: use temperature 0", field="policies")
    tallies = [Tally(spec) for spec in specs]
    _warm_up(engine, specs, drafter)
    bar = tqdm(total=len(prompts) * len(specs), desc="bench", unit="run", disable=not progress)
    for question_id, prompt in prompts:
        for tally in tallies:
            if tally.external:
                tally.add_external(question_id, *run_hf_baseline(engine, tally.spec.policy, prompt, max_new_tokens))
                bar.update()
                continue
            request = GenerationRequest(prompt=prompt, policy=tally.spec.policy, params=tally.spec.params,
                                        max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                                        drafter=drafter)
            tally.add(question_id, engine.run(request, detail=False))
            tally.params = tally.params or engine.validate(request).policy.params.model_dump()
            bar.update()
    bar.close()
    baseline = next(t for t in tallies if t.spec.policy == "ar")
    prompt_text = dict(prompts)
    results = [_summarise(engine, tally, baseline, temperature, prompt_text) for tally in tallies]
    info = engine.describe()
    return {"target": info.target, "draft": info.draft, "drafter": drafter or engine.default_drafter,
            "device": info.device, "dtype": info.dtype, "costs": info.costs, "prompts": len(prompts),
            "max_new_tokens": max_new_tokens, "temperature": temperature, "seed": seed, "results": results}


def _warm_up(engine: SpecEngine, specs: list[PolicySpec], drafter: str | None) -> None:
    """One short run per policy so first-call costs (allocation, kernel selection) are not timed."""
    for spec in specs:
        if is_hf_baseline(spec.policy):
            run_hf_baseline(engine, spec.policy, "Hello", 8)
            continue
        engine.run(GenerationRequest(prompt="Hello", policy=spec.policy, params=spec.params, max_new_tokens=8,
                                     drafter=drafter), detail=False)


def _summarise(engine: SpecEngine, tally: Tally, baseline: Tally, temperature: float,
               prompt_text: dict[Any, str]) -> dict[str, Any]:
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
                tokens: list[int]) -> dict[str, Any]:
    """Where an output first leaves `ar`'s, and the target's top-2 logit gap there under `ar`'s prefix."""
    position = next((i for i, (a, b) in enumerate(zip(reference, tokens)) if a != b), min(len(reference), len(tokens)))
    ids = engine.codec.encode_prompt(prompt) + reference[:position]
    with torch.inference_mode():
        logits = engine.target.model(torch.tensor([ids], device=engine.target.device)).logits[0, -1].float()  # [V]
    top2 = torch.topk(logits, 2).values
    return {"question_id": question_id, "position": position, "top2_gap": float(top2[0] - top2[1])}


def markdown_table(report: dict[str, Any]) -> str:
    header = (f"target {report['target']} · drafter {report['drafter']} · {report['device']} {report['dtype']} · "
              f"{report['prompts']} prompts × {report['max_new_tokens']} new tokens · temperature {report['temperature']}")
    lines = [header, "",
             "| policy | τ | δ | c | tokens/s | speedup vs ar | steps | draft / verify / other | outside forwards "
             "| identical to ar |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        identical = "—" if r["identical_to_ar"] is None else ("yes" if r["identical_to_ar"] else
                                                              f"no ({len(r['divergences'])})")
        shares = "—" if r["share_draft"] is None else (
            f"{r['share_draft']:.0%} / {r['share_verify']:.0%} / {r['share_other']:.0%}")
        lines.append(f"| {r['policy']} | {_cell(r['tau'], '.2f')} | {_cell(r['delta'], '.2f')} | {_cell(r['c'], '.3f')} "
                     f"| {r['tokens_per_s']:.1f} | {r['speedup_vs_ar']:.2f}× | {_cell(r['steps'], 'd')} | {shares} "
                     f"| {_cell(r['share_outside_forwards'], '.0%')} | {identical} |")
    return "\n".join(lines) + "\n"


def _cell(value: Any, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def write_report(report: dict[str, Any], out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out / "results.md").write_text(markdown_table(report), encoding="utf-8")
    return out


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompts", default=None,
                        help="Spec-Bench-format JSON lines (question_id, category, turns); default: the shipped "
                             "prompt set's held-out split, never used to train the head")
    parser.add_argument("--policies", default="ar,chain,eagle,talon",
                        help=f"comma-separated among {', '.join(POLICIES)}; parameters after colons, e.g. "
                             "talon:mu=0.05:budget=40; hf-generate and hf-prompt-lookup add Hugging Face's own "
                             "greedy decoding for scale")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--limit", type=int, default=None, help="only the first N prompts, one category in turn")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="folder for results.md and results.json (default: runs/bench-…)")


def command(args: argparse.Namespace) -> int:
    specs = [PolicySpec.parse(text) for text in args.policies.split(",") if text.strip()]
    prompts = read_prompts(args.prompts, args.limit) if args.prompts else held_out_prompts(args.limit)
    if not prompts:
        raise RequestError(f"{args.prompts} holds no prompts", field="prompts")
    engine = load_engine(EngineOptions.from_args(args))
    report = run_bench(engine, prompts, specs, args.max_new_tokens, args.temperature, args.seed, args.drafter)
    out = write_report(report, args.out or Path("runs") / time.strftime("bench-%Y%m%d-%H%M%S"))
    print(markdown_table(report))
    note = engine.costs_note_for([spec.policy for spec in specs])
    if note:
        print(f"note: {note}")
    print(f"wrote {out / 'results.md'} and {out / 'results.json'}")
    return 0
