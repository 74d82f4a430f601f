"""Growing one step's draft tree: the drafter proposes, the policy decides, layer by layer.

This is the one draft loop: the engine calls it every step and the policy
tests call it with a stub drafter, so what the tests check is what runs.
Each layer, the drafter proposes for every frontier node as many children as
the policy asks for, given the tree so far (`children_per_node`; past a
policy's model budget, only its free ones: a model-free match's continuation); they are
pooled (`pool_from`) with their cumulative path scores; the policy keeps or
prunes each candidate and says which kept ones grow further. The loop ends
when no kept node is to grow, when the drafter has nothing to offer, or at
`max_depth` (the tokens the request can still emit).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.drafters.base import Drafter, Proposal
from engine.policies.base import LayerSelection, Policy, Pool
from engine.sampling import SamplingParams
from engine.tree import DraftTree


@dataclass
class GrownLayer:
    """One layer as the policy saw it: the pool, its decisions, and the tree index each kept candidate got."""

    pool: Pool
    selection: LayerSelection
    nodes: list[int | None]  # [len(pool)]: tree index of a kept candidate, None for a pruned one


@dataclass
class Draft:
    tree: DraftTree  # every kept node, before the policy's rerank
    layers: list[GrownLayer] = field(default_factory=list)
    dists: dict[int, torch.Tensor] = field(default_factory=dict)  # node -> [V] q its sampled children came from


def pool_from(tree: DraftTree, proposals: list[Proposal], depth: int, prefix_len: int = 0) -> Pool:
    """Flattens the frontier's proposals into one layer's candidate pool, scored by path: score(parent)·q.

    >>> tree = DraftTree.with_root(7); a = tree.add(0, 8, 0.5, 0.5)
    >>> pool = pool_from(tree, [Proposal(node=a, token=[9, 10], q=[0.6, 0.2], source="x")], depth=2)
    >>> pool.parent, pool.score
    ([1, 1], [0.3, 0.1])
    """
    pool = Pool(depth=depth, parent=[], token=[], q=[], score=[], source=[], sampled=[], prefix_len=prefix_len)
    for proposal in proposals:
        n, above = len(proposal.token), tree.score[proposal.node]
        pool.parent += [proposal.node] * n
        pool.token += proposal.token
        pool.q += proposal.q
        pool.score += [above * q for q in proposal.q]
        pool.source += [proposal.source] * n
        pool.sampled += [proposal.sampled] * n
    return pool


def grow_tree(policy: Policy, drafter: Drafter, root: int, max_depth: int, prefix_len: int = 0,
              sampling: SamplingParams = SamplingParams(), generator: torch.Generator | None = None) -> Draft:
    """Grows a tree under `root` until the policy stops it; `prefix_len` is the target's cached context."""
    draft = Draft(tree=DraftTree.with_root(root))
    sample = policy.sample_children(sampling.temperature)
    frontier, depth = [0], 0
    while frontier and depth < max_depth:
        depth += 1
        k = policy.children_per_node(draft.tree, depth)
        if policy.drafts_from_model(depth):
            proposals = drafter.propose(draft.tree, frontier, k, sample, sampling, generator)
        else:
            proposals = drafter.free_proposals(draft.tree, frontier, k)
        draft.dists.update({p.node: p.q_dist for p in proposals if p.sampled})
        pool = pool_from(draft.tree, proposals, depth, prefix_len)
        if not len(pool):
            break
        selection = policy.select_layer(draft.tree, pool)
        assert all(d.kept for d, sampled in zip(selection.decisions, pool.sampled) if sampled), \
            f"{policy.name} pruned a sampled candidate: sampled siblings are lossless only if all are verified"
        frontier = _add_layer(draft, pool, selection)
    return draft


def _add_layer(draft: Draft, pool: Pool, selection: LayerSelection) -> list[int]:
    """Adds the kept candidates to the tree, in pool order; returns the next frontier."""
    decisions = selection.decisions
    kept = [i for i, decision in enumerate(decisions) if decision.kept]
    first = draft.tree.extend([pool.parent[i] for i in kept], [pool.token[i] for i in kept],
                              [pool.q[i] for i in kept], [pool.score[i] for i in kept],
                              [pool.source[i] for i in kept], [pool.sampled[i] for i in kept])
    nodes: list[int | None] = [None] * len(decisions)
    for node, i in enumerate(kept, start=first):
        nodes[i] = node
    draft.layers.append(GrownLayer(pool, selection, nodes))
    return [first + j for j, i in enumerate(kept) if decisions[i].expanded]
