"""`specscope serve`: the web app under uvicorn. engine/cli.py imports this lazily, so engine/ never needs FastAPI."""

from __future__ import annotations

import argparse
from typing import Any

from app.settings import ServerSettings

_OPTIONS = ("host", "port", "target", "draft", "head", "drafter", "dtype", "device", "replay_only")


def register_cli(subparsers: Any) -> argparse.ArgumentParser:
    """Adds the `serve` subcommand; its `func` takes the parsed namespace."""
    parser = subparsers.add_parser("serve", help="serve the web app (settings also from SPECSCOPE_* env)")
    add_arguments(parser)
    parser.set_defaults(func=serve_from_args)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Defaults are None so that unset flags fall back to the environment, then to ServerSettings.
    parser.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (default 8000)")
    parser.add_argument("--target", help="target model (default: the embedded SmolLM2-135M)")
    parser.add_argument("--draft", help="draft model for token-level drafting")
    parser.add_argument("--head", help="feature-level draft head")
    parser.add_argument("--drafter", help="default drafter among those loaded")
    parser.add_argument("--dtype", help="model dtype, e.g. float32, bfloat16")
    parser.add_argument("--device", help="cpu, cuda, ...")
    parser.add_argument("--replay-only", action="store_true", default=None,
                        help="load no model; the page replays the shipped traces")


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    given = {name: getattr(args, name) for name in _OPTIONS if getattr(args, name, None) is not None}
    return ServerSettings(**given)


def serve_from_args(args: argparse.Namespace) -> int:
    import uvicorn

    from app.main import create_app

    settings = settings_from_args(args)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")
    return 0


def serve_main(argv: list[str] | None = None) -> int:
    """Entry point with its own argument parsing: `specscope serve [options]`."""
    parser = argparse.ArgumentParser(prog="specscope serve", description="serve the specscope web app")
    add_arguments(parser)
    return serve_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(serve_main())
