"""Typed, versioned events: the one stream the CLI, the benchmark, trace files and the web app read.

Glossary (used the same way in Python, JSON and CSS):
    draft      a token proposed by a drafter
    candidate  a draft token a policy looked at in one layer of a step
    kept       a candidate the policy put in the tree
    pruned     a candidate the policy left out (reason says why)
    tree       the kept candidates under the root, sent to verify
    verify     one target forward over the whole tree
    accepted   a draft token the target agreed with
    rejected   a draft token the target evaluated and refused
    recovered  the token the target chose where it rejected every child (greedy: its argmax;
               sampling: a draw from the residual norm(max(0, p - q)))
    bonus      the target's token after a fully accepted path ending in a leaf
    step       one draft-then-verify cycle; it emits accepted tokens plus one recovered or bonus
               (none where the text ends at an accepted draft)
    τ (tau)    mean tokens emitted per step (accepted + 1)
    δ (delta)  mean draft forwards per step
    c          mean draft forward time over mean verify forward time

Schema version 2 added the acceptance walk to `verify` (what the sampling
panel draws) and the cost table's summary to `run_started`; both are optional,
so version-1 traces read unchanged. Version 3 reports a step only as far as
its text goes: where the text ends at an accepted draft (the first EOS, or
max_new_tokens), `accepted_path` and `walk` stop at that node, nodes past it
are unreached, and `emitted` is null, since no recovered or bonus token
follows; earlier traces read unchanged. Version 3 traces may also carry `byte_hex`
on candidates, tree nodes and emitted tokens: a token's raw bytes where its text
alone is not whole UTF-8 (part of an emoji or accented letter), so a reader can
decode it with the tokens around it; absent, as in earlier traces, it is None.
Version 4 adds the what-if (engine/whatif.py): one step of a run re-run under
another policy or parameters, a run of its own whose `run_started` carries
`what_if_step` and whose `run_finished` may stop with "what_if"; earlier traces
read unchanged.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter, model_serializer

from engine.acceptance import Check
from engine.policies.base import Adjustment
from engine.timing import Timings

SCHEMA_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)

Reason = Literal["topk", "threshold", "below_threshold", "budget", "depth_limit", "rerank", "cost",
                 "match"]  # match: a model-free match followed past the policy's draft budget (chain past γ)
Verdict = Literal["accepted", "rejected", "unreached"]
EmittedKind = Literal["recovered", "bonus"]
StopReason = Literal["eos", "max_new_tokens", "cancelled", "what_if"]  # what_if: its one step is done


class _Event(BaseModel):
    schema_version: Literal[READABLE_VERSIONS] = SCHEMA_VERSION
    run_id: str
    policy: str


class CostsSummary(BaseModel):
    """The cost table the run read, at the prompt's context: what a verify of n tokens costs here."""

    source: Literal["measured", "synthetic", "assumed"]  # "assumed": nothing was measured on this device
    context: int  # the measured context the times below are read at
    ns: list[int]
    target_ms: list[float]  # one target forward of n new tokens
    draft_ms: list[float]  # one draft forward of n new tokens (assumed where the drafter runs no LanguageModel)


class RunStarted(_Event):
    type: Literal["run_started"] = "run_started"
    prompt: str
    prompt_tokens: int
    params: dict[str, Any]
    drafter: str
    target: str
    draft: str | None
    device: str
    dtype: str
    seed: int
    temperature: float
    top_k: int
    top_p: float
    max_new_tokens: int
    costs: CostsSummary | None = None
    what_if_step: int | None = None  # a what-if (version 4): the one step this run re-drafts from its run's prefix


class _TokenBytes(BaseModel):
    """A token's raw bytes where its `text` alone is not whole UTF-8 (codec.byte_hex); written only
    where present, so the events of every other token read as before."""

    byte_hex: str | None = None

    @model_serializer(mode="wrap")
    def _without_absent_bytes(self, handler):
        data = handler(self)
        if data.get("byte_hex") is None:
            data.pop("byte_hex", None)
        return data


class Candidate(_TokenBytes):
    """One candidate of a draft layer and the policy's decision on it."""

    parent: int  # tree index of the parent node
    token: int
    text: str
    depth: int
    q: float  # draft probability of the token given its parent
    score: float  # cumulative path score
    source: str  # which drafter proposed it
    kept: bool
    expanded: bool  # kept and on the frontier the next layer grows from
    reason: Reason
    threshold: float | None = None  # the bar in force for this decision, if any
    node: int | None = None  # tree index when kept
    detail: dict[str, float] = Field(default_factory=dict)  # e.g. cast's utility and cost


