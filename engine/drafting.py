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

Before the drafter proposes for a layer, `grow_layers` yields the model forward
the proposal needs (`Drafter.draft_forward`), so a batch (engine/batch.py) grows
every request's tree a layer at a time and runs their forwards in one call;
`grow_tree` runs each as it comes, for a request alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generator

import torch

from engine.drafters.base import DraftForward, Drafter, Proposal, run_draft_forwards
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


def pool_from(tree: DraftTree, proposals: list[Proposal], depth: int, prefix_len: int = 0,
              floor: float | None = None) -> Pool:
    """Flattens the frontier's proposals into one layer's candidate pool, scored by path: score(parent)·q;
    with a `floor` φ (Policy.pool_floor) only the candidates scoring at least φ × the layer's best, in the
    same order (the products and the comparison are the policy's own, so it decides the same).

    >>> tree = DraftTree.with_root(7); a = tree.add(0, 8, 0.5, 0.5)
    >>> proposal = Proposal(node=a, token=[9, 10, 11], q=[0.6, 0.2, 0.01], source="x")
    >>> pool = pool_from(tree, [proposal], depth=2)
    >>> pool.parent, pool.score
    ([1, 1, 1], [0.3, 0.1, 0.005])
    >>> pool_from(tree, [proposal], depth=2, floor=0.1).token
    [9, 10]
    """
    pool = Pool(depth=depth, parent=[], token=[], q=[], score=[], source=[], sampled=[], grows_free=[],
                prefix_len=prefix_len)
    scored = [(proposal, [tree.score[proposal.node] * q for q in proposal.q]) for proposal in proposals]
    threshold = None
    if floor is not None and not any(proposal.sampled for proposal in proposals):
        threshold = floor * max((max(scores) for _, scores in scored if scores), default=0.0)
    for proposal, scores in scored:
        if threshold is None:
            tokens, qs = proposal.token, proposal.q
        else:  # a wide gated layer: most of the frontier's children are below the gate
            passing = [i for i, score in enumerate(scores) if score >= threshold]
            tokens, qs, scores = ([proposal.token[i] for i in passing], [proposal.q[i] for i in passing],
                                  [scores[i] for i in passing])
        n = len(tokens)
        pool.parent += [proposal.node] * n
        pool.token += tokens
        pool.q += qs
        pool.score += scores
        pool.source += [proposal.source] * n
        pool.sampled += [proposal.sampled] * n
        pool.grows_free += [proposal.grows_free] * n
    return pool


def grow_tree(policy: Policy, drafter: Drafter, root: int, max_depth: int, prefix_len: int = 0,
              sampling: SamplingParams = SamplingParams(), generator: torch.Generator | None = None) -> Draft:
    """Grows a tree under `root` until the policy stops it (`grow_layers`, each forward run as it comes)."""
    return run_growing(grow_layers(policy, drafter, root, max_depth, prefix_len, sampling, generator))


Growing = Generator[DraftForward, None, "Draft"]  # yields each layer's forward to run, returns the tree


def run_growing(growing: Growing) -> Draft:
    """Drives a growing tree alone: each forward it hands out runs at once."""
    try:
        while True:
            run_draft_forwards([next(growing)])
    except StopIteration as done:
        return done.value


def grow_layers(policy: Policy, drafter: Drafter, root: int, max_depth: int, prefix_len: int = 0,
                sampling: SamplingParams = SamplingParams(), generator: torch.Generator | None = None) -> Growing:
    """Grows a tree under `root` until the policy stops it; `prefix_len` is the target's cached context.
    Before the drafter proposes for a layer it yields the model forward the layer needs, to be run before it
    goes on (alone or with other requests'). Where the policy need not explain itself (`Policy.explain` off:
    no one reads the pruned candidates) a layer pools only the candidates its `pool_floor` lets through: the
    same tree, without building a decision for every child below the gate. At the root the drafter is told how
    many layers the policy will grow as one line of top-1 children (`Policy.line_ahead`, greedy drafts only),
    which it may run in the root's forward: the same tree either way."""
    draft = Draft(tree=DraftTree.with_root(root))
    sample = policy.sample_children(sampling.temperature)
    frontier, depth = [0], 0
    while frontier and depth < max_depth:
        depth += 1
        from_model = policy.drafts_from_model(depth, prefix_len)
        k = policy.children_per_node(draft.tree, depth)
        if from_model:
            line = min(policy.line_ahead(), max_depth - 1) if depth == 1 and not sample else 0
            forward = drafter.draft_forward(draft.tree, frontier, line)
            if forward is not None:
                yield forward
            proposals = drafter.propose(draft.tree, frontier, k, sample, sampling, generator)
        elif k == 0:  # no free child asked for: none to pool (and no match to walk)
            break
        else:
            proposals = drafter.free_proposals(draft.tree, frontier, k)
        draft.dists.update({p.node: p.q_dist for p in proposals if p.sampled})
        pool = pool_from(draft.tree, proposals, depth, prefix_len, None if policy.explain else policy.pool_floor(depth))
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
