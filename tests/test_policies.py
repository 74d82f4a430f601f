"""Decision records of the built-in policies on synthetic candidate pools (no model involved)."""

import random

import pytest

from engine.drafters.base import Proposal
from engine.drafting import grow_tree, pool_from
from engine.errors import RequestError
from engine.policies import POLICIES, make_policy
from engine.costs import CostTable
from engine.policies.base import PolicyContext, Pool, StepOutcome, rerank_top, top_indices
from engine.timing import Timings
from engine.tree import DraftTree
from tiny_models import StubDrafter


def pool_under(tree: DraftTree, frontier: list[int], qs: list[list[float]], depth: int) -> Pool:
    proposals = [Proposal(node=node, token=[100 * node + rank for rank in range(len(children))], q=children,
                          source="draft") for node, children in zip(frontier, qs)]
    return pool_from(tree, proposals, depth)


def grow(policy, qs_of, max_layers: int = 40) -> tuple[DraftTree, list]:
    """Runs a policy with the engine's own draft loop, with q's from `qs_of(node, k)`."""
    draft = grow_tree(policy, StubDrafter(qs_of), root=0, max_depth=max_layers)
    return draft.tree, [(layer.pool, layer.selection) for layer in draft.layers]


def random_qs(seed: int):
    rng = random.Random(seed)

    def qs_of(node: int, k: int) -> list[float]:
        raw = sorted((rng.random() ** 3 for _ in range(k)), reverse=True)
        total = sum(raw) / rng.uniform(0.5, 1.0)
        return [r / total for r in raw]
    return qs_of


@pytest.mark.parametrize("seed", range(10))
def test_talon_keeps_exactly_k_at_layer_one_gates_deeper_layers_and_respects_the_budget(seed):
    policy = make_policy("talon")
    tree, selections = grow(policy, random_qs(seed))
    first_pool, first = selections[0]
    assert sum(d.kept for d in first.decisions) == policy.params.top_k
    for pool, selection in selections[1:]:
        assert selection.anchor == max(pool.score)
        assert selection.threshold == pytest.approx(policy.params.mu * selection.anchor)
        for i, decision in enumerate(selection.decisions):
            if decision.kept:
                assert pool.score[i] >= selection.threshold
            elif pool.score[i] < selection.threshold:
                assert decision.reason == "below_threshold"
            else:
                assert decision.reason == "budget"
    assert len(tree) - 1 <= policy.params.budget


def test_talon_grows_deep_and_narrow_when_confident_and_shallow_and_wide_when_not():
    confident = grow(make_policy("talon"), lambda node, k: [0.95] + [0.05 / (k - 1)] * (k - 1))[0]
    uncertain = grow(make_policy("talon"), lambda node, k: [1.0 / k] * k)[0]
    assert confident.max_depth > uncertain.max_depth
    widest = lambda tree: max(tree.depth.count(d) for d in range(1, tree.max_depth + 1))
    assert widest(uncertain) > widest(confident)


@pytest.mark.parametrize("shape, qs_of", [("flat", lambda node, k: [0.02] * k),
                                           ("peaked", lambda node, k: [0.9] + [0.1 / (k - 1)] * (k - 1))])
def test_talon_stops_drafting_the_moment_its_budget_is_full(shape, qs_of):
    """TALON ends growth when a layer fills N: one draft forward per layer of the tree, none wasted."""
    policy = make_policy("talon", {"budget": 30})
    drafter = StubDrafter(qs_of)
    draft = grow_tree(policy, drafter, root=0, max_depth=40)
    assert len(draft.tree) - 1 == 30, f"the budget binds for a {shape} draft"
    assert drafter.meter.forwards == draft.tree.max_depth == len(draft.layers)
    last = draft.layers[-1].selection.decisions
    assert not any(d.expanded for d in last)
    assert {d.reason for d in last if d.kept} == {"budget"}


