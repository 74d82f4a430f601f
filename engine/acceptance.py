"""Which path of a verified tree the target keeps, and the token it adds after it.

Walking down from the root, each reached node v holds the target's
distribution p_v over the next token. Its children are tried one after the
other; each is a draft x from a distribution r known to the walk, accepted
with probability min(1, p(x)/r(x)); on rejection p becomes the residual
norm(max(0, p − r)) and the next child is tried against it:

- a deterministic child (top-k drafting) is a point mass, r = δ_x: accepted
  with probability p(x); the residual is p with x zeroed and renormalised;
- sampled children are drawn from the node's draft distribution q without
  replacement, and tried in draw order: the i-th draw comes from q with the
  earlier draws removed and renormalised, r_i = q_i, so after each rejection
  the residual is norm(max(0, p − q_i)) and q_{i+1} is q_i without the rejected
  token. (This is the rule of Recursive Speculative Decoding, Jeon et al.
  2024, for draws without replacement; SpecInfer's multi-draft rule is the
  same walk for i.i.d. draws, r_i = q.) Deterministic children are tried
  first, best q first; the order among them is free, since a point mass does
  not depend on the others.

Why the token emitted at v is distributed exactly as p_v, for any number of
children: say the walk reaches a child with p in force and the child's draft
x ~ r, where r may depend on everything tried before (the earlier draws) but
not on the coins. It emits x with probability min(r(x), p(x)) and otherwise
passes on norm(max(0, p − r)) with probability 1 − Σ min(r, p); if what follows
emits exactly what it is passed, the total is min(r, p) + max(0, p − r) = p
(Leviathan et al. 2023, §2.3, eqs. 4–8, for one draft).
After the last child, or at a leaf, the token is drawn from the p in force, so
by induction from the last child back to the first the emitted token is
distributed as p_v, and the whole output is the target's own. Two things the
proof needs: every drawn child is tried (a policy that sampled children keeps
them all: engine/policies/base.py `sample_children`), and each is tried against
the distribution it was drawn from given the draws before it — sorting sampled
siblings by q, or reading the full q after a draw without replacement, breaks
it (a draft that puts 0.9 on a where the target puts 0.1 then emits a 11 % of
the time, not 10 %). Greedy decoding is the same walk with one-hot p, which
reduces to: follow the child equal to the argmax.

The walk is returned as it happened: for every node it visited, each child
tried with the numbers that decided it (the p in force, the r(x) in force, the
ratio, the uniform draw u), and where every child was rejected, what was left
of p. The web app's sampling panel draws exactly these numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal

import torch

from engine.tree import DraftTree


Rule = Literal["greedy", "deterministic", "sampled"]


@dataclass
class Check:
    """One child tried at a visited node, with the numbers that decided it: the `verify` event's walk
    carries these records as they are (engine/events.py)."""

    child: int  # tree index
    token: int
    rule: Rule  # "greedy" (is it the argmax?), "deterministic" (accept with p), "sampled" (accept with min(1, p/q))
    p: float  # target probability of the token under the p in force when tried
    q: float  # the child's draft probability; sampled: under the q in force (earlier-drawn siblings removed)
    ratio: float  # the acceptance probability: min(1, p/q) sampled, p deterministic, 1 or 0 greedy
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
        return verdicts_of(self.visits)


def verdicts_of(visits: list[Visit]) -> dict[int, str]:
    """Tree index -> "accepted" / "rejected" for every child tried at these visits."""
    return {check.child: "accepted" if check.accepted else "rejected" for visit in visits for check in visit.checks}


def children_lists(tree: DraftTree) -> list[list[int]]:
    """Each node's children in the order the walk tries them: deterministic ones best q first, then the
    sampled ones in draw order (tree order: a drafter lists its draws in the order it drew them).

    >>> tree = DraftTree.with_root(0)
    >>> for token, q, sampled in [(1, 0.2, True), (2, 0.7, True), (3, 0.1, False), (4, 0.3, False)]:
    ...     _ = tree.add(0, token, q, q, sampled=sampled)
    >>> children_lists(tree)[0]
    [4, 3, 1, 2]
    """
    children: list[list[int]] = [[] for _ in range(len(tree))]
    for node in range(1, len(tree)):
        children[tree.parent[node]].append(node)
    for kids in children:
        kids.sort(key=lambda c: (tree.sampled[c], 0.0 if tree.sampled[c] else -tree.q[c]))
    return children


def row_argmax(logits: torch.Tensor, row: int) -> int:
    """The index of row `row`'s largest logit, the first where several tie."""
    return int(logits[row].argmax())


