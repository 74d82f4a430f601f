"""What a user asks for: one generation with one policy. Validated the same way for CLI and web."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.sampling import SamplingParams


class GenerationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=32_000)
    policy: str | None = Field(None, description="a registered policy; None: the engine's default")
    params: dict[str, Any] = Field(default_factory=dict)
    temperature: float = Field(0.0, ge=0.0, le=5.0)
    top_k: int = Field(0, ge=0, le=100_000)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int = Field(0, ge=0, le=2**63 - 1)
    max_new_tokens: int = Field(128, ge=1, le=8192)
    drafter: str | None = Field(None, description="one of the drafters the server or CLI loaded; None: the default")

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p)
