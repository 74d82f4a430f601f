"""`suffix`: model-free drafting from the longest earlier match of the text, in the spirit of SuffixDecoding.

The prompt and the output so far are indexed by a suffix automaton (`SuffixIndex`),
extended by every committed token. For a tree node, the text up to it (the context
and the path from the root) is matched against the index: the longest suffix of it
that occurred before *and was followed by something* is the node's match, of length
L, and the tokens that followed its occurrences are the node's children, each with
its empirical frequency. Following a child extends the match by one token, so a
copied passage yields a chain as deep as the copy, one layer per token, at no model
forward (δ counts none of it).

A frequency is not an acceptance probability: one earlier occurrence gives
frequency 1 whether the match is one token long or forty. So q = trust(L) ×
frequency, where trust(L) is the share of this drafter's candidates the target has
accepted at that match length in this request (a Beta prior whose mean rises with L,
buckets 1, 2–3, 4–7, 8–15, 16–31, 32+): long matches earn deep paths in a budgeted
tree because copies of that length were accepted, short ones stay modest.

Beside the request's own index the drafter reads a suffix memory of earlier
requests (engine/drafters/memory.py) when the engine hands it one: each node's
match is the longer of the two, its children are tagged `memory` when they come
from earlier requests, and each source earns its own trust. A node drafts no
deeper than its match is long (SuffixDecoding's adaptive speculation length,
α = 1): along a copy the match grows one token per layer, so this only stops
branches whose match began below the root and is still short.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from engine.drafters.base import Drafter, Proposal
from engine.drafters.suffix_index import SuffixIndex
from engine.sampling import SamplingParams
from engine.tree import DraftTree

if TYPE_CHECKING:
    from engine.drafters.memory import SuffixMemory

BUCKET_FLOORS = (1, 2, 4, 8, 16, 32)  # match lengths at which trust buckets begin
# Prior acceptance of a candidate in each bucket: how often the most frequent follower was the target's next
# token in 400 of the target's greedy answers (the shipped head's selfdistill-ids.npz): 0.24, 0.59, 0.77, 0.91,
# 0.92, 0.99 by bucket, rounded down where few matches were that long.
PRIOR_TRUST = (0.25, 0.55, 0.75, 0.9, 0.92, 0.95)
PRIOR_WEIGHT = 6.0  # pseudo-candidates behind each prior
SPEC_FACTOR = 1.0  # a node drafts children only while its depth + 1 ≤ SPEC_FACTOR × its match length
MEMORY = "memory"  # the source of candidates drawn from earlier requests


class TrustByLength:
    """Accepted share of evaluated candidates per match-length bucket, with a prior rising with length.

    >>> trust = TrustByLength(); round(trust(1), 2), round(trust(40), 2)
    (0.25, 0.95)
    >>> trust.record(40, accepted=False); round(trust(40), 2)  # (0.95·6 + 0) / (6 + 1)
    0.81
    """

    def __init__(self) -> None:
        self.tried = [0] * len(BUCKET_FLOORS)
        self.accepted = [0] * len(BUCKET_FLOORS)

    @staticmethod
    def bucket(length: int) -> int:
        return max(b for b, floor in enumerate(BUCKET_FLOORS) if length >= floor)

    def __call__(self, length: int) -> float:
        b = self.bucket(length)
        return (self.accepted[b] + PRIOR_WEIGHT * PRIOR_TRUST[b]) / (self.tried[b] + PRIOR_WEIGHT)

    def record(self, length: int, accepted: bool) -> None:
        b = self.bucket(length)
        self.tried[b] += 1
        self.accepted[b] += accepted


class SuffixDrafter(Drafter):
    name = "suffix"

    def __init__(self) -> None:
        super().__init__()
        self.memory: SuffixMemory | None = None
        self.index = SuffixIndex()
        self.tokens: list[int] = []  # the request's context: prompt, then every emitted token
        self.trust = TrustByLength()  # of matches in the request's own text
        self.memory_trust = TrustByLength()  # of matches in earlier requests
        self._states: dict[int, tuple[tuple[int, int], ...]] = {}  # tree node -> (state, length) per index
        self._memory_end = (0, 0)  # the request's text matched in the memory's index

    def session(self) -> "SuffixDrafter":
        return SuffixDrafter()

    def use_memory(self, memory: SuffixMemory | None) -> None:
        self.memory = memory

    @property
    def indexes(self) -> tuple[tuple[str, SuffixIndex], ...]:
        """(source, index) to match in: the request's own text, then earlier requests' if remembered."""
        own = ((self.name, self.index),)
        return own + ((MEMORY, self.memory.index),) if self.memory is not None else own

    def start(self, context: list[int], features: torch.Tensor | None = None) -> None:
        self.index = SuffixIndex()
        self.index.extend_all(context)
        self.tokens = list(context)
        self._memory_end = self._walk_memory((0, 0), context)
        self.trust, self.memory_trust = TrustByLength(), TrustByLength()
        self._states = {}

    def propose(self, tree: DraftTree, frontier: list[int], k: int, sample: bool,
                sampling: SamplingParams, generator: torch.Generator) -> list[Proposal]:
        """The k most frequent followers of each node's match; nodes without a match, or deeper than
        their match is long, get none. Children are chosen deterministically even when sampling (a
        point mass is lossless)."""
        proposals = []
        for node in frontier:
            source, length, followers = self.best_match(tree, node)
            if not followers or tree.depth[node] + 1 > SPEC_FACTOR * length:
                continue
            best = sorted(followers.items(), key=lambda item: (-item[1], item[0]))[:max(k, 0)]
            total = sum(followers.values())
            trust = self.trust_of(source)(length)
            proposals.append(Proposal(node=node, token=[t for t, _ in best], q=[trust * c / total for _, c in best],
                                      source=source, grows_free=True))
        return proposals

    def free_proposals(self, tree: DraftTree, frontier: list[int], k: int) -> list[Proposal]:
        """Every proposal is free: no model runs."""
        return self.propose(tree, frontier, k, False, SamplingParams(), torch.Generator())

    def match(self, tree: DraftTree, node: int) -> tuple[int, dict[int, int]]:
        """The node's match length and its followers {token: occurrences}: the longest over the indexes."""
        return self.best_match(tree, node)[1:]

    def best_match(self, tree: DraftTree, node: int) -> tuple[str, int, dict[int, int]]:
        """(source, length, followers) of the node's longest match; the request's own text wins a tie."""
        best: tuple[str, int, dict[int, int]] = (self.name, 0, {})
        for (source, index), (state, length) in zip(self.indexes, self._state(tree, node)):
            found = index.followers(state, length)
            if found[0] > best[1]:
                best = (source, *found)
        return best

    def trust_of(self, source: str) -> TrustByLength:
        return self.memory_trust if source == MEMORY else self.trust

    def _state(self, tree: DraftTree, node: int) -> tuple[tuple[int, int], ...]:
        """Each index's (state, length) for the text up to `node`, walked from the nearest known ancestor."""
        if node in self._states:
            return self._states[node]
        if node == 0:
            states = (self.index.end(), self._memory_end)[:len(self.indexes)]
        else:
            token = tree.token[node]
            states = tuple(index.step(state, length, token)
                           for (_, index), (state, length) in zip(self.indexes, self._state(tree, tree.parent[node])))
        self._states[node] = states
        return states

    def commit(self, tree: DraftTree, accepted_path: list[int], emitted: list[int],
               features: torch.Tensor | None = None) -> None:
        self._states = {}  # the verified tree may be reindexed from the drafted one: walk it afresh
        self.learn(tree, accepted_path)
        self.index.extend_all(emitted)
        self.tokens.extend(emitted)
        self._memory_end = self._walk_memory(self._memory_end, emitted)
        self._states = {}

    def _walk_memory(self, state: tuple[int, int], tokens: list[int]) -> tuple[int, int]:
        if self.memory is None:
            return state
        for token in tokens:
            state = self.memory.index.step(*state, token)
        return state

    def learn(self, tree: DraftTree, accepted_path: list[int]) -> None:
        """Counts this drafter's candidates the target evaluated (their parent was accepted), by source and
        match length."""
        on_path = set(accepted_path)
        for child in range(1, len(tree)):
            parent = tree.parent[child]
            if parent in on_path and {self.name, MEMORY} & set(tree.source[child].split("+")):
                source, length, _ = self.best_match(tree, parent)
                self.trust_of(source).record(length, child in on_path)
