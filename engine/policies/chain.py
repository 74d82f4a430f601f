"""`chain`: γ draft tokens in a line (Leviathan et al. 2023), and a free copy past them.

With temperature > 0 each draft token is sampled from the draft distribution
and verified by rejection sampling with residual norm(max(0, p - q)).

γ bounds what the drafter is asked for. Past γ the chain takes only free
children (a model-free drafter following a text match, engine/drafters/suffix.py:
no draft forward, so δ counts none of them) and follows them while their q is at
least `free_q`, up to `max_depth`: a 30-token copy is verified in one step
instead of six. A free token is free to draft, not to verify: it also has to
pay for its place in the verify forward. Its expected gain is its path score
(the chance the target accepts it and every token before it), in tokens, each
worth one one-token step; its cost is what it adds to the verify forward, read
from the cost table in one-token forwards. So the chain follows the match while

    score(u) ≥ (verify(n + 1) − verify(n)) / verify(1),     n = the tokens verified without u,

which on a GPU (a flat verify cost) is any match, and on a CPU whose wide
forwards are compute-bound a sure one only (`cost_aware=false`: q alone decides).
With `free_q` = 1 (no match is that sure) the chain is Leviathan's.
"""

from __future__ import annotations

from pydantic import Field

from engine.policies.base import Decision, LayerSelection, Policy, PolicyParams, Pool
from engine.tree import DraftTree


class ChainParams(PolicyParams):
    gamma: int = Field(5, ge=1, le=64, description="draft tokens per step (γ)")
    sample: bool = Field(True, description="sample drafts from q when temperature > 0")
    free_q: float = Field(0.5, ge=0, le=1, description="past γ, a free match continues while its q is at least this")
    max_depth: int = Field(32, ge=1, le=64, description="depth limit of a free match")
    cost_aware: bool = Field(True, description="past γ, a free match continues only while its path score pays "
                                               "for its share of the verify forward (the cost table's)")


class ChainPolicy(Policy):
    name = "chain"
    description = "A line of γ draft tokens verified in one forward (Leviathan et al. 2023): deep and one wide."
    Params = ChainParams
    title = "chain (Leviathan et al.)"
    symbols = {"γ": "gamma"}
    needs_costs = True  # past γ only; its output says whether the costs were measured

    def children_per_node(self, tree: DraftTree, depth: int) -> int:
        return 1

    def drafts_from_model(self, depth: int) -> bool:
        return depth <= self.params.gamma

    def sample_children(self, temperature: float) -> bool:
        return self.params.sample and temperature > 0

    def select_layer(self, tree: DraftTree, pool: Pool) -> LayerSelection:
        grow = pool.depth < max(self.params.max_depth, self.params.gamma)
        if pool.depth <= self.params.gamma:
            decisions = [Decision(kept=i == 0, expanded=i == 0 and grow, reason="topk") for i in range(len(pool))]
            return LayerSelection(decisions=decisions)
        sure = pool.q[0] >= self.params.free_q
        price = self._verify_price(pool)
        pays = not self.params.cost_aware or pool.score[0] >= price
        first = "match" if sure and pays else "cost" if sure else "below_threshold"
        detail = {"price": price} if self.params.cost_aware else {}
        decisions = [Decision(kept=i == 0 and sure and pays, expanded=i == 0 and sure and pays and grow,
                              reason=first if i == 0 else "topk", threshold=self.params.free_q,
                              detail=detail if i == 0 else {}) for i in range(len(pool))]
        return LayerSelection(decisions=decisions, threshold=self.params.free_q)

    def _verify_price(self, pool: Pool) -> float:
        """What one more token adds to the verify forward, in one-token forwards: the chain so far is the
        root and depth − 1 drafts."""
        costs, n, context = self.costs, pool.depth, pool.prefix_len
        return (costs.verify_cost(n + 1, context) - costs.verify_cost(n, context)) / costs.verify_cost(1, context)
