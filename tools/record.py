"""Records runs as trace files for the page's replay mode: `python -m tools.record OUT.jsonl --policy talon ...`.

Traces shipped in static/traces/ let a lecture run with no model loaded. With `--batch` the runs are decoded
together (engine/batch.py), every step's trees verified in one target forward, so a lecture can show a batch's
trees side by side ("Compare policies", then "Show these runs side by side"), each step saying it shared the forward.
"""

from __future__ import annotations

import argparse

from engine.batch import Batch
from engine.engine import SpecEngine
from engine.events import TraceWriter
from engine.loading import load_engine
from engine.options import EngineOptions
from engine.policies import PolicySpec
from engine.request import GenerationRequest

DEFAULT_PROMPT = "Count from one to twenty in words, separated by commas."


def record(engine: SpecEngine, requests: list[GenerationRequest], path: str, batch: bool = False) -> None:
    """Runs each request in turn (or, with `batch`, all of them together), all events into one JSON-lines file,
    after one short untimed run of each (as the bench warms up): a process's first forwards and a policy's first
    step are slower, and a lesson compares the recorded runs' speeds."""
    for request in requests:
        engine.run(request.model_copy(update={"prompt": "Hello", "max_new_tokens": 8}), memory=None, detail=True)
    writer = TraceWriter(path)
    try:
        if batch:
            together = Batch(engine, len(requests))
            tickets = [together.submit(request, writer, memory=None) for request in requests]
            together.run()
            for ticket in tickets:
                ticket.outcome()  # raises what failed a run
        else:
            for request in requests:
                engine.run(request, writer, memory=None)  # a lesson must not depend on the lessons before it
    finally:
        writer.close()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", help="trace file to write (JSON lines)")
    parser.add_argument("--policy", action="append", default=None,
                        help="policy to run, parameters after colons (talon:mu=0.05); repeat for several runs "
                             "(default: the engine's default policy)")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--batch", action="store_true",
                        help="decode the runs together, every step's trees verified in one forward (a batch to show "
                             "side by side)")
    GenerationRequest.add_arguments(parser)


def command(args: argparse.Namespace) -> int:
    engine = load_engine(EngineOptions.from_args(args))
    specs = [PolicySpec.parse(text, field="policy") for text in args.policy or [engine.default_policy]]
    requests = [GenerationRequest(prompt=args.prompt, policy=spec.policy, params=spec.params, drafter=args.drafter,
                                  **GenerationRequest.given_in(args))
                for spec in specs]
    record(engine, requests, args.out, batch=args.batch)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.record", description=__doc__.splitlines()[0])
    add_arguments(parser)
    EngineOptions.add_arguments(parser)
    return command(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
