"""The one error a user can cause, naming the field at fault.

Every layer reports a wrong input the same way: the CLI prints
`specscope: error [field]: message`, the web app sends an `error` event with
the field so the form can mark it. The subclasses only say which kind of input
was wrong; they add nothing else.
"""

from __future__ import annotations

from pydantic import ValidationError


class SpecscopeError(ValueError):
    """A wrong input; `field` names it (a request field, a parameter as `params.mu`, an option)."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class RequestError(SpecscopeError):
    """A generation request (prompt, policy, parameters, sampling, lengths) the engine cannot run."""


class LoadError(SpecscopeError):
    """A model, drafter, head or cost table that cannot be loaded as asked."""


def from_validation(err: ValidationError, prefix: str = "", skip: int = 0) -> RequestError:
    """The first problem pydantic found, as a RequestError naming its field (under `prefix`, e.g. "params.";
    `skip` drops leading location parts, such as a union's tag)."""
    first = err.errors()[0]
    field = ".".join(str(part) for part in first["loc"][skip:])
    message = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
    return RequestError(f"{field}: {message}" if field else message, field=prefix + field if field else None)
