"""The WebSocket protocol, typed both ways (docs/websocket.md describes it for humans).

Client -> server: a `run` message (a GenerationRequest plus `type`), a `what_if` (one step of a run
re-run under another policy or parameters: engine/whatif.py's WhatIfRequest plus `type`) or a `cancel`.
Server -> client: the engine's events for the run, in order, plus `queued`
while the run waits for the model and `detail_dropped` when a client that fell
behind stops getting per-candidate events. Every problem with a client message
comes back as an engine `error` event naming the field, so a client has one
error shape to read.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from engine.errors import RequestError, from_validation
from engine.events import RunError
from engine.policies import POLICIES, policy_params
from engine.request import GenerationRequest
from engine.whatif import WhatIfRequest


class RunMessage(GenerationRequest):
    type: Literal["run"]

    def to_request(self) -> GenerationRequest:
        return GenerationRequest(**self.model_dump(exclude={"type"}))


class WhatIfMessage(WhatIfRequest):
    type: Literal["what_if"]

    def to_request(self) -> WhatIfRequest:
        return WhatIfRequest(**self.model_dump(exclude={"type"}))


class CancelMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["cancel"]


ClientMessage = Annotated[Union[RunMessage, WhatIfMessage, CancelMessage], Field(discriminator="type")]
CLIENT_ADAPTER: TypeAdapter[ClientMessage] = TypeAdapter(ClientMessage)


class Queued(BaseModel):
    """The run waits for the model; `position` 1 means it goes next."""

    type: Literal["queued"] = "queued"
    position: int = Field(ge=1)


class DetailDropped(BaseModel):
    """The client fell behind: the per-candidate events (`draft_layer`, `tree`, `verify`) of `step`
    may be incomplete and later steps of the run send none; text and step summaries go on."""

    type: Literal["detail_dropped"] = "detail_dropped"
    run_id: str
    step: int
    message: str


def parse_client_message(text: str) -> RunMessage | WhatIfMessage | CancelMessage:
    """A client message, or a RequestError naming the first field that is wrong."""
    try:
        return CLIENT_ADAPTER.validate_json(text)
    except ValidationError as err:
        raise _as_request_error(err, text) from None


def _as_request_error(err: ValidationError, text: str) -> RequestError:
    first = err.errors()[0]
    if first["type"] in ("json_invalid", "string_unicode"):
        return _json_problem(first["msg"], text)
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return RequestError("`type` must be \"run\", \"what_if\" or \"cancel\"", field="type")
    if not first["loc"]:
        return RequestError("a message must be a JSON object", field=None)
    # A discriminated union puts the message type first in the location; the field follows it.
    return from_validation(err, skip=1 if len(first["loc"]) > 1 else 0)


def _json_problem(parser_message: str, text: str) -> RequestError:
    """The JSON parser's complaint in words a client can act on, ending with the line and column.

    Our parser refuses escapes of lone surrogates (`"\\ud800"`); Python's json reads them, which
    lets the message name the string that holds one."""
    where = parser_message.removeprefix("Invalid JSON: ").removeprefix("Input should be a valid string, ")
    if "recursion limit" in where:
        return RequestError(f"JSON nested too deeply ({where})", field=None)
    try:
        lenient = json.loads(text)
    except (ValueError, RecursionError):
        return RequestError(f"malformed JSON: {where}", field=None)
    path = _path_to_lone_surrogate(lenient)
    if path is None:
        return RequestError(f"malformed JSON: {where}", field=None)
    field = ".".join(path) or None
    return RequestError(f"{field or 'a key'}: holds a lone surrogate (U+D800 to U+DFFF without its pair); "
                        f"text must be valid Unicode", field=field)


def _path_to_lone_surrogate(value: object, path: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    if isinstance(value, str):
        return path if any("\ud800" <= char <= "\udfff" for char in value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and _path_to_lone_surrogate(key) is not None:
            return path
        found = _path_to_lone_surrogate(item, (*path, str(key)))
        if found is not None:
            return found
    return None


def check_params_strictly(policy: str, params: dict[str, Any]) -> None:
    """Policy parameters from a client are JSON values, checked strictly (the policies' one check,
    engine/policies/spec.py: finite numbers, never booleans or strings). Raises a RequestError naming
    the parameter; an unknown policy is left to the engine's check to name."""
    if policy in POLICIES:
        policy_params(policy, params, text=False)


def policy_named_in(text: str) -> str:
    """The policy a broken run message asked for, so its error event can say so."""
    try:
        policy = json.loads(text).get("policy", "")
    except (ValueError, AttributeError, RecursionError):
        return ""
    return policy if isinstance(policy, str) else ""


def error_event(message: str, field: str | None = None, policy: str = "", run_id: str = "") -> RunError:
    """An error event for a problem found before the engine started a run (so no run id yet)."""
    return RunError(run_id=run_id, policy=policy, message=message, field=field)
