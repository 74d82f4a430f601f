"""`talon`: a budgeted tree gated relative to each layer's best path (TALON, 2026).

Our source is the paper's summary in ../shared/papers (000_…: "method", key
designs 1 and 2); the names below are the paper's.

Forced layers (design 1, root top-K initialisation). The first k layers
(default k = 1: the root's children, the paper's layer d = 0) keep the K
candidates of highest path score: P_1 = Top-K(P(· | x_t)). The drafter is asked
for the top-K children of each frontier node, which holds every candidate a
top-K of the pool can take.

Gated layers (design 2, confidence gating). The paper pools every child of
the frontier, S_d = ∪_{v ∈ P_d} {(v, w) | w ∈ V}, scores each by its path
probability p(u) = p(v)·q(w | v), takes the anchor m_d = max_{u ∈ S_d} p(u) and
keeps P_{d+1} = {u ∈ S_d | p(u) ≥ μ·m_d}; if more pass than the budget has left,
N − |T|, only the top N − |T| by path score are kept and the tree stops
growing. We ask the drafter for the top `remaining` = N − |T| children of each
frontier node: that is exact, because no node can have more than `remaining`
kept children and the anchor (the best child of the best node) is among them.
With k = 0 every layer is gated, from the root's children on (the paper's
pure-gating ablation).

The budget stop. When a layer's kept nodes fill the budget, none of them is
expanded ("budget"): the tree is complete, and no draft forward is spent on
children nobody could keep. Draft forwards per step (δ) then equal the depth.

Ours, where the summary is silent: N counts draft nodes (the root, already
decided, is not one); `max_depth` is a safety limit on depth (kept nodes at it
are not expanded: "depth_limit"); children are the draft's top choices, not
samples, also at temperature > 0 (engine/acceptance.py verifies them as point
masses, which is lossless).
"""

from __future__ import annotations

from pydantic import Field

from engine.policies.base import Decision, LayerSelection, Policy, PolicyParams, Pool, top_indices
from engine.tree import DraftTree


class TalonParams(PolicyParams):
    budget: int = Field(60, ge=1, le=512, description="global budget of draft nodes (N)")
    top_k: int = Field(10, ge=1, le=64, description="candidates kept at each forced layer (K)")
    mu: float = Field(0.03, gt=0, le=1, description="gate relative to the layer's best path score (μ)")
    forced_layers: int = Field(1, ge=0, le=8, description="first layers kept by top-K instead of the gate (k); "
                                                          "0: every layer gated")
    max_depth: int = Field(32, ge=1, le=64, description="safety limit on tree depth")


class TalonPolicy(Policy):
    name = "talon"
    description = ("TALON's budgeted tree: each layer keeps the candidates whose path score is at least μ × the "
                   "layer's best, within N nodes; confident drafts grow deep and narrow, unsure ones shallow and wide.")
    Params = TalonParams
    title = "TALON"
    symbols = {"N": "budget", "K": "top_k", "μ": "mu", "k": "forced_layers"}

    def children_per_node(self, tree: DraftTree, depth: int) -> int:
        """Top-K at a forced layer; at a gated layer, as many as the budget has left (see the module doc)."""
        if depth <= self.params.forced_layers:
            return self.params.top_k
        return self.remaining(tree)

    def remaining(self, tree: DraftTree) -> int:
        """Draft nodes the budget still allows: N − |T|, the root not counted."""
        return max(self.params.budget - (len(tree) - 1), 0)

    def select_layer(self, tree: DraftTree, pool: Pool) -> LayerSelection:
        remaining = self.remaining(tree)
        if pool.depth <= self.params.forced_layers:
            selection = self._select_top_k(pool, remaining)
        else:
            selection = self._select_gated(pool, remaining)
        if sum(d.kept for d in selection.decisions) >= remaining:
            _stop_growing(selection)
        return selection

    def pool_floor(self, depth: int) -> float | None:
        """μ at a gated layer: a candidate below μ·m_d fails the gate, and the gate's anchor m_d, the kept set
        (ranked by score, ties by pool order) and the budget stop read only candidates that pass it."""
        return None if depth <= self.params.forced_layers else self.params.mu

    def _select_top_k(self, pool: Pool, remaining: int) -> LayerSelection:
        ranked = top_indices(pool.score, self.params.top_k)
        kept = set(ranked[:remaining])
        grow = pool.depth < self.params.max_depth
        decisions = []
        for i in range(len(pool)):
            if i in kept:
                decisions.append(Decision(kept=True, expanded=grow, reason="topk" if grow else "depth_limit"))
            else:
                decisions.append(Decision(kept=False, expanded=False, reason="budget" if i in ranked else "topk"))
        return LayerSelection(decisions=decisions)

    def _select_gated(self, pool: Pool, remaining: int) -> LayerSelection:
        scores = pool.score
        anchor = max(scores)
        threshold = self.params.mu * anchor
        passing = [i for i, score in enumerate(scores) if score >= threshold]
        kept = set(sorted(passing, key=lambda i: (-scores[i], i))[:remaining])
        grow = pool.depth < self.params.max_depth
        reason = "threshold" if grow else "depth_limit"
        # A gated layer pools up to `remaining` children of every frontier node, most of them below the gate:
        # one comprehension over the pool, not a loop of appends.
        decisions = [Decision(kept=True, expanded=grow, reason=reason, threshold=threshold) if i in kept
                     else Decision(kept=False, expanded=False, threshold=threshold,
                                   reason="below_threshold" if score < threshold else "budget")
                     for i, score in enumerate(scores)]
        return LayerSelection(decisions=decisions, threshold=threshold, anchor=anchor)


def _stop_growing(selection: LayerSelection) -> None:
    """The layer filled the budget: its kept nodes are final, none is grown."""
    for decision in selection.decisions:
        if decision.kept:
            decision.expanded = False
            decision.reason = "budget"
