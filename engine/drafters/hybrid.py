"""`hybrid`: one tree whose candidates come from the EAGLE-3 head and from the suffix drafter together.

The suffix drafter (engine/drafters/suffix.py) proposes the tokens that followed
the node's longest earlier match; the head proposes its top-k. Candidates are
pooled per node and each records who proposed it ("head", "suffix", or
"head+suffix" when both did; "memory" for a match in earlier requests), so the web
app can colour by source.

Policies gate on q, so a match's candidate carries the larger of the head's own
probability for that token and the suffix drafter's q, its empirical frequency
times the acceptance that matches of its length have earned in this request: a
copy the head already believes keeps the head's confidence, and a copy the head
missed is trusted as much as copies of that length have been accepted.

A long match must not be crowded out, nor pay for the head at every token. Where
the match is confident (its best candidate's q ≥ `copy_q`), the head is not run
at that node: its children are the match's alone, and the head has no state to
continue from below it, so the branch stays a copy until the match ends. Deep in a
verbatim copy a layer then costs no head forward at all (δ does not grow), and the
copy's path score, not the head's alternatives, decides how deep it is drafted. Such a
match's proposals say so (`Proposal.grows_free`, as the suffix drafter's all do), so a
cost-aware policy prices deepening the copy at its bookkeeping, not at a head forward.
"""

from __future__ import annotations

import torch

from engine.drafters.base import Drafter, Proposal
from engine.drafters.eagle_head import EagleHeadDrafter, HeadForward
from engine.drafters.memory import SuffixMemory
from engine.drafters.suffix import SuffixDrafter
from engine.models.device import inference
from engine.sampling import SamplingParams
from engine.tree import DraftTree

MATCH = SuffixDrafter.name  # the source of a match in the request's own text ("memory": in earlier requests)


class HybridDrafter(Drafter):
    name = "hybrid"

    def __init__(self, head: EagleHeadDrafter, suffix: SuffixDrafter | None = None, match_children: int = 2,
                 copy_q: float = 0.8):
        super().__init__(meter=head.meter)  # only the head runs a model
        self.head = head
        self.suffix = suffix or SuffixDrafter()
        self.model_name = head.model_name
        self.feature_layers = head.feature_layers
        self.match_children = match_children
        self.copy_q = copy_q
        self._modelled: set[int] = set()  # nodes the head ran this step: only their children can run it
        self._planned: tuple | None = None  # (tree, its size, frontier, matches, nodes the head runs at)

    def session(self) -> "HybridDrafter":
        return HybridDrafter(self.head.session(), self.suffix.session(), self.match_children, self.copy_q)

    def use_memory(self, memory: SuffixMemory | None) -> None:
        self.suffix.use_memory(memory)

    def start(self, context: list[int], features: torch.Tensor | None = None) -> None:
        self.head.start(context, features)
        self.suffix.start(context)
        self._modelled = set()

    def draft_forward(self, tree: DraftTree, frontier: list[int], line: int = 0) -> HeadForward | None:
        _, modelled = self._plan(tree, frontier)
        return self.head.draft_forward(tree, modelled, line) if modelled else None

    def _plan(self, tree: DraftTree, frontier: list[int]) -> tuple[dict[int, Proposal], list[int]]:
        """The frontier's matches and the nodes the head runs at; `draft_forward` plans what `propose` then
        does, so it is planned once (the matches are the suffix drafter's greedy ones: no draw)."""
        planned = self._planned
        if planned is not None and planned[0] is tree and planned[1] == len(tree) and planned[2] == frontier:
            return planned[3], planned[4]
        matches = {p.node: p for p in self.suffix.propose(tree, frontier, self.match_children, False,
                                                          SamplingParams(), None)}
        modelled = [node for node in frontier if self._runs_head(tree, node, matches.get(node))]
        self._planned = (tree, len(tree), list(frontier), matches, modelled)
        return matches, modelled

    @inference
    def propose(self, tree: DraftTree, frontier: list[int], k: int, sample: bool,
                sampling: SamplingParams, generator: torch.Generator) -> list[Proposal]:
        matches, modelled = self._plan(tree, frontier)
        self._planned = None
        heads = {p.node: p for p in self.head.propose(tree, modelled, k, sample, sampling, generator)} \
            if modelled else {}
        self._modelled.update(modelled)
        merged = []
        for node in frontier:
            if node in heads:
                merged += self._merge(heads[node], matches.get(node))
            elif node in matches:
                merged.append(matches[node])
        return merged

    def free_proposals(self, tree: DraftTree, frontier: list[int], k: int) -> list[Proposal]:
        return self.suffix.free_proposals(tree, frontier, min(k, self.match_children))

    def _runs_head(self, tree: DraftTree, node: int, match: Proposal | None) -> bool:
        """The head runs where it can (at the root, or below a node it ran) unless a match is confident."""
        reachable = node == 0 or tree.parent[node] in self._modelled
        return reachable and (match is None or match.q[0] < self.copy_q)

    def _merge(self, head: Proposal, match: Proposal | None) -> list[Proposal]:
        """The head's children plus the match's, deduplicated: one proposal per source."""
        if match is None or head.sampled:
            return [head]  # sampled children are verified against q_dist; extra point masses would not be
        children = {t: [q, self.head.name] for t, q in zip(head.token, head.q)}  # token -> [q, source]
        for token, q_match in zip(match.token, match.q):
            q = max(self.head.prob(head.node, token), q_match)
            if token in children:
                children[token] = [max(children[token][0], q), f"{self.head.name}+{match.source}"]
            else:
                children[token] = [q, match.source]
        by_source: dict[str, Proposal] = {}
        for token, (q, source) in sorted(children.items(), key=lambda item: -item[1][0]):
            proposal = by_source.setdefault(source, Proposal(node=head.node, token=[], q=[], source=source))
            proposal.token.append(token)
            proposal.q.append(q)
        return list(by_source.values())

    def commit(self, tree: DraftTree, accepted_path: list[int], emitted: list[int],
               features: torch.Tensor | None = None) -> None:
        self.head.commit(tree, accepted_path, emitted, features)
        self.suffix.commit(tree, accepted_path, emitted)
        self._modelled = set()
