"""The cast policy on synthetic pools: EAGLE as its linear-cost special case, and the shapes its rules imply.

Costs are in t₁, the target's time for one token: with CostTable.linear(1.6, 42.0) t₁ = 43.6 ms, so a
threshold of 0.87 here is 0.02 expected tokens per ms.
"""

from __future__ import annotations

import random

import pytest

from engine.costs import CostTable
from engine.drafters.base import Proposal
from engine.drafting import grow_tree, pool_from
from engine.events import Candidate
from engine.policies import POLICIES, make_policy
from engine.policies.base import Pool, PolicyContext, StepOutcome
from engine.policies.cast import CastPolicy, marginal_walk
from engine.policies.eagle import EaglePolicy
from engine.timing import Timings
from engine.tree import DraftTree
from tiny_models import StubDrafter

PEAKED = [0.9, 0.05, 0.02, 0.01, 0.01, 0.005, 0.003, 0.001, 0.0005, 0.0005]  # low entropy
FLAT = [0.1] * 10  # high entropy


def make_cast(table: CostTable, **params) -> CastPolicy:
    return make_policy("cast", params, PolicyContext(costs=table))


def random_pool(rng: random.Random, frontier: int, children: int, depth: int = 2) -> tuple[DraftTree, Pool]:
    """A tree with `frontier` nodes at depth - 1 and a pool of their children with random draft probabilities."""
    tree = DraftTree.with_root(0)
    parents = [0]
    for d in range(1, depth):
        parents = [tree.add(parents[0], token=100 * d + j, q=q, score=q * tree.score[parents[0]])
                   for j, q in enumerate(_random_distribution(rng, frontier))]
    proposals = [Proposal(node=p, token=[1000 + 10 * p + j for j in range(children)],
                          q=_random_distribution(rng, children), source="test") for p in parents]
    return tree, pool_from(tree, proposals, depth, prefix_len=300)


def _random_distribution(rng: random.Random, k: int) -> list[float]:
    """The top k probabilities of a random distribution, best first (they sum to less than 1)."""
    weights = sorted((rng.expovariate(1.0) ** 3 for _ in range(k + 5)), reverse=True)
    total = sum(weights)
    return [w / total for w in weights[:k]]


def layer_pool(tree: DraftTree, frontier: list[int], child_q: list[float], depth: int) -> Pool:
    """Every frontier node gets the same children distribution `child_q`."""
    proposals = [Proposal(node=p, token=list(range(len(child_q))), q=list(child_q), source="test") for p in frontier]
    return pool_from(tree, proposals, depth, prefix_len=300)


def grow(policy: CastPolicy, child_q: list[float], steps: int = 1) -> tuple[DraftTree, list[int]]:
    """Drafts `steps` steps with the engine's own loop; returns the last step's tree and its layer widths."""
    policy.start_run()
    drafter = StubDrafter(lambda node, k: child_q[:k], token_of=lambda node, rank: rank)
    for _ in range(steps):
        draft = grow_tree(policy, drafter, root=0, max_depth=1000, prefix_len=300)
    widths = [sum(decision.expanded for decision in layer.selection.decisions) for layer in draft.layers]
    return draft.tree, widths


def test_cast_is_registered():
    assert POLICIES["cast"] is CastPolicy


