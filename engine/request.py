"""What a user asks for: one generation with one policy. Validated the same way for CLI and web.

`GenerationRequest` is the one declaration of a request's fields, bounds and defaults: the commands'
flags are generated from it (`add_arguments`, as `EngineOptions.add_arguments` does for the engine),
and the page's form reads its JSON schema (`request_schema`, served at /api/request).
"""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

from engine.sampling import SamplingParams

# The lowest sampling temperature besides 0 (greedy). Sampling divides the logits by T before the
# softmax; the division must stay finite. At T >= 0.01 it does for every logit below 3.4e36 in
# magnitude even in float32 (float64, which sampling uses, has room to spare), and below it
# sampling is greedy in all but name: a logit gap of 0.5 is already a probability ratio of e^50.
MIN_TEMPERATURE = 0.01


# The fields every command that runs requests takes as flags; the prompt, the policy and its parameters
# each command takes its own way (one prompt, a prompt file; one policy, several).
FLAG_FIELDS = ("temperature", "top_k", "top_p", "seed", "max_new_tokens")


class GenerationRequest(BaseModel):
    # Numbers are strict (no booleans, no numeric strings) and finite: a request means what it says.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    prompt: str = Field(min_length=1, max_length=32_000, description="the user's turn (the chat template is applied)")
    policy: str | None = Field(None, description="a registered policy; None: the engine's default")
    params: dict[str, Any] = Field(default_factory=dict, description="the policy's parameters")
    temperature: float = Field(0.0, ge=0.0, le=5.0, strict=True,
                               description=f"sampling temperature: 0 is greedy; otherwise at least {MIN_TEMPERATURE}",
                               json_schema_extra={"minimumAboveZero": MIN_TEMPERATURE})
    top_k: int = Field(0, ge=0, le=100_000, strict=True, description="sample from the k likeliest tokens only; 0: all")
    top_p: float = Field(1.0, gt=0.0, le=1.0, strict=True,
                         description="sample from the smallest set of tokens holding this probability (nucleus)")
    seed: int = Field(0, ge=0, le=2**63 - 1, strict=True, description="seed of the sampling draws")
    max_new_tokens: int = Field(128, ge=1, le=8192, strict=True, description="most tokens generated")
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

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser, fields: tuple[str, ...] = FLAG_FIELDS) -> None:
        """One `--flag` per field, typed, its default and bounds stated in `--help`; the request checks the
        values (`from_args`), so a flag cannot mean anything a request could not."""
        for name in fields:
            field = cls.model_fields[name]
            parser.add_argument(f"--{name.replace('_', '-')}", type=field.annotation, default=field.default,
                                help=f"{field.description} ({_bounds(name)}; default: {field.default})")

    @classmethod
    def given_in(cls, args: argparse.Namespace, fields: tuple[str, ...] = FLAG_FIELDS) -> dict[str, Any]:
        """The request's fields a parsed command line holds (`add_arguments`' flags)."""
        return {name: getattr(args, name) for name in fields}


def _bounds(name: str) -> str:
    """A field's bounds in words, from its schema: `1 to 8192`, `above 0 to 1`."""
    prop = GenerationRequest.model_json_schema()["properties"][name]
    low = f"{prop['minimum']}" if "minimum" in prop else f"above {prop['exclusiveMinimum']}"
    return f"{low} to {prop['maximum']}"


def request_schema() -> dict[str, Any]:
    """The request's JSON schema: each field's type, bounds, default and meaning, for the page's form.
    `temperature` carries `minimumAboveZero`: 0 (greedy) or at least that."""
    return GenerationRequest.model_json_schema()
