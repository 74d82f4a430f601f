"""`specscope generate`: one prompt through one policy, streamed to the terminal (and compared with another)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from engine.engine import SpecEngine
from engine.events import RunFinished, RunStarted, TextDelta, TraceWriter
from engine.loading import load_engine
from engine.options import EngineOptions
from engine.policies import POLICIES, parse_params
from engine.request import GenerationRequest

SUMMARY_FIELDS = ("text", "new_tokens", "steps", "tau", "delta", "tokens_per_s", "wall_s")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("prompt")
    parser.add_argument("--policy", default=None,
                        help=f"one of: {', '.join(POLICIES)} (default: the fastest measured on this device)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE", help="a policy parameter")
    GenerationRequest.add_arguments(parser)
    parser.add_argument("--trace", default=None, help="write every event as JSON lines to this file")
    parser.add_argument("--compare", default=None, metavar="POLICY", help="also run this policy; print the speedup")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def command(args: argparse.Namespace) -> int:
    request = GenerationRequest(prompt=args.prompt, policy=args.policy, params=parse_params(args.param),
                                drafter=args.drafter, **GenerationRequest.given_in(args))
    engine = load_engine(EngineOptions.from_args(args))
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

    default_note = None if args.policy else engine.default_policy_note
    if default_note and stream:
        print(f"default policy {default_note}", flush=True)
    try:
        result = engine.run(request, emit=emit, detail=trace is not None)
    finally:
        if trace:
            trace.close()
    other = None
    if args.compare:
        other = engine.run(request.model_copy(update={"policy": args.compare, "params": {}}), detail=False,
                           emit=lambda event: started.append(event) if isinstance(event, RunStarted) else None)
    note = engine.costs_note_for([result.policy] + ([other.policy] if other else []))
    if args.json:
        summary = _json_summary(result, other, [event.params for event in started])
        if default_note:
            summary["default_policy_note"] = default_note
        print(json.dumps({**summary, "costs_note": note} if note else summary))
        return 0
    print()
    print(summary_line(result, engine))
    if other:
        print(summary_line(other, engine))
        identical = "identical output" if other.tokens == result.tokens else "outputs differ"
        print(f"speedup {result.policy} vs {other.policy}: {_ratio(result, other):.2f}× ({identical})")
    if note:
        print(f"note: {note}")
    return 0


def _ratio(result: RunFinished, baseline: RunFinished) -> float:
    return result.tokens_per_s / baseline.tokens_per_s if baseline.tokens_per_s else 0.0


def summary_line(result: RunFinished, engine: SpecEngine) -> str:
    info = engine.describe()
    c = f" c={result.c:.3f}" if result.c is not None else ""
    return (f"[{result.policy}] {result.new_tokens} tokens in {result.steps} steps · τ={result.tau:.2f} "
            f"δ={result.delta:.2f}{c} · {result.tokens_per_s:.1f} tok/s · {result.wall_s:.2f} s · "
            f"{info.dtype} on {info.device}")


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
