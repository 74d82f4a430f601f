"""The acceptance rules on hand-made trees and distributions."""

import pytest
import torch
from scipy.stats import chisquare

from engine import acceptance
from engine.acceptance import _residual, accept_greedy, accept_sampled, children_lists
from engine.sampling import draw_without_replacement
from engine.tree import DraftTree

VOCAB = 6


def one_hot_logits(best: list[int]) -> torch.Tensor:
    """[T, V] logits whose argmax at node i is best[i]."""
    logits = torch.zeros(len(best), VOCAB)
    logits[torch.arange(len(best)), torch.tensor(best)] = 5.0
    return logits


def branching_tree() -> DraftTree:
    """root(0) -> 1 -> 3;  root -> 2 -> 4"""
    tree = DraftTree.with_root(0)
    a = tree.add(0, 1, 0.6, 0.6)
    b = tree.add(0, 2, 0.3, 0.3)
    tree.add(a, 3, 0.5, 0.3)
    tree.add(b, 4, 0.5, 0.15)
    return tree


def test_greedy_follows_the_argmax_path_and_adds_the_bonus():
    tree = branching_tree()
    result = accept_greedy(tree, one_hot_logits([2, 0, 4, 0, 5]))
    assert result.path == [0, 2, 4]
    assert (result.token, result.kind) == (5, "bonus")
    assert result.verdicts == {1: "rejected", 2: "accepted", 4: "accepted"}


def test_greedy_recovers_with_the_argmax_where_no_child_matches():
    tree = branching_tree()
    result = accept_greedy(tree, one_hot_logits([1, 5, 0, 0, 0]))
    assert result.path == [0, 1]
    assert (result.token, result.kind) == (5, "recovered")
    assert result.verdicts[3] == "rejected"
    assert 4 not in result.verdicts, "children of a rejected node are never evaluated"


def test_a_deterministic_child_the_target_cannot_produce_is_always_rejected():
    tree = DraftTree.with_root(0)
    tree.add(0, 1, 0.9, 0.9)
    target = torch.tensor([[0.0, 0.0, 1.0, 0, 0, 0], [1.0 / VOCAB] * VOCAB], dtype=torch.float64)
    for seed in range(20):
        result = accept_sampled(tree, target, {}, torch.Generator().manual_seed(seed))
        assert result.path == [0] and result.token == 2 and result.kind == "recovered"


def test_a_sampled_child_with_q_equal_p_is_always_accepted():
    tree = DraftTree.with_root(0)
    tree.add(0, 3, 0.5, 0.5, sampled=True)
    p = torch.tensor([0.1, 0.1, 0.3, 0.5, 0.0, 0.0], dtype=torch.float64)
    target = torch.stack([p, p])
    for seed in range(20):
        result = accept_sampled(tree, target, {0: p.clone()}, torch.Generator().manual_seed(seed))
        assert result.path == [0, 1] and result.kind == "bonus"


def test_residual_is_the_normalised_positive_part_of_p_minus_q():
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.6, 0.2], dtype=torch.float64)
    assert torch.allclose(_residual(p, q), torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64))
    assert torch.equal(_residual(p, p), p), "p = q leaves nothing to reject; the rule keeps p"


def test_draws_without_replacement_come_in_the_order_of_a_sequential_draw():
    """P(first = i, second = j) = q_i · q_j / (1 − q_i): the first from q, the second from q without the first."""
    q = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    generator = torch.Generator().manual_seed(1)
    trials = 12_000
    counts = {}
    for _ in range(trials):
        pair = tuple(draw_without_replacement(q, 2, generator))
        counts[pair] = counts.get(pair, 0) + 1
    pairs = [(i, j) for i in range(3) for j in range(3) if i != j]
    expected = [trials * q[i].item() * q[j].item() / (1 - q[i].item()) for i, j in pairs]
    assert set(counts) <= set(pairs)
    assert chisquare([counts.get(pair, 0) for pair in pairs], expected).pvalue > 1e-3