def test_talon_pools_every_child_that_can_pass_the_gate_not_only_the_top_k():
    """A parent at 0.5 with 20 children at q = 0.05 beside one at 0.3 with a child at 0.9: all 21 pass
    p(u) >= μ·m_d (0.025 and 0.27 against 0.0081), so all 21 are kept, not the top-K of each parent."""
    children = {0: [0.5, 0.3], 1: [0.05] * 20, 2: [0.9]}
    policy = make_policy("talon", {"top_k": 10})
    draft = grow_tree(policy, StubDrafter(lambda node, k: children.get(node, [])[:k]), root=0, max_depth=40)
    second = draft.layers[1]
    assert sum(d.kept for d in second.selection.decisions) == 21
    assert second.selection.anchor == pytest.approx(0.27)


@pytest.mark.parametrize("name, params", [("talon", {}), ("talon", {"forced_layers": 0, "mu": 0.1}),
                                           ("talon", {"budget": 200, "mu": 0.005}),
                                           ("talon-adaptive", {}), ("eagle", {"depth": 5})])
@pytest.mark.parametrize("seed", range(6))
def test_a_run_without_per_candidate_events_grows_the_same_tree_from_pools_cut_at_the_gate(name, params, seed):
    """Without whole pools (the bench's setting) a gated layer pools only the candidates at or above μ·m_d:
    the same tree, node for node, with fewer candidates. Ties included: q's from a small set of values."""
    rng = random.Random(seed)

    def qs_of(node: int, k: int) -> list[float]:
        return sorted((rng.choice([0.5, 0.2, 0.05, 0.01, 0.001]) for _ in range(k)), reverse=True)

    draws = {}
    def remembered(node: int, k: int) -> list[float]:  # both runs see the same q's at the same node
        if (node, k) not in draws:
            draws[node, k] = qs_of(node, k)
        return draws[node, k]

    whole = grow_tree(make_policy(name, params), StubDrafter(remembered), root=0, max_depth=40)
    quiet = make_policy(name, params)
    quiet.explain = False  # no per-candidate events
    cut = grow_tree(quiet, StubDrafter(remembered), root=0, max_depth=40)
    fields = ("parent", "token", "q", "score", "depth")
    assert [getattr(cut.tree, f) for f in fields] == [getattr(whole.tree, f) for f in fields]
    assert sum(len(layer.pool) for layer in cut.layers) <= sum(len(layer.pool) for layer in whole.layers)
    if name == "talon" and params.get("forced_layers") == 0:
        assert sum(len(layer.pool) for layer in cut.layers) < sum(len(layer.pool) for layer in whole.layers)


def test_talon_with_no_forced_layers_gates_from_the_root():
    """k = 0, the paper's pure-gating ablation: the root's children pass the gate, not a top-K."""
    qs_of = lambda node, k: [0.6, 0.3, 0.01] + [0.001] * (k - 3) if node == 0 else []
    gated = grow_tree(make_policy("talon", {"forced_layers": 0}), StubDrafter(qs_of), root=0, max_depth=40)
    forced = grow_tree(make_policy("talon", {"forced_layers": 1}), StubDrafter(qs_of), root=0, max_depth=40)
    first = gated.layers[0]
    assert first.selection.anchor == pytest.approx(0.6)
    assert [d.reason for d in first.selection.decisions[:4]] == ["threshold", "threshold", "below_threshold",
                                                                 "below_threshold"]
    assert len(first.pool) == 60, "a gated root layer asks for as many children as the budget allows"
    assert len(gated.tree) - 1 == 2 and len(forced.tree) - 1 == 10


def test_eagle_expands_the_top_k_by_path_score_and_reranks_to_m():
    policy = make_policy("eagle", {"depth": 4, "top_k": 3, "total": 10})
    tree, selections = grow(policy, random_qs(3))
    for pool, selection in selections:
        expanded = [i for i, d in enumerate(selection.decisions) if d.expanded]
        best = sorted(range(len(pool)), key=lambda i: -pool.score[i])[:3]
        assert sorted(expanded) == sorted(best) or pool.depth == 4
    assert tree.max_depth == 4
    rerank = policy.finalize(tree)
    assert len(rerank.keep) == 11 and rerank.keep[0] == 0
    kept = set(rerank.keep)
    assert all(tree.parent[i] in kept for i in rerank.keep[1:]), "the reranked tree is ancestor-closed"
    assert all(d.reason == "rerank" for d in rerank.pruned.values())


