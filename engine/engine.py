"""The speculative engine: one run = prefill, then draft → verify → commit steps until done.

Every step grows a tree layer by layer (the drafter proposes children of the
frontier, the policy keeps or prunes each candidate), lets the policy rerank
it, verifies all of it with one target forward under a tree mask, keeps the
path the acceptance rule allows, compacts the target's KV cache to that path
and tells the drafter. What happens is reported through `emit` as typed
events; the same stream feeds the CLI, the benchmark, trace files and the web.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from engine.acceptance import Acceptance, accept_greedy, accept_sampled
from engine.codec import Codec
from engine.drafters.base import Drafter
from engine.events import (Candidate, DraftLayer, DraftTreeDone, EmittedToken, NodeVerdict, PolicyAdjusted,
                           RunFinished, RunStarted, StepMetrics, TextDelta, TreeNode, Verification)
from engine.lm import CachedLM
from engine.policies import PolicyError, make_policy
from engine.policies.base import LayerSelection, Policy, Pool, StepOutcome
from engine.request import GenerationRequest, RequestError
from engine.sampling import probs_from_logits
from engine.tree import DraftTree, position_ids, tree_attention_allowed

Emit = Callable[[Any], None]


@dataclass
class StepTimes:
    draft_ms: float = 0.0
    draft_forward_ms: float = 0.0
    verify_ms: float = 0.0
    other_ms: float = 0.0
    verify_forwards: int = 0


class SpecEngine:
    """A loaded target (and drafters) that runs generation requests one at a time."""

    def __init__(self, target: CachedLM, codec: Codec, drafters: dict[str, Callable[[], Drafter]],
                 default_drafter: str, info: dict[str, Any] | None = None,
                 draft_lm: CachedLM | None = None, policy_context: dict[str, Any] | None = None):
        assert default_drafter in drafters, default_drafter
        self.target = target
        self.codec = codec
        self.drafters = drafters
        self.default_drafter = default_drafter
        self.draft_lm = draft_lm
        self.policy_context = policy_context or {}
        self.info = {"target": target.name, "draft": draft_lm.name if draft_lm else None,
                     "device": str(target.device), "dtype": str(target.dtype).removeprefix("torch."), **(info or {})}
        self._lock = threading.Lock()
        self._drafter_cache: dict[str, Drafter] = {}

    @property
    def drafter_names(self) -> list[str]:
        return list(self.drafters)

    def describe(self) -> dict[str, Any]:
        return {**self.info, "drafters": self.drafter_names, "default_drafter": self.default_drafter}

    def prepare(self, request: GenerationRequest) -> tuple[Policy, Drafter | None, list[int]]:
        """Checks a request against this engine; raises RequestError naming the field at fault."""
        if not request.prompt.strip():
            raise RequestError("the prompt is empty", field="prompt")
        try:
            policy = make_policy(request.policy, request.params, self.policy_context)
        except PolicyError as err:
            raise RequestError(str(err), field=err.field) from None
        name = request.drafter or self.default_drafter
        if name not in self.drafters:
            raise RequestError(f"unknown drafter {name!r}; this engine has {', '.join(self.drafters)}", field="drafter")
        prompt_ids = self.codec.encode_prompt(request.prompt)
        limit = self.target.max_length
        if len(prompt_ids) >= limit:
            raise RequestError(f"the prompt is {len(prompt_ids)} tokens; the model's context is {limit}", field="prompt")
        if len(prompt_ids) + request.max_new_tokens > limit:
            raise RequestError(f"max_new_tokens {request.max_new_tokens} would exceed the model's context of {limit} "
                               f"tokens (the prompt takes {len(prompt_ids)})", field="max_new_tokens")
        drafter = self._drafter(name) if policy.drafts else None
        return policy, drafter, prompt_ids

    def run(self, request: GenerationRequest, emit: Emit | None = None,
            cancelled: Callable[[], bool] | None = None, detail: bool = True) -> RunFinished:
        """Generates for one request. With `detail` off, per-candidate events (layers, tree,
        verify) are not built: the benchmark's setting, so bookkeeping does not cost speed."""
        policy, drafter, prompt_ids = self.prepare(request)
        with self._lock:
            run = _Run(self, request, policy, drafter, prompt_ids, emit or (lambda event: None),
                       cancelled or (lambda: False), detail)
            return run.execute()

    def _drafter(self, name: str) -> Drafter:
        """Drafters are built once (a draft LM's weights are shared) and restarted per run."""
        if name not in self._drafter_cache:
            self._drafter_cache[name] = self.drafters[name]()
        return self._drafter_cache[name]


