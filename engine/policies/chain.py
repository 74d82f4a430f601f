"""`chain`: γ draft tokens in a line (Leviathan et al. 2023), and a free copy past them.

With temperature > 0 each draft token is sampled from the draft distribution
and verified by rejection sampling with residual norm(max(0, p - q)).

γ bounds what the drafter is asked for. Past γ the chain takes only free
children (a model-free drafter following a text match, engine/drafters/suffix.py:
no draft forward, so δ counts none of them) and follows them while their q is at
least `free_q`, up to `max_depth`: a 30-token copy is verified in one step
instead of six. A free token is free to draft, not to verify: it also has to
pay for its place in the verify forward. Its expected gain is its path score
(the chance the target accepts it and every token before it), in tokens, each
worth one one-token step; its cost is what it adds to the verify forward, read
from the cost table in one-token forwards. So the chain follows the match while

    score(u) ≥ (verify(n + 1) − verify(n)) / verify(1),     n = the tokens verified without u,

which on a GPU (a flat verify cost) is any match, and on a CPU whose wide
forwards are compute-bound a sure one only (`cost_aware=false`: q alone decides).
With `free_q` = 1 (no match is that sure) the chain is Leviathan's.

γ itself is chosen as Leviathan et al. choose it (§3.5): the one that
maximises the expected tokens per unit of step time (their improvement
factor). With α the chance the target accepts a draft token, a step of γ
drafts emits

    E(γ) = (1 − α^(γ+1)) / (1 − α)       tokens (the bonus or recovered one included),

and costs γ draft forwards and a verify forward over γ + 1 tokens. The
paper takes the verify as flat and a draft as c of it; here both are read
from the cost table (measured on this machine by `specscope profile`), so a
verify that grows with its tokens, as a CPU's does, favours shorter
chains. The clock is not read: a run's γ, and so a seeded run's draws, are
the same every time. α is estimated per request from the chain's own
verdicts (the maximum-likelihood estimate of a geometric run: accepted
drafts over accepted drafts plus rejections), discounted by `DECAY` a step
so that a change of text moves it, from a prior of `PRIOR_ALPHA` worth
`PRIOR_WEIGHT` verdicts. `gamma` is then the most a step drafts;
`pick_gamma=false` drafts exactly `gamma` every step. Each change of the
step's γ is reported (policy_adjusted) with its numbers.

γ = 0 is a choice too, as in the paper (an improvement factor below 1 says
do not speculate): one verify of the root alone, E = 1, nothing drafted
from the model (a free match may still follow). A batch of 4 on a 2-core
CPU, where one more token a request adds half to all of a one-token forward,
gives it; a run alone there does not. A step without model drafts gives no
verdict, so the estimate then drifts back to the prior as an old verdict
fades (DECAY a step): after some ten such steps the chain drafts again, and
its verdicts decide whether it goes on.
"""

from __future__ import annotations

from pydantic import Field

from engine.policies.base import (Adjustment, Decision, LayerSelection, Policy, PolicyContext, PolicyParams, Pool,
                                  StepOutcome)
from engine.tree import DraftTree

PRIOR_ALPHA = 0.6  # Leviathan et al. measure α of 0.5–0.8 for their drafts
PRIOR_WEIGHT = 2.0  # verdicts the prior is worth: the first steps' own move it at once
DECAY = 0.9  # each step's weight against the next: about the last ten steps count


class ChainParams(PolicyParams):
    gamma: int = Field(5, ge=1, le=64, description="draft tokens per step (γ); with pick_gamma, the most")
    pick_gamma: bool = Field(True, description="each step, the γ up to gamma that maximises expected tokens per "
                                               "unit of step time (Leviathan et al. §3.5), from the acceptance "
                                               "measured so far and the cost table")
    sample: bool = Field(True, description="sample drafts from q when temperature > 0")
    free_q: float = Field(0.5, ge=0, le=1, description="past γ, a free match continues while its q is at least this")
    max_depth: int = Field(32, ge=1, le=64, description="depth limit of a free match")
    cost_aware: bool = Field(True, description="past γ, a free match continues only while its path score pays "
                                               "for its share of the verify forward (the cost table's)")


