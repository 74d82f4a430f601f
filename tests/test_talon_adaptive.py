"""talon-adaptive: μ and N moved for measured throughput, every move explained, bad moves undone."""

from __future__ import annotations

import pytest

from engine.costs import CostTable
from engine.errors import RequestError
from engine.policies import POLICIES, make_policy
from engine.policies.base import PolicyContext, StepOutcome
from engine.timing import Timings
from engine.policies.talon_adaptive import TalonAdaptivePolicy

GPU_LIKE = CostTable.linear(lam=0.01, delta=20.0)  # verifying more tokens is nearly free
CPU_LIKE = CostTable.linear(lam=1.6, delta=42.0)  # every verified token costs


def make(table: CostTable, **params) -> TalonAdaptivePolicy:
    """The moves from a given start: the first tree at N as given (first_cost 0), unless a test says otherwise."""
    return make_policy("talon-adaptive", {"window": 4, "first_window": 4, "first_cost": 0, **params},
                       PolicyContext(costs=table))


def outcome(tree_size: int, depth: int, accepted: int, verify_ms: float = 50.0, draft_ms: float = 10.0) -> StepOutcome:
    return StepOutcome(tree_size=tree_size, depth=depth, accepted=accepted,
                       times=Timings(draft_ms=draft_ms, verify_ms=verify_ms, other_ms=1.0), prefix_len=300)


def feed(policy: TalonAdaptivePolicy, step: StepOutcome, times: int) -> list:
    changes = []
    for _ in range(times):
        changes += policy.observe(step)
    return changes


def test_talon_adaptive_is_registered():
    assert POLICIES["talon-adaptive"] is TalonAdaptivePolicy


@pytest.mark.parametrize("params, field, words", [
    ({"budget": 64, "budget_min": 64, "budget_max": 32}, "params.budget_max", "budget_min 64 is above budget_max 32"),
    ({"mu_min": 0.2, "mu_max": 0.1, "mu": 0.2}, "params.mu_max", "mu_min 0.2 is above mu_max 0.1"),
    ({"budget": 300}, "params.budget_max", "budget 300 is above budget_max 256"),
    ({"budget": 4, "budget_min": 8}, "params.budget_min", "budget_min 8 is above budget 4"),
    ({"mu": 0.001}, "params.mu_min", "mu_min 0.002 is above mu 0.001"),
])
def test_min_max_pairs_out_of_order_are_refused_naming_both(params, field, words):
    with pytest.raises(RequestError) as refused:
        make(GPU_LIKE, **params)
    assert refused.value.field == field and words in str(refused.value)


def test_a_start_inside_its_range_is_accepted():
    policy = make(GPU_LIKE, budget=16, budget_min=16, budget_max=16, mu=0.1, mu_min=0.1, mu_max=0.1)
    assert (policy.params.budget, policy.params.mu) == (16, 0.1)


def test_nothing_changes_before_a_window_is_measured():
    policy = make(CPU_LIKE)
    assert feed(policy, outcome(60, 5, 2), 3) == []


@pytest.mark.parametrize("table, grows", [(GPU_LIKE, True), (CPU_LIKE, False)])
def test_full_trees_move_the_budget_the_way_the_cost_table_favours(table, grows):
    policy = make(table, budget=60)
    changes = feed(policy, outcome(60, 5, 2), 4)
    assert [c.param for c in changes] == ["budget"]
    assert (changes[0].new > 60) == grows
    assert policy.params.budget == changes[0].new
    assert "tok/s" in changes[0].why and "cost table" in changes[0].why


def test_a_move_that_costs_throughput_is_undone_and_turned_around():
    policy = make(GPU_LIKE, budget=60)
    [grow] = feed(policy, outcome(60, 5, 2, verify_ms=50.0), 4)
    [undo] = feed(policy, outcome(grow.new, 5, 2, verify_ms=80.0), 4)
    assert (undo.param, undo.old, undo.new) == ("budget", grow.new, 60)
    assert undo.why.startswith("undone")
    assert policy.params.budget == 60
    [shrink] = feed(policy, outcome(60, 5, 2, verify_ms=50.0), 4)
    assert shrink.param == "budget" and shrink.new < 60


def test_a_move_that_holds_throughput_is_kept_and_continued():
    policy = make(GPU_LIKE, budget=8)  # far below the bound: the first move cannot reach it
    [grow] = feed(policy, outcome(8, 5, 2), 4)
    [again] = feed(policy, outcome(grow.new, 5, 3), 4)
    assert again.param == "budget" and again.old == grow.new and again.new > grow.new


def test_a_budget_move_goes_as_far_as_the_cost_table_predicts_a_gain_not_one_factor():
    """On costs where every verified token costs, 60-node trees shrink in one window to what pays (one
    halving per window spent most of a short request on trees too wide to pay)."""
    policy = make(CPU_LIKE, budget=60)
    [shrink] = feed(policy, outcome(60, 5, 2), 4)
    assert shrink.param == "budget" and shrink.new < 60 / 2
    assert shrink.new >= policy.params.budget_min


def test_the_first_window_is_one_step_by_default():
    """TALON's 60 nodes are a GPU's budget: on a CPU the first step says so, not the first three."""
    policy = make_policy("talon-adaptive", {"budget": 60, "first_cost": 0}, PolicyContext(costs=CPU_LIKE))
    [shrink] = policy.observe(outcome(60, 5, 2))
    assert shrink.param == "budget" and shrink.new < 60
    assert feed(policy, outcome(shrink.new, 5, 2), policy.params.window - 1) == []  # then every `window` steps


