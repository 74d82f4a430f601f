"""What-if: one step of a run re-drafted and re-verified from the same prefix, under another policy or parameters.

A what-if names the run's request (prompt, sampling, seed, max_new_tokens) with
the policy and parameters to try, the step to re-run and the tokens the run had
emitted before it (`prefix`). The engine (SpecEngine.what_if) prefills the
prompt and that prefix, starts the drafter on that context, and runs exactly one
step, which it reports with the ordinary events (`draft_layer`, `tree`,
`verify`, `text`, `step_metrics`, each carrying the step's number) between a
`run_started` whose `what_if_step` says so and a `run_finished` whose
`stop_reason` is "what_if" (or "eos" / "max_new_tokens" where that step ends
the text). Nothing of the original run is touched: the what-if is a run of its
own, taking its turn for the model like any other.

What starts fresh, as at any run's start: a drafter's state built during the
run (the suffix drafter's trust in its matches, an EAGLE head's features,
which are the prefill's rather than the verify forwards'), an adaptive policy's
state (talon-adaptive's budget and μ, cast's measured costs) and, when
sampling, the random draws. Greedy, with the run's own policy and parameters,
the step drafts and verifies as it did in the run.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from engine.errors import RequestError
from engine.request import GenerationRequest

TokenId = Annotated[int, Field(ge=0, strict=True)]


class WhatIfRequest(GenerationRequest):
    """A GenerationRequest (the policy and parameters to try, the run's prompt and sampling) plus where to try it."""

    step: int = Field(ge=1, le=8192, strict=True, description="the run's step to re-run; its events carry this number")
    prefix: list[TokenId] = Field(default_factory=list, max_length=8192,
                                  description="the token ids the run emitted before that step, in order")

    @field_validator("prefix")
    @classmethod
    def _prefix_fits_the_step(cls, prefix: list[int], info: ValidationInfo) -> list[int]:
        limit, step = info.data.get("max_new_tokens"), info.data.get("step")
        if limit is not None and len(prefix) >= limit:
            raise PydanticCustomError(
                "prefix_too_long", "holds {n} tokens: a step after them would pass max_new_tokens {limit}",
                {"n": len(prefix), "limit": limit})
        if step is not None and len(prefix) < step - 1:  # every step but a run's last emits at least one token
            raise PydanticCustomError(
                "prefix_too_short", "holds {n} tokens, but the {before} steps before step {step} emitted at least "
                "{before}", {"n": len(prefix), "before": step - 1, "step": step})
        return prefix


def check_prefix(prefix: list[int], vocab_size: int) -> None:
    """Every prefix token must be one of the model's: a RequestError names the field."""
    for i, token in enumerate(prefix):
        if token >= vocab_size:
            raise RequestError(f"token {token} at position {i} is not in the model's vocabulary of {vocab_size}",
                               field=f"prefix.{i}")
