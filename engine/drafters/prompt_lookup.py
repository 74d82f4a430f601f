"""`prompt-lookup`: model-free drafting from n-gram matches in the prompt and generated text.

For a tree node, the suffix of (context + path to the node) is looked up
among all earlier n-grams of the context, longest n first; the tokens that
followed those n-grams are the node's children, q being their share of the
matches. The index grows incrementally as tokens are committed.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import torch

from engine.drafters.base import Drafter, Proposal
from engine.sampling import SamplingParams
from engine.tree import DraftTree, path_to


class PromptLookupDrafter(Drafter):
    name = "prompt-lookup"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        super().__init__()
        assert 1 <= min_ngram <= max_ngram
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.context: list[int] = []
        self.followers: dict[tuple[int, ...], Counter] = defaultdict(Counter)

    def session(self) -> "PromptLookupDrafter":
        return PromptLookupDrafter(self.max_ngram, self.min_ngram)

    def start(self, context: list[int], features: torch.Tensor | None = None) -> None:
        self.context = []
        self.followers = defaultdict(Counter)
        self._extend(context)

    def propose(self, tree: DraftTree, frontier: list[int], k: int, sample: bool,
                sampling: SamplingParams, generator: torch.Generator) -> list[Proposal]:
        proposals = []
        for node in frontier:
            path_tokens = [tree.token[i] for i in path_to(tree.parent, node)[1:]]
            counts = self._followers_of(path_tokens)
            if not counts:
                continue
            total = sum(counts.values())
            best = counts.most_common(k)
            proposals.append(Proposal(node=node, token=[t for t, _ in best], q=[c / total for _, c in best],
                                      source=self.name, grows_free=True))
        return proposals

    def commit(self, tree: DraftTree, accepted_path: list[int], emitted: list[int],
               features: torch.Tensor | None = None) -> None:
        self._extend(emitted)

    def _followers_of(self, path_tokens: list[int]) -> Counter | None:
        """Tokens that followed the longest suffix of context + path seen before."""
        tail = (self.context[-self.max_ngram:] + path_tokens)[-self.max_ngram:]
        for n in range(min(self.max_ngram, len(tail)), self.min_ngram - 1, -1):
            counts = self.followers.get(tuple(tail[-n:]))
            if counts:
                return counts
        return None

    def _extend(self, tokens: list[int]) -> None:
        """Appends tokens, indexing every n-gram that now has a follower."""
        for token in tokens:
            end = len(self.context)
            for n in range(self.min_ngram, self.max_ngram + 1):
                if end >= n:
                    self.followers[tuple(self.context[end - n:end])][token] += 1
            self.context.append(token)
