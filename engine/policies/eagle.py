"""`eagle`: the EAGLE-2/3 dynamic tree.

Each layer grows the K frontier nodes of highest cumulative path score by
their top-K children; every child is kept as a rerank candidate, the best K by
path score form the next frontier. After D layers the tree is reranked to the
m nodes of highest path score (defaults D=7, K=10, m=60).

D counts draft layers, one draft forward each, so δ = D. EAGLE's own code
(`topK_genrate`) counts its `depth` after a first forward that drafts the
root's children: its depth d drafts d + 1 layers in d + 1 forwards, which is
the δ = D + 1 TALON reports for EAGLE-3 at D = 8, K = 10. That baseline is
`depth=9` here (`specscope bench --policies eagle:depth=9`); our default D = 7
is EAGLE's depth 6.
"""

from __future__ import annotations

from pydantic import Field

from engine.policies.base import Decision, LayerSelection, Policy, PolicyParams, Pool, Rerank, rerank_top, top_indices
from engine.tree import DraftTree


class EagleParams(PolicyParams):
    depth: int = Field(7, ge=1, le=32, description="draft layers, one draft forward each (D; EAGLE's code "
                                                   "counts one fewer: EAGLE-3 at its depth 8 is 9 here)")
    top_k: int = Field(10, ge=1, le=64, description="children per node and frontier width (K)")
    total: int = Field(60, ge=1, le=512, description="draft nodes kept by the final rerank (m)")


class EaglePolicy(Policy):
    name = "eagle"
    description = ("EAGLE-2's dynamic tree: D layers, each growing the K best paths by their top-K children, "
                   "then the m nodes of highest path score are verified.")
    Params = EagleParams
    title = "EAGLE-2/3"
    reranks = True  # to the m best nodes, every step
    symbols = {"D": "depth", "K": "top_k", "m": "total"}

    def children_per_node(self, tree: DraftTree, depth: int) -> int:
        return self.params.top_k

    def select_layer(self, tree: DraftTree, pool: Pool) -> LayerSelection:
        last = pool.depth >= self.params.depth
        frontier = set() if last else set(top_indices(pool.score, self.params.top_k))
        threshold = min((pool.score[i] for i in frontier), default=None)
        reason = "depth_limit" if last else "topk"
        # Every candidate is kept: two records serve the whole pool (nothing edits a decision afterwards).
        grown, leaf = (Decision(kept=True, expanded=expanded, reason=reason, threshold=threshold)
                       for expanded in (True, False))
        decisions = [grown if i in frontier else leaf for i in range(len(pool))]
        return LayerSelection(decisions=decisions, threshold=threshold)

    def finalize(self, tree: DraftTree) -> Rerank:
        return rerank_top(tree, self.params.total)
