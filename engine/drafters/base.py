"""The drafter interface: children for a frontier of tree nodes, state kept in step with the tree.

A drafter sees the request's context (prompt and generated tokens, the
tree's root being its last token), proposes children for any frontier of the
current step's tree, and is told after verification which path was accepted
and which token the target emitted, so its own state (KV cache, n-gram
index, hidden states) follows the accepted path exactly as the target's does.
A drafter counts and times its own model forwards in its `meter`; the engine
only reads it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from engine.sampling import SamplingParams
from engine.timing import ForwardMeter
from engine.tree import DraftTree

if TYPE_CHECKING:
    from engine.drafters.memory import SuffixMemory


@dataclass
class Proposal:
    """Children proposed for one frontier node, best first."""

    node: int  # tree index of the frontier node
    token: list[int]
    q: list[float]  # draft probability of each child given the node
    source: str
    sampled: bool = False  # drawn from q_dist without replacement, listed in draw order, rather than chosen
    q_dist: torch.Tensor | None = None  # [V] draft distribution at the node; required when sampled
    # The children's own children come without a model forward: the drafter keeps no model state below them
    # (a model-free drafter's, or a hybrid's text match where its head did not run). A cost-aware policy
    # prices growing them at no forward (engine/policies/cast.py).
    grows_free: bool = False


class DraftForward(ABC):
    """A model forward a drafter is about to run for a frontier, handed out before `propose` so that a batch
    (engine/batch.py) runs several requests' forwards in one call; each stores its own results in its drafter,
    where `propose` then finds them."""

    key: object  # forwards with equal keys (the same model's weights) can run in one call

    @classmethod
    @abstractmethod
    def run_together(cls, forwards: list["DraftForward"]) -> None:
        """Runs forwards of one key, in as few calls as they fit, each getting what a call of its own gives."""


def run_draft_forwards(forwards: list[DraftForward]) -> None:
    """Runs the forwards, those of one kind and key together."""
    groups: dict[tuple[type, object], list[DraftForward]] = {}
    for forward in forwards:
        groups.setdefault((type(forward), forward.key), []).append(forward)
    for (kind, _), group in groups.items():
        kind.run_together(group)


class Drafter(ABC):
    name: str
    model_name: str | None = None
    # Target layers whose inputs a feature-level drafter (an EAGLE-3 head) reads; the engine
    # then hands it those hidden states, concatenated, for every token the target has processed.
    feature_layers: tuple[int, ...] = ()

    def __init__(self, meter: ForwardMeter | None = None) -> None:
        self.meter = meter or ForwardMeter()  # a drafter built on another shares that one's meter

    @abstractmethod
    def start(self, context: list[int], features: torch.Tensor | None = None) -> None:
        """Begins a request; `context` is the prompt's token ids, the root last.

        `features` [len(context) - 1, F]: the target's features for every context token but the
        root (only when `feature_layers` is set)."""

    def session(self) -> "Drafter":
        """A drafter like this one (its models, its settings) with state of its own, for another request
        drafted in the same batch (engine/batch.py): model weights are shared, caches and indexes are not."""
        raise NotImplementedError(f"the {self.name} drafter does not draft for a batch")

    def use_memory(self, memory: "SuffixMemory | None") -> None:
        """Hands a drafter that drafts from earlier requests the memory of this run's scope (None: none);
        the others ignore it. Called before `start`."""

    @abstractmethod
    def propose(self, tree: DraftTree, frontier: list[int], k: int, sample: bool,
                sampling: SamplingParams, generator: torch.Generator) -> list[Proposal]:
        """Up to k children for each frontier node (nodes may get none)."""

    def draft_forward(self, tree: DraftTree, frontier: list[int], line: int = 0) -> DraftForward | None:
        """The model forward `propose` would run for this frontier, to run first, perhaps with other requests'
        (`run_draft_forwards`); None where there is none to hand out (a model-free drafter, one whose forwards
        do not batch, or nothing left to run): `propose` then does what it needs itself. `line`, at the root:
        the layers below it the policy will grow as one line of top-1 children (`Policy.line_ahead`), which a
        drafter may run in the root's forward (the head does, engine/drafters/eagle_head.py)."""
        return None

    def free_proposals(self, tree: DraftTree, frontier: list[int], k: int) -> list[Proposal]:
        """Children that cost no model forward and that the drafter vouches for following (the
        continuation of a text match), for a layer past a policy's model budget; none by default."""
        return []

    @abstractmethod
    def commit(self, tree: DraftTree, accepted_path: list[int], emitted: list[int],
               features: torch.Tensor | None = None) -> None:
        """Follows verification: `accepted_path` are tree indices from the root;
        `emitted` are the tokens appended to the context (accepted drafts, then
        the recovered or bonus token, which is the next root).

        `features` [len(accepted_path), F]: the target's features at the accepted path's nodes
        (only when `feature_layers` is set)."""
