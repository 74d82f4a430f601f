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

The walk is returned as it happened: for every node it visited, each child
tried with the numbers that decided it (the p in force, q, the ratio, the
uniform draw u), and where every child was rejected, what was left of p. The
web app's sampling panel draws exactly these numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.tree import DraftTree


@dataclass
class Check:
    """One child tried at a visited node."""

    child: int  # tree index
    token: int
    rule: str  # "greedy" (is it the argmax?), "deterministic" (accept with p), "sampled" (accept with min(1, p/q))
    p: float  # target probability of the token under the p in force when tried
    q: float  # the child's draft probability
    ratio: float  # the acceptance probability: min(1, p/q), p, or 1/0 for greedy
    u: float | None  # the uniform draw compared with `ratio` (None for greedy)
    accepted: bool


@dataclass
class Visit:
    """A node the walk reached: the children it tried and, if it stopped here, what it drew."""

    node: int
    checks: list[Check] = field(default_factory=list)
    left: torch.Tensor | None = None  # [V] what remained of p after every child was rejected (sampling only)
    drawn: int | None = None  # the recovered or bonus token drawn here (the walk's last node only)


@dataclass
class Acceptance:
    path: list[int]  # accepted tree indices from the root, root included
    token: int  # the recovered or bonus token emitted after the path
    kind: str  # "recovered" or "bonus"
    token_p: float  # target probability of that token at the last path node
    visits: list[Visit]  # one per path node, in walk order
    p_of_node: dict[int, float]  # tree index -> target probability of its token at its parent

    @property
    def verdicts(self) -> dict[int, str]:
        """Tree index -> "accepted" / "rejected" for every evaluated draft node."""
        return {check.child: "accepted" if check.accepted else "rejected"
                for visit in self.visits for check in visit.checks}


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
    path, visits = [0], []
    node = 0
    while True:
        visit = Visit(node)
        visits.append(visit)
        match = None
        for child in children[node]:
            hit = match is None and tree.token[child] == best[node]
            visit.checks.append(Check(child, tree.token[child], "greedy", 0.0, tree.q[child], float(hit), None, hit))
            match = child if hit else match
        if match is None:
            break
        path.append(match)
        node = match
    visits[-1].drawn = best[node]
    kind = "recovered" if children[node] else "bonus"
    probs = torch.softmax(target_logits[path].double(), dim=-1)  # [A, V]: only the rows the walk read
    for row, visit in enumerate(visits):
        for check in visit.checks:
            check.p = probs[row, check.token].item()
    p_of_node = {check.child: check.p for visit in visits for check in visit.checks}
    return Acceptance(path, best[node], kind, probs[-1, best[node]].item(), visits, p_of_node)


def accept_sampled(tree: DraftTree, target_probs: torch.Tensor, draft_dists: dict[int, torch.Tensor],
                   generator: torch.Generator) -> Acceptance:
    """target_probs: [T, V] float64 after temperature/top-k/top-p; draft_dists: node -> [V] float64
    distribution its sampled children were drawn from."""
    children = children_lists(tree)
    path, visits, p_of_node = [0], [], {}
    node = 0
    while True:
        visit = Visit(node)
        visits.append(visit)
        p = target_probs[node].clone()  # [V]
        accepted = None
        for child in children[node]:
            x = tree.token[child]
            p_of_node[child] = target_probs[node, x].item()
            if tree.sampled[child]:
                q = draft_dists[node]  # [V]
                rule, q_x = "sampled", q[x].item()
                ratio = min(1.0, p[x].item() / q_x)
            else:
                rule, q_x = "deterministic", tree.q[child]
                ratio = p[x].item()
            u = _coin(generator)
            ok = u < ratio
            visit.checks.append(Check(child, x, rule, p[x].item(), q_x, ratio, u, ok))
            if ok:
                accepted = child
                break
            p = _residual(p, q) if rule == "sampled" else _zero_out(p, x)
        if accepted is None:
            break
        path.append(accepted)
        node = accepted
    visit.left = p if children[node] else None
    token = int(torch.multinomial(p, 1, generator=generator))
    visit.drawn = token
    kind = "recovered" if children[node] else "bonus"
    return Acceptance(path, token, kind, target_probs[node, token].item(), visits, p_of_node)


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
