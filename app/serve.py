"""`specscope serve` (also `python -m app.serve`): the web app under uvicorn."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from app.settings import ServerSettings
from engine.options import EngineOptions

_SERVER_OPTIONS = ("host", "port", "replay_only", "allowed_hosts", "api_docs", "max_run_tokens", "max_run_seconds",
                   "max_batch")
MAX_MESSAGE_BYTES = 1 << 20  # a client message is a prompt of at most 32000 characters and a few fields

log = logging.getLogger("specscope.app")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Defaults are None so that unset flags fall back to the environment, then to ServerSettings.
    fields = ServerSettings.model_fields
    parser.add_argument("--host", help=f"{fields['host'].description} (default {fields['host'].default})")
    parser.add_argument("--port", type=int, help=f"{fields['port'].description} (default {fields['port'].default})")
    parser.add_argument("--replay-only", action="store_true", default=None, help=fields["replay_only"].description)
    parser.add_argument("--allowed-hosts", metavar="NAMES", help=fields["allowed_hosts"].description)
    parser.add_argument("--api-docs", action="store_true", default=None, help=fields["api_docs"].description)
    parser.add_argument("--max-run-tokens", type=int, metavar="N",
                        help=f"{fields['max_run_tokens'].description} (default {fields['max_run_tokens'].default})")
    parser.add_argument("--max-run-seconds", type=float, metavar="S",
                        help=f"{fields['max_run_seconds'].description} (default {fields['max_run_seconds'].default:g})")
    parser.add_argument("--max-batch", type=int, metavar="B", help=fields["max_batch"].description)
    EngineOptions.add_arguments(parser)


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    given = {name: getattr(args, name) for name in _SERVER_OPTIONS if getattr(args, name, None) is not None}
    return ServerSettings(**given, **EngineOptions.given_in(args))


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


def command(args: argparse.Namespace) -> int:
    import uvicorn

    from app.main import create_app

    settings = settings_from_args(args)
    if settings.host in ("0.0.0.0", "::", "") and not settings.allowed_hosts:
        log.warning("listening on every interface, but only localhost names are served: pass --allowed-hosts "
                    "with the names other machines use to reach this one")
    uvicorn.Server(uvicorn_config(create_app(settings), settings)).run()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.serve", description="serve the specscope web app")
    add_arguments(parser)
    return command(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
