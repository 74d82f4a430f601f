"""`cast`: a cost-aware dynamic tree (CAST, Hong, Tan & Hu, ICLR 2026).

CAST keeps EAGLE-2/3's tree (grow the best frontier nodes by their top-K
children, keep every child as a rerank candidate, rerank by path score) but
sizes each part by utility per unit of measured cost instead of fixed K, D, m.
Utility is expected accepted tokens: a node's path score (product of draft
probabilities from the root) estimates the chance the target accepts it, so
the utility of a set of nodes is the sum of their scores. Costs are read in ms
from the cost table `specscope profile` writes (the policy context's `costs`) and
expressed in target forwards: ms over the table's time for one target forward
of one token at the current context (t₁). A machine that is uniformly faster
or slower (another GPU, a busy CPU) then leaves every decision unchanged, and
C1–C3 share one scale: expected tokens gained per t₁ of time spent, which a
node must beat to raise throughput; the step's own tokens per t₁ (τ over the
step time in t₁, ~1–3) is the natural bar.

Our source is the paper's summary in ../shared/papers (002_…); "design n" below is its
key design n, the formulas are its own.

costs   (design 1) The table f(B, c, n) from `specscope profile`, every n measured up to a
        limit; a lookup rounds c up to the next measured context (the paper's select(c)
        takes the next multiple of L above c, we the smallest measured context ≥ c) and n
        up to the next measured n, never interpolating across a step (engine/costs.py).
width   (design 2) Each layer's candidates are sorted by path score v(1) ≥ v(2) ≥ ….
        Taking the best k as the frontier has utility u_k = v(1)+…+v(k) and costs the
        draft's forward of k tokens, c_k = S_D[select(c)][k] / S_T[select(c)][1]. The
        best candidate is always grown (whether to grow at all is the depth rule's
        call); from the current k' the frontier extends to the k > k' with the largest
        marginal ratio (u_k − u_k')/(c_k − c_k'), while that ratio is ≥ C1 (the paper
        writes > C1; with ≥, Theorem 4.1 keeps exactly K, the K-th ratio being C1
        itself). Jumping to the best ratio, not the next k, is our reading of the
        paper's Algorithm 1 (robust selection where utility per cost is not concave):
        measured costs are steps (a GPU runs 17 tokens as fast as 32), so a single node
        may look dear while the next eight together are cheap. A non-positive marginal
        cost makes the jump free. With linear cost c_k = λk + δ (in t₁) every ratio is
        v(k)/λ, so C1 = v(K)/λ keeps exactly the top K: EAGLE's frontier (Theorem 4.1,
        batch 1).
depth   (design 3) φ_i = u_{i+1}/u_i says how much utility a layer keeps from the one above.
        A FIFO buffer holds the last R such ratios, across the steps of a request; another
        layer is drafted only while α·u_i / c ≥ C2, α = mean(φ) and c the draft forward
        (in t₁) of the n_i frontier nodes that make it. The paper initialises the buffer to
        {1}; we fill all R places with 1, so that one early ratio cannot swing α.
rerank  (design 4) All drafted nodes, ordered by path score (ancestor-closed: a child
        never outscores its parent), are cut to m by the same marginal rule over
        the target's verify cost, threshold C3. Our verify forward carries the root with
        the m nodes, so the cost is that of m + 1 tokens (the paper's c_k reads k).
batch   The paper's utility is a batch mean, u_k = (1/B) Σ_j Σ_{s≤k} v^(j)(s). Each request
        sizes its own tree, so utility is that request's Σ v, which equals the batch mean
        when the B requests look alike; the cost rows S_T(B), S_D(B) are those of the B
        requests verified together (engine/batch.py tells the policy each step; a run alone
        reads B = 1), or of `batch` where given.

calibration (ours, not the paper's) A path score is the draft's confidence, not
        the target's acceptance: a weak or uncalibrated draft (a tiny model's
        near-uniform q, an n-gram's count ratios) under- or over-states it. Over
        a request, κ = (accepted + 1) / (Σ path scores verified + 1) rescales
        utilities to min(1, κ·score); and the best node is always verified
        (min_verify) so κ has evidence to learn from even when costs would send nothing.
        Likewise the draft's cost: a table without a draft row (no draft LM or head
        was profiled) has only an assumed one, and every drafter pays Python
        overhead the table cannot see, so draft costs are scaled by ρ, the median
        of measured / table-predicted draft ms over the request's last 16 steps
        (two pseudo-steps at 1 to start: a cold first step must not swing it).
        κ = ρ = 1 until a step is observed; `calibrate=false` keeps them at 1 and
        `min_verify=0` drops the forced node: then the paper's rules hold as stated.
off     (ours) No calibration lifts a node's utility above 1, so where even k nodes the target
        accepts for sure would not pass C3, max_k k / (c_{k+1} − c_1) < C3 in the verify row of
        this batch and context, no tree can pay: the step drafts nothing, not even a free match
        (each would be pruned at the rerank). Likewise the forced node (min_verify) is forced only
        where one node accepted for sure, 1 / (c_2 − c_1), would pass C3: it buys evidence for
        κ, worth nothing where κ could not send that node. A Zen 3's table (2 cores, AVX2) at
        batch 4: up to 128 tokens of context sure nodes yield at best 1.8 tokens per t₁, so cast
        decodes as `ar` does; up to 512, 2.2 (many sure nodes: a copy could pay), one node 1.8,
        so it drafts and forces none; alone, 5.9 or more. Each switch is reported (`speculates`).
free    (ours) A candidate whose children come without a model forward (Proposal.grows_free: a
        text match off the part of the tree the head ran on, where a hybrid drafter copies;
        every candidate of a model-free drafter) costs no draft forward to grow, only the
        drafting's bookkeeping: σ per node, the request's measured drafting time outside
        model forwards per node grown (a prior of SIGMA_PRIOR t₁ over SIGMA_PRIOR_NODES
        pseudo-nodes to start). Growing m model and f free nodes costs c(m) + σ·f, in the
        width, depth and ρ alike; a verbatim copy is then drafted as deep as its path scores
        pay for, as a chain's free layers are, instead of stopping where a head forward
        would not pay. Without calibration σ stays at its prior.

The summary gives no values for C1–C3; docs/cast.md records the sweep that chose the defaults.
Every decision's detail carries the utility, cost, ratio and threshold behind it.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass

from pydantic import Field

from engine.policies.base import (Adjustment, Decision, LayerSelection, Policy, PolicyContext, PolicyParams, Pool,
                                  Rerank, StepOutcome, ancestors_in)
from engine.tree import DraftTree

SIGMA_PRIOR = 0.02  # t₁ of bookkeeping per free node grown before a step is observed (~0.3 ms on a 2-core CPU)
SIGMA_PRIOR_NODES = 4  # pseudo-nodes the prior counts as, so one cold step does not swing σ


class CastParams(PolicyParams):
    c1: float = Field(1.0, ge=0, description="width: least marginal tokens per target-forward time (t₁) of drafting (C1)")
    c2: float = Field(4.0, ge=0, description="depth: least predicted tokens per t₁ of drafting another layer (C2)")
    c3: float = Field(2.0, ge=0, description="rerank: least marginal tokens per t₁ of verifying more nodes (C3)")
    top_k: int = Field(10, ge=1, le=64, description="children drafted per frontier node (K)")
    max_width: int = Field(32, ge=1, le=256, description="most frontier nodes per layer")
    max_depth: int = Field(32, ge=1, le=64, description="safety limit on draft layers")
    max_total: int = Field(128, ge=1, le=512, description="most draft nodes sent to verification")
    window: int = Field(4, ge=1, le=64, description="gain ratios φ remembered by the depth rule (R)")
    batch: int = Field(1, ge=1, le=256, description="batch size the costs are read at (unset: the requests "
                                                    "verified together, 1 for a run alone)")
    min_verify: int = Field(1, ge=0, le=512, description="best nodes always verified where a node accepted for "
                                                        "sure would pay, so calibration has evidence")
    calibrate: bool = Field(True, description="rescale path scores by the request's accepted / predicted (κ) and "
                                              "draft costs by measured / table time (ρ); false: the paper's rules")


@dataclass
class MarginalChoice:
    """How many of the sorted items a marginal walk kept, and the ratio that admitted or stopped each."""

    count: int
    ratio: list[float]  # [N] per item: the hull step's ratio that admitted it, or the best it was offered
    gain: list[float]  # [N] marginal utility of that step
    spend: list[float]  # [N] marginal cost of that step


def marginal_walk(utility: list[float], cost: list[float], threshold: float, start: int = 0) -> MarginalChoice:
    """Walks the upper concave envelope of (cost, utility) from `start` while its slope is ≥ threshold.

    `utility[k]` and `cost[k]` belong to taking the first k items (index 0: none), so both have
    N + 1 entries. From the current k' the walk jumps to the k > k' of largest slope
    (u_k − u_k')/(c_k − c_k'), the furthest on ties; a jump that costs nothing is free.
    Slopes equal to the threshold up to float rounding pass, so a threshold set to an item's own
    ratio keeps that item.

    >>> marginal_walk([0, 3, 5, 6], [0, 1, 2, 3], threshold=2).count
    2
    >>> marginal_walk([0, 3, 4, 7], [0, 1, 2, 3], threshold=2).count  # item 3 redeems item 2
    3
    """
    n = len(utility) - 1
    ratio, gain, spend = [0.0] * n, [0.0] * n, [0.0] * n
    here = start
    while here < n:
        best_k, best_ratio = here + 1, float("-inf")
        for k in range(here + 1, n + 1):
            slope = _slope(utility[k] - utility[here], cost[k] - cost[here])
            if slope >= best_ratio:
                best_k, best_ratio = k, slope
        passes = best_ratio >= threshold * (1 - 1e-9) if threshold > 0 else best_ratio >= threshold
        for item in range(here, best_k if passes else n):
            ratio[item] = best_ratio
            gain[item] = utility[best_k] - utility[here]
            spend[item] = cost[best_k] - cost[here]
        if not passes:
            break
        here = best_k
    return MarginalChoice(count=here, ratio=ratio, gain=gain, spend=spend)


def _slope(gain: float, spend: float) -> float:
    if spend <= 0:
        return float("inf") if gain > 0 else 0.0
    return gain / spend


class CastPolicy(Policy):
    name = "cast"
    description = ("CAST's cost-aware tree: widens, deepens and verifies only while the expected tokens gained per "
                   "unit of measured forward time beat C1, C2 and C3 (reads the cost table).")
    needs_costs = True
    Params = CastParams
    title = "CAST"
    symbols = {"C1": "c1", "C2": "c2", "C3": "c3", "K": "top_k"}

    def __init__(self, params: CastParams, context: PolicyContext | None = None):
        super().__init__(params, context)
        self.start_run()

    def start_run(self) -> None:
        self.gains: deque[float] = deque([1.0] * self.params.window, maxlen=self.params.window)
        self._layer_utility: dict[int, float] = {}
        self._prefix_len = 0
        self.kappa = 1.0  # accepted tokens per unit of verified path score, this request
        self._reported_kappa = 1.0
        self._accepted_sum = 0.0
        self._predicted_sum = 0.0
        self._verified_score = 0.0  # Σ path scores sent to verification in the current step
        self.draft_scale = 1.0  # measured draft ms per table-predicted draft ms, this request (ρ)
        self._reported_scale = 1.0
        self._draft_ratios: deque[float] = deque([1.0, 1.0], maxlen=16)
        self._draft_ms_sum = 0.0
        self._draft_predicted_sum = 0.0
        self._step_draft_predicted = 0.0  # table ms of the draft forwards of the current step
        self._overhead_t1 = SIGMA_PRIOR * SIGMA_PRIOR_NODES  # Σ drafting outside model forwards, in t₁ …
        self._grown_nodes = float(SIGMA_PRIOR_NODES)  # … over the nodes grown: σ = their ratio
        self._step_grown = 0  # nodes grown in the current step
        self._sure: dict[tuple[int, int], tuple[float, float]] = {}  # (batch, select(c)) -> sure_ratios
        self.speculates = True  # the current step's tree may pay (see the module's "off")
        self._reported_speculates = True

    @property
    def cost_batch(self) -> int:
        """The batch whose cost rows S_T(B), S_D(B) the rules read: `batch` where given, else the requests
        sharing this step's verify forward (engine/batch.py)."""
        return self.params.batch if "batch" in self.params.model_fields_set else self.batch

    def unit_ms(self, context: int) -> float:
        """t₁: the table's ms for one target forward of one token at this context."""
        return max(self.costs.verify_cost(1, context, self.cost_batch), 1e-9)

    def draft_prices(self, count: int, context: int, scale: float) -> list[float]:
        """[a draft forward of k tokens in t₁ for k = 0 … count, times `scale`], the table read once (a layer prices
        every width)."""
        unit = self.unit_ms(context)
        return [scale * ms / unit for ms in self.costs.prices(count, context, self.cost_batch, "draft")]

    @property
    def sigma(self) -> float:
        """σ: the bookkeeping of growing one free node, in t₁ (see the module's "free")."""
        return self._overhead_t1 / self._grown_nodes

    def growth_costs(self, ranked_free: list[bool], context: int, scale: float | None = None) -> list[float]:
        """[cost of growing the first k of the ranked candidates in t₁, k = 0 … len]: c(m) + σ·f for the m that need
        the drafter's model and the f that grow free among them; c scaled by ρ, or by `scale` where given (1:
        the table's own prediction)."""
        prices = self.draft_prices(len(ranked_free) - sum(ranked_free), context,
                                   self.draft_scale if scale is None else scale)
        costs, modelled, free = [0.0], 0, 0
        for grows_free in ranked_free:
            free += grows_free
            modelled += not grows_free
            costs.append(prices[modelled] + self.sigma * free)
        return costs

    def verify_prices(self, count: int, context: int) -> list[float]:
        """[a target forward of m tokens in t₁ for m = 0 … count]."""
        unit = self.unit_ms(context)
        return [ms / unit for ms in self.costs.prices(count, context, self.cost_batch)]

    def sure_ratios(self, context: int) -> tuple[float, float]:
        """(best, first): the best ratio k / (c_{k+1} − c_1) of k nodes the target accepts for sure, and that of
        one node (k = 1), at this context and batch (see the module's "off"); read once per cost row."""
        key = (self.cost_batch, self.costs.select_context(context))
        known = self._sure.get(key)
        if known is None:
            count = self.params.max_total
            prices = self.verify_prices(count + 1, context)
            ratios = [_slope(k, prices[k + 1] - prices[1]) for k in range(1, count + 1)]
            known = self._sure[key] = (max(ratios), ratios[0])
        return known

    def _passes(self, ratio: float) -> bool:
        return ratio >= self.params.c3 * (1 - 1e-9)

    def drafts_from_model(self, depth: int, prefix_len: int) -> bool:
        if depth == 1:
            self.speculates = self._passes(self.sure_ratios(prefix_len)[0])
        return self.speculates

    def value(self, score: float) -> float:
        """A node's utility: its calibrated chance of being accepted."""
        return min(1.0, self.kappa * score)

    def children_per_node(self, tree: DraftTree, depth: int) -> int:
        return self.params.top_k if self.speculates else 0

    def select_layer(self, tree: DraftTree, pool: Pool) -> LayerSelection:
        context = pool.prefix_len + len(tree)
        if pool.depth == 1:
            self._layer_utility = {}
            self._step_draft_predicted = self.costs.draft_cost(1, context, self.cost_batch)
            self._step_grown = 1  # the root
        self._prefix_len = pool.prefix_len
        ranked = sorted(range(len(pool)), key=lambda i: (-pool.score[i], i))
        width = self._width(pool, ranked, context)
        decisions = self._width_decisions(pool, ranked, width)
        frontier = ranked[:width.count]
        utility = sum(self.value(pool.score[i]) for i in frontier)
        self._remember_gain(pool.depth, utility)
        free = sum(pool.grows_free[i] for i in frontier)
        stop = self._depth_stop(pool.depth, utility, width.count, free, context)
        if stop is not None:
            for decision in decisions:
                decision.expanded = False
                decision.reason = "depth_limit"
                if self.explain:
                    decision.detail.update(stop)
                decision.threshold = self.params.c2
        threshold = min((pool.score[i] for i in frontier), default=None)
        return LayerSelection(decisions=decisions, threshold=threshold)

    def _width(self, pool: Pool, ranked: list[int], context: int) -> MarginalChoice:
        """The frontier size: the best candidate, then the marginal walk over draft cost (C1)."""
        considered = ranked[:self.params.max_width]
        utility = [0.0]
        for i in considered:
            utility.append(utility[-1] + self.value(pool.score[i]))
        cost = self.growth_costs([pool.grows_free[i] for i in considered], context)
        return marginal_walk(utility, cost, self.params.c1, start=min(1, len(considered)))

    def _width_decisions(self, pool: Pool, ranked: list[int], width: MarginalChoice) -> list[Decision]:
        """Every candidate is kept for the rerank; the first `width.count` by score are grown, and those past the
        `max_width` considered are stopped by the budget. Where the run explains (`explain`) each says why with
        its numbers."""
        decisions: list[Decision] = [None] * len(pool)  # type: ignore[list-item]
        unit_ms = self.unit_ms(self._prefix_len) if self.explain else 0.0
        for rank, i in enumerate(ranked):
            decision = Decision(kept=True, expanded=rank < width.count,
                                reason="cost" if rank < len(width.ratio) else "budget", threshold=self.params.c1)
            if self.explain:
                decision.detail = self._width_detail(pool.score[i], rank, width, unit_ms)
            decisions[i] = decision
        return decisions

    def _width_detail(self, score: float, rank: int, width: MarginalChoice, unit_ms: float) -> dict[str, float]:
        """The numbers behind the width decision of the candidate of path score `score` at `rank` (0: the best)."""
        detail = {"utility": self.value(score), "rank": rank + 1}
        if rank >= len(width.ratio):
            return {**detail, "max_width": self.params.max_width}
        ratio = float("inf") if rank == 0 else width.ratio[rank]  # the best is grown whenever the layer grows
        return {**detail, "marginal_utility": width.gain[rank], "marginal_cost": width.spend[rank],
                "ratio": _finite(ratio), "unit_ms": unit_ms}

    def _remember_gain(self, depth: int, utility: float) -> None:
        """Pushes φ = u_depth / u_(depth−1) into the FIFO buffer."""
        above = self._layer_utility.get(depth - 1)
        if above:
            self.gains.append(utility / above)
        self._layer_utility[depth] = utility

    def _depth_stop(self, depth: int, utility: float, width: int, free: int, context: int
                    ) -> dict[str, float] | None:
        """Why the next layer is not drafted (as decision detail), or None to grow it: `width` frontier nodes, of
        which `free` grow without a model forward."""
        phi = sum(self.gains) / len(self.gains)
        predicted = phi * utility
        frontier_free = [False] * (width - free) + [True] * free
        cost = self.growth_costs(frontier_free, context + width)[-1]
        ratio = _slope(predicted, cost)
        detail = {"predicted_utility": predicted, "phi": phi, "depth_cost": cost,
                  "depth_ratio": _finite(ratio), "depth_threshold": self.params.c2}
        if depth >= self.params.max_depth or width == 0 or ratio < self.params.c2:
            return detail
        self._step_draft_predicted += (self.growth_costs(frontier_free, context + width, scale=1.0)[-1]
                                       * self.unit_ms(context + width))
        self._step_grown += width
        return None

    def finalize(self, tree: DraftTree) -> Rerank:
        """Cuts the tree to the nodes worth their verify cost (C3), best path scores first."""
        drafted = sorted(range(1, len(tree)), key=lambda i: (-tree.score[i], tree.depth[i], i))
        considered = drafted[:self.params.max_total]
        utility = [0.0]
        for i in considered:
            utility.append(utility[-1] + self.value(tree.score[i]))
        cost = self.verify_prices(len(considered) + 1, self._prefix_len)[1:]  # m nodes verify with the root
        choice = marginal_walk(utility, cost, self.params.c3)
        forced = min(self.params.min_verify, len(considered)) if self._passes(
            self.sure_ratios(self._prefix_len)[1]) else 0  # evidence for κ, where κ could send a node
        count = max(choice.count, forced)
        chosen = set(considered[:count])
        keep = [0] + [i for i in range(1, len(tree)) if i in chosen and ancestors_in(tree, i, chosen)]
        kept = set(keep)
        self._verified_score = sum(tree.score[i] for i in keep[1:])
        if not self.explain:  # one record for every dropped node, as rerank_top gives: nothing reads its numbers
            return Rerank(keep=keep, pruned=dict.fromkeys(
                (i for i in drafted if i not in kept),
                Decision(kept=False, expanded=False, reason="rerank", threshold=self.params.c3)))
        pruned = {}
        unit_ms = self.unit_ms(self._prefix_len)
        for rank, i in enumerate(drafted):
            if i in kept:
                continue
            detail = {"utility": self.value(tree.score[i]), "rank": rank + 1}
            if rank < len(choice.ratio):
                detail.update(marginal_utility=choice.gain[rank], marginal_cost=choice.spend[rank],
                              ratio=_finite(choice.ratio[rank]), unit_ms=unit_ms)
            else:
                detail["max_total"] = self.params.max_total
            pruned[i] = Decision(kept=False, expanded=False, reason="rerank", threshold=self.params.c3, detail=detail)
        return Rerank(keep=keep, pruned=pruned)

    def observe(self, outcome: StepOutcome) -> list[Adjustment]:
        """Updates κ and ρ from the step; reports each when it has moved by a quarter since last said, and
        a switch of speculation off or on."""
        changes = self._speculation_switch(outcome.prefix_len)
        if not self.params.calibrate:
            return changes
        self._accepted_sum += outcome.accepted
        self._predicted_sum += self._verified_score
        self.kappa = (self._accepted_sum + 1) / (self._predicted_sum + 1)
        self._draft_ms_sum += outcome.times.draft_ms
        self._draft_predicted_sum += self._step_draft_predicted
        if self._step_grown:
            outside = max(outcome.times.draft_ms - outcome.times.draft_forward_ms, 0.0)
            self._overhead_t1 += outside / self.unit_ms(outcome.prefix_len)
            self._grown_nodes += self._step_grown
        if self._step_draft_predicted > 0:
            self._draft_ratios.append(outcome.times.draft_ms / self._step_draft_predicted)
        self.draft_scale = min(max(statistics.median(self._draft_ratios), 0.01), 100.0)
        if abs(self.kappa - self._reported_kappa) > 0.25 * self._reported_kappa:
            changes.append(Adjustment(
                param="kappa", old=self._reported_kappa, new=self.kappa,
                why=f"{self._accepted_sum:.0f} drafts accepted where the verified path scores predicted "
                    f"{self._predicted_sum:.1f}: utilities rescaled by κ"))
            self._reported_kappa = self.kappa
        if abs(self.draft_scale - self._reported_scale) > 0.25 * self._reported_scale:
            changes.append(Adjustment(
                param="draft_cost_scale", old=self._reported_scale, new=self.draft_scale,
                why=f"drafting took {self._draft_ms_sum:.0f} ms where the cost table predicted "
                    f"{self._draft_predicted_sum:.0f}: draft costs rescaled by ρ"))
            self._reported_scale = self.draft_scale
        return changes

    def _speculation_switch(self, context: int) -> list[Adjustment]:
        """The step's `speculates` when it differs from the last one said, with the numbers behind it."""
        if self.speculates == self._reported_speculates:
            return []
        self._reported_speculates = self.speculates
        best = self.sure_ratios(context)[0]
        verdict = "below C3: nothing drafted, the root verified alone as in ar" if not self.speculates else \
            "C3 or above: trees again"
        return [Adjustment(param="speculates", old=float(not self.speculates), new=float(self.speculates),
                           why=f"at batch {self.cost_batch} and context {self.costs.select_context(context)}, nodes "
                               f"accepted for sure would yield at best {_finite(best):.2f} tokens per t₁ of "
                               f"verify, {verdict}")]


def _finite(value: float) -> float:
    """JSON has no infinity; a free step is reported as a very large ratio."""
    return min(value, 1e9)
