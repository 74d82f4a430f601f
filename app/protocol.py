"""The WebSocket protocol, typed both ways (docs/websocket.md describes it for humans).

Client -> server: a `run` message (a GenerationRequest plus `type`) or a `cancel`.
Server -> client: the engine's events for the run, in order, plus `queued`
while the run waits for the model and `detail_dropped` when a client that fell
behind stops getting per-candidate events. Every problem with a client message
comes back as an engine `error` event naming the field, so a client has one
error shape to read.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from engine.events import RunError
from engine.policies import POLICIES
from engine.request import GenerationRequest


class RunMessage(GenerationRequest):
    type: Literal["run"]

    def to_request(self) -> GenerationRequest:
        return GenerationRequest(**self.model_dump(exclude={"type"}))


class CancelMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["cancel"]


ClientMessage = Annotated[Union[RunMessage, CancelMessage], Field(discriminator="type")]
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


class ClientMessageError(ValueError):
    def __init__(self, message: str, field: str | None, policy: str = ""):
        super().__init__(message)
        self.field = field
        self.policy = policy


def parse_client_message(text: str) -> RunMessage | CancelMessage:
    """A client message, or ClientMessageError naming the first field that is wrong."""
    try:
        message = CLIENT_ADAPTER.validate_json(text)
    except ValidationError as err:
        raise _as_client_error(err, text) from None
    if isinstance(message, RunMessage):
        _check_params_strictly(message)
    return message


def _as_client_error(err: ValidationError, text: str) -> ClientMessageError:
    first = err.errors()[0]
    if first["type"] in ("json_invalid", "string_unicode"):
        return _json_problem(first["msg"], text)
    # A discriminated union puts the message type first in the location; the field follows it.
    loc = [str(part) for part in first["loc"]]
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return ClientMessageError("`type` must be \"run\" or \"cancel\"", field="type")
    if not loc:
        return ClientMessageError("a message must be a JSON object", field=None)
    field = ".".join(loc[1:]) if len(loc) > 1 else (loc[0] if loc else None)
    message = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
    return ClientMessageError(f"{field}: {message}", field=field, policy=_policy_of(text))


def _json_problem(parser_message: str, text: str) -> ClientMessageError:
    """The JSON parser's complaint in words a client can act on, ending with the line and column.

    Our parser refuses escapes of lone surrogates (`"\\ud800"`); Python's json reads them, which
    lets the message name the string that holds one."""
    where = parser_message.removeprefix("Invalid JSON: ").removeprefix("Input should be a valid string, ")
    if "recursion limit" in where:
        return ClientMessageError(f"JSON nested too deeply ({where})", field=None)
    try:
        lenient = json.loads(text)
    except (ValueError, RecursionError):
        return ClientMessageError(f"malformed JSON: {where}", field=None)
    path = _path_to_lone_surrogate(lenient)
    if path is None:
        return ClientMessageError(f"malformed JSON: {where}", field=None)
    field = ".".join(path) or None
    return ClientMessageError(f"{field or 'a key'}: holds a lone surrogate (U+D800 to U+DFFF without its pair); "
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


def _check_params_strictly(message: RunMessage) -> None:
    """Policy parameters from a client are JSON values: numbers must be finite numbers, never booleans or
    strings (the CLI's `--param key=value` strings are parsed by the engine, leniently)."""
    cls = POLICIES.get(message.policy)
    if cls is None:
        return  # the engine's check names the unknown policy
    for name, value in message.params.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ClientMessageError(f"{message.policy}: {name}: Input should be a finite number",
                                     field=f"params.{name}", policy=message.policy)
    try:
        cls.Params.model_validate(message.params, strict=True)
    except ValidationError as err:
        first = err.errors()[0]
        name = ".".join(str(part) for part in first["loc"]) or "params"
        problem = "unknown parameter" if first["type"] == "extra_forbidden" else first["msg"]
        raise ClientMessageError(f"{message.policy}: {name}: {problem}", field=f"params.{name}",
                                 policy=message.policy) from None


def _policy_of(text: str) -> str:
    """The policy a broken run message asked for, so its error event can say so."""
    try:
        policy = json.loads(text).get("policy", "")
    except (ValueError, AttributeError):
        return ""
    return policy if isinstance(policy, str) else ""


def error_event(message: str, field: str | None = None, policy: str = "", run_id: str = "") -> RunError:
    """An error event for a problem found before the engine started a run (so no run id yet)."""
    return RunError(run_id=run_id, policy=policy, message=message, field=field)
