"""Draft trees as flat arrays, and the pure functions that encode them for attention.

A tree of T nodes is seven parallel arrays. Node 0 is the root: the last token
already decided (the previous step's bonus or recovered token, or the prompt's
last token), not yet in the target's KV cache. Every other node is a draft
token whose parent comes earlier in the arrays, so `parent[i] < i`.

    parent   [T]  index of the parent node, -1 for the root
    token    [T]  token id
    depth    [T]  0 for the root, parent's depth + 1 otherwise
    q        [T]  draft probability of the token given its parent (1 for the root)
    score    [T]  cumulative path score: product of q from the root (1 for the root)
    source   [T]  which drafter proposed it ("root" for the root)
    sampled  [T]  drawn from the draft distribution (verified against q) rather than chosen as its top-k

The encodings follow EAGLE: a node attends to the cached prefix, to its
ancestors and to itself; its position id is prefix length + depth.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class DraftTree:
    parent: list[int] = field(default_factory=list)
    token: list[int] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    q: list[float] = field(default_factory=list)
    score: list[float] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    sampled: list[bool] = field(default_factory=list)

    @classmethod
    def with_root(cls, token: int) -> "DraftTree":
        tree = cls()
        tree.parent.append(-1)
        tree.token.append(token)
        tree.depth.append(0)
        tree.q.append(1.0)
        tree.score.append(1.0)
        tree.source.append("root")
        tree.sampled.append(False)
        return tree

    def __len__(self) -> int:
        return len(self.token)

    def add(self, parent: int, token: int, q: float, score: float, source: str = "draft",
            sampled: bool = False) -> int:
        """Appends a node under `parent` and returns its index."""
        assert 0 <= parent < len(self), "a node's parent must already be in the tree"
        self.parent.append(parent)
        self.token.append(token)
        self.depth.append(self.depth[parent] + 1)
        self.q.append(q)
        self.score.append(score)
        self.source.append(source)
        self.sampled.append(sampled)
        return len(self) - 1

    def extend(self, parent: list[int], token: list[int], q: list[float], score: list[float], source: list[str],
               sampled: list[bool]) -> int:
        """Appends nodes whose parents are already in the tree (a layer: `add` for each, in one go); returns
        the index of the first.

        >>> t = DraftTree.with_root(5); t.extend([0, 0], [7, 8], [0.5, 0.3], [0.5, 0.3], ["x", "x"], [False, False])
        1
        >>> t.depth
        [0, 1, 1]
        """
        first = len(self)
        assert all(0 <= p < first for p in parent), "a node's parent must already be in the tree"
        depth = self.depth
        self.parent += parent
        self.token += token
        self.depth += [depth[p] + 1 for p in parent]
        self.q += q
        self.score += score
        self.source += source
        self.sampled += sampled
        return first

    @property
    def max_depth(self) -> int:
        return max(self.depth)

    @property
    def is_path(self) -> bool:
        """Whether every node is the child of the one before it: a chain, which a causal forward verifies
        under the same visibility as its tree mask.

        >>> t = DraftTree.with_root(5); a = t.add(0, 7, 0.5, 0.5); t.is_path
        True
        >>> b = t.add(0, 8, 0.3, 0.3); t.is_path
        False
        """
        return all(p == i for i, p in enumerate(self.parent[1:]))

    def children(self, node: int) -> list[int]:
        return [i for i, p in enumerate(self.parent) if p == node]

    def subset(self, keep: list[int]) -> "DraftTree":
        """The tree restricted to `keep` (ancestor-closed, must contain the root), reindexed.

        >>> t = DraftTree.with_root(5); a = t.add(0, 7, 0.5, 0.5); b = t.add(0, 8, 0.3, 0.3)
        >>> c = t.add(a, 9, 0.5, 0.25); t.subset([0, a, c]).parent
        [-1, 0, 1]
        """
        keep = sorted(keep)
        assert keep[0] == 0, "a subset keeps the root"
        new_index = {old: new for new, old in enumerate(keep)}
        sub = DraftTree()
        for old in keep:
            p = self.parent[old]
            assert p == -1 or p in new_index, "a subset must be ancestor-closed"
            sub.parent.append(-1 if p == -1 else new_index[p])
            sub.token.append(self.token[old])
            sub.depth.append(self.depth[old])
            sub.q.append(self.q[old])
            sub.score.append(self.score[old])
            sub.source.append(self.source[old])
            sub.sampled.append(self.sampled[old])
        return sub


def ancestor_matrix(parent: list[int]) -> torch.Tensor:
    """[T, T] bool: entry (i, j) is True iff j is i itself or one of its ancestors.

    >>> ancestor_matrix([-1, 0, 0, 1]).int().tolist()
    [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
    """
    lines: list[list[int]] = []  # each node's ancestors and itself, root first
    for i, p in enumerate(parent):
        assert (i == 0) == (p == -1) and p < i, "parents must come before their children"
        lines.append((lines[p] if p >= 0 else []) + [i])
    mask = torch.zeros(len(parent), len(parent), dtype=torch.bool)
    mask[[i for i, line in enumerate(lines) for _ in line], [j for line in lines for j in line]] = True
    return mask


def position_ids(depth: list[int], prefix_len: int) -> torch.Tensor:
    """[T] long: prefix length + depth.

    >>> position_ids([0, 1, 1, 2], prefix_len=10).tolist()
    [10, 11, 11, 12]
    """
    return torch.tensor(depth, dtype=torch.long) + prefix_len


def root_to_leaf_paths(parent: list[int]) -> list[list[int]]:
    """Every root-to-leaf path as node indices, leaves in index order.

    >>> root_to_leaf_paths([-1, 0, 0, 1])
    [[0, 2], [0, 1, 3]]
    """
    has_child = set(p for p in parent if p >= 0)
    return [path_to(parent, leaf) for leaf in range(len(parent)) if leaf not in has_child]


def path_to(parent: list[int], node: int) -> list[int]:
    """Node indices from the root down to `node`.

    >>> path_to([-1, 0, 0, 1], 3)
    [0, 1, 3]
    """
    path = []
    while node != -1:
        path.append(node)
        node = parent[node]
    return path[::-1]


def attention_bias(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """[1, 1, N, S] additive mask from an [N, S] bool matrix of allowed columns.

    0 where attention is allowed, the dtype's minimum elsewhere: a boolean
    4-D mask is misread by transformers' eager attention.

    >>> attention_bias(torch.tensor([[True, False]]), torch.float32)[0, 0, 0, 1] < -1e30
    tensor(True)
    """
    bias = torch.zeros(allowed.shape, dtype=dtype)
    bias.masked_fill_(~allowed, torch.finfo(dtype).min)
    return bias[None, None]


def tree_attention_allowed(parent: list[int], prefix_len: int) -> torch.Tensor:
    """[T, P + T] bool: every node sees the whole prefix, its ancestors and itself.

    >>> tree_attention_allowed([-1, 0, 0], prefix_len=2).int().tolist()
    [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 0, 1]]
    """
    tree = ancestor_matrix(parent)  # [T, T]
    prefix = torch.ones(len(parent), prefix_len, dtype=torch.bool)  # [T, P]
    return torch.cat([prefix, tree], dim=1)
