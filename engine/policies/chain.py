"""`chain`: γ draft tokens in a line (Leviathan et al. 2023).

With temperature > 0 each draft token is sampled from the draft distribution
and verified by rejection sampling with residual norm(max(0, p - q)).
"""

from __future__ import annotations

from pydantic import Field

from engine.policies.base import Decision, LayerSelection, Policy, PolicyParams, Pool
from engine.tree import DraftTree


class ChainParams(PolicyParams):
    gamma: int = Field(5, ge=1, le=64, description="draft tokens per step (γ)")
    sample: bool = Field(True, description="sample drafts from q when temperature > 0")


class ChainPolicy(Policy):
    name = "chain"
    Params = ChainParams

    def children_per_node(self, tree: DraftTree, depth: int) -> int:
        return 1

    def sample_children(self, temperature: float) -> bool:
        return self.params.sample and temperature > 0

    def select_layer(self, tree: DraftTree, pool: Pool) -> LayerSelection:
        grow = pool.depth < self.params.gamma
        decisions = [Decision(kept=i == 0, expanded=i == 0 and grow, reason="topk") for i in range(len(pool))]
        return LayerSelection(decisions=decisions)
