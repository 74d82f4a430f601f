"""Which path of a verified tree the target keeps, and the token it adds after it.

Walking down from the root, each reached node v holds the target's
distribution p_v over the next token. Its children are tried in order:

- a deterministic child x (top-k drafting: its proposal is a point mass) is
  accepted with probability p(x); on rejection p(x) is zeroed and p renormalised;
- a sampled child x ~ q is accepted with probability min(1, p(x)/q(x)); on
  rejection p becomes the residual norm(max(0, p - q)).

Either rule leaves the emitted token distributed exactly as p_v (recursive
rejection sampling, SpecInfer/EAGLE), so the whole output is the target's own.
If every child is rejected, the recovered token is drawn from what is left of
p; at a leaf the bonus token is drawn from p_v. Greedy decoding is the same
walk with one-hot p, which reduces to: follow the child equal to the argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.tree import DraftTree


@dataclass
class Acceptance:
    path: list[int]  # accepted tree indices from the root, root included
    token: int  # the recovered or bonus token emitted after the path
    kind: str  # "recovered" or "bonus"
    token_p: float  # target probability of that token at the last path node
    verdicts: dict[int, str]  # tree index -> "accepted" / "rejected" for every evaluated draft node
    p_of_node: dict[int, float]  # tree index -> target probability of its token at its parent


def children_lists(tree: DraftTree) -> list[list[int]]:
    """Each node's children, best draft probability first (any fixed order is lossless)."""
    children: list[list[int]] = [[] for _ in range(len(tree))]
    for node in range(1, len(tree)):
        children[tree.parent[node]].append(node)
    for kids in children:
        kids.sort(key=lambda c: -tree.q[c])
    return children


def accept_greedy(tree: DraftTree, target_logits: torch.Tensor) -> Acceptance:
    """target_logits: [T, V]. The longest path of argmax tokens, then the argmax after it."""
    best = target_logits.argmax(-1).tolist()  # [T]
    children = children_lists(tree)
    path, verdicts = [0], {}
    node = 0
    while True:
        match = None
        for child in children[node]:
            hit = match is None and tree.token[child] == best[node]
            verdicts[child] = "accepted" if hit else "rejected"
            match = child if hit else match
        if match is None:
            break
        path.append(match)
        node = match
    kind = "recovered" if children[node] else "bonus"
    probs = torch.softmax(target_logits[path].double(), dim=-1)  # [A, V]: only the rows the walk read
    row = {n: i for i, n in enumerate(path)}
    p_of_node = {child: probs[row[tree.parent[child]], tree.token[child]].item() for child in verdicts}
    return Acceptance(path, best[node], kind, probs[-1, best[node]].item(), verdicts, p_of_node)


def accept_sampled(tree: DraftTree, target_probs: torch.Tensor, draft_dists: dict[int, torch.Tensor],
                   generator: torch.Generator) -> Acceptance:
    """target_probs: [T, V] float64 after temperature/top-k/top-p; draft_dists: node -> [V] float64
    distribution its sampled children were drawn from."""
    children = children_lists(tree)
    path, verdicts, p_of_node = [0], {}, {}
    node = 0
    while True:
        p = target_probs[node].clone()  # [V]
        accepted = None
        for child in children[node]:
            x = tree.token[child]
            p_of_node[child] = target_probs[node, x].item()
            if tree.sampled[child]:
                q = draft_dists[node]  # [V]
                ok = _coin(generator) < min(1.0, (p[x] / q[x]).item())
                p = p if ok else _residual(p, q)
            else:
                ok = _coin(generator) < p[x].item()
                p = p if ok else _zero_out(p, x)
            verdicts[child] = "accepted" if ok else "rejected"
            if ok:
                accepted = child
                break
        if accepted is None:
            break
        path.append(accepted)
        node = accepted
    token = int(torch.multinomial(p, 1, generator=generator))
    kind = "recovered" if children[node] else "bonus"
    return Acceptance(path, token, kind, target_probs[node, token].item(), verdicts, p_of_node)


def _coin(generator: torch.Generator) -> float:
    return torch.rand((), dtype=torch.float64, generator=generator).item()


def _residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)); if p ≤ q everywhere a rejection had probability 0, so keep p."""
    rest = torch.clamp(p - q, min=0.0)
    total = rest.sum()
    return rest / total if total > 0 else p


def _zero_out(p: torch.Tensor, token: int) -> torch.Tensor:
    rest = p.clone()
    rest[token] = 0.0
    total = rest.sum()
    return rest / total if total > 0 else p
