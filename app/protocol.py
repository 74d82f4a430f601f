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

from engine.errors import RequestError, from_validation
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


def parse_client_message(text: str) -> RunMessage | CancelMessage:
    """A client message, or a RequestError naming the first field that is wrong."""
    try:
        return CLIENT_ADAPTER.validate_json(text)
    except ValidationError as err:
        raise _as_request_error(err) from None


def _as_request_error(err: ValidationError) -> RequestError:
    first = err.errors()[0]
    if first["type"] == "json_invalid":
        return RequestError("malformed JSON", field=None)
    if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return RequestError("`type` must be \"run\" or \"cancel\"", field="type")
    if not first["loc"]:
        return RequestError("a message must be a JSON object", field=None)
    # A discriminated union puts the message type first in the location; the field follows it.
    return from_validation(err, skip=1 if len(first["loc"]) > 1 else 0)


def policy_named_in(text: str) -> str:
    """The policy a broken run message asked for, so its error event can say so."""
    try:
        policy = json.loads(text).get("policy", "")
    except (ValueError, AttributeError):
        return ""
    return policy if isinstance(policy, str) else ""


def error_event(message: str, field: str | None = None, policy: str = "", run_id: str = "") -> RunError:
    """An error event for a problem found before the engine started a run (so no run id yet)."""
    return RunError(run_id=run_id, policy=policy, message=message, field=field)
