"""Turning what a run did into events: the one stream the CLI, the benchmark, traces and the web read.

The engine's step does the algorithm and hands the reporter what happened
(the grown layers, the verified tree, the acceptance walk, the tokens kept,
the step's timings); the reporter builds the events, keeps the run's totals
and writes the closing `run_finished`. With `detail` off (the benchmark's
setting) it builds only the text and step summaries, so bookkeeping costs no
speed where speed is measured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from engine.acceptance import Acceptance, Visit, verdicts_of
from engine.drafting import Draft
from engine.events import (Candidate, CostsSummary, DraftLayer, DraftTreeDone, EmittedToken, NodeVerdict,
                           PolicyAdjusted, RunFinished, RunStarted, StepMetrics, TextDelta, TokenOdds, TreeNode,
                           Verification, WalkNode)
from engine.interface import Emit
from engine.models.codec import Codec, TextStream
from engine.policies.base import Adjustment, Decision, Rerank
from engine.timing import Timings
from engine.tree import DraftTree

WALK_TOP = 5  # tokens shown per visited node in the sampling panel


@dataclass
class VerifiedStep:
    """What one step's verification decided, as the reporter needs it."""

    step: int
    tree: DraftTree  # the verified tree
    accepted: Acceptance
    kept: list[int]  # tokens appended to the output this step (cut at EOS or max-new-tokens)
    generated: list[int]  # the whole output so far, this step's tokens included
    target_probs: Callable[[int], torch.Tensor]  # node -> [V] the target's distribution there, as acceptance read it
    draft_dists: dict[int, torch.Tensor]  # node -> [V] q its sampled children were drawn from

    @property
    def accepted_kept(self) -> int:
        """Accepted drafts among the kept tokens (a cut at EOS or max-new-tokens may drop some)."""
        return min(len(self.accepted.path) - 1, len(self.kept))

    @property
    def path_kept(self) -> list[int]:
        """The accepted path as far as the text goes: the root and the accepted drafts kept."""
        return self.accepted.path[:self.accepted_kept + 1]

    @property
    def emitted_kept(self) -> bool:
        """Whether the recovered or bonus token is in the output: a cut at an accepted draft falls before it."""
        return len(self.kept) == len(self.accepted.path)


