"""The WebSocket protocol, typed both ways (docs/websocket.md describes it for humans).

Client -> server: a `run` message (a GenerationRequest plus `type`) or a `cancel`.
Server -> client: the engine's events for the run, in order, plus `queued`
while the run waits for the model. Every problem with a client message comes
back as an engine `error` event naming the field, so a client has one error
shape to read.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from engine.events import RunError
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


class ClientMessageError(ValueError):
    def __init__(self, message: str, field: str | None, policy: str = ""):
        super().__init__(message)
        self.field = field
        self.policy = policy


def parse_client_message(text: str) -> RunMessage | CancelMessage:
    """A client message, or ClientMessageError naming the first field that is wrong."""
    try:
        return CLIENT_ADAPTER.validate_json(text)
    except ValidationError as err:
        raise _as_client_error(err, text) from None


def _as_client_error(err: ValidationError, text: str) -> ClientMessageError:
    first = err.errors()[0]
    if first["type"] == "json_invalid":
        return ClientMessageError("malformed JSON", field=None)
    # A discriminated union puts the message type first in the location; the field follows it.
    loc = [str(part) for part in first["loc"]]
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return ClientMessageError("`type` must be \"run\" or \"cancel\"", field="type")
    if not loc:
        return ClientMessageError("a message must be a JSON object", field=None)
    field = ".".join(loc[1:]) if len(loc) > 1 else (loc[0] if loc else None)
    message = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
    return ClientMessageError(f"{field}: {message}", field=field, policy=_policy_of(text))


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