class DraftLayer(_Event):
    type: Literal["draft_layer"] = "draft_layer"
    step: int
    depth: int
    candidates: list[Candidate]
    threshold: float | None = None  # e.g. talon's μ·m_d
    anchor: float | None = None  # e.g. talon's m_d


class TreeNode(_TokenBytes):
    node: int
    origin: int  # the node's index in the tree before rerank (as in draft_layer candidates)
    parent: int
    token: int
    text: str
    depth: int
    q: float
    score: float
    source: str


class DraftTreeDone(_Event):
    """The tree sent to verification; `pruned` lists nodes dropped at rerank (old indices)."""

    type: Literal["tree"] = "tree"
    step: int
    nodes: list[TreeNode]
    pruned: list[Candidate] = Field(default_factory=list)


class NodeVerdict(BaseModel):
    node: int
    token: int
    p: float | None  # target probability of the token at its parent (None where unreached)
    q: float
    verdict: Verdict


class EmittedToken(_TokenBytes):
    parent: int  # tree node after which the target chose it
    token: int
    text: str
    p: float
    kind: EmittedKind


class TokenOdds(BaseModel):
    token: int
    text: str
    p: float  # the target's probability
    q: float | None  # the draft's, where the drafter gave one for this token


class WalkNode(BaseModel):
    """A node the acceptance walk visited."""

    node: int
    top: list[TokenOdds]  # the target's most likely tokens here, before any rejection
    checks: list[Check]  # the acceptance walk's own records (engine/acceptance.py), children in the order tried
    residual_top: list[TokenOdds] | None = None  # what was left of p after every child was rejected (sampling)
    drawn: int | None = None  # the recovered or bonus token drawn here


class Verification(_Event):
    type: Literal["verify"] = "verify"
    step: int
    nodes: list[NodeVerdict]
    emitted: EmittedToken | None  # None where the text ended at an accepted draft (version 3)
    accepted_path: list[int]  # tree indices from the root, root included, up to the last token emitted
    walk: list[WalkNode] | None = None  # absent in version-1 traces


class TextDelta(_Event):
    type: Literal["text"] = "text"
    step: int
    tokens: list[int]
    text: str
    accepted: int  # how many of `tokens` were accepted drafts (the rest: recovered or bonus)


class StepMetrics(_Event, Timings):
    type: Literal["step_metrics"] = "step_metrics"
    step: int
    accepted: int
    emitted: int
    tree_size: int  # draft nodes verified, root excluded
    depth: int
    width: int  # the widest layer of the verified tree
    draft_forwards: int
    new_tokens: int  # total so far
    shared: int = 1  # requests whose trees this step's one target forward verified (1: alone; >1 in a batch)


class _PolicyAdjustedHeader(_Event):
    type: Literal["policy_adjusted"] = "policy_adjusted"
    step: int


class PolicyAdjusted(Adjustment, _PolicyAdjustedHeader):
    """A policy's Adjustment after a step (engine/policies/base.py), flat after the event's header (pydantic
    lays out the last base's fields first, so the JSON reads header, then adjustment, as traces always have)."""


class RunFinished(_Event, Timings):
    type: Literal["run_finished"] = "run_finished"
    text: str
    tokens: list[int]
    new_tokens: int
    steps: int
    tau: float
    delta: float
    c: float | None
    tokens_per_s: float
    wall_s: float
    stop_reason: StopReason


class RunError(_Event):
    type: Literal["error"] = "error"
    message: str
    field: str | None = None


Event = Annotated[
    Union[RunStarted, DraftLayer, DraftTreeDone, Verification, TextDelta, StepMetrics,
          PolicyAdjusted, RunFinished, RunError],
    Field(discriminator="type"),
]
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def parse_event(line: str | bytes) -> Event:
    """One event from its JSON text (a trace line or a WebSocket message)."""
    return EVENT_ADAPTER.validate_json(line)


def read_trace(path: str) -> list[Event]:
    with open(path, encoding="utf-8") as f:
        return [parse_event(line) for line in f if line.strip()]


class TraceWriter:
    """Writes events as JSON lines; usable as an emit callback."""

    def __init__(self, path: str):
        self._file = open(path, "w", encoding="utf-8")

    def __call__(self, event: BaseModel) -> None:
        self._file.write(event.model_dump_json() + "\n")

    def close(self) -> None:
        self._file.close()
