"""`specscope serve`: the web app under uvicorn. engine/cli.py imports this lazily, so engine/ never needs FastAPI."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from app.settings import ServerSettings

_OPTIONS = ("host", "port", "target", "draft", "head", "drafter", "dtype", "device", "replay_only",
            "allowed_hosts", "api_docs", "max_run_tokens", "max_run_seconds")
MAX_MESSAGE_BYTES = 1 << 20  # a client message is a prompt of at most 32000 characters and a few fields

log = logging.getLogger("specscope.app")


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
    parser.add_argument("--allowed-hosts", metavar="NAMES",
                        help="comma-separated host names served besides localhost, 127.0.0.1, [::1] and --host, "
                             "e.g. the name other machines use to reach this one")
    parser.add_argument("--api-docs", action="store_true", default=None,
                        help="serve /openapi.json and a /docs page (off by default)")
    parser.add_argument("--max-run-tokens", type=int, help="most new tokens one run may ask for (default 2048)")
    parser.add_argument("--max-run-seconds", type=float, help="a run is stopped after this long (default 300)")


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    given = {name: getattr(args, name) for name in _OPTIONS if getattr(args, name, None) is not None}
    return ServerSettings(**given)


def uvicorn_config(app: Any, settings: ServerSettings, **overrides: Any) -> Any:
    """uvicorn's configuration for this app: the hardened protocols (app/transport.py), a bounded
    message size, a bounded shutdown, and client addresses taken from the socket, never from
    X-Forwarded-For (which any local client could set to escape the per-address caps)."""
    import uvicorn

    from app.transport import protocols

    http, ws = protocols(settings.handshake_timeout)
    options = dict(host=settings.host, port=settings.port, log_level="info", http=http, ws=ws,
                   ws_max_size=MAX_MESSAGE_BYTES, proxy_headers=False, server_header=False,
                   timeout_graceful_shutdown=settings.shutdown_timeout)
    return uvicorn.Config(app, **(options | overrides))


def serve_from_args(args: argparse.Namespace) -> int:
    import uvicorn

    from app.main import create_app

    settings = settings_from_args(args)
    if settings.host in ("0.0.0.0", "::", "") and not settings.allowed_hosts:
        log.warning("listening on every interface, but only localhost names are served: pass --allowed-hosts "
                    "with the names other machines use to reach this one")
    uvicorn.Server(uvicorn_config(create_app(settings), settings)).run()
    return 0


def serve_main(argv: list[str] | None = None) -> int:
    """Entry point with its own argument parsing: `specscope serve [options]`."""
    parser = argparse.ArgumentParser(prog="specscope serve", description="serve the specscope web app")
    add_arguments(parser)
    return serve_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(serve_main())
