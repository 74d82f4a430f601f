"""`talon`: a budgeted tree gated relative to each layer's best path (TALON, 2026).

Layer 1 keeps the root's top-K children (and the first k layers keep their
top-K). Each deeper layer pools all children of the frontier, scores each by
cumulative path probability p(u) = p(v)·q(w|v), takes the anchor
m_d = max score of the pool and keeps u iff p(u) ≥ μ·m_d, cut by score to what
is left of the global node budget N. Confident drafts grow deep, narrow trees;
uncertain ones shallow, wide trees.
"""

from __future__ import annotations

from pydantic import Field

from engine.policies.base import Decision, LayerSelection, Policy, PolicyParams, Pool, top_indices
from engine.tree import DraftTree


class TalonParams(PolicyParams):
    budget: int = Field(60, ge=1, le=512, description="global node budget (N)")
    top_k: int = Field(10, ge=1, le=64, description="children per node; kept at the forced layers (K)")
    mu: float = Field(0.03, gt=0, le=1, description="gate relative to the layer's best path score (μ)")
    forced_layers: int = Field(1, ge=1, le=8, description="first layers kept by top-K instead of the gate (k)")
    max_depth: int = Field(32, ge=1, le=64, description="safety limit on tree depth")


class TalonPolicy(Policy):
    name = "talon"
    description = ("TALON's budgeted tree: each layer keeps the candidates whose path score is at least μ × the "
                   "layer's best, within N nodes; confident drafts grow deep and narrow, unsure ones shallow and wide.")
    Params = TalonParams

    def children_per_node(self, depth: int) -> int:
        return self.params.top_k

    def select_layer(self, tree: DraftTree, pool: Pool) -> LayerSelection:
        remaining = self.params.budget - (len(tree) - 1)
        if pool.depth <= self.params.forced_layers:
            return self._select_top_k(pool, remaining)
        return self._select_gated(pool, remaining)

    def _select_top_k(self, pool: Pool, remaining: int) -> LayerSelection:
        ranked = top_indices(pool.score, self.params.top_k)
        kept = set(ranked[:remaining])
        grow = pool.depth < self.params.max_depth
        decisions = []
        for i in range(len(pool)):
            reason = "topk" if i in kept or i not in ranked else "budget"
            decisions.append(Decision(kept=i in kept, expanded=i in kept and grow, reason=reason))
        return LayerSelection(decisions=decisions)

    def _select_gated(self, pool: Pool, remaining: int) -> LayerSelection:
        anchor = max(pool.score)
        threshold = self.params.mu * anchor
        passing = [i for i in range(len(pool)) if pool.score[i] >= threshold]
        kept = set(sorted(passing, key=lambda i: (-pool.score[i], i))[:max(remaining, 0)])
        grow = pool.depth < self.params.max_depth
        decisions = []
        for i in range(len(pool)):
            if i in kept:
                decision = Decision(kept=True, expanded=grow, reason="threshold" if grow else "depth_limit")
            elif pool.score[i] < threshold:
                decision = Decision(kept=False, expanded=False, reason="below_threshold")
            else:
                decision = Decision(kept=False, expanded=False, reason="budget")
            decision.threshold = threshold
            decisions.append(decision)
        return LayerSelection(decisions=decisions, threshold=threshold, anchor=anchor)