def first_token_frequency(p: list[float], q: list[float], children: int, trials: int, seed: int = 0) -> list[float]:
    """How often each token is emitted at the root when `children` siblings are drawn from q as the drafters
    draw them (without replacement, in draw order) and walked by accept_sampled."""
    p_t = torch.tensor(p, dtype=torch.float64)
    q_t = torch.tensor(q, dtype=torch.float64)
    target = torch.stack([p_t] * (children + 1))  # the children's own rows are never read: they end the walk
    generator = torch.Generator().manual_seed(seed)
    counts = [0] * len(p)
    for _ in range(trials):
        tree = DraftTree.with_root(0)
        for token in draw_without_replacement(q_t, children, generator):
            tree.add(0, token, q[token], q[token], sampled=True)
        result = accept_sampled(tree, target, {0: q_t}, generator)
        counts[tree.token[result.path[1]] if len(result.path) > 1 else result.token] += 1
    return [c / trials for c in counts]


def test_several_sampled_siblings_emit_the_target_distribution():
    """q = (0.9, 0.1), p = (0.1, 0.9), both tokens drawn: tried in draw order against q without the earlier
    draws, a is emitted 10 % of the time; 20 000 trials put the 11.1 % of a walk that sorts the siblings by q
    (or keeps the full q after a draw without replacement) 5 standard deviations away (σ = 0.0021)."""
    frequency = first_token_frequency([0.1, 0.9], [0.9, 0.1], children=2, trials=20_000)
    assert frequency[0] == pytest.approx(0.1, abs=0.0055)


P = [0.05, 0.4, 0.05, 0.3, 0.2]  # a target that disagrees with the draft's favourite
Q = [0.5, 0.1, 0.2, 0.1, 0.1]


def chi_square_p(frequency: list[float], expected: list[float], trials: int) -> float:
    return chisquare([f * trials for f in frequency], [e * trials for e in expected]).pvalue


@pytest.mark.parametrize("children", [2, 4])
def test_sampled_siblings_on_a_larger_vocabulary_emit_the_target_distribution(children):
    frequency = first_token_frequency(P, Q, children=children, trials=10_000, seed=children)
    assert chi_square_p(frequency, P, 10_000) > 1e-3, frequency


def sorted_by_q(tree: DraftTree) -> list[list[int]]:
    return [sorted(kids, key=lambda c: -tree.q[c]) for kids in children_lists(tree)]


@pytest.mark.parametrize("fault", ["siblings sorted by q", "the full q after each draw"])
def test_either_fault_of_the_old_walk_fails_the_same_test(fault, monkeypatch):
    """The negative controls: each half of the old walk alone biases the emitted token."""
    if fault == "siblings sorted by q":
        monkeypatch.setattr(acceptance, "children_lists", sorted_by_q)
    else:
        monkeypatch.setattr(acceptance, "_next_draw", lambda q, token: q)
    frequency = first_token_frequency(P, Q, children=3, trials=2_000, seed=3)
    assert chi_square_p(frequency, P, 2_000) < 1e-6, frequency


def test_the_old_walk_emits_the_probe_token_one_time_in_nine(monkeypatch):
    """The issue's probe under the old walk (siblings sorted by q, the full q in every residual): 1/9, not 0.1."""
    monkeypatch.setattr(acceptance, "children_lists", sorted_by_q)
    monkeypatch.setattr(acceptance, "_next_draw", lambda q, token: q)
    frequency = first_token_frequency([0.1, 0.9], [0.9, 0.1], children=2, trials=20_000)
    assert frequency[0] == pytest.approx(1 / 9, abs=0.0055)


def test_sampled_checks_report_the_q_in_force():
    """After a rejected draw, the next sibling's q is read without the rejected token."""
    tree = DraftTree.with_root(0)
    tree.add(0, 0, 0.9, 0.9, sampled=True)
    tree.add(0, 1, 0.1, 0.1, sampled=True)
    p = torch.tensor([0.0, 1.0], dtype=torch.float64)
    q = torch.tensor([0.9, 0.1], dtype=torch.float64)
    result = accept_sampled(tree, torch.stack([p, p, p]), {0: q}, torch.Generator().manual_seed(0))
    first, second = result.visits[0].checks
    assert (first.q, first.ratio, first.accepted) == (0.9, 0.0, False)
    assert (second.q, second.p, second.ratio, second.accepted) == (1.0, 1.0, 1.0, True)
