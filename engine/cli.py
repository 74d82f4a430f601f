"""`specscope`: generate, bench, profile, train-head and serve from the command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from engine.embedded import EmbeddedModelMissing
from engine.events import RunFinished, RunStarted, TextDelta, TraceWriter
from engine.policies import POLICIES, PolicyError
from engine.request import GenerationRequest, RequestError

SUMMARY_FIELDS = ("text", "new_tokens", "steps", "tau", "delta", "tokens_per_s", "wall_s")


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default=None, help="target model: hub id or folder (default: embedded SmolLM2)")
    parser.add_argument("--draft", default=None, help="draft LM sharing the target's tokenizer (hub id or folder)")
    parser.add_argument("--head", default=None, help="EAGLE-3 draft head: folder or hub id (default: the shipped head, if any)")
    parser.add_argument("--drafter", default=None, help="which drafter to use (default: the best one loaded)")
    parser.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: the device's best)")
    parser.add_argument("--device", default=None, help="cpu, cuda or mps (default: the best available)")


def load_from_args(args: argparse.Namespace, policies: list[str]):
    from engine.loading import load_engine

    engine = load_engine(target=args.target, draft=args.draft, head=args.head, drafter=args.drafter,
                         dtype=args.dtype, device=args.device)
    attach_costs_if_needed(engine, policies)
    return engine


def attach_costs_if_needed(engine, policies: list[str]) -> None:
    """Cost-aware policies read the measured cost table; load it (or profile once) only for them."""
    if any(getattr(POLICIES.get(name), "needs_costs", False) for name in policies):
        from engine.profile import load_cost_table

        engine.policy_context["cost_table"] = load_cost_table(engine)


def parse_params(pairs: list[str]) -> dict[str, str]:
    params = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise RequestError(f"--param expects key=value, got {pair!r}", field="params")
        params[key.strip()] = value.strip()
    return params


def generate_command(args: argparse.Namespace) -> int:
    request = GenerationRequest(prompt=args.prompt, policy=args.policy, params=parse_params(args.param),
                                temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                                max_new_tokens=args.max_new_tokens, drafter=args.drafter)
    policies = [request.policy] + ([args.compare] if args.compare else [])
    engine = load_from_args(args, policies)
    trace = TraceWriter(args.trace) if args.trace else None
    stream = not args.json
    started: list[RunStarted] = []

    def emit(event: Any) -> None:
        if trace:
            trace(event)
        if isinstance(event, RunStarted):
            started.append(event)
        if stream and isinstance(event, TextDelta):
            print(event.text, end="", flush=True)

    result = engine.run(request, emit=emit, detail=trace is not None)
    if trace:
        trace.close()
    other = None
    if args.compare:
        other = engine.run(request.model_copy(update={"policy": args.compare, "params": {}}), detail=False,
                           emit=lambda event: started.append(event) if isinstance(event, RunStarted) else None)
    if args.json:
        print(json.dumps(_json_summary(result, other, [event.params for event in started])))
    else:
        print()
        print(_summary_line(result, engine))
        if other:
            print(_summary_line(other, engine))
            identical = "identical output" if other.tokens == result.tokens else "outputs differ"
            print(f"speedup {result.policy} vs {other.policy}: {_ratio(result, other):.2f}× ({identical})")
    return 0


def _ratio(result: RunFinished, baseline: RunFinished) -> float:
    return result.tokens_per_s / baseline.tokens_per_s if baseline.tokens_per_s else 0.0


def _summary_line(result: RunFinished, engine) -> str:
    c = f" c={result.c:.3f}" if result.c is not None else ""
    return (f"[{result.policy}] {result.new_tokens} tokens in {result.steps} steps · τ={result.tau:.2f} "
            f"δ={result.delta:.2f}{c} · {result.tokens_per_s:.1f} tok/s · {result.wall_s:.2f} s · "
            f"{engine.info['dtype']} on {engine.info['device']}")


def _json_summary(result: RunFinished, other: RunFinished | None, params: list[dict[str, Any]]) -> dict:
    """`params`: the parameters each run started with, in run order."""
    summary = {name: getattr(result, name) for name in SUMMARY_FIELDS}
    summary.update(policy=result.policy, params=params[0])
    if other:
        compare = {name: getattr(other, name) for name in SUMMARY_FIELDS}
        compare.update(policy=other.policy, params=params[1], speedup=_ratio(result, other),
                       identical=other.tokens == result.tokens)
        summary["compare"] = compare
    return summary


def bench_command(args: argparse.Namespace) -> int:
    from engine.bench import PolicySpec, held_out_prompts, markdown_table, read_prompts, run_bench, write_report

    specs = [PolicySpec.parse(text) for text in args.policies.split(",") if text.strip()]
    prompts = read_prompts(args.prompts, args.limit) if args.prompts else held_out_prompts(args.limit)
    if not prompts:
        raise RequestError(f"{args.prompts} holds no prompts", field="prompts")
    engine = load_from_args(args, [spec.policy for spec in specs])
    report = run_bench(engine, prompts, specs, args.max_new_tokens, args.temperature, args.seed, args.drafter)
    out = Path(args.out or Path("runs") / time.strftime("bench-%Y%m%d-%H%M%S"))
    charts = []
    if args.plots:
        from tools.plots import write_plots

        charts = write_plots(report, out)
    write_report(report, out, charts)
    print(markdown_table(report, charts))
    print(f"wrote {out / 'results.md'} and {out / 'results.json'}" + (f" and {len(charts)} charts" if charts else ""))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specscope", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    generate = commands.add_parser("generate", help="generate text with one policy (and compare with another)")
    generate.add_argument("prompt")
    generate.add_argument("--policy", default="talon", help=f"one of: {', '.join(POLICIES)}")
    generate.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="a policy parameter")
    generate.add_argument("--temperature", type=float, default=0.0)
    generate.add_argument("--top-k", type=int, default=0)
    generate.add_argument("--top-p", type=float, default=1.0)
    generate.add_argument("--max-new-tokens", type=int, default=256)
    generate.add_argument("--seed", type=int, default=0)
    generate.add_argument("--trace", default=None, help="write every event as JSON lines to this file")
    generate.add_argument("--compare", default=None, metavar="POLICY", help="also run this policy; print the speedup")
    generate.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    add_engine_args(generate)
    generate.set_defaults(func=generate_command)

    bench = commands.add_parser("bench", help="benchmark policies on Spec-Bench-format prompts against ar")
    bench.add_argument("--prompts", default=None,
                       help="Spec-Bench-format JSON lines (question_id, category, turns); default: the shipped "
                            "prompt set's held-out split, never used to train the head")
    bench.add_argument("--policies", default="ar,chain,eagle,talon",
                       help="comma-separated; parameters after colons, e.g. talon:mu=0.05:budget=40; "
                            "hf-generate and hf-prompt-lookup add Hugging Face's own greedy decoding for scale")
    bench.add_argument("--max-new-tokens", type=int, default=128)
    bench.add_argument("--limit", type=int, default=None, help="only the first N prompts")
    bench.add_argument("--temperature", type=float, default=0.0)
    bench.add_argument("--seed", type=int, default=0)
    bench.add_argument("--out", default=None, help="folder for results.md and results.json (default: runs/bench-…)")
    bench.add_argument("--plots", action="store_true",
                       help="also write SVG charts beside results.md (speedup, τ per category, τ against tree size, "
                            "the cost curve), linked from it")
    add_engine_args(bench)
    bench.set_defaults(func=bench_command)

    _register_optional(commands)
    return parser


def _register_optional(commands: Any) -> None:
    """Subcommands that live in their own modules; `serve` imports the web stack only when run."""
    from engine import profile

    profile.register_cli(commands)
    try:
        from engine import train_head
    except ImportError:
        train_head = None
    if train_head is not None:
        train_head.register_cli(commands)
    from app import serve

    serve.register_cli(commands)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except (RequestError, PolicyError, ValueError, FileNotFoundError, EmbeddedModelMissing) as err:
        field = f" [{err.field}]" if getattr(err, "field", None) else ""
        print(f"specscope: error{field}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
