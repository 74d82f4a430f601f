"""Typed dependencies: what a route may take from the app's state, loaded once in the lifespan."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from starlette.requests import HTTPConnection

from app.settings import ServerSettings
from engine.interface import Engine


def get_engine(connection: HTTPConnection) -> Engine | None:
    """The loaded engine; None on a replay-only server."""
    return connection.app.state.engine


def get_settings(connection: HTTPConnection) -> ServerSettings:
    return connection.app.state.settings


EngineDep = Annotated[Engine | None, Depends(get_engine)]
SettingsDep = Annotated[ServerSettings, Depends(get_settings)]
