"""`talon-adaptive`: TALON's gate with μ and N tuned during a request for tokens per second.

TALON fixes the gate μ and the node budget N. This policy keeps TALON's
layer rules (each node's top `remaining` children pooled, growth stopped the
moment N is full, k = 0 allowed: engine/policies/talon.py) and, every
`window` steps (the first time after `first_window`), measures the request's
throughput: (accepted + 1) tokens per step over the step's draft + verify +
other time. It then moves one parameter (μ by a factor, N by as many factors
as the model below predicts a gain, at most four, and not at all where it
predicts none) and keeps the move only if the next window's throughput did
not fall; a move that cost speed is undone and that direction is tried again
only after the other one.

Which parameter moves, and which way, comes from the acceptance history and
the cost table:
    N  when the trees fill the budget (the budget binds, not the gate). The
       direction is the one the cost table favours: acceptance is modelled
       as gaining α tokens per doubling of N (α fitted from the windows seen
       so far, 0.3 before two budgets were seen), and verify time as the
       measured one times the table's ratio of N' + 1 to N + 1 tokens. On a device whose
       verify cost is flat in n (a GPU) that says grow; on a CPU, shrink.
    μ  when the gate binds. A high μ keeps only near-best paths (narrow, deep
       trees), a low μ hedges (wide, shallow). If the target accepts most of
       the depth drafted (accepted/depth ≥ 0.6) deeper trees pay: raise μ; if
       it rejects early (≤ 0.3) hedge: lower μ; in between, keep the last direction.
Every change is returned as an Adjustment with the numbers behind it.

The root's top-K follows N (`root_follows_budget`): K = N/6, rounded, at least 1
and at most `top_k`, the share of the budget TALON's defaults give the root
(K 10 of N 60, where it stays 10). Forced to keep K of the root's children, a
budget of 2 or 4 (where a 2-core CPU's verify costs leave it) was all siblings,
a tree one token deep; K 1 there lets the gate grow it deep where the draft is
sure (MT-bench on a Zen 3, in one process: 1.01× `ar` with K fixed at 10,
1.19× with K 1, chain 1.15×). With one child at the root, the head's root
forward also runs the line below it, N − 1 pairs (`line_ahead`, as a chain's):
taken where the gate keeps one child a layer, for nothing where it keeps more.

The first tree is TALON's N where verifying it costs at most `first_cost`
one-token forwards in the cost table (a GPU: about one), else the largest N
that does: on a 2-core CPU a 60-node tree verifies in 3 to 16 one-token
forwards, and every request used to pay one such step before the first move.
The run's opening event carries the N it starts at.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from engine.policies.base import Adjustment, PolicyContext, StepOutcome
from engine.policies.talon import TalonParams, TalonPolicy

PRIOR_TOKENS_PER_DOUBLING = 0.3
MAX_FACTORS = 4  # a budget move goes at most budget_factor⁴ up or down at once
ROOT_SHARE = 10 / 60  # the root's top-K per node of the budget at TALON's defaults (K 10, N 60)
FIRST_CONTEXT = 512  # cached tokens the first tree is priced at (a ratio of verify costs barely moves with it)


class TalonAdaptiveParams(TalonParams):
    window: int = Field(3, ge=2, le=128, description="steps measured before each adjustment")
    first_window: int = Field(1, ge=1, le=128, description="steps measured before the first: TALON's budget is "
                                                           "a GPU's, and on a CPU a step at N = 60 costs three")
    first_cost: float = Field(2.0, ge=0, le=64, description="the first tree: at most the nodes that verify in this "
                                                         "many one-token forwards by the cost table (0: Budget)")
    # 8 held it at 0.62x ar on a Zen 3 (AVX2), where 9 tokens verify at 2.5 one-token forwards
    budget_min: int = Field(2, ge=1, le=512, validate_default=True, description="lowest node budget N")
    budget_max: int = Field(256, ge=1, le=512, validate_default=True, description="highest node budget N")
    mu_min: float = Field(0.002, gt=0, le=1, validate_default=True, description="lowest gate μ")
    mu_max: float = Field(0.5, gt=0, le=1, validate_default=True, description="highest gate μ")
    budget_factor: float = Field(2.0, gt=1, le=4, description="N is multiplied or divided by this")
    mu_factor: float = Field(2.0, gt=1, le=10, description="μ is multiplied or divided by this")
    tolerance: float = Field(0.03, ge=0, le=0.5, description="a move is undone if throughput falls by more")
    root_follows_budget: bool = Field(True, description="the root's top-K follows N as at TALON's defaults (N/6, "
                                                        "at least 1, at most top_k); false: top_k whatever N is")

    @field_validator("budget_min", "mu_min")
    @classmethod
    def _min_not_above_start(cls, low: float, info: ValidationInfo) -> float:
        start = info.field_name.removesuffix("_min")
        _check_order(info.field_name, low, start, info.data.get(start))
        return low

    @field_validator("budget_max", "mu_max")
    @classmethod
    def _max_not_below_min_or_start(cls, high: float, info: ValidationInfo) -> float:
        param = info.field_name.removesuffix("_max")
        _check_order(f"{param}_min", info.data.get(f"{param}_min"), info.field_name, high)
        _check_order(param, info.data.get(param), info.field_name, high)
        return high


def _check_order(low_name: str, low: float | None, high_name: str, high: float | None) -> None:
    """Refuses `low > high`, naming both. A field that failed its own check is absent (None): not compared."""
    if low is not None and high is not None and low > high:
        raise PydanticCustomError("min_max_order", "{low_name} {low} is above {high_name} {high}",
                                  {"low_name": low_name, "low": low, "high_name": high_name, "high": high})


@dataclass
class Window:
    """Sums over the steps of one measurement window."""

    steps: int = 0
    tokens: float = 0.0  # accepted + 1 per step
    accepted: float = 0.0
    depth: float = 0.0
    tree_size: float = 0.0
    ms: float = 0.0
    verify_ms: float = 0.0
    prefix_len: int = 0

    def add(self, outcome: StepOutcome) -> None:
        self.steps += 1
        self.tokens += outcome.accepted + 1
        self.accepted += outcome.accepted
        self.depth += outcome.depth
        self.tree_size += outcome.tree_size
        self.ms += outcome.times.total_ms
        self.verify_ms += outcome.times.verify_ms
        self.prefix_len = outcome.prefix_len

    @property
    def tokens_per_s(self) -> float:
        return 1000 * self.tokens / self.ms if self.ms > 0 else 0.0


@dataclass
class Move:
    param: str
    old: float
    new: float
    rate_before: float


@dataclass
class AdaptState:
    window: Window = field(default_factory=Window)
    move: Move | None = None  # the last change, kept or undone after the next window
    direction: dict[str, int] = field(default_factory=lambda: {"budget": 0, "mu": 0})
    at_budget: dict[int, Window] = field(default_factory=dict)  # the last window measured at each N


class TalonAdaptivePolicy(TalonPolicy):
    name = "talon-adaptive"
    description = ("TALON's gate with its budget N (the root's K with it) and gate μ tuned during the run: every "
                   "few steps one moves, and the move is undone if tokens per second fell.")
    needs_costs = True
    Params = TalonAdaptiveParams
    title = "TALON, adaptive"

    def __init__(self, params: TalonAdaptiveParams, context: PolicyContext | None = None):
        super().__init__(params, context)
        self.initial = params
        self.start_run()

    def start_run(self) -> None:
        self.params = self.initial
        self._set("budget", self._first_budget())
        self.state = AdaptState()

    def _first_budget(self) -> int:
        """N for a request's first tree: the given N, or the most nodes from budget_min up whose verify costs at most
        first_cost one-token forwards in the cost table (budget_min where none does)."""
        p = self.initial
        if not p.first_cost:
            return p.budget
        prices = self.costs.prices(p.budget + 1, FIRST_CONTEXT, self.batch)  # verify ms of 0 … N + 1 tokens
        fits = [n for n in range(p.budget_min, p.budget + 1) if prices[n + 1] <= p.first_cost * prices[1]]
        return max(fits, default=p.budget_min)

    def observe(self, outcome: StepOutcome) -> list[Adjustment]:
        self.state.window.add(outcome)
        length = self.params.window if self.state.at_budget else self.params.first_window
        if self.state.window.steps < length:
            return []
        window, self.state.window = self.state.window, Window()
        self.state.at_budget[self.params.budget] = window
        if self.state.move is not None:
            undone = self._judge_move(window)
            if undone:
                return [undone]
        move = self._next_move(window)
        return [move] if move else []

    def _judge_move(self, window: Window) -> Adjustment | None:
        """Keeps the last move if throughput held, else undoes it and turns that parameter around."""
        move, self.state.move = self.state.move, None
        rate = window.tokens_per_s
        if rate >= move.rate_before * (1 - self.params.tolerance):
            self.state.direction[move.param] = 1 if move.new > move.old else -1
            return None
        self.state.direction[move.param] = -1 if move.new > move.old else 1
        root = self._set(move.param, move.old)
        return Adjustment(param=move.param, old=move.new, new=move.old,
                          why=f"undone: {rate:.1f} tok/s over the last {window.steps} steps, "
                              f"{move.rate_before:.1f} before the change{root}")

    def _next_move(self, window: Window) -> Adjustment | None:
        fill = window.tree_size / window.steps / self.params.budget
        if fill >= 0.8:
            param, new, reason = "budget", *self._budget_proposal(window)
        else:
            param, new, reason = "mu", *self._mu_proposal(window)
        old = getattr(self.params, param)
        if new is None or new == old:
            return None
        reason += self._set(param, new)
        rate = window.tokens_per_s
        self.state.move = Move(param, old, new, rate)
        return Adjustment(param=param, old=float(old), new=float(new),
                          why=f"{rate:.1f} tok/s, trees {100 * fill:.0f}% of N: {reason}")

    def _budget_proposal(self, window: Window) -> tuple[int | None, str]:
        """The budget the cost table and the acceptance history favour, in whole factors up or down: as
        far as the model predicts a gain (on a CPU whose wide verifies are compute-bound, from 60 nodes
        straight to 4 or 8, not one halving per window), within the bounds. A budget this request has
        run at is judged by the throughput it measured there, not by the model (whose slope of
        acceptance over N is fitted to a few windows): a move undone is not retried on a guess."""
        n, f = self.params.budget, self.params.budget_factor
        low, high = self.params.budget_min, self.params.budget_max
        candidates = {clamp_int(round(n * f ** k), low, high) for k in range(-MAX_FACTORS, MAX_FACTORS + 1)} - {n}
        if self.state.direction["budget"]:
            wanted = 1 if self.state.direction["budget"] > 0 else -1
            candidates = {c for c in candidates if (c > n) == (wanted > 0)} or candidates
        if not candidates:
            return None, "N at its bound"
        predicted = {c: self._predicted_rate(window, c) for c in candidates | {n}}
        predicted.update({c: w.tokens_per_s for c, w in self.state.at_budget.items() if c in candidates})
        best = max(candidates, key=lambda c: predicted[c])
        if predicted[best] <= predicted[n]:  # e.g. at budget_min after growing was undone: nothing to try
            return None, f"no N predicted faster than {predicted[n]:.1f} tok/s at N={n}"
        ratio = (self.costs.verify_cost(best + 1, window.prefix_len, self.batch)
                 / self.costs.verify_cost(n + 1, window.prefix_len, self.batch))
        return best, (f"predicted {predicted[best]:.1f} tok/s at N={best} vs {predicted[n]:.1f} at N={n} "
                      f"(verifying {best} nodes costs {ratio:.2f}× {n} in the cost table)")

    def _predicted_rate(self, window: Window, budget: int) -> float:
        """tokens/s if N were `budget`: α tokens per doubling; the measured verify time scaled by the
        cost table's ratio between the two tree sizes (a ratio, so a table taken on a faster or
        busier machine still serves), read at the batch this step's verify forward is shared with."""
        n = self.params.budget
        tokens = window.tokens / window.steps + self._tokens_per_doubling() * math.log2(budget / n)
        size = window.tree_size / window.steps
        verify_now = self.costs.verify_cost(size + 1, window.prefix_len, self.batch)
        verify_then = self.costs.verify_cost(size * budget / n + 1, window.prefix_len, self.batch)
        verify_ms = window.verify_ms / window.steps
        ms = window.ms / window.steps + verify_ms * (verify_then / verify_now - 1)
        return 1000 * max(tokens, 1.0) / ms if ms > 0 else 0.0

    def _tokens_per_doubling(self) -> float:
        """Slope of mean accepted over log2 N across the budgets this request has run at."""
        seen = {n: w.accepted / w.steps for n, w in self.state.at_budget.items()}  # mean accepted per step, by N
        if len(seen) < 2:
            return PRIOR_TOKENS_PER_DOUBLING
        xs = [math.log2(n) for n in seen]
        ys = list(seen.values())
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var
        return max(slope, 0.0)

    def _mu_proposal(self, window: Window) -> tuple[float | None, str]:
        """Raise μ when most of the drafted depth is accepted (grow deep), lower it when little is."""
        depth_used = window.accepted / max(window.depth, 1)
        direction = self.state.direction["mu"]
        if depth_used >= 0.6:
            direction, reason = 1, f"{100 * depth_used:.0f}% of the drafted depth accepted: narrower, deeper"
        elif depth_used <= 0.3:
            direction, reason = -1, f"{100 * depth_used:.0f}% of the drafted depth accepted: wider, shallower"
        else:
            direction = direction or -1
            reason = f"{100 * depth_used:.0f}% of the drafted depth accepted: trying {'up' if direction > 0 else 'down'}"
        mu = self.params.mu * (self.params.mu_factor if direction > 0 else 1 / self.params.mu_factor)
        return min(max(mu, self.params.mu_min), self.params.mu_max), reason

    def _set(self, param: str, value: float) -> str:
        """Sets a parameter (N moves the root's K with it, `root_follows_budget`); says how K moved, if it did."""
        update: dict[str, float] = {param: value}
        if param == "budget" and self.initial.root_follows_budget:
            update["top_k"] = self.root_top_k(int(value))
        k, self.params = self.params.top_k, self.params.model_copy(update=update)
        return f"; the root's top-K {k} → {self.params.top_k}" if self.params.top_k != k else ""

    def line_ahead(self) -> int:
        """Where the root keeps one child, the tree is a line for as long as the gate keeps one child of each
        node: up to N − 1 layers below the root, which the drafter may run in the root's forward (a layer that
        keeps another node, or more than one, drafts as ever; the tree is the same either way). Only for a budget
        TALON's share gives one root child too (N ≤ 8): a larger one at K 1 (set by hand) is a tree the gate
        widens, whose line would mostly run for nothing."""
        one_child = self.params.top_k == 1 and self.params.forced_layers >= 1
        return self.params.budget - 1 if one_child and round(self.params.budget * ROOT_SHARE) <= 1 else 0

    def root_top_k(self, budget: int) -> int:
        """K at budget N: TALON's share of N for the root (ROOT_SHARE), at least 1, at most the given top_k.

        >>> policy = TalonAdaptivePolicy(TalonAdaptiveParams(first_cost=0))
        >>> [policy.root_top_k(n) for n in (2, 4, 8, 16, 32, 60, 128)]
        [1, 1, 1, 3, 5, 10, 10]
        """
        return min(max(round(budget * ROOT_SHARE), 1), self.initial.top_k)


def clamp_int(value: int, low: int, high: int) -> int:
    return min(max(value, low), high)
