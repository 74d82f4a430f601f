"""A policy with parameters as text, `talon:mu=0.05:budget=30`, and the one check of a policy's parameters.

The grammar is the bench's column and the page's link pane: the policy's name, then `key=value`
pairs after colons; `--param key=value` is one such pair. Values stay text here: `check_params`
reads them as the policy's schema types, the same way wherever the text came from (the command
line, a bench column, a link).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from engine.errors import RequestError, from_validation
from engine.policies.base import Policy, PolicyParams


def parse_pair(pair: str) -> tuple[str, str] | None:
    """`key=value` -> (key, value), both stripped; None where there is no `=` or no key.

    >>> parse_pair(" mu = 0.05 "), parse_pair("mu"), parse_pair("=1")
    (('mu', '0.05'), None, None)
    """
    key, sep, value = pair.partition("=")
    return (key.strip(), value.strip()) if sep and key.strip() else None


def parse_params(pairs: list[str], field: str = "params", where: str = "--param expects key=value") -> dict[str, str]:
    """`--param key=value` flags as text parameters; a RequestError names the pair that is no pair (`where`
    says what was being read)."""
    params = {}
    for pair in pairs:
        parsed = parse_pair(pair)
        if parsed is None:
            raise RequestError(f"{where}, got {pair!r}", field=field)
        params[parsed[0]] = parsed[1]
    return params


@dataclass(frozen=True)
class PolicySpec:
    """A policy and its text parameters, written `name:key=value:key=value` (`label` is the text as written)."""

    label: str
    policy: str
    params: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, field: str = "policies") -> "PolicySpec":
        """The grammar only: whether the name is a policy is `check_params`'s (or the caller's) to say.

        >>> PolicySpec.parse("talon:mu=0.05:budget=30").params
        {'mu': '0.05', 'budget': '30'}
        """
        name, *pairs = text.strip().split(":")
        params = parse_params(pairs, field, where=f"{text!r}: expected key=value after ':'")
        return cls(label=text.strip(), policy=name.strip(), params=params)


def check_params(policy: type[Policy], params: dict[str, Any], text: bool = False) -> PolicyParams:
    """The one check of a policy's parameters: its `Params` model's bounds and rules, finite numbers only.

    JSON values (a page's run message, `text=False`) are taken strictly: a number is a number, never a
    boolean or a string. With `text=True` a string value is text to read as its field's type, as
    `--param mu=0.05` and `talon:mu=0.05` write it. A RequestError names the parameter at fault."""
    for name, value in params.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise RequestError(f"{policy.name}: {name}: Input should be a finite number", field=f"params.{name}")
    try:
        validated = policy.Params.model_validate(params, strict=not text)
    except ValidationError as err:
        problem = from_validation(err, prefix="params.")
        message = str(problem).replace("unknown field", "unknown parameter")
        raise RequestError(f"{policy.name}: {message}", field=problem.field or "params") from None
    for name, value in validated:
        if isinstance(value, float) and not math.isfinite(value):  # text such as "inf"
            raise RequestError(f"{policy.name}: {name}: Input should be a finite number", field=f"params.{name}")
    return validated
