"""Server settings: from the command line and the environment (SPECSCOPE_*), never from a browser.

The engine's options are inherited from `EngineOptions`, declared once for the
CLI, the tools and the server.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine.options import EngineOptions


class ServerSettings(BaseSettings, EngineOptions):
    model_config = SettingsConfigDict(env_prefix="SPECSCOPE_", extra="ignore")

    host: str = Field("127.0.0.1", description="interface to bind")
    port: int = Field(8000, ge=1, le=65535, description="port to listen on")
    replay_only: bool = Field(False, description="load no model: the page replays shipped traces only")
    max_waiting: int = Field(16, ge=1, description="runs allowed to wait in line before new ones are refused")
