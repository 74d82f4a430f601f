"""An EAGLE-3 head as a drafter: tree-batched, with its own KV cache following the accepted path.

The head reads pairs (token embedding, state). For a context token x_i the
state is the target's feature of x_{i-1}; the pair sits at head position i-1.
The head's cache holds the pairs of every context token but the root. The
root's pair (root token, feature of the token before it) is tree node 0; a
drafted node pairs its token with its parent's output state, since the target
has not seen the parent yet (EAGLE-3's training-time test), and attends to the
cache, its ancestors and itself.

After verification the accepted drafts are re-read with the target's real
features (their tree pairs used predicted states); they wait as pending pairs
and run in the same forward as the next root, so a step costs one head
forward per draft layer and none extra.

Each forward is first handed out as a `HeadForward` (`draft_forward`), so a
batch (engine/batch.py) runs the forwards of several requests' heads in one
kernel call (`HeadForward.run_together`: the head's weights read once for them
all, each request's pairs attending over its own cache, each getting the bits of
a call of its own); a request alone runs its own.

The head's keys and values live in one static cache [2, kv, capacity, d]:
the committed pairs first, then this step's tree nodes in run order, written in
place. In bfloat16 on a CPU that runs the native kernel a draft forward is one
call of its `head_step` (engine/models/native); elsewhere the head's torch modules.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from engine.drafters.base import DraftForward, Drafter, Proposal
from engine.models import native
from engine.models.device import clock, inference
from engine.models.fastlm import forward_choice
from engine.models.head import Eagle3Head, default_feature_layers, load_head
from engine.sampling import SamplingParams, draw_without_replacement, probs_from_logits
from engine.timing import ForwardMeter
from engine.tree import DraftTree, attention_bias


class EagleHeadDrafter(Drafter):
    name = "head"

    def __init__(self, head: Eagle3Head, model_name: str | None = None, num_target_layers: int | None = None):
        super().__init__(ForwardMeter(head.fc.weight.device))
        self.head = head.eval()
        self.model_name = model_name
        layers = head.feature_layers or (default_feature_layers(num_target_layers) if num_target_layers else ())
        assert len(layers) == 3, "an EAGLE-3 head reads three target layers"
        self.feature_layers = tuple(layers)
        self.dtype = head.fc.weight.dtype
        self.device = head.fc.weight.device
        self.native = self._bind_native()
        self._top_k_out: dict[tuple[int, int], tuple[torch.Tensor, ...]] = {}  # top-k outputs per (rows, k)
        self._reset_state()

    def _bind_native(self) -> native.NativeHead | None:
        """The kernel's head step where it runs this head (bf16 on a CPU with the kernel, and not turned
        off by SPECSCOPE_FORWARD), else None: the torch modules run it."""
        if self.dtype != torch.bfloat16 or self.device.type != "cpu" or forward_choice() != "native":
            return None
        try:
            return native.NativeHead(self.head)
        except native.NativeUnavailable:
            return None  # the target's FastLM has said why the kernel does not run, once

    def session(self) -> "EagleHeadDrafter":
        """The same head (its weights shared) with a cache, a meter and kernel scratch of its own."""
        other = copy.copy(self)
        other.meter = ForwardMeter(self.device)
        other.native = self.native.session() if self.native is not None and forward_choice() == "native" \
            else other._bind_native()
        other._top_k_out = {}
        other._reset_state()
        return other

    @classmethod
    def from_dir(cls, path: str | Path, target_model: torch.nn.Module, dtype: torch.dtype = torch.float32,
                 model_name: str | None = None) -> "EagleHeadDrafter":
        """Loads a head directory for `target_model`, sharing its input embeddings."""
        embeddings = target_model.get_input_embeddings().weight.detach()  # [V, H]
        head = load_head(path, embeddings, dtype)
        return cls(head, model_name or Path(path).name, target_model.config.num_hidden_layers)

    def _reset_state(self) -> None:
        attn = self.head.midlayer.self_attn
        self.kv = torch.zeros(2, attn.kv_heads, 256, attn.head_dim, dtype=self.dtype, device=self.device)  # [2, kv, C, d]
        self.length = 0  # committed pairs; this step's tree nodes follow them in the cache
        self.pending_tokens: list[int] = []  # context tokens whose pairs are not in the cache yet
        # [k, F] blocks whose rows, in order, are the features (each of the token before) of the pending tokens and
        # then of the root: kept as the target's forwards gave them, joined only when the root forward runs (a
        # step's accepted path is one block, so mostly never), not a row at a time.
        self.waiting: list[torch.Tensor] = []
        self.discard_tree()

    def discard_tree(self) -> None:
        """Drops this step's tree, keeping the committed cache: the next forward starts the step again (each
        step's root does; a profile times a layer this way)."""
        self.ran = 0  # tree nodes run this step: columns length … length + ran − 1 of the cache, in run order
        self.slot: dict[int, int] = {}  # node -> its column among them
        self.ancestry: dict[int, list[int]] = {}  # node -> columns of itself and its ancestors
        self.node_state: dict[int, torch.Tensor] = {}  # node -> output state [H]
        self.node_logits: dict[int, torch.Tensor] = {}  # node -> [Vd] draft-vocabulary logits
        self.node_lse: dict[int, float] = {}  # node -> log Σ exp(logits), once a greedy proposal needed it
        self.last_ran: tuple[list[int], torch.Tensor | None] = ([], None)  # the last forward's nodes, logits
        # The root forward's line (`draft_forward`): pairs (target token, state [H], logits [Vd]) in the columns
        # after the root, for the node below `line_parent` drafted with the first's token, and so on down.
        self.line: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        self.line_parent = 0

    @property
    def cache_len(self) -> int:
        return self.length

    def _room(self, needed: int) -> None:
        """Grows the cache (doubling) to hold `needed` columns, keeping what it holds."""
        capacity = self.kv.shape[2]
        if needed <= capacity:
            return
        while capacity < needed:
            capacity *= 2
        kv = torch.zeros(*self.kv.shape[:2], capacity, self.kv.shape[3], dtype=self.dtype, device=self.device)
        kv[:, :, :self.length + self.ran] = self.kv[:, :, :self.length + self.ran]
        self.kv = kv

    def start(self, context: list[int], features: torch.Tensor | None = None) -> None:
        self._reset_state()
        if features is None:  # a one-token prompt: nothing before the root
            features = torch.zeros(0, self.head.fc.in_features, dtype=self.dtype, device=self.device)
        assert len(features) == len(context) - 1, "the head needs a feature per context token but the root"
        self.pending_tokens = list(context[1:-1])
        self.waiting = [features if len(features) else torch.zeros(1, features.shape[1], dtype=self.dtype,
                                                                    device=self.device)]  # nothing before the root

    @inference
    def propose(self, tree: DraftTree, frontier: list[int], k: int, sample: bool,
                sampling: SamplingParams, generator: torch.Generator) -> list[Proposal]:
        draft = self.frontier_draft_logits(tree, frontier)  # [N, Vd]
        if k <= 0:
            return [Proposal(node=node, token=[], q=[], source=self.name) for node in frontier]
        if sample and not sampling.greedy:
            logits = self.head.expand_logits(draft.float())  # [N, V]
            return [self._sampled_children(node, row, k, sampling, generator) for node, row in zip(frontier, logits)]
        values, indices, lse = self._top_k(draft, min(k, self.head.draft_vocab_size))  # [N, k], [N, k], [N]
        q = (values - lse[:, None]).exp().tolist()  # q = exp(logit - lse): no [N, Vd] softmax written
        self.node_lse.update(zip(frontier, lse.tolist()))
        tokens = self.head.to_target_ids(indices.tolist())
        return [Proposal(node=node, token=tokens[i], q=q[i], source=self.name) for i, node in enumerate(frontier)]

    def _top_k(self, draft: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The k best of each row of draft logits [N, Vd] (values and indices) and each row's log-sum-exp:
        in the kernel for its bf16 logits (one C call) up to the k it ranks (a budgeted policy may ask for
        more: talon's gated layers for everything its budget has left), else by torch over float ones."""
        if draft.dtype == torch.bfloat16 and self.native is not None and k <= native.TOP_K_MAX:
            shape = (draft.shape[0], k)
            if shape not in self._top_k_out:  # propose reads them at once and keeps none: written again each layer
                if len(self._top_k_out) > 64:  # frontiers of many widths: keep it bounded
                    self._top_k_out.clear()
                self._top_k_out[shape] = (torch.empty(shape), torch.empty(shape, dtype=torch.int64),
                                          torch.empty(shape[0]))
            return native.top_k_lse(draft, k, self._top_k_out[shape])
        draft = draft.float()  # [N, Vd]: the kernel's values and log-sum-exp are float32 too
        top = torch.topk(draft, k, dim=-1)  # [N, k]: one call for the frontier
        return top.values, top.indices, torch.logsumexp(draft, dim=-1)

    def frontier_logits(self, tree: DraftTree, frontier: list[int]) -> torch.Tensor:
        """[N, V] target-vocabulary logits of the head at each frontier node, -inf outside the draft vocabulary."""
        return self.head.expand_logits(self.frontier_draft_logits(tree, frontier).float())

    def frontier_draft_logits(self, tree: DraftTree, frontier: list[int]) -> torch.Tensor:
        """[N, Vd] draft-vocabulary logits of the head at each frontier node (computed once per node): the
        kernel's bfloat16 as it wrote them, else float32."""
        missing = self._missing(tree, frontier)
        if 0 in missing:
            self._root_forward(tree).run()
            missing.remove(0)
        if missing:
            self._nodes_forward(tree, missing).run()
        nodes, logits = self.last_ran
        if nodes == frontier:  # the usual layer: one forward ran the whole frontier, in its order, so its logits
            return logits  # are the answer as they stand (no copy of N × Vd)
        return torch.stack([self.node_logits[n] for n in frontier])

    def draft_forward(self, tree: DraftTree, frontier: list[int], line: int = 0) -> "HeadForward | None":
        """The one forward this frontier needs (the root's, or the new nodes'), or None: none, or two. The root's
        runs `line` more pairs after it where the kernel can (`NativeHead.step_line`: the root's top-1 child, its
        top-1 child, …), and a later layer whose one new node is the next of them takes it without a forward."""
        missing = self._missing(tree, frontier)
        if missing == [0]:
            return self._root_forward(tree, line)
        return self._nodes_forward(tree, missing) if missing and 0 not in missing else None

    def _missing(self, tree: DraftTree, frontier: list[int]) -> list[int]:
        """The frontier's nodes whose forward has not run; a lone one the line ran is taken from it."""
        missing = [n for n in frontier if n not in self.node_logits]
        if len(missing) == 1 and self.line and self._take_from_line(tree, missing[0]):
            return []
        return missing

    def _take_from_line(self, tree: DraftTree, node: int) -> bool:
        """Whether `node` is the line's next pair (the child of the last node it gave, or of the root, drafted with
        the token it ran): then the pair is stored as the node's own forward would have stored it, the same bits
        in the same column (forward.c's `head_step_line`). Any other node ends the line: the forward that runs
        it writes over the line's columns."""
        token, state, logits = self.line[0]
        if tree.parent[node] != self.line_parent or tree.token[node] != token:
            self.line = []
            return False
        assert self.ran == len(self.ancestry[self.line_parent]), "the line's columns follow its parent's"
        del self.line[0]
        self._store([node], [self.ancestry[self.line_parent]], state[None], logits[None])
        self.line_parent = node
        return True

    def prob(self, node: int, token: int) -> float:
        """q(token | node) after a greedy proposal at `node`; 0 outside the draft vocabulary."""
        index = self.head.draft_index(token)
        return 0.0 if index < 0 else math.exp(float(self.node_logits[node][index]) - self.node_lse[node])

    def _timed_step(self, tokens: list[int], state: torch.Tensor | None, positions: list[int], masked: torch.Tensor | None,
                    first_logit: int, features: torch.Tensor | None = None, line: int = 0
                    ) -> tuple[torch.Tensor, torch.Tensor, native.Line | None]:
        """One head forward over N new pairs written from column length + ran on, and the draft logits of
        rows first_logit … N − 1: the draft forward that δ and c count. `masked` [N, M] (bool or uint8) says
        which of the last M of the columns each row sees (None: causal among the new rows); with `features`
        [N, F] the state is their fusion, inside the forward. Returns the output states [N, H], the logits, and
        the `line` pairs run after the last row in the same call, where the kernel runs them (each counts as a
        forward), else None."""
        start, n = self.length + self.ran, len(tokens)
        line = line if self.native is not None and n <= self.native.max_tokens else 0
        self._room(start + n + line)
        masked = _causal(masked, n)
        ran_line = None
        with self.meter.timed(1 + line):
            if features is not None:
                state = self.head.fuse(features)  # [N, H]
            ids = torch.tensor(tokens, device=self.device)
            at = _position_tensor(positions, self.device)
            if line:
                out, logits, ran_line = self.native.step_line(self.head.embed(ids), state, at, self.kv, start, masked,
                                                              first_logit, line)
            elif self.native is not None:
                out, logits = self.native(self.head.embed(ids), state, at, self.kv, start, masked, first_logit)
            else:
                out, logits = self._torch_step(ids, state, at, start, masked, first_logit)
                logits = logits.float()  # [R, Vd]
        return out, logits, ran_line

    def _torch_step(self, ids: torch.Tensor, state: torch.Tensor, positions: torch.Tensor, start: int,
                    masked: torch.Tensor | None, first_logit: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The same forward through the head's torch modules; writes the new keys and values in place."""
        n = len(ids)
        past = (self.kv[0, :, :start][None], self.kv[1, :, :start][None]) if start else None  # [1, kv, S, d] each
        allowed = torch.ones(n, start + n, dtype=torch.bool)
        if masked is not None:
            allowed[:, start + n - masked.shape[1]:] = masked
        out, (k, v) = self.head.step(ids[None], state[None], positions[None], past,
                                     attention_bias(allowed, self.dtype).to(self.device))
        self.kv[0, :, start:start + n] = k[0]
        self.kv[1, :, start:start + n] = v[0]
        return out[0], self.head.draft_logits(out[0, first_logit:])

    def _root_forward(self, tree: DraftTree, line: int = 0) -> "HeadForward":
        """The pending context pairs and the root pair in one causal forward; once it has run, the pending
        pairs have joined the cache and the root is node 0, the tree's first column, with its logits [1, Vd];
        and the `line` pairs run after it (`draft_forward`) wait in the next columns."""
        self.discard_tree()
        tokens = self.pending_tokens + [tree.token[0]]
        features = self.waiting[0] if len(self.waiting) == 1 else torch.cat(self.waiting)  # [M + 1, F]
        if features.device != self.device:
            features = features.to(self.device)
        positions = list(range(self.length, self.length + len(tokens)))

        def store(out: torch.Tensor, logits: torch.Tensor, ran_line: native.Line | None = None) -> None:
            self.length += len(tokens) - 1
            self.pending_tokens, self.waiting = [], [features[-1:]]  # the root's, should the step start again
            self._store([0], [[]], out[-1:], logits)
            if ran_line is not None:
                self.line = list(zip(ran_line.tokens.tolist(), ran_line.states.unbind(0), ran_line.logits.unbind(0)))
        return HeadForward(self, tokens, None, positions, None, len(tokens) - 1, features, store, line)

    def _nodes_forward(self, tree: DraftTree, nodes: list[int]) -> "HeadForward":
        """Drafted nodes: each pairs its token with its parent's output state, attending to the committed
        cache, its ancestors and itself (the columns of this step's tree: ran before, N new); once run, their
        logits [N, Vd] are stored."""
        ran = self.ran
        self.line = []  # its columns are these nodes' now
        above = [self.ancestry[tree.parent[n]] for n in nodes]  # each node's ancestors' columns
        masked = _ancestry_mask(above, ran)  # [N, D + N] over the tree's columns
        state = torch.stack([self.node_state[tree.parent[n]] for n in nodes])  # [N, H]
        positions = [self.length + tree.depth[n] for n in nodes]  # the root pair sits at column `length`
        return HeadForward(self, [tree.token[n] for n in nodes], state, positions, masked, 0, None,
                           lambda out, logits, _line=None: self._store(nodes, above, out, logits))

    def _store(self, nodes: list[int], above: list[list[int]], states: torch.Tensor, logits: torch.Tensor) -> None:
        """Records the nodes just run (their keys are the cache's next columns): states [N, H], logits [N, Vd]."""
        first = self.ran
        self.ran += len(nodes)
        self.last_ran = (nodes, logits)
        rows = zip(states.unbind(0), logits.unbind(0))  # every row's view in one op each, not two ops a node
        for i, (node, (state, row)) in enumerate(zip(nodes, rows)):
            self.slot[node] = first + i
            self.ancestry[node] = above[i] + [first + i]
            self.node_state[node] = state
            self.node_logits[node] = row

    def _sampled_children(self, node: int, logits: torch.Tensor, k: int, sampling: SamplingParams,
                          generator: torch.Generator) -> Proposal:
        """k draws from q without replacement, in draw order, verified against q_dist [V] in that order."""
        q_dist = probs_from_logits(logits[None], sampling)[0]  # [V] float64
        tokens = draw_without_replacement(q_dist, k, generator)
        return Proposal(node=node, token=tokens, q=q_dist[tokens].tolist(), source=self.name,
                        sampled=True, q_dist=q_dist)

    def commit(self, tree: DraftTree, accepted_path: list[int], emitted: list[int],
               features: torch.Tensor | None = None) -> None:
        assert features is not None and len(features) == len(accepted_path)
        if 0 in self.slot:  # the root pair was computed with its real feature: keep it (the tree's first column)
            assert self.slot[0] == 0
            self.length += 1
            self.waiting = []
        else:  # the root waits as a pending pair, with the feature it waited with as the root (`waiting`'s last)
            self.pending_tokens.append(tree.token[0])
        self.pending_tokens += [tree.token[node] for node in accepted_path[1:]]
        self.waiting.append(features)  # the accepted drafts' features, then the next root's (the path's last)
        self.discard_tree()


@dataclass(eq=False)
class HeadForward(DraftForward):
    """One draft forward of an EAGLE-3 head, planned: N new pairs to write from its drafter's column
    length + ran on (`EagleHeadDrafter._timed_step`'s arguments) and what the drafter does with the output."""

    drafter: EagleHeadDrafter
    tokens: list[int]
    state: torch.Tensor | None  # [N, H], or None where `features` [N, F] give it (fused inside the forward)
    positions: list[int]
    masked: torch.Tensor | None
    first_logit: int
    features: torch.Tensor | None
    store: Callable[..., None]  # (output states [N, H], logits[, the line run after them]) -> None
    line: int = 0  # pairs to run after the last row, each the top-1 child of the one before (the root's forward)

    @property
    def key(self) -> int:
        return id(self.drafter.head)  # sessions of one head share its modules

    # Handed out before `propose`, so perhaps outside its inference mode (a run holds one; a profile's timer may
    # not): without the mode the fusion would take autograd's linear, not the kernel's.
    @inference
    def run(self) -> None:
        """The forward alone, as the drafter's own call."""
        self.store(*self.drafter._timed_step(self.tokens, self.state, self.positions, self.masked, self.first_logit,
                                             self.features, self.line))

    @classmethod
    def run_together(cls, forwards: list["HeadForward"]) -> None:
        """Through the kernel, as few calls as `max_tokens` pairs a call allow; each drafter's meter counts a
        forward of the call's time. Without the kernel, one by one."""
        kernel = forwards[0].drafter.native
        if kernel is None or len(forwards) == 1:
            for forward in forwards:
                forward.run()
            return
        chunks: list[list[HeadForward]] = [[]]
        pairs = 0
        for forward in forwards:
            if chunks[-1] and pairs + len(forward.tokens) > kernel.max_tokens:
                chunks.append([])
                pairs = 0
            chunks[-1].append(forward)
            pairs += len(forward.tokens)
        for chunk in chunks:
            if len(chunk) == 1:  # alone, or more pairs than a call takes: the drafter's own call splits them
                chunk[0].run()
            else:
                cls._run_call(kernel, chunk)

    @staticmethod
    @inference
    def _run_call(kernel: native.NativeHead, forwards: list["HeadForward"]) -> None:
        """Forwards of several drafters (at most `max_tokens` pairs) in one `head_step_batch`."""
        head, device = forwards[0].drafter.head, forwards[0].drafter.device
        began = clock(device)
        fused = [f for f in forwards if f.features is not None]
        states = dict(zip(fused, head.fuse(torch.cat([f.features for f in fused])).split(
            [len(f.tokens) for f in fused]))) if fused else {}  # [N, H] each: one product for every root
        steps = []
        for forward in forwards:
            drafter, n = forward.drafter, len(forward.tokens)
            start = drafter.length + drafter.ran
            drafter._room(start + n)
            state = states[forward] if forward.features is not None else forward.state
            steps.append((head.embed(torch.tensor(forward.tokens, device=device)), state,
                          _position_tensor(forward.positions, device), drafter.kv, start,
                          _causal(forward.masked, n), forward.first_logit))
        results = kernel.batch(steps)
        ms = (clock(device) - began) * 1000
        for forward, (out, logits) in zip(forwards, results):
            forward.drafter.meter.record(ms)
            forward.store(out, logits)


def _position_tensor(positions: list[int], device: torch.device) -> torch.Tensor:
    """positions as an int64 tensor: one `arange` op where they run on by one (a root forward's context pairs,
    a lone node), where `torch.tensor` dispatches four.

    >>> cpu = torch.device("cpu")
    >>> _position_tensor([4, 5, 6], cpu).tolist(), _position_tensor([3, 3], cpu).tolist()
    ([4, 5, 6], [3, 3])
    """
    first = positions[0]
    if positions[-1] - first == len(positions) - 1 and positions == list(range(first, first + len(positions))):
        return torch.arange(first, first + len(positions), device=device)
    return torch.tensor(positions, dtype=torch.int64, device=device)


def _causal(masked: torch.Tensor | None, n: int) -> torch.Tensor | None:
    """A step's mask over its new columns: as given, else causal among the n new pairs (None for one; the
    kernel's shared uint8 mask, made once per n)."""
    if masked is None and n > 1:
        return native.causal_mask(n)
    return masked


def _ancestry_mask(above: list[list[int]], ran: int) -> torch.Tensor:
    """[N, ran + N] uint8 (the kernel's mask type): row i sees the columns in above[i] (its ancestors among the
    `ran` run before) and its own, ran + i. Built as one Python list and one tensor: a draft layer is small,
    and every torch op on a tiny tensor costs microseconds of dispatch.

    >>> _ancestry_mask([[0], [0, 1]], ran=2).tolist()
    [[1, 0, 1, 0], [1, 1, 0, 1]]
    """
    width = ran + len(above)
    flat = [0] * (len(above) * width)
    for i, columns in enumerate(above):
        row = i * width
        for column in columns:
            flat[row + column] = 1
        flat[row + ran + i] = 1
    return torch.tensor(flat, dtype=torch.uint8).view(len(above), width)