@pytest.mark.parametrize("seed", range(20))
def test_linear_cost_width_equals_eagle_top_k(seed):
    """CAST Theorem 4.1 (batch 1): with c_k = λk + δ and C1 = v(K)/λ, the frontier is EAGLE's top K.

    λ is the draft's slope in t₁ (the target's one-token time, 10 + 40 ms here)."""
    rng = random.Random(seed)
    top_k = rng.randint(2, 10)
    lam, delta = rng.uniform(0.05, 5.0), rng.uniform(0.0, 50.0)
    tree, pool = random_pool(rng, frontier=rng.randint(1, 10), children=top_k, depth=rng.randint(1, 4))
    assert len(pool) >= top_k, "the random pool must offer at least K candidates"
    kth_value = sorted(pool.score, reverse=True)[top_k - 1]
    table = CostTable.linear(lam=10.0, delta=40.0, draft_lam=lam, draft_delta=delta)
    cast = make_cast(table, c1=kth_value / (lam / 50.0), c2=0.0, top_k=top_k, max_width=256, max_depth=32)
    eagle = EaglePolicy(EaglePolicy.Params(top_k=top_k, depth=32))

    cast_frontier = {i for i, d in enumerate(cast.select_layer(tree, pool).decisions) if d.expanded}
    eagle_frontier = {i for i, d in enumerate(eagle.select_layer(tree, pool).decisions) if d.expanded}
    assert cast_frontier == eagle_frontier
    assert len(cast_frontier) == top_k


def test_linear_cost_rerank_keeps_nodes_whose_score_pays_for_their_verify_cost():
    rng = random.Random(7)
    tree, pool = random_pool(rng, frontier=6, children=8)
    for i in range(len(pool)):
        tree.add(pool.parent[i], pool.token[i], pool.q[i], pool.score[i])
    lam, delta = 1.6, 42.0
    c3 = 0.87
    rerank = make_cast(CostTable.linear(lam=lam, delta=delta), c3=c3).finalize(tree)
    expected = [i for i in range(1, len(tree)) if tree.score[i] >= c3 * lam / (lam + delta)]
    assert rerank.keep == [0] + expected
    assert all(d.reason == "rerank" and d.threshold == c3 for d in rerank.pruned.values())


@pytest.mark.parametrize("pool_shape, steep, expected", [
    ("flat", False, 32), ("flat", True, 1), ("peaked", False, 2), ("peaked", True, 1)])
def test_width_widens_for_flat_pools_and_cheap_drafts(pool_shape, steep, expected):
    child_q = FLAT if pool_shape == "flat" else PEAKED
    draft_lam = 20.0 if steep else 2.0
    cast = make_cast(CostTable.linear(1.6, 42.0, draft_lam=draft_lam, draft_delta=4.0), c1=0.87, c2=0.0,
                     max_width=32, max_depth=2)
    tree = DraftTree.with_root(0)
    pool = layer_pool(tree, [0], child_q * 4 if pool_shape == "flat" else child_q, depth=1)
    width = sum(d.expanded for d in cast.select_layer(tree, pool).decisions)
    assert width == min(expected, len(pool))


@pytest.mark.parametrize("seed", range(4))
def test_a_run_that_reads_no_detail_gets_the_same_decisions_and_rerank_without_their_numbers(seed):
    """`explain` off (a bench's runs, which emit no per-candidate events): every layer keeps, grows and gives
    the same reasons and thresholds, the rerank keeps the same nodes and drops the same ones, over steps that
    move κ, ρ and the gain buffer; only the numbers behind each decision are left out."""
    rng = random.Random(seed)
    draws: dict[tuple[int, int], list[float]] = {}

    def qs_of(node: int, k: int) -> list[float]:  # both runs see the same q's at the same node
        if (node, k) not in draws:
            draws[node, k] = _random_distribution(rng, k)
        return draws[node, k]

    table = CostTable.linear(lam=0.4, delta=10.0, ns=(1, 2, 3, 4, 8, 16, 32, 64))
    runs = []
    for explain in (True, False):
        cast = make_cast(table, c1=0.5, c2=1.0, c3=1.0)
        cast.explain = explain
        drafter = StubDrafter(qs_of, token_of=lambda node, rank: rank)
        steps = []
        for step in range(5):
            draft = grow_tree(cast, drafter, root=0, max_depth=12, prefix_len=300)
            rerank = cast.finalize(draft.tree)
            steps.append((draft.tree.parent, draft.tree.score,
                          [[(d.kept, d.expanded, d.reason, d.threshold) for d in layer.selection.decisions]
                           for layer in draft.layers],
                          rerank.keep, sorted(rerank.pruned), {d.reason for d in rerank.pruned.values()}))
            cast.observe(StepOutcome(tree_size=len(rerank.keep) - 1, depth=draft.tree.max_depth, accepted=step % 3,
                                     times=Timings(draft_ms=1.0 + step), prefix_len=300 + step))
            assert explain or all(not d.detail for layer in draft.layers for d in layer.selection.decisions)
        runs.append(steps)
    assert runs[0] == runs[1]