def test_eagle_at_the_eagle3_setting_talon_reports_drafts_nine_layers_in_nine_forwards():
    """TALON's EAGLE-3 baseline: D = 8 in EAGLE's count, K = 10, δ = D + 1 = 9; here `depth=9`."""
    policy = make_policy("eagle", {"depth": 9})
    drafter = StubDrafter(random_qs(4))
    draft = grow_tree(policy, drafter, root=0, max_depth=40)
    assert drafter.meter.forwards == draft.tree.max_depth == 9
    assert len(draft.tree) - 1 == 10 + 8 * 100, "K children for each of K frontier nodes on every layer past the first"
    assert len(policy.finalize(draft.tree).keep) == 61


def test_rerank_keeps_ancestor_closure_under_ties():
    tree = DraftTree.with_root(0)
    a = tree.add(0, 1, 0.5, 0.5)
    tree.add(a, 2, 1.0, 0.5)
    tree.add(0, 3, 0.5, 0.5)
    keep = rerank_top(tree, 2).keep
    assert all(tree.parent[i] in keep for i in keep[1:])


def test_chain_drafts_gamma_tokens_in_a_line():
    tree, _ = grow(make_policy("chain", {"gamma": 4, "pick_gamma": False}), lambda node, k: [0.9])
    assert tree.parent == [-1, 0, 1, 2, 3]


# Leviathan et al. §3.5: γ maximises E(γ) / cost(γ), E(γ) = (1 − α^(γ+1)) / (1 − α). With a flat verify of 10 ms
# and 1 ms draft layers, α = 0.6 (the prior) peaks at γ = 3: 2.18 tokens / 13 ms beats 1.96 / 12 and 2.31 / 14.
FLAT = PolicyContext(costs=CostTable.linear(0.0, 10.0))
STEEP = PolicyContext(costs=CostTable.linear(1.0, 10.0))  # each verified token adds a tenth of a forward


def outcome(depth: int, accepted: int) -> StepOutcome:
    return StepOutcome(tree_size=depth, depth=depth, accepted=accepted, prefix_len=100, times=Timings())


def test_chain_picks_leviathans_gamma_from_the_prior_and_the_costs():
    assert make_policy("chain", {"gamma": 8}, FLAT).gamma_now == 3
    assert make_policy("chain", {"gamma": 2}, FLAT).gamma_now == 2  # gamma bounds it
    assert make_policy("chain", {"gamma": 8}, STEEP).gamma_now < 3  # a verify that grows favours shorter chains
    tree, _ = grow(make_policy("chain", {"gamma": 8}, FLAT), lambda node, k: [0.9])
    assert tree.parent == [-1, 0, 1, 2]


def test_chain_gamma_follows_the_measured_acceptance_and_says_why():
    policy = make_policy("chain", {"gamma": 8}, FLAT)
    moves = [a for _ in range(10) for a in policy.observe(outcome(policy.gamma_now, policy.gamma_now))]
    assert policy.gamma_now == 8 and policy.alpha > 0.9  # every draft accepted: the longest chain pays
    assert moves and all(a.param == "gamma" and a.new > a.old for a in moves) and "α ≈" in moves[-1].why
    for _ in range(30):  # every first draft rejected: the old verdicts fade, DECAY a step
        policy.observe(outcome(policy.gamma_now, 0))
    assert policy.gamma_now == 1 and policy.alpha < 0.4