class RunReporter:
    def __init__(self, emit: Emit, detail: bool, codec: Codec, run_id: str, policy: str):
        self.emit = emit
        self.detail = detail
        self.codec = codec
        self.header = {"run_id": run_id, "policy": policy}
        self.totals = Timings()
        self.steps = 0
        self.draft_forwards = 0
        self._text = TextStream(codec)  # each text event carries what its step added

    def resume_after(self, generated: list[int]) -> None:
        """A run that starts mid-output (a what-if) reports only the text its own steps add."""
        self._text = TextStream(self.codec, generated)

    def started(self, **fields: Any) -> None:
        self.emit(RunStarted(**self.header, **fields))

    def drafted(self, step: int, draft: Draft, rerank: Rerank, verified: DraftTree) -> None:
        """Each layer's candidates with the policy's decisions, then the tree sent to verification."""
        if not self.detail:
            return
        for layer in draft.layers:
            pool, selection = layer.pool, layer.selection
            candidates = [self._candidate(pool.parent[i], pool.token[i], pool.depth, pool.q[i], pool.score[i],
                                          pool.source[i], decision, layer.nodes[i])
                          for i, decision in enumerate(selection.decisions)]
            self.emit(DraftLayer(**self.header, step=step, depth=pool.depth, candidates=candidates,
                                 threshold=selection.threshold, anchor=selection.anchor))
        full, origins = draft.tree, sorted(rerank.keep)
        nodes = [TreeNode(node=i, origin=origins[i], parent=verified.parent[i], token=verified.token[i],
                          text=self.codec.token_text(verified.token[i]), depth=verified.depth[i], q=verified.q[i],
                          score=verified.score[i], source=verified.source[i], byte_hex=self.codec.byte_hex(verified.token[i]))
                 for i in range(len(verified))]
        pruned = [self._candidate(full.parent[old], full.token[old], full.depth[old], full.q[old], full.score[old],
                                  full.source[old], decision, old)
                  for old, decision in sorted(rerank.pruned.items())]
        self.emit(DraftTreeDone(**self.header, step=step, nodes=nodes, pruned=pruned))

    def verified(self, result: VerifiedStep, final: bool) -> None:
        """The target's verdicts (with the acceptance walk's numbers) and the text the step added."""
        header = {**self.header, "step": result.step}
        if self.detail:
            self.emit(Verification(**header, **self._verdicts(result)))
        # A token can end inside a multi-byte character: its replacement mark is held back until complete.
        self.emit(TextDelta(**header, tokens=result.kept, text=self._text.piece(result.generated, final),
                            accepted=result.accepted_kept))

    def step_done(self, result: VerifiedStep, draft_forwards: int, times: Timings,
                  adjustments: list[Adjustment], shared: int = 1) -> None:
        """What the policy changed after the step, and the step's summary; adds to the run's totals."""
        header = {**self.header, "step": result.step}
        for change in adjustments:
            self.emit(PolicyAdjusted(**header, **change.model_dump()))
        self.steps += 1
        self.draft_forwards += draft_forwards
        self.totals = self.totals + times
        tree = result.tree
        self.emit(StepMetrics(**header, **times.model_dump(), accepted=result.accepted_kept,
                              emitted=len(result.kept), tree_size=len(tree) - 1, depth=tree.max_depth,
                              width=layer_width(tree), draft_forwards=draft_forwards,
                              new_tokens=len(result.generated), shared=shared))

    def finished(self, stop: str, wall_s: float, generated: list[int]) -> RunFinished:
        """The run's summary: τ, δ, c and tokens per second over the whole run."""
        steps = max(self.steps, 1)
        c = None
        if self.draft_forwards and self.totals.verify_ms > 0:
            c = (self.totals.draft_forward_ms / self.draft_forwards) / (self.totals.verify_ms / steps)
        finished = RunFinished(
            **self.header, **self.totals.model_dump(), text=self.codec.decode(generated), tokens=generated,
            new_tokens=len(generated), steps=self.steps, tau=len(generated) / steps,
            delta=self.draft_forwards / steps, c=c, tokens_per_s=len(generated) / wall_s if wall_s > 0 else 0.0,
            wall_s=wall_s, stop_reason=stop)
        self.emit(finished)
        return finished

    def _candidate(self, parent: int, token: int, depth: int, q: float, score: float, source: str,
                   decision: Decision, node: int | None) -> Candidate:
        return Candidate(parent=parent, token=token, text=self.codec.token_text(token), depth=depth, q=q, score=score,
                         source=source, kept=decision.kept, expanded=decision.expanded, reason=decision.reason,
                         threshold=decision.threshold, node=node, detail=decision.detail, byte_hex=self.codec.byte_hex(token))

    def _verdicts(self, result: VerifiedStep) -> dict[str, Any]:
        """The walk as far as the text goes. Where the text ends at an accepted draft (EOS, or max-new-tokens),
        the walk is reported up to that node and stops there: nodes past it are unreached and no recovered or
        bonus token is emitted, so the event says what step_metrics and the output say."""
        tree, accepted, path = result.tree, result.accepted, result.path_kept
        visits = accepted.visits[:len(path)]
        if not result.emitted_kept:
            visits = visits[:-1] + [Visit(path[-1])]  # the end of the text: no child tried, nothing drawn
        verdicts = verdicts_of(visits)
        nodes = [NodeVerdict(node=i, token=tree.token[i], p=accepted.p_of_node.get(i) if i in verdicts else None,
                             q=tree.q[i], verdict=verdicts.get(i, "unreached")) for i in range(1, len(tree))]
        emitted = None
        if result.emitted_kept:
            emitted = EmittedToken(parent=path[-1], token=accepted.token, text=self.codec.token_text(accepted.token),
                                   p=accepted.token_p, kind=accepted.kind, byte_hex=self.codec.byte_hex(accepted.token))
        walk = [self._walk_node(result, visit) for visit in visits]
        return {"nodes": nodes, "emitted": emitted, "accepted_path": path, "walk": walk}

    def _walk_node(self, result: VerifiedStep, visit: Visit) -> WalkNode:
        p = result.target_probs(visit.node)  # [V]
        q_of = self._draft_q(result, visit.node)
        residual = self._top_odds(visit.left, q_of) if visit.left is not None else None
        return WalkNode(node=visit.node, top=self._top_odds(p, q_of), checks=visit.checks, residual_top=residual,
                        drawn=visit.drawn)

    def _draft_q(self, result: VerifiedStep, node: int) -> Callable[[int], float | None]:
        """q of a token at `node`: the distribution sampled children came from, else the drafted children's q."""
        dist = result.draft_dists.get(node)
        if dist is not None:
            return lambda token: float(dist[token])
        tree = result.tree
        drafted = {tree.token[c]: tree.q[c] for c in range(1, len(tree)) if tree.parent[c] == node}
        return drafted.get

    def _top_odds(self, p: torch.Tensor, q_of: Callable[[int], float | None]) -> list[TokenOdds]:
        top = torch.topk(p, min(WALK_TOP, p.shape[-1]))
        return [TokenOdds(token=token, text=self.codec.token_text(token), p=prob, q=q_of(token))
                for token, prob in zip(top.indices.tolist(), top.values.tolist())]


def layer_width(tree: DraftTree) -> int:
    """The number of nodes in the tree's widest layer (the root not counted).

    >>> t = DraftTree.with_root(0); a = t.add(0, 1, .5, .5); b = t.add(0, 2, .3, .3); c = t.add(a, 3, .5, .25)
    >>> layer_width(t)
    2
    """
    counts: dict[int, int] = {}
    for depth in tree.depth[1:]:
        counts[depth] = counts.get(depth, 0) + 1
    return max(counts.values(), default=0)
