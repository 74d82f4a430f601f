import torch

from engine.tree import (DraftTree, ancestor_matrix, attention_bias, path_to, position_ids, root_to_leaf_paths,
                         tree_attention_allowed)


def small_tree() -> DraftTree:
    """root(5) -> a(7) -> c(9);  root -> b(8)"""
    tree = DraftTree.with_root(5)
    a = tree.add(0, 7, 0.5, 0.5)
    tree.add(0, 8, 0.3, 0.3)
    tree.add(a, 9, 0.4, 0.2)
    return tree


def test_add_records_depth_and_parent():
    tree = small_tree()
    assert tree.parent == [-1, 0, 0, 1]
    assert tree.depth == [0, 1, 1, 2]
    assert tree.max_depth == 2
    assert tree.children(0) == [1, 2]


def test_ancestor_matrix_lets_each_node_see_its_path_only():
    mask = ancestor_matrix(small_tree().parent)
    assert mask.tolist() == [[True, False, False, False],
                             [True, True, False, False],
                             [True, False, True, False],
                             [True, True, False, True]]


def test_position_ids_are_prefix_length_plus_depth():
    assert position_ids(small_tree().depth, 7).tolist() == [7, 8, 8, 9]


def test_paths_reach_every_leaf():
    parent = small_tree().parent
    assert root_to_leaf_paths(parent) == [[0, 2], [0, 1, 3]]
    assert path_to(parent, 3) == [0, 1, 3]


def test_prefix_columns_are_always_visible():
    allowed = tree_attention_allowed([-1, 0, 1], prefix_len=3)
    assert allowed[:, :3].all()
    assert allowed[:, 3:].tolist() == ancestor_matrix([-1, 0, 1]).tolist()


def test_attention_bias_is_zero_where_allowed_and_minimum_elsewhere():
    bias = attention_bias(torch.tensor([[True, False], [True, True]]), torch.bfloat16)
    assert bias.shape == (1, 1, 2, 2)
    assert bias[0, 0, 0, 0] == 0 and bias[0, 0, 0, 1] == torch.finfo(torch.bfloat16).min


def test_subset_reindexes_an_ancestor_closed_selection():
    sub = small_tree().subset([0, 1, 3])
    assert sub.parent == [-1, 0, 1]
    assert sub.token == [5, 7, 9]
    assert sub.depth == [0, 1, 2]
