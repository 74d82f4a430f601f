"""Tree policies, registered by name."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from engine.policies.ar import ArPolicy
from engine.policies.base import Policy
from engine.policies.cast import CastPolicy
from engine.policies.chain import ChainPolicy
from engine.policies.eagle import EaglePolicy
from engine.policies.talon import TalonPolicy
from engine.policies.talon_adaptive import TalonAdaptivePolicy

POLICIES: dict[str, type[Policy]] = {
    p.name: p for p in (ArPolicy, ChainPolicy, EaglePolicy, TalonPolicy, CastPolicy, TalonAdaptivePolicy)}


class PolicyError(ValueError):
    """A policy name or parameter a user got wrong; `field` names it."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


def make_policy(name: str, params: dict[str, Any] | None = None, context: dict[str, Any] | None = None) -> Policy:
    """Builds a registered policy from its name and (possibly string-valued) parameters."""
    if name not in POLICIES:
        raise PolicyError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}", field="policy")
    cls = POLICIES[name]
    try:
        validated = cls.Params(**(params or {}))
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "params"
        message = "unknown parameter" if first["type"] == "extra_forbidden" else first["msg"]
        raise PolicyError(f"{name}: {field}: {message}", field=f"params.{field}") from None
    return cls(validated, context)


def policy_schemas() -> dict[str, dict[str, Any]]:
    """Each policy's parameters as JSON schema (defaults, bounds, each parameter's meaning), for forms and
    docs; the schema's own `description` is the policy's one line."""
    return {name: {**cls.Params.model_json_schema(), "description": cls.description} for name, cls in POLICIES.items()}
