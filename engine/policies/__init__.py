"""Tree policies, registered by name."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from engine.errors import RequestError, from_validation
from engine.policies.ar import ArPolicy
from engine.policies.base import Policy, PolicyContext
from engine.policies.cast import CastPolicy
from engine.policies.chain import ChainPolicy
from engine.policies.eagle import EaglePolicy
from engine.policies.talon import TalonPolicy
from engine.policies.talon_adaptive import TalonAdaptivePolicy

POLICIES: dict[str, type[Policy]] = {
    p.name: p for p in (ArPolicy, ChainPolicy, EaglePolicy, TalonPolicy, CastPolicy, TalonAdaptivePolicy)}


def make_policy(name: str, params: dict[str, Any] | None = None, context: PolicyContext | None = None) -> Policy:
    """Builds a registered policy from its name and (possibly string-valued) parameters;
    a RequestError names the policy or the parameter at fault."""
    if name not in POLICIES:
        raise RequestError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}", field="policy")
    cls = POLICIES[name]
    try:
        validated = cls.Params(**(params or {}))
    except ValidationError as err:
        problem = from_validation(err, prefix="params.")
        message = str(problem).replace("unknown field", "unknown parameter")
        raise RequestError(f"{name}: {message}", field=problem.field or "params") from None
    return cls(validated, context)


def policy_schemas() -> dict[str, dict[str, Any]]:
    """Each policy's parameters with defaults and bounds, for forms and docs."""
    return {name: cls.Params.model_json_schema() for name, cls in POLICIES.items()}
