"""`specscope`: the command line, on top of the tools and the web app.

Each subcommand lives in its own module, which declares its arguments
(`add_arguments`) and runs them (`command`); the engine's options are added
from `EngineOptions`, the one declaration of how to ask for an engine.
"""

from __future__ import annotations

import argparse
import sys
from types import ModuleType

from pydantic import ValidationError

from engine.errors import SpecscopeError, from_validation
from engine.options import EngineOptions


def _subcommands() -> list[tuple[str, str, ModuleType, bool]]:
    """(name, help, module, whether it loads an engine), in the order `--help` lists them."""
    from app import serve
    from tools import bench, generate, profile, record, train_head

    return [
        ("generate", "generate text with one policy (and compare with another)", generate, True),
        ("bench", "benchmark policies on Spec-Bench-format prompts against ar", bench, True),
        ("profile", "measure target/draft forward time on this device and write a cost table", profile, True),
        ("train-head", "train an EAGLE-3 draft head for a target (CPU is enough)", train_head, False),
        ("record", "record runs as a trace file the page replays with no model", record, True),
        ("serve", "serve the web app (settings also from SPECSCOPE_* variables)", serve, False),
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specscope", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name, help_text, module, loads_engine in _subcommands():
        sub = commands.add_parser(name, help=help_text, description=(module.__doc__ or help_text).splitlines()[0])
        module.add_arguments(sub)
        if loads_engine:
            EngineOptions.add_arguments(sub)
        sub.set_defaults(func=module.command)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        try:
            return args.func(args) or 0
        except ValidationError as err:  # a request or option built from the flags
            raise from_validation(err) from None
    except (SpecscopeError, FileNotFoundError) as err:
        field = f" [{err.field}]" if getattr(err, "field", None) else ""
        print(f"specscope: error{field}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
