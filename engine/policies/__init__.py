"""Tree policies, registered by name."""

from __future__ import annotations

from typing import Any

from engine.errors import RequestError
from engine.policies.ar import ArPolicy
from engine.policies.base import Policy, PolicyContext, PolicyParams
from engine.policies.cast import CastPolicy
from engine.policies.chain import ChainPolicy
from engine.policies.eagle import EaglePolicy
from engine.policies.spec import PolicySpec, check_params, parse_params
from engine.policies.talon import TalonPolicy
from engine.policies.talon_adaptive import TalonAdaptivePolicy

POLICIES: dict[str, type[Policy]] = {
    p.name: p for p in (ArPolicy, ChainPolicy, EaglePolicy, TalonPolicy, CastPolicy, TalonAdaptivePolicy)}

# The default where the cost table records no measured fastest policy (it says so); an engine's
# `default_policy` is the measured one, and the page reads that from /api/info.
DEFAULT_POLICY = TalonPolicy.name

__all__ = ["DEFAULT_POLICY", "POLICIES", "Policy", "PolicyContext", "PolicySpec", "check_params", "make_policy", "parse_params",
           "policy_class", "policy_params", "policy_schemas"]


def policy_class(name: str) -> type[Policy]:
    """A registered policy; a RequestError lists the registered ones."""
    if name not in POLICIES:
        raise RequestError(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}", field="policy")
    return POLICIES[name]


def policy_params(name: str, params: dict[str, Any] | None = None, text: bool = True) -> PolicyParams:
    """A registered policy's parameters, checked (engine/policies/spec.py check_params); `text`: string
    values are text to read, as the command line, bench columns and links write them."""
    return check_params(policy_class(name), params or {}, text=text)


def make_policy(name: str, params: dict[str, Any] | None = None, context: PolicyContext | None = None) -> Policy:
    """Builds a registered policy from its name and (possibly string-valued) parameters;
    a RequestError names the policy or the parameter at fault."""
    return policy_class(name)(policy_params(name, params), context)


def policy_schemas() -> dict[str, dict[str, Any]]:
    """Each policy's parameters as JSON schema (defaults, bounds, each parameter's meaning), for forms and
    docs; the schema's own `description` is the policy's one line and `presentation` how a page shows it:
    its title, whether it drafts (the baseline does not), whether every step ends in a rerank, and the
    papers' symbols of its main parameters."""
    return {name: {**cls.Params.model_json_schema(), "description": cls.description,
                   "presentation": {"title": cls.title, "drafts": cls.drafts, "reranks": cls.reranks,
                                    "symbols": dict(cls.symbols)}}
            for name, cls in POLICIES.items()}
