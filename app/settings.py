"""Server settings: from the command line and the environment (SPECSCOPE_*), never from a browser.

The engine's options are inherited from `EngineOptions`, declared once for the
CLI, the tools and the server.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from engine.options import EngineOptions


class ServerSettings(BaseSettings, EngineOptions):
    model_config = SettingsConfigDict(env_prefix="SPECSCOPE_", extra="ignore")

    host: str = Field("127.0.0.1", description="interface to bind")
    port: int = Field(8000, ge=1, le=65535, description="port to listen on")
    replay_only: bool = Field(False, description="load no model: the page replays shipped traces only")
    max_waiting: int = Field(16, ge=1, description="runs allowed to wait in line before new ones are refused")
    max_batch: int | None = Field(None, ge=1, le=64,
                                  description="runs decoded together, their trees verified in one forward "
                                              "(engine/batch.py); default: the largest batch the cost table "
                                              "measured, 1 (one run at a time) where none was")

    # Who may drive the model (docs/websocket.md, "Limits").
    allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="host names served besides localhost, 127.0.0.1, [::1] and --host "
                                          "(comma-separated; * turns the Host check off)")
    api_docs: bool = Field(False, description="serve /openapi.json and a self-contained /docs page")
    max_connections_per_client: int = Field(8, ge=1, description="open WebSockets per client address")
    max_runs_per_client: int = Field(4, ge=1, description="runs one client address may have waiting or running")
    max_run_tokens: int = Field(2048, ge=1, description="most new tokens one run may ask for")
    max_run_seconds: float = Field(300.0, gt=0, description="a run still going after this long is stopped")
    send_timeout: float = Field(5.0, gt=0, description="seconds one message may take to leave for its client")
    max_backlog_events: int = Field(1024, ge=8, description="events a client may fall behind before it is dropped "
                                                             "(past a quarter of it, per-candidate detail is dropped)")
    max_backlog_bytes: int = Field(8 << 20, ge=1 << 16, description="bytes a client may fall behind, likewise")
    handshake_timeout: float = Field(10.0, gt=0, description="seconds to send a complete HTTP request or upgrade")
    idle_timeout: float = Field(300.0, gt=0, description="a WebSocket with no run and no message this long is closed")
    suffix_memory_scope: Literal["client", "shared", "off"] = Field(
        "client", description="whose earlier runs the suffix drafter may copy from: a client's own (per browser tab, "
                              "the default), every client's (shared: one client's text can then appear in another's "
                              "drafts, which the page draws), or none (off)")
    shutdown_timeout: float = Field(3.0, gt=0, description="seconds shutdown waits for connections to close")

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return [name.strip() for name in value.split(",") if name.strip()] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _memory_file_is_shared(self) -> "ServerSettings":
        if self.suffix_memory is not None and self.suffix_memory_scope != "shared":
            raise ValueError("suffix_memory (a file) holds one memory for the whole server: it needs "
                             "suffix_memory_scope=shared")
        return self
