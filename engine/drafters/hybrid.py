"""`hybrid`: one tree whose candidates come from the EAGLE-3 head and from prompt lookup together.

The head proposes its top-k children for every frontier node; prompt lookup
adds the tokens that followed the longest matching n-gram. Candidates are
pooled per node and each records who proposed it ("head", "prompt-lookup", or
"head+prompt-lookup" when both did), so the web app can colour by source.

Policies gate on q, so an n-gram candidate must carry a q comparable to the
head's. Its q is the larger of the head's own probability for that token and
the lookup's share of the matches scaled by how often lookup candidates the
target evaluated were accepted so far in this run (a Beta(1, 1) running
estimate): a copy the head already believes keeps the head's confidence, and
a copy the head missed is trusted as much as copies have earned.
"""

from __future__ import annotations

import torch

from engine.drafters.base import Drafter, Proposal
from engine.drafters.eagle_head import EagleHeadDrafter
from engine.drafters.prompt_lookup import PromptLookupDrafter
from engine.sampling import SamplingParams
from engine.tree import DraftTree

LOOKUP = "prompt-lookup"


class HybridDrafter(Drafter):
    name = "hybrid"

    def __init__(self, head: EagleHeadDrafter, lookup: PromptLookupDrafter | None = None, lookup_children: int = 1):
        super().__init__(meter=head.meter)  # only the head runs a model
        self.head = head
        self.lookup = lookup or PromptLookupDrafter()
        self.model_name = head.model_name
        self.feature_layers = head.feature_layers
        self.lookup_children = lookup_children
        self.lookup_tried = 0
        self.lookup_accepted = 0

    @property
    def lookup_trust(self) -> float:
        """Posterior mean acceptance of evaluated lookup candidates."""
        return (self.lookup_accepted + 1) / (self.lookup_tried + 2)

    def start(self, context: list[int], features: torch.Tensor | None = None) -> None:
        self.head.start(context, features)
        self.lookup.start(context)
        self.lookup_tried = self.lookup_accepted = 0

    @torch.inference_mode()
    def propose(self, tree: DraftTree, frontier: list[int], k: int, sample: bool,
                sampling: SamplingParams, generator: torch.Generator) -> list[Proposal]:
        head_proposals = {p.node: p for p in self.head.propose(tree, frontier, k, sample, sampling, generator)}
        lookup_proposals = {p.node: p for p in self.lookup.propose(tree, frontier, self.lookup_children, False,
                                                                    sampling, generator)}
        merged = []
        for node in frontier:
            merged += self._merge(head_proposals[node], lookup_proposals.get(node))
        return merged

    def _merge(self, head: Proposal, lookup: Proposal | None) -> list[Proposal]:
        """The head's children plus the n-gram ones, deduplicated: one proposal per source."""
        if lookup is None or head.sampled:
            return [head]  # sampled children are verified against q_dist; extra point masses would not be
        children = {t: [q, self.head.name] for t, q in zip(head.token, head.q)}  # token -> [q, source]
        for token, share in zip(lookup.token, lookup.q):
            q = max(self.head.prob(head.node, token), self.lookup_trust * share)
            if token in children:
                children[token] = [max(children[token][0], q), f"{self.head.name}+{LOOKUP}"]
            else:
                children[token] = [q, LOOKUP]
        by_source: dict[str, Proposal] = {}
        for token, (q, source) in sorted(children.items(), key=lambda item: -item[1][0]):
            proposal = by_source.setdefault(source, Proposal(node=head.node, token=[], q=[], source=source))
            proposal.token.append(token)
            proposal.q.append(q)
        return list(by_source.values())

    def commit(self, tree: DraftTree, accepted_path: list[int], emitted: list[int],
               features: torch.Tensor | None = None) -> None:
        self._learn_trust(tree, accepted_path)
        self.head.commit(tree, accepted_path, emitted, features)
        self.lookup.commit(tree, accepted_path, emitted)

    def _learn_trust(self, tree: DraftTree, accepted_path: list[int]) -> None:
        """Counts lookup candidates the target evaluated (their parent was accepted) and those it accepted."""
        on_path = set(accepted_path)
        for node in range(1, len(tree)):
            if LOOKUP in tree.source[node] and tree.parent[node] in on_path:
                self.lookup_tried += 1
                self.lookup_accepted += node in on_path
