"""What a user asks for: one generation with one policy. Validated the same way for CLI and web."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from engine.sampling import SamplingParams

# The lowest sampling temperature besides 0 (greedy). Sampling divides the logits by T before the
# softmax; the division must stay finite. At T >= 0.01 it does for every logit below 3.4e36 in
# magnitude even in float32 (float64, which sampling uses, has room to spare), and below it
# sampling is greedy in all but name: a logit gap of 0.5 is already a probability ratio of e^50.
MIN_TEMPERATURE = 0.01


class GenerationRequest(BaseModel):
    # Numbers are strict (no booleans, no numeric strings) and finite: a request means what it says.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    prompt: str = Field(min_length=1, max_length=32_000)
    policy: str | None = Field(None, description="a registered policy; None: the engine's default")
    params: dict[str, Any] = Field(default_factory=dict)
    temperature: float = Field(0.0, ge=0.0, le=5.0, strict=True,
                               description=f"0: greedy; otherwise at least {MIN_TEMPERATURE}")
    top_k: int = Field(0, ge=0, le=100_000, strict=True)
    top_p: float = Field(1.0, gt=0.0, le=1.0, strict=True)
    seed: int = Field(0, ge=0, le=2**63 - 1, strict=True)
    max_new_tokens: int = Field(128, ge=1, le=8192, strict=True)
    drafter: str | None = Field(None, description="one of the drafters the server or CLI loaded; None: the default")

    @field_validator("temperature")
    @classmethod
    def _greedy_or_above_the_floor(cls, temperature: float) -> float:
        if 0 < temperature < MIN_TEMPERATURE:
            raise PydanticCustomError(
                "temperature_floor", "must be 0 (greedy) or at least {floor}: below that logits / T is not safely "
                "finite and sampling is greedy in all but name", {"floor": MIN_TEMPERATURE})
        return temperature

    @property
    def sampling(self) -> SamplingParams:
        return SamplingParams(self.temperature, self.top_k, self.top_p)
