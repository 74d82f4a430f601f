"""`draft-lm`: a small causal LM sharing the target's tokenizer, drafting tree-batched.

Its KV cache holds the committed context; the tokens not yet in it (the
root, and accepted drafts it never ran) are fed as a chain at the first layer
of a step. Each deeper layer runs the whole frontier in one forward with a
tree mask, so δ equals the number of layers. After verification the cache
keeps the accepted nodes it ran and drops the rest of the tree.
"""

from __future__ import annotations

import torch

from engine.drafters.base import Drafter, Proposal
from engine.models.base import LanguageModel
from engine.sampling import SamplingParams, draw_without_replacement, probs_from_logits
from engine.timing import ForwardMeter
from engine.tree import DraftTree, path_to


class DraftLMDrafter(Drafter):
    name = "draft-lm"

    def __init__(self, lm: LanguageModel):
        super().__init__(ForwardMeter(lm.device))
        self.lm = lm
        self.model_name = lm.name
        self.context: list[int] = []
        self.cached = 0  # context tokens already in the cache
        self.position_of: dict[int, int] = {}  # tree node -> cache position, this step

    def session(self) -> "DraftLMDrafter":
        """The same draft LM's weights over a cache of its own."""
        return DraftLMDrafter(self.lm.session())

    def start(self, context: list[int], features: torch.Tensor | None = None) -> None:
        self.lm.reset()
        self.context = list(context)
        self.cached = 0
        self.position_of = {}

    def propose(self, tree: DraftTree, frontier: list[int], k: int, sample: bool,
                sampling: SamplingParams, generator: torch.Generator) -> list[Proposal]:
        with self.meter.timed():
            if frontier == [0] and not self.position_of:
                logits = self._run_pending()  # [1, V]
            else:
                logits = self._run_frontier(tree, frontier)  # [F, V]
        return [self._children(node, row, k, sample, sampling, generator) for node, row in zip(frontier, logits)]

    def commit(self, tree: DraftTree, accepted_path: list[int], emitted: list[int],
               features: torch.Tensor | None = None) -> None:
        ran = [self.position_of[n] for n in accepted_path if n in self.position_of]
        if ran:
            self.lm.keep(list(range(len(self.context) - 1)) + ran)
            self.cached = len(self.context) - 1 + len(ran)
        self.context.extend(emitted)
        self.position_of = {}

    def _run_pending(self) -> torch.Tensor:
        """Runs the context tokens the cache lacks, the root last; returns the root's logits."""
        pending = self.context[self.cached:]
        out = self.lm.forward_chain(pending)
        self.cached = len(self.context)
        self.position_of = {0: len(self.context) - 1}
        return out.logits[-1:]

    def _run_frontier(self, tree: DraftTree, frontier: list[int]) -> torch.Tensor:
        """Runs frontier nodes in one forward; each sees the context and its own ancestors."""
        start = self.lm.cache_len
        allowed = torch.zeros(len(frontier), start + len(frontier), dtype=torch.bool)  # [F, S]
        allowed[:, :len(self.context)] = True
        for row, node in enumerate(frontier):
            for ancestor in path_to(tree.parent, node)[:-1]:  # every ancestor already ran, the root first
                allowed[row, self.position_of[ancestor]] = True
            allowed[row, start + row] = True
        positions = torch.tensor([len(self.context) - 1 + tree.depth[n] for n in frontier])  # [F]
        out = self.lm.forward_tree([tree.token[n] for n in frontier], positions, allowed)
        for row, node in enumerate(frontier):
            self.position_of[node] = start + row
        return out.logits

    def _children(self, node: int, logits: torch.Tensor, k: int, sample: bool,
                  sampling: SamplingParams, generator: torch.Generator) -> Proposal:
        """logits: [V]. Top-k children, or k draws from the draft distribution without replacement, in draw
        order, when sampling (engine/acceptance.py verifies them in that order)."""
        if sample:
            dist = probs_from_logits(logits[None], sampling)[0]  # [V] float64
            tokens = draw_without_replacement(dist, k, generator)
            return Proposal(node, tokens, [dist[t].item() for t in tokens], self.name, sampled=True, q_dist=dist)
        dist = torch.softmax(logits.double(), dim=-1) if sampling.greedy else probs_from_logits(logits[None], sampling)[0]
        top = torch.topk(dist, min(k, dist.shape[-1]))
        return Proposal(node, top.indices.tolist(), top.values.tolist(), self.name)