def test_chain_gamma_reads_the_draft_cost_from_the_table():
    """Draft forwards at 5 ms, not 1 ms: shorter chains pay better."""
    dear = PolicyContext(costs=CostTable.linear(0.0, 10.0, draft_lam=0.0, draft_delta=5.0))
    assert make_policy("chain", {"gamma": 8}, dear).gamma_now < make_policy("chain", {"gamma": 8}, FLAT).gamma_now


def test_chain_with_pick_gamma_off_keeps_gamma():
    policy = make_policy("chain", {"gamma": 6, "pick_gamma": False}, FLAT)
    assert [policy.observe(outcome(6, 0)) for _ in range(5)] == [[]] * 5 and policy.gamma_now == 6


def test_ar_never_drafts():
    assert not POLICIES["ar"].drafts


@pytest.mark.parametrize("params, field", [({"mu": 0}, "params.mu"), ({"mu": 1.5}, "params.mu"),
                                           ({"budget": 0}, "params.budget"), ({"nope": 1}, "params.nope")])
def test_bad_talon_parameters_are_named(params, field):
    with pytest.raises(RequestError) as err:
        make_policy("talon", params)
    assert err.value.field == field


def test_unknown_policy_is_named():
    with pytest.raises(RequestError, match="unknown policy"):
        make_policy("medusa")


def test_top_indices_orders_by_value_then_index_on_pools_full_of_ties():
    """The order every top-K policy ranks by: larger value first, the lower index among equals (0.0 and -0.0
    equal too)."""
    rng = random.Random(0)
    for _ in range(500):
        values = [rng.choice([0.0, -0.0, 0.1, 0.5, 0.3, 1e-9]) for _ in range(rng.randint(0, 40))]
        k = rng.randint(0, 45)
        assert top_indices(values, k) == sorted(range(len(values)), key=lambda i: (-values[i], i))[:k]


def test_chain_decodes_as_ar_where_no_draft_pays_and_drafts_again_as_its_verdicts_fade():
    """Leviathan's γ = 0: in a batch of 4 whose every token a request adds costs a whole one-token forward, a
    draft at α 0.6 cannot pay (1.6 tokens in 2 forwards against 1 in 1); the chain drafts nothing from the model
    and prices a free match at that batch's row. Alone it drafts again; and where low verdicts turned it off, the
    prior comes back as they fade, so it tries again."""
    table = CostTable.linear(0.5, 10.0, batches=(1, 4))
    table.target.ms[1] = [[10.0 * n for n in table.ns] for _ in table.contexts]
    policy = make_policy("chain", {"gamma": 4}, PolicyContext(costs=table))
    assert policy.gamma_now >= 1
    policy.see_batch(4)
    moves = policy.observe(outcome(policy.gamma_now, policy.gamma_now // 2))
    assert policy.gamma_now == 0 and policy.line_ahead() == 0 and not policy.drafts_from_model(1, 100)
    assert moves[-1].new == 0 and "no draft (the root alone, as ar)" in moves[-1].why
    class Matching(StubDrafter):  # a sure text match, free to draft: 0.9 of a token for a whole forward
        def free_proposals(self, tree, frontier, k):
            return self.propose(tree, frontier, k)
    matching = Matching(lambda node, k: [0.9], grows_free=lambda tree, node: True)
    assert grow_tree(policy, matching, root=0, max_depth=8, prefix_len=100).tree.parent == [-1]
    policy.see_batch(1)
    policy.observe(outcome(0, 0))
    assert policy.gamma_now >= 1 and policy.drafts_from_model(1, 100)
    dear = make_policy("chain", {"gamma": 4}, PolicyContext(costs=CostTable.linear(0.5, 10.0, draft_delta=3.0)))
    gammas = []
    for _ in range(40):  # every draft rejected: off ...
        dear.observe(outcome(dear.gamma_now, 0))
        gammas.append(dear.gamma_now)
    assert 0 in gammas
    for _ in range(30):
        dear.observe(outcome(0, 0))  # ... and no verdicts: α drifts back to the prior, and the chain drafts again
    assert dear.gamma_now >= 1 and abs(dear.alpha - 0.6) < 0.1