def test_a_budget_measured_slower_is_not_tried_again_on_the_models_word():
    policy = make(GPU_LIKE, budget=60)
    [grow] = feed(policy, outcome(60, 5, 2, verify_ms=50.0), 4)
    [undo] = feed(policy, outcome(grow.new, 5, 4, verify_ms=150.0), 4)  # more accepted, but far slower
    assert undo.why.startswith("undone") and policy.params.budget == 60
    later = [c for _ in range(4) for c in feed(policy, outcome(60, 5, 2, verify_ms=50.0), 4)]
    assert all(c.new != grow.new for c in later if c.param == "budget")


def test_no_budget_move_where_the_cost_table_predicts_no_gain():
    """At budget_min, with growing undone, the only move left is one the model predicts slower: none is made
    (trying it every other window cost a third of a request's steps at the slower budget)."""
    policy = make(CPU_LIKE, budget=8)
    changes = [c for _ in range(6) for c in feed(policy, outcome(8, 3, 1), 4)]
    assert all(c.param != "budget" for c in changes) and policy.params.budget == 8


@pytest.mark.parametrize("accepted, up", [(4, True), (1, False)])
def test_gate_moves_deeper_when_drafts_are_accepted_and_wider_when_not(accepted, up):
    policy = make(CPU_LIKE, budget=60, mu=0.03)
    [change] = feed(policy, outcome(20, 5, accepted), 4)  # trees well under N: the gate binds
    assert change.param == "mu"
    assert (change.new > 0.03) == up
    assert policy.params.mu == change.new


def test_parameters_stay_within_bounds():
    policy = make(GPU_LIKE, budget=250, budget_max=256)
    for _ in range(20):
        feed(policy, outcome(policy.params.budget, 5, 2), 4)
        assert policy.params.budget_min <= policy.params.budget <= 256


def test_start_run_restores_the_initial_parameters():
    policy = make(GPU_LIKE, budget=60, mu=0.03)
    feed(policy, outcome(60, 5, 2), 4)
    assert policy.params.budget != 60
    policy.start_run()
    assert (policy.params.budget, policy.params.mu) == (60, 0.03)


def test_the_first_tree_is_talons_n_where_verifying_it_is_cheap_and_fewer_nodes_where_it_is_not():
    """first_cost 2: at most as many nodes as verify in two one-token forwards by the table. CPU_LIKE verifies
    n tokens in 1.6 n + 42 ms, so 28 tokens (27 nodes and the root) cost 86.8 ≤ 2 × 43.6 and 29 cost 88.4."""
    cpu = make(CPU_LIKE, budget=60, first_cost=2)
    assert cpu.params.budget == 27 and cpu.initial.budget == 60
    feed(cpu, outcome(27, 5, 2), 4)
    cpu.start_run()  # every request starts there again
    assert cpu.params.budget == 27
    assert make(GPU_LIKE, budget=60, first_cost=2).params.budget == 60
    assert make(CPU_LIKE, budget=60, first_cost=0).params.budget == 60
    assert make(CPU_LIKE, budget=60, budget_min=40, first_cost=2).params.budget == 40  # none fits: budget_min
    default = make_policy("talon-adaptive", {}, PolicyContext(costs=CPU_LIKE))
    assert default.params.first_cost == 2 and default.params.budget == 27


def test_the_roots_top_k_follows_the_budget_so_a_small_budget_can_grow_deep():
    """At TALON's N 60 the root keeps its K 10; at N 4 (a CPU's budget) K is 1, and the gate spends the rest
    of the budget below the root's best child where the draft is sure, not on three more of the root's
    children. A budget move takes K with it and says so; `root_follows_budget` false keeps K fixed."""
    from engine.drafting import grow_tree
    from tiny_models import StubDrafter

    sure = StubDrafter(lambda node, k: [0.9, 0.01, 0.005, 0.002][:k])  # the draft is sure at every node
    follows = make(CPU_LIKE, budget=4)
    fixed = make(CPU_LIKE, budget=4, root_follows_budget=False)
    assert (follows.params.top_k, fixed.params.top_k, make(GPU_LIKE, budget=60).params.top_k) == (1, 10, 10)
    deep, wide = (grow_tree(policy, sure, root=0, max_depth=10).tree for policy in (follows, fixed))
    assert deep.depth == [0, 1, 2, 3, 4] and wide.depth == [0, 1, 1, 1, 1]

    grown = make(GPU_LIKE, budget=8, budget_max=256)
    [grow] = feed(grown, outcome(8, 5, 2), 4)
    assert grown.params.top_k == grown.root_top_k(grow.new) > 1 and "the root's top-K 1 →" in grow.why
    grown.start_run()
    assert (grown.params.budget, grown.params.top_k) == (8, 1)


def test_a_root_of_one_child_offers_its_line_to_the_drafter():
    """With K 1 the tree may be a line down to the budget: the policy offers N − 1 pairs to run in the root's
    forward (the same tree whether or not the layers take them); with K > 1, or the root gated, none."""
    assert make(CPU_LIKE, budget=4).line_ahead() == 3
    assert make(CPU_LIKE, budget=4, root_follows_budget=False).line_ahead() == 0
    assert make(CPU_LIKE, budget=4, forced_layers=0).line_ahead() == 0
    assert make(GPU_LIKE, budget=60).line_ahead() == 0
    assert make(CPU_LIKE, budget=60, top_k=1).line_ahead() == 0  # K 1 by hand at a wide budget: no line of 59
    assert make(CPU_LIKE, budget=8, top_k=1, root_follows_budget=False).line_ahead() == 7