class ChainPolicy(Policy):
    name = "chain"
    description = "A line of γ draft tokens verified in one forward (Leviathan et al. 2023): deep and one wide."
    Params = ChainParams
    title = "chain (Leviathan et al.)"
    symbols = {"γ": "gamma"}
    needs_costs = True  # γ's choice and past γ; its output says whether the costs were measured

    def __init__(self, params: ChainParams, context: PolicyContext | None = None):
        super().__init__(params, context)
        self.start_run()

    def start_run(self) -> None:
        self.accepted = PRIOR_ALPHA * PRIOR_WEIGHT  # discounted accepted drafts, the prior's included
        self.rejected = (1 - PRIOR_ALPHA) * PRIOR_WEIGHT  # discounted rejections
        self.context_len = 0  # the target's cached tokens at the last step
        self.gamma_now = self.params.gamma
        if self.params.pick_gamma:
            self.gamma_now = self.best_gamma()[0]

    @property
    def alpha(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def best_gamma(self) -> tuple[int, dict[str, float]]:
        """The γ ≤ gamma of most expected tokens per ms, as the cost table prices a step, and the numbers behind it."""
        alpha, costs, context, batch = self.alpha, self.costs, self.context_len, self.batch
        draft = costs.draft_cost(1, context, batch)
        verify = costs.prices(self.params.gamma + 1, context, batch)  # [verify of m tokens for m = 0 … γ + 1]

        def tokens(gamma: int) -> float:  # (1 − α^(γ+1)) / (1 − α), written so that α = 1 is no special case
            return sum(alpha ** i for i in range(gamma + 1))

        def ms(gamma: int) -> float:  # γ draft forwards, then one verify of the root and γ drafts
            return gamma * draft + verify[gamma + 1]  # γ = 0: no draft forward (the head catches up when it runs)

        best = max(range(self.params.gamma + 1), key=lambda g: (tokens(g) / ms(g), -g))  # ties: the shorter
        return best, {"alpha": alpha, "tokens": tokens(best), "ms": ms(best)}

    def observe(self, outcome: StepOutcome) -> list[Adjustment]:
        """Counts the step's verdicts on its model drafts, then picks the next step's γ."""
        drafted = min(outcome.depth, self.gamma_now)
        accepted = min(outcome.accepted, drafted)
        fading = (1 - DECAY) * PRIOR_WEIGHT if not drafted else 0.0  # no verdict: the prior takes the faded weight
        self.accepted = self.accepted * DECAY + accepted + fading * PRIOR_ALPHA
        self.rejected = self.rejected * DECAY + (1 if accepted < drafted else 0) + fading * (1 - PRIOR_ALPHA)
        self.context_len = outcome.prefix_len
        if not self.params.pick_gamma:
            return []
        old, (new, why) = self.gamma_now, self.best_gamma()
        self.gamma_now = new
        if new == old:
            return []
        drafts = f"{new} drafts are" if new else "no draft (the root alone, as ar) is"
        return [Adjustment(param="gamma", old=old, new=new,
                           why=f"α ≈ {why['alpha']:.2f} from the verdicts so far: {drafts} expected to emit "
                               f"{why['tokens']:.2f} tokens in {why['ms']:.1f} ms, the most per ms")]

    def children_per_node(self, tree: DraftTree, depth: int) -> int:
        return 1

    def line_ahead(self) -> int:
        return max(self.gamma_now - 1, 0)

    def drafts_from_model(self, depth: int, prefix_len: int) -> bool:
        return depth <= self.gamma_now

    def sample_children(self, temperature: float) -> bool:
        return self.params.sample and temperature > 0

    def select_layer(self, tree: DraftTree, pool: Pool) -> LayerSelection:
        grow = pool.depth < max(self.params.max_depth, self.gamma_now)
        if pool.depth <= self.gamma_now:
            decisions = [Decision(kept=i == 0, expanded=i == 0 and grow, reason="topk") for i in range(len(pool))]
            return LayerSelection(decisions=decisions)
        sure = pool.q[0] >= self.params.free_q
        price = self._verify_price(pool)
        pays = not self.params.cost_aware or pool.score[0] >= price
        first = "match" if sure and pays else "cost" if sure else "below_threshold"
        detail = {"price": price} if self.params.cost_aware else {}
        decisions = [Decision(kept=i == 0 and sure and pays, expanded=i == 0 and sure and pays and grow,
                              reason=first if i == 0 else "topk", threshold=self.params.free_q,
                              detail=detail if i == 0 else {}) for i in range(len(pool))]
        return LayerSelection(decisions=decisions, threshold=self.params.free_q)

    def _verify_price(self, pool: Pool) -> float:
        """What one more token adds to the verify forward, in one-token forwards: the chain so far is the
        root and depth − 1 drafts."""
        costs, n, context, batch = self.costs, pool.depth, pool.prefix_len, self.batch
        return ((costs.verify_cost(n + 1, context, batch) - costs.verify_cost(n, context, batch))
                / costs.verify_cost(1, context, batch))
