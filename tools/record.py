"""Records runs as trace files for the page's replay mode: `python -m tools.record OUT.jsonl --policy talon ...`.

Traces shipped in static/traces/ let a lecture run with no model loaded.
"""

from __future__ import annotations

import argparse

from engine.engine import SpecEngine
from engine.events import TraceWriter
from engine.loading import load_engine
from engine.options import EngineOptions
from engine.request import GenerationRequest

DEFAULT_PROMPT = "Count from one to twenty in words, separated by commas."


def record(engine: SpecEngine, requests: list[GenerationRequest], path: str) -> None:
    """Runs each request in turn, all events into one JSON-lines file."""
    writer = TraceWriter(path)
    try:
        for request in requests:
            engine.run(request, writer, memory=None)  # a lesson must not depend on the lessons before it
    finally:
        writer.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", help="trace file to write (JSON lines)")
    parser.add_argument("--policy", action="append", default=None, help="policy to run; repeat for several runs")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--temperature", type=float, default=0.0)


def command(args: argparse.Namespace) -> int:
    engine = load_engine(EngineOptions.from_args(args))
    requests = [GenerationRequest(prompt=args.prompt, policy=policy, max_new_tokens=args.max_new_tokens,
                                  seed=args.seed, temperature=args.temperature)
                for policy in args.policy or ["talon"]]
    record(engine, requests, args.out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.record", description=__doc__.splitlines()[0])
    add_arguments(parser)
    EngineOptions.add_arguments(parser)
    return command(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