def test_free_extra_nodes_are_taken_when_costs_step():
    """A GPU-like step cost: the 9th node is dear, the 10th to 16th come free with it; the walk takes them."""
    cost = [0, 5, 5, 5, 5, 5, 5, 5, 5, 9, 9, 9, 9, 9, 9, 9, 9]
    utility = [0.0]
    for k in range(16):
        utility.append(utility[-1] + 0.3)
    assert marginal_walk(utility, cost, threshold=0.5, start=1).count == 16
    assert marginal_walk(utility, cost, threshold=1.0, start=1).count == 8


def test_a_staircase_table_makes_cast_take_32_nodes_rather_than_17():
    """A GPU-like draft: 16 tokens cost one t₁, 17 to 32 cost two. Node 17 alone does not pay for the step
    (ratio 0.1 per t₁), nodes 17–32 together do (1.015): the frontier is 32. Interpolating the table between
    its measured n = 16 and 32 would have priced node 17 at 1/16 t₁ and stopped there."""
    table = CostTable.linear(lam=0.0, delta=10.0, ns=(1, 2, 4, 8, 16, 32, 64))  # t₁ = 10 ms
    table.draft.ms[0] = [[10.0] * 5 + [20.0, 40.0] for _ in table.contexts]
    assert table.draft_cost(17, context=300) == table.draft_cost(32, context=300)
    tree = DraftTree.with_root(0)
    pool = layer_pool(tree, [0], [0.1] * 17 + [0.061] * 15, depth=1)
    cast = make_cast(table, c1=1.0, c2=0.0, max_width=32)
    assert sum(d.expanded for d in cast.select_layer(tree, pool).decisions) == 32


def test_confident_drafts_grow_deeper_than_uncertain_ones():
    table = CostTable.linear(1.6, 42.0, draft_lam=0.2, draft_delta=4.0)
    _, peaked_widths = grow(make_cast(table, c1=0.87, c2=0.44, max_width=8, max_depth=16), PEAKED, steps=3)
    _, flat_widths = grow(make_cast(table, c1=0.87, c2=0.44, max_width=8, max_depth=16), FLAT, steps=3)
    assert len(peaked_widths) > len(flat_widths)
    assert flat_widths[0] > peaked_widths[0]


def test_steep_draft_cost_makes_shallower_trees():
    cheap = CostTable.linear(1.6, 42.0, draft_lam=0.05, draft_delta=1.0)
    dear = CostTable.linear(1.6, 42.0, draft_lam=0.5, draft_delta=20.0)
    _, cheap_widths = grow(make_cast(cheap, c2=0.44, max_depth=32), PEAKED, steps=3)
    _, dear_widths = grow(make_cast(dear, c2=0.44, max_depth=32), PEAKED, steps=3)
    assert len(cheap_widths) > len(dear_widths) >= 1


def test_a_copy_that_grows_free_is_drafted_deeper_than_the_same_copy_through_the_model():
    """Below the root the children are a match's (Proposal.grows_free, as a hybrid's copy off the head's
    part of the tree): growing them costs σ of bookkeeping, not a head forward, so the copy goes on while its
    path score pays for that."""
    table = CostTable.linear(1.6, 42.0, draft_lam=0.2, draft_delta=4.0)
    copy = [0.97, 0.01]

    def depth_of(grows_free) -> int:
        cast = make_cast(table, max_depth=32)  # the default C2
        draft = grow_tree(cast, StubDrafter(lambda node, k: copy[:k], grows_free=grows_free), root=0,
                          max_depth=1000, prefix_len=300)
        return draft.tree.max_depth

    through_model = depth_of(lambda tree, node: False)
    free_below_root = depth_of(lambda tree, node: node != 0)
    assert free_below_root > through_model + 5, (free_below_root, through_model)