@dataclass
class _Run:
    engine: SpecEngine
    request: GenerationRequest
    policy: Policy
    drafter: Drafter | None
    prompt_ids: list[int]
    emit: Emit
    cancelled: Callable[[], bool]
    detail: bool
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    generated: list[int] = field(default_factory=list)
    text: str = ""  # decoded so far; each step's text event carries what it added
    totals: StepTimes = field(default_factory=StepTimes)
    steps: int = 0
    draft_forwards: int = 0

    def execute(self) -> RunFinished:
        began = time.perf_counter()
        self._emit_started()
        root = self._prefill()
        self.generator = torch.Generator().manual_seed(self.request.seed)
        stop = None
        while stop is None:
            if self.cancelled():
                stop = "cancelled"
                break
            root, stop = self._step(root)
        return self._finish(stop, time.perf_counter() - began)

    @property
    def target(self) -> CachedLM:
        return self.engine.target

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return self.drafter.feature_layers if self.drafter else ()

    def _prefill(self) -> int:
        """Runs the prompt but its last token, which becomes the first root."""
        self.target.reset()
        self.policy.start_run()
        features = None
        if len(self.prompt_ids) > 1:
            out = self.target.forward_chain(self.prompt_ids[:-1], hidden_layers=self.feature_layers)
            features = torch.cat(out.hidden, dim=-1) if out.hidden else None  # [P-1, F]
        if self.drafter:
            self.drafter.forwards = 0
            self.drafter.forward_ms = 0.0
            self.drafter.start(list(self.prompt_ids), features)
        return self.prompt_ids[-1]

    def _step(self, root: int) -> tuple[int, str | None]:
        self.steps += 1
        times = StepTimes()
        t0 = time.perf_counter()
        forwards_before, forward_ms_before = self._drafter_counters()
        tree, dists = self._draft(root)
        t1 = time.perf_counter()
        logits, features = self._verify(tree)
        t2 = time.perf_counter()
        accepted = self._accept(tree, logits, dists)
        emitted = [tree.token[i] for i in accepted.path[1:]] + [accepted.token]
        self._commit(tree, accepted, emitted, features)
        kept, stop = self._truncate(emitted)
        self.generated.extend(kept)
        forwards_after, forward_ms_after = self._drafter_counters()
        times.draft_ms, times.verify_ms = (t1 - t0) * 1000, (t2 - t1) * 1000
        times.draft_forward_ms = forward_ms_after - forward_ms_before
        self._emit_step(tree, accepted, kept, forwards_after - forwards_before, times, t2, final=stop is not None)
        return accepted.token, stop

    def _drafter_counters(self) -> tuple[int, float]:
        return (self.drafter.forwards, self.drafter.forward_ms) if self.drafter else (0, 0.0)

    def _draft(self, root: int) -> tuple[DraftTree, dict[int, torch.Tensor]]:
        """Grows the tree layer by layer, then reranks it to the nodes sent to verification."""
        tree = DraftTree.with_root(root)
        dists: dict[int, torch.Tensor] = {}
        if not self.drafter:
            return tree, dists
        max_depth = self._depth_room()
        sample = self.policy.sample_children(self.request.temperature)
        frontier, depth = [0], 0
        while frontier and depth < max_depth:
            depth += 1
            proposals = self.drafter.propose(tree, frontier, self.policy.children_per_node(depth), sample,
                                             self.request.sampling, self.generator)
            dists.update({p.node: p.q_dist for p in proposals if p.sampled})
            pool = _pool_of(tree, proposals, depth, self.target.cache_len)
            if not len(pool):
                break
            selection = self.policy.select_layer(tree, pool)
            frontier = self._add_layer(tree, pool, selection)
        rerank = self.policy.finalize(tree)
        verified = tree.subset(rerank.keep)
        if self.detail:
            self._emit_tree(verified, rerank, tree)
        new_index = {old: new for new, old in enumerate(sorted(rerank.keep))}
        return verified, {new_index[node]: d for node, d in dists.items() if node in new_index}

    def _depth_room(self) -> int:
        """Deeper drafts could not be emitted: past max-new-tokens or the context."""
        left = self.request.max_new_tokens - len(self.generated) - 1
        context_left = self.target.max_length - self.target.cache_len - 1
        return max(0, min(left, context_left))

    def _add_layer(self, tree: DraftTree, pool: Pool, selection: LayerSelection) -> list[int]:
        """Adds kept candidates to the tree; returns the next frontier."""
        frontier, candidates = [], []
        for i, decision in enumerate(selection.decisions):
            node = None
            if decision.kept:
                node = tree.add(pool.parent[i], pool.token[i], pool.q[i], pool.score[i], pool.source[i],
                                pool.sampled[i])
                if decision.expanded:
                    frontier.append(node)
            if self.detail:
                candidates.append(Candidate(
                    parent=pool.parent[i], token=pool.token[i], text=self._text(pool.token[i]), depth=pool.depth,
                    q=pool.q[i], score=pool.score[i], source=pool.source[i], kept=decision.kept,
                    expanded=decision.expanded, reason=decision.reason, threshold=decision.threshold,
                    node=node, detail=decision.detail))
        if self.detail:
            self.emit(DraftLayer(**self._header(), step=self.steps, depth=pool.depth, candidates=candidates,
                                 threshold=selection.threshold, anchor=selection.anchor))
        return frontier

    def _verify(self, tree: DraftTree) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One target forward over every node: logits [T, V] and features [T, F] if a drafter needs them."""
        prefix = self.target.cache_len
        if len(tree) == 1:
            out = self.target.forward_chain(tree.token, hidden_layers=self.feature_layers)
        else:
            allowed = tree_attention_allowed(tree.parent, prefix)  # [T, P + T]
            out = self.target.forward_tree(tree.token, position_ids(tree.depth, prefix), allowed,
                                           hidden_layers=self.feature_layers)
        self.totals.verify_forwards += 1
        features = torch.cat(out.hidden, dim=-1) if out.hidden else None
        return out.logits, features

    def _accept(self, tree: DraftTree, logits: torch.Tensor, dists: dict[int, torch.Tensor]) -> Acceptance:
        if self.request.sampling.greedy:
            return accept_greedy(tree, logits)
        probs = probs_from_logits(logits, self.request.sampling)  # [T, V]
        return accept_sampled(tree, probs, dists, self.generator)

    def _commit(self, tree: DraftTree, accepted: Acceptance, emitted: list[int], features: torch.Tensor | None) -> None:
        """Keeps the accepted path in the target's cache and brings the drafter along."""
        prefix = self.target.cache_len - len(tree)
        self.target.keep(list(range(prefix)) + [prefix + node for node in accepted.path])
        if self.drafter:
            path_features = features[accepted.path] if features is not None else None  # [A, F]
            self.drafter.commit(tree, accepted.path, emitted, path_features)

    def _truncate(self, emitted: list[int]) -> tuple[list[int], str | None]:
        """Cuts a step's tokens where plain decoding would have stopped."""
        room = self.request.max_new_tokens - len(self.generated)
        for i, token in enumerate(emitted[:room]):
            if token in self.engine.codec.eos_ids:
                return emitted[:i + 1], "eos"
        kept = emitted[:room]
        return kept, "max_new_tokens" if len(self.generated) + len(kept) >= self.request.max_new_tokens else None

    def _emit_step(self, tree: DraftTree, accepted: Acceptance, kept: list[int], draft_forwards: int,
                   times: StepTimes, verify_end: float, final: bool) -> None:
        header = {**self._header(), "step": self.steps}
        if self.detail:
            self.emit(Verification(**header, **_verdicts(tree, accepted, self._text)))
        accepted_count = min(len(accepted.path) - 1, len(kept))
        # A token can end inside a multi-byte character: hold its replacement mark back until complete.
        text = self.engine.codec.decode(self.generated)
        text = text if final else text.rstrip("\ufffd")
        delta, self.text = text[len(self.text):], text
        self.emit(TextDelta(**header, tokens=kept, text=delta, accepted=accepted_count))
        times.other_ms = (time.perf_counter() - verify_end) * 1000
        self._observe(header, tree, accepted, times)
        self._add_times(times, draft_forwards)
        self.emit(StepMetrics(**header, accepted=accepted_count, emitted=len(kept), tree_size=len(tree) - 1,
                              depth=tree.max_depth, width=_width(tree), draft_forwards=draft_forwards,
                              draft_ms=times.draft_ms, draft_forward_ms=times.draft_forward_ms,
                              verify_ms=times.verify_ms, other_ms=times.other_ms, new_tokens=len(self.generated)))

    def _observe(self, header: dict[str, Any], tree: DraftTree, accepted: Acceptance, times: StepTimes) -> None:
        """Lets the policy learn from the step just verified; reports what it changed."""
        outcome = StepOutcome(tree_size=len(tree) - 1, depth=tree.max_depth, accepted=len(accepted.path) - 1,
                              draft_ms=times.draft_ms, verify_ms=times.verify_ms, other_ms=times.other_ms,
                              prefix_len=self.target.cache_len)
        for change in self.policy.observe(outcome):
            self.emit(PolicyAdjusted(**header, param=change.param, old=change.old, new=change.new, why=change.why))

    def _add_times(self, times: StepTimes, draft_forwards: int) -> None:
        self.totals.draft_ms += times.draft_ms
        self.totals.draft_forward_ms += times.draft_forward_ms
        self.totals.verify_ms += times.verify_ms
        self.totals.other_ms += times.other_ms
        self.draft_forwards += draft_forwards

    def _emit_started(self) -> None:
        request, info = self.request, self.engine.info
        self.emit(RunStarted(
            **self._header(), prompt=request.prompt, prompt_tokens=len(self.prompt_ids),
            params=self.policy.params.model_dump(), drafter=self.drafter.name if self.drafter else "none",
            target=info["target"], draft=self.drafter.model_name if self.drafter else None,
            device=info["device"], dtype=info["dtype"], seed=request.seed, temperature=request.temperature,
            top_k=request.top_k, top_p=request.top_p, max_new_tokens=request.max_new_tokens))

    def _emit_tree(self, verified: DraftTree, rerank, full: DraftTree) -> None:
        origins = sorted(rerank.keep)
        nodes = [TreeNode(node=i, origin=origins[i], parent=verified.parent[i], token=verified.token[i],
                          text=self._text(verified.token[i]), depth=verified.depth[i], q=verified.q[i],
                          score=verified.score[i], source=verified.source[i]) for i in range(len(verified))]
        pruned = [Candidate(parent=full.parent[old], token=full.token[old], text=self._text(full.token[old]),
                            depth=full.depth[old], q=full.q[old], score=full.score[old], source=full.source[old],
                            kept=False, expanded=False, reason=decision.reason, threshold=decision.threshold,
                            node=old, detail=decision.detail)
                  for old, decision in sorted(rerank.pruned.items())]
        self.emit(DraftTreeDone(**self._header(), step=self.steps, nodes=nodes, pruned=pruned))

    def _finish(self, stop: str, wall_s: float) -> RunFinished:
        steps = max(self.steps, 1)
        forwards = self.draft_forwards
        c = None
        if forwards and self.totals.verify_forwards:
            c = (self.totals.draft_forward_ms / forwards) / (self.totals.verify_ms / self.totals.verify_forwards)
        finished = RunFinished(
            **self._header(), text=self.engine.codec.decode(self.generated), tokens=self.generated,
            new_tokens=len(self.generated), steps=self.steps, tau=len(self.generated) / steps,
            delta=forwards / steps, c=c, tokens_per_s=len(self.generated) / wall_s if wall_s > 0 else 0.0,
            wall_s=wall_s, draft_ms=self.totals.draft_ms, draft_forward_ms=self.totals.draft_forward_ms,
            verify_ms=self.totals.verify_ms,
            other_ms=self.totals.other_ms, stop_reason=stop)
        self.emit(finished)
        return finished

    def _header(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "policy": self.policy.name}

    def _text(self, token: int) -> str:
        return self.engine.codec.token_text(token)


