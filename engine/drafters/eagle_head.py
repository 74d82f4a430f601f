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
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

from engine.drafters.base import Drafter, Proposal
from engine.head import Eagle3Head, default_feature_layers, load_head
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
        self._reset_state()

    @classmethod
    def from_dir(cls, path: str | Path, target_model: torch.nn.Module, dtype: torch.dtype = torch.float32,
                 model_name: str | None = None) -> "EagleHeadDrafter":
        """Loads a head directory for `target_model`, sharing its input embeddings."""
        embeddings = target_model.get_input_embeddings().weight.detach()  # [V, H]
        head = load_head(path, embeddings, dtype)
        return cls(head, model_name or Path(path).name, target_model.config.num_hidden_layers)

    def _reset_state(self) -> None:
        attn = self.head.midlayer.self_attn
        empty = torch.zeros(1, attn.kv_heads, 0, attn.head_dim, dtype=self.dtype, device=self.device)  # [1, kv, 0, d]
        self.cache_k, self.cache_v = empty, empty.clone()
        self.pending_tokens: list[int] = []  # context tokens whose pairs are not in the cache yet
        self.pending_features: list[torch.Tensor] = []  # each [F]: feature of the token before
        self.root_feature: torch.Tensor | None = None  # [F]: feature of the token before the root
        self._clear_tree()

    def _clear_tree(self) -> None:
        attn = self.head.midlayer.self_attn
        empty = torch.zeros(1, attn.kv_heads, 0, attn.head_dim, dtype=self.dtype, device=self.device)
        self.tree_k, self.tree_v = empty, empty.clone()  # [1, kv, D, d]: keys of the nodes run this step, in run order
        self.slot: dict[int, int] = {}  # node -> its column in tree_k
        self.ancestry: dict[int, list[int]] = {}  # node -> columns of itself and its ancestors
        self.node_state: dict[int, torch.Tensor] = {}  # node -> output state [H]
        self.node_logits: dict[int, torch.Tensor] = {}  # node -> [Vd] draft-vocabulary logits
        self.node_lse: dict[int, float] = {}  # node -> log Σ exp(logits), once a greedy proposal needed it

    @property
    def cache_len(self) -> int:
        return self.cache_k.shape[2]

    def start(self, context: list[int], features: torch.Tensor | None = None) -> None:
        self._reset_state()
        if features is None:  # a one-token prompt: nothing before the root
            features = torch.zeros(0, self.head.fc.in_features, dtype=self.dtype, device=self.device)
        assert len(features) == len(context) - 1, "the head needs a feature per context token but the root"
        self.pending_tokens = list(context[1:-1])
        self.pending_features = list(features[:-1])
        self.root_feature = features[-1] if len(features) else self._zero_feature()

    def _zero_feature(self) -> torch.Tensor:
        return torch.zeros(self.head.fc.in_features, dtype=self.dtype, device=self.device)

    @torch.inference_mode()
    def propose(self, tree: DraftTree, frontier: list[int], k: int, sample: bool,
                sampling: SamplingParams, generator: torch.Generator) -> list[Proposal]:
        draft = self.frontier_draft_logits(tree, frontier)  # [N, Vd]
        if k <= 0:
            return [Proposal(node=node, token=[], q=[], source=self.name) for node in frontier]
        if sample and not sampling.greedy:
            logits = self.head.expand_logits(draft)  # [N, V]
            return [self._sampled_children(node, row, k, sampling, generator) for node, row in zip(frontier, logits)]
        top = torch.topk(draft, min(k, self.head.draft_vocab_size), dim=-1)  # [N, k]: one call for the frontier
        lse = torch.logsumexp(draft, dim=-1)  # [N]: q = exp(logit - lse), no [N, Vd] softmax written
        q = (top.values - lse[:, None]).exp().tolist()
        self.node_lse.update(zip(frontier, lse.tolist()))
        tokens = self.head.to_target(top.indices).tolist()
        return [Proposal(node=node, token=tokens[i], q=q[i], source=self.name) for i, node in enumerate(frontier)]

    def frontier_logits(self, tree: DraftTree, frontier: list[int]) -> torch.Tensor:
        """[N, V] target-vocabulary logits of the head at each frontier node, -inf outside the draft vocabulary."""
        return self.head.expand_logits(self.frontier_draft_logits(tree, frontier))

    def frontier_draft_logits(self, tree: DraftTree, frontier: list[int]) -> torch.Tensor:
        """[N, Vd] draft-vocabulary logits of the head at each frontier node (computed once per node)."""
        missing = [n for n in frontier if n not in self.node_logits]
        if 0 in missing:
            self._run_root(tree)
            missing.remove(0)
        if missing:
            self._run_nodes(tree, missing)
        return torch.stack([self.node_logits[n] for n in frontier])

    def prob(self, node: int, token: int) -> float:
        """q(token | node) after a greedy proposal at `node`; 0 outside the draft vocabulary."""
        index = self.head.draft_index(token)
        return 0.0 if index < 0 else math.exp(float(self.node_logits[node][index]) - self.node_lse[node])

    def _timed_step(self, tokens, state, positions, past, bias, read_out: slice, features=None):
        """One head forward and the readout of the positions in `read_out`: the draft forward that δ and c count.
        With `features` [1, N, F] the state is their fusion, inside the forward."""
        with self.meter.timed():
            if features is not None:
                state = self.head.fuse(features)  # [1, N, H]
            out, kv = self.head.step(tokens, state, positions, past, bias)
            logits = self.head.draft_logits(out[0, read_out]).float()  # [R, Vd]
        return out, kv, logits

    def _run_root(self, tree: DraftTree) -> None:
        """The pending context pairs and the root pair in one causal forward; the root becomes node 0."""
        self._clear_tree()
        tokens = self.pending_tokens + [tree.token[0]]
        features = torch.stack(self.pending_features + [self.root_feature]).to(self.device)  # [M + 1, F]
        n, past = len(tokens), self.cache_len
        positions = torch.arange(past, past + n, device=self.device)[None]  # [1, M + 1]
        causal = torch.ones(n, n, dtype=torch.bool).tril()  # [M + 1, M + 1]
        allowed = torch.cat([torch.ones(n, past, dtype=torch.bool), causal], dim=1)
        out, (k, v), logits = self._timed_step(torch.tensor([tokens], device=self.device), None, positions,
                                               self._past(), attention_bias(allowed, self.dtype).to(self.device),
                                               slice(n - 1, n), features=features[None])
        self.cache_k = torch.cat([self.cache_k, k[:, :, :-1]], dim=2)
        self.cache_v = torch.cat([self.cache_v, v[:, :, :-1]], dim=2)
        self.pending_tokens, self.pending_features = [], []
        self._store([0], [[]], k[:, :, -1:], v[:, :, -1:], out[0, -1:], logits)

    def _run_nodes(self, tree: DraftTree, nodes: list[int]) -> None:
        """Drafted nodes: each pairs its token with its parent's output state, attending to its ancestors."""
        ran = self.tree_k.shape[2]  # columns of the nodes already run, every ancestor of the new ones among them
        above = [self.ancestry[tree.parent[n]] for n in nodes]  # each node's ancestors' columns
        allowed = torch.zeros(len(nodes), self.cache_len + ran + len(nodes), dtype=torch.bool)  # [N, P + D + N]
        allowed[:, :self.cache_len] = True
        rows = [i for i, columns in enumerate(above) for _ in columns]
        allowed[rows, [self.cache_len + c for columns in above for c in columns]] = True
        allowed[range(len(nodes)), range(self.cache_len + ran, self.cache_len + ran + len(nodes))] = True
        state = torch.stack([self.node_state[tree.parent[n]] for n in nodes])[None]  # [1, N, H]
        root_position = self.cache_len  # the root pair's position once the pending pairs are cached
        positions = torch.tensor([[root_position + tree.depth[n] for n in nodes]], device=self.device)  # [1, N]
        past = (torch.cat([self.cache_k, self.tree_k], dim=2), torch.cat([self.cache_v, self.tree_v], dim=2))
        tokens = torch.tensor([[tree.token[n] for n in nodes]], device=self.device)
        out, (k, v), logits = self._timed_step(tokens, state, positions, past,
                                               attention_bias(allowed, self.dtype).to(self.device),
                                               slice(0, len(nodes)))
        self._store(nodes, above, k, v, out[0], logits)

    def _store(self, nodes: list[int], above: list[list[int]], k: torch.Tensor, v: torch.Tensor,
               states: torch.Tensor, logits: torch.Tensor) -> None:
        """Appends the nodes' keys [1, kv, N, d] to the tree's; states [N, H] and logits [N, Vd] by node."""
        first = self.tree_k.shape[2]
        self.tree_k = torch.cat([self.tree_k, k], dim=2)
        self.tree_v = torch.cat([self.tree_v, v], dim=2)
        for i, node in enumerate(nodes):
            self.slot[node] = first + i
            self.ancestry[node] = above[i] + [first + i]
            self.node_state[node] = states[i]
            self.node_logits[node] = logits[i]

    def _past(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        return (self.cache_k, self.cache_v) if self.cache_len else None

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
        if 0 in self.slot:  # the root pair was computed with its real feature: keep it
            root = self.slot[0]
            self.cache_k = torch.cat([self.cache_k, self.tree_k[:, :, root:root + 1]], dim=2)
            self.cache_v = torch.cat([self.cache_v, self.tree_v[:, :, root:root + 1]], dim=2)
        else:
            self.pending_tokens.append(tree.token[0])
            self.pending_features.append(self.root_feature)
        for j, node in enumerate(accepted_path[1:], start=1):
            self.pending_tokens.append(tree.token[node])
            self.pending_features.append(features[j - 1])
        self.root_feature = features[-1]
        self._clear_tree()