def test_sigma_follows_the_drafting_time_outside_model_forwards():
    """σ, a free node's price, is the request's measured drafting time outside forwards per node grown: a
    slow drafting loop makes free copies shallower, and a new run starts from the prior again."""
    table = CostTable.linear(1.6, 42.0, draft_lam=0.05, draft_delta=1.0)
    cast = make_cast(table, c2=0.44, max_depth=32)
    drafter = StubDrafter(lambda node, k: [0.97, 0.01][:k], grows_free=lambda tree, node: True)
    before = grow_tree(cast, drafter, root=0, max_depth=1000, prefix_len=300).tree.max_depth
    prior = cast.sigma
    for _ in range(20):
        draft = grow_tree(cast, drafter, root=0, max_depth=1000, prefix_len=300)
        cast.finalize(draft.tree)
        cast.observe(StepOutcome(tree_size=len(draft.tree) - 1, depth=draft.tree.max_depth, accepted=1,
                                 times=Timings(draft_ms=400.0, draft_forward_ms=0.0, verify_ms=40.0),
                                 prefix_len=300))
    after = grow_tree(cast, drafter, root=0, max_depth=1000, prefix_len=300).tree.max_depth
    assert cast.sigma > 10 * prior and after < before, (cast.sigma, prior, after, before)
    cast.start_run()
    assert cast.sigma == prior


def test_gain_buffer_learns_across_steps_and_resets_per_run():
    table = CostTable.linear(1.6, 42.0, draft_lam=0.2, draft_delta=4.0)
    cast = make_cast(table, c2=0.44, window=4)
    grow(cast, FLAT, steps=3)
    assert max(cast.gains) < 1.0
    cast.start_run()
    assert list(cast.gains) == [1.0] * 4


def test_steep_verify_cost_sends_fewer_nodes():
    tree, _ = grow(make_cast(CostTable.linear(1.6, 42.0, draft_lam=0.05, draft_delta=1.0), c2=0.044,
                             max_width=8, max_depth=4), FLAT)
    flat = make_cast(CostTable.linear(0.1, 20.0), c3=1.0).finalize(tree)
    steep = make_cast(CostTable.linear(5.0, 20.0), c3=1.0).finalize(tree)
    assert 1 < len(steep.keep) < len(flat.keep) <= len(tree)


def test_every_decision_says_why_with_utility_cost_and_threshold():
    table = CostTable.linear(1.6, 42.0, draft_lam=0.3, draft_delta=4.0)
    cast = make_cast(table, c2=0.87, max_width=8)
    tree = DraftTree.with_root(0)
    selection = cast.select_layer(tree, layer_pool(tree, [0], PEAKED, depth=1))
    for d in selection.decisions:
        assert d.reason in {"cost", "depth_limit", "budget"}
        assert d.threshold is not None and "utility" in d.detail
        assert d.reason != "cost" or "marginal_cost" in d.detail
        Candidate(parent=0, token=1, text="x", depth=1, q=0.1, score=0.1, source="t", kept=d.kept,
                  expanded=d.expanded, reason=d.reason, threshold=d.threshold, detail=d.detail)
    grown, _ = grow(cast, PEAKED)
    for d in cast.finalize(grown).pruned.values():
        assert d.reason == "rerank" and d.threshold == cast.params.c3
        assert "marginal_cost" in d.detail or "max_total" in d.detail


def test_without_a_cost_table_cast_reads_assumed_costs():
    assert make_policy("cast", {}).costs.target.source == "assumed"


def test_best_node_is_verified_even_when_costs_would_send_none():
    tree, _ = grow(make_cast(CostTable.linear(1.6, 42.0), c2=0.0, max_depth=2), FLAT)
    assert make_cast(CostTable.linear(1000.0, 42.0), c3=1.0).finalize(tree).keep == [0, 1]
    assert make_cast(CostTable.linear(1000.0, 42.0), c3=1.0, min_verify=0).finalize(tree).keep == [0]


