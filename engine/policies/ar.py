"""`ar`: no drafting. Every step verifies the root alone: plain decoding through the same engine."""

from __future__ import annotations

from engine.policies.base import LayerSelection, Policy, PolicyParams, Pool
from engine.tree import DraftTree


class ArParams(PolicyParams):
    pass


class ArPolicy(Policy):
    name = "ar"
    description = "Plain decoding, no draft: one target forward per token; the baseline every speedup is measured against."
    Params = ArParams
    drafts = False
    title = "plain decoding"

    def children_per_node(self, tree: DraftTree, depth: int) -> int:
        return 0

    def select_layer(self, tree: DraftTree, pool: Pool) -> LayerSelection:
        raise AssertionError("ar never drafts")