def accept_greedy(tree: DraftTree, target_logits: torch.Tensor, odds: bool = True,
                  argmax: Callable[[torch.Tensor, int], int] = row_argmax) -> Acceptance:
    """target_logits: [T, V]. The longest path of argmax tokens, then the argmax after it.

    Only the rows the walk visits are read (an argmax each, then their log-sum-exp for the p's
    reported): the other nodes' logits are never needed. The p's only inform a report of the walk,
    not the walk itself: with `odds` off (a run that reports none, the benchmark's) their log-sum-exp
    over the vocabulary is skipped, and every p, token_p included, is left at 0 and p_of_node empty.
    `argmax(logits, row)` must answer as `row_argmax` does (the native kernel's does, in a fifth of
    torch's time or less)."""
    children = children_lists(tree)
    path, visits = [0], []
    node = 0
    while True:
        best = argmax(target_logits, node)
        visit = Visit(node)
        visits.append(visit)
        match = None
        for child in children[node]:
            hit = match is None and tree.token[child] == best
            visit.checks.append(Check(child, tree.token[child], "greedy", 0.0, tree.q[child], float(hit), None, hit))
            match = child if hit else match
        if match is None:
            break
        path.append(match)
        node = match
    visits[-1].drawn = best
    kind = "recovered" if children[node] else "bonus"
    if not odds:
        return Acceptance(path, best, kind, 0.0, visits, {})
    rows = target_logits[path]  # [A, V]: only the rows the walk read
    lse = torch.logsumexp(rows, dim=-1)  # [A]
    wanted = [(row, check.token) for row, visit in enumerate(visits) for check in visit.checks] + [(len(path) - 1, best)]
    picked = rows[[r for r, _ in wanted], [t for _, t in wanted]] - lse[[r for r, _ in wanted]]
    p = picked.exp().tolist()
    for check, value in zip((check for visit in visits for check in visit.checks), p):
        check.p = value
    p_of_node = {check.child: check.p for visit in visits for check in visit.checks}
    return Acceptance(path, best, kind, p[-1], visits, p_of_node)


def accept_sampled(tree: DraftTree, target_probs: torch.Tensor, draft_dists: dict[int, torch.Tensor],
                   generator: torch.Generator) -> Acceptance:
    """target_probs: [T, V] float64 after temperature/top-k/top-p; draft_dists: node -> [V] float64
    distribution its sampled children were drawn from, without replacement, in tree order."""
    children = children_lists(tree)
    path, visits, p_of_node = [0], [], {}
    node = 0
    while True:
        visit = Visit(node)
        visits.append(visit)
        p = target_probs[node].clone()  # [V]
        q = draft_dists.get(node)  # [V]: the next sampled child's distribution, its earlier siblings removed
        accepted = None
        for child in children[node]:
            x = tree.token[child]
            p_of_node[child] = target_probs[node, x].item()
            if tree.sampled[child]:
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
            if rule == "sampled":
                p, q = _residual(p, q), _next_draw(q, x)
            else:
                p = _zero_out(p, x)
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


def _next_draw(q: torch.Tensor, token: int) -> torch.Tensor:
    """The distribution of the next draw without replacement: q without the token just drawn."""
    return _zero_out(q, token)


def _zero_out(p: torch.Tensor, token: int) -> torch.Tensor:
    rest = p.clone()
    rest[token] = 0.0
    total = rest.sum()
    return rest / total if total > 0 else p