def test_calibration_scales_utility_by_accepted_over_predicted():
    """A draft whose scores understate acceptance (a near-uniform q) earns a κ > 1 and wider trees."""
    cast = make_cast(CostTable.linear(1.6, 42.0), c3=0.87)
    tree, _ = grow(cast, [0.01] * 10)
    sent = len(cast.finalize(tree).keep)
    changes = []
    for _ in range(5):
        cast.finalize(tree)
        changes += cast.observe(StepOutcome(tree_size=sent - 1, depth=1, accepted=2,
                                            times=Timings(draft_ms=5.0, verify_ms=40.0, other_ms=1.0), prefix_len=300))
    assert cast.kappa > 5 and changes and changes[-1].param == "kappa" and "κ" in changes[-1].why
    assert len(cast.finalize(tree).keep) > sent
    cast.start_run()
    assert cast.kappa == 1.0


def test_draft_costs_follow_the_measured_draft_time():
    """A drafter far cheaper than the table says (prompt lookup under an assumed cost) earns wider layers."""
    cast = make_cast(CostTable.linear(1.6, 42.0, draft_lam=2.0, draft_delta=4.0), c1=0.87, c2=0.0, max_depth=2)
    tree = DraftTree.with_root(0)
    pool = layer_pool(tree, [0], PEAKED, depth=1)
    before = sum(d.expanded for d in cast.select_layer(tree, pool).decisions)
    changes = []
    for _ in range(5):
        cast.select_layer(tree, pool)
        cast.finalize(tree)
        changes += cast.observe(StepOutcome(tree_size=2, depth=1, accepted=1,
                                            times=Timings(draft_ms=0.1, verify_ms=40.0, other_ms=1.0), prefix_len=300))
    after = sum(d.expanded for d in cast.select_layer(tree, pool).decisions)
    assert cast.draft_scale < 0.5 and any(c.param == "draft_cost_scale" for c in changes)
    assert after > before == 2


def test_where_no_node_could_pay_cast_drafts_nothing_from_the_model_and_says_why():
    """A batch of 4 where every token a request adds costs a whole one-token forward (a 2-core CPU's rows):
    a node accepted for sure yields 1 token per t₁ < C3, so no κ could send one. Cast runs no draft forward,
    forces no node, and says so; alone (batch 1, cheap nodes) it drafts again and says that too."""
    table = CostTable.linear(0.1, 20.0, batches=(1, 4))
    table.target.ms[1] = [[20.0 * n for n in table.ns] for _ in table.contexts]
    cast = make_cast(table)
    cast.see_batch(4)
    tree, widths = grow(cast, PEAKED)
    assert len(tree) == 1 and widths == [] and not cast.speculates
    assert cast.sure_ratios(300) == (1.0, 1.0)
    assert cast.finalize(tree).keep == [0]
    off = cast.observe(StepOutcome(tree_size=0, depth=0, accepted=0, times=Timings(verify_ms=20.0), prefix_len=300))
    assert [(a.param, a.old, a.new) for a in off] == [("speculates", 1.0, 0.0)]
    assert "batch 4" in off[0].why and "1.00 tokens per t₁" in off[0].why and "as in ar" in off[0].why
    cast.see_batch(1)
    draft = grow_tree(cast, StubDrafter(lambda node, k: PEAKED[:k], token_of=lambda node, rank: rank), root=0,
                      max_depth=1000, prefix_len=300)
    assert len(draft.tree) > 1 and cast.speculates and len(cast.finalize(draft.tree).keep) > 1
    on = cast.observe(StepOutcome(tree_size=1, depth=1, accepted=1, times=Timings(verify_ms=20.0), prefix_len=300))
    assert ("speculates", 0.0, 1.0) in [(a.param, a.old, a.new) for a in on]
