"""`specscope serve` (also `python -m app.serve`): the web app under uvicorn."""

from __future__ import annotations

import argparse

from app.settings import ServerSettings
from engine.options import EngineOptions

_SERVER_OPTIONS = ("host", "port", "replay_only")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Defaults are None so that unset flags fall back to the environment, then to ServerSettings.
    fields = ServerSettings.model_fields
    parser.add_argument("--host", help=f"{fields['host'].description} (default {fields['host'].default})")
    parser.add_argument("--port", type=int, help=f"{fields['port'].description} (default {fields['port'].default})")
    parser.add_argument("--replay-only", action="store_true", default=None, help=fields["replay_only"].description)
    EngineOptions.add_arguments(parser)


def settings_from_args(args: argparse.Namespace) -> ServerSettings:
    given = {name: getattr(args, name) for name in _SERVER_OPTIONS if getattr(args, name, None) is not None}
    return ServerSettings(**given, **EngineOptions.given_in(args))


def command(args: argparse.Namespace) -> int:
    import uvicorn

    from app.main import create_app

    settings = settings_from_args(args)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="info")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.serve", description="serve the specscope web app")
    add_arguments(parser)
    return command(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