def _pool_of(tree: DraftTree, proposals, depth: int, prefix_len: int) -> Pool:
    """Flattens the frontier's proposals into one layer's candidate pool."""
    pool = Pool(depth=depth, parent=[], token=[], q=[], score=[], source=[], sampled=[], prefix_len=prefix_len)
    for proposal in proposals:
        for token, q in zip(proposal.token, proposal.q):
            pool.parent.append(proposal.node)
            pool.token.append(token)
            pool.q.append(q)
            pool.score.append(tree.score[proposal.node] * q)
            pool.source.append(proposal.source)
            pool.sampled.append(proposal.sampled)
    return pool


def _width(tree: DraftTree) -> int:
    counts: dict[int, int] = {}
    for depth in tree.depth[1:]:
        counts[depth] = counts.get(depth, 0) + 1
    return max(counts.values(), default=0)


def _verdicts(tree: DraftTree, accepted: Acceptance, text: Callable[[int], str]) -> dict[str, Any]:
    nodes = [NodeVerdict(node=i, token=tree.token[i], p=accepted.p_of_node.get(i), q=tree.q[i],
                         verdict=accepted.verdicts.get(i, "unreached")) for i in range(1, len(tree))]
    emitted = EmittedToken(parent=accepted.path[-1], token=accepted.token, text=text(accepted.token),
                           p=accepted.token_p, kind=accepted.kind)
    return {"nodes": nodes, "emitted": emitted, "accepted_path": accepted.path}
