"""Server settings: from the environment (SPECSCOPE_*) and the command line, never from a browser."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ServerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SPECSCOPE_", extra="ignore")

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    target: str | None = Field(None, description="target model; None: the embedded SmolLM2 default")
    draft: str | None = Field(None, description="draft model for token-level drafting")
    head: str | None = Field(None, description="feature-level draft head")
    drafter: str | None = Field(None, description="default drafter among those loaded")
    dtype: str | None = None
    device: str | None = None
    replay_only: bool = Field(False, description="load no model: the page replays shipped traces only")
    max_waiting: int = Field(16, ge=1, description="runs allowed to wait in line before new ones are refused")
