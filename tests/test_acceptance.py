"""The acceptance rules on hand-made trees and distributions."""

import torch

from engine.acceptance import _residual, accept_greedy, accept_sampled
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
