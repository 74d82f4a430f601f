"""Tiny random Llama models built in code, and a drafter of given probabilities: for tests and demos
that must not download anything."""

from __future__ import annotations

import copy
from typing import Callable

import torch
from pydantic import Field
from transformers import LlamaConfig, LlamaForCausalLM

from engine.drafters.base import Drafter, Proposal
from engine.drafters.draft_lm import DraftLMDrafter
from engine.drafters.prompt_lookup import PromptLookupDrafter
from engine.drafters.suffix import SuffixDrafter
from engine.engine import SpecEngine
from engine.models.codec import ByteCodec, Codec
from engine.models.fastlm import causal_lm
from engine.models.base import ForwardOutput
from engine.models.lm import CachedLM
from engine.policies.base import Decision, LayerSelection, Policy, PolicyParams, Pool
from engine.sampling import SamplingParams
from engine.tree import DraftTree

TINY_VOCAB = 260
TINY_EOS = 256


class SymbolCodec(Codec):
    """A tiny vocabulary for distribution tests: prompt characters map to ids modulo vocab - 1."""

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size
        self.eos_ids = frozenset({vocab_size - 1})
        self.name = f"symbols-{vocab_size}"

    def encode_prompt(self, prompt: str) -> list[int]:
        return [ord(c) % (self.vocab_size - 1) for c in prompt]

    def decode(self, ids: list[int]) -> str:
        return " ".join(str(i) for i in ids if i not in self.eos_ids)

    def token_text(self, token: int) -> str:
        return str(token)


def tiny_llama(seed: int, vocab_size: int = TINY_VOCAB, hidden: int = 64, layers: int = 2,
               dtype: torch.dtype = torch.float32, max_positions: int = 1024,
               sharpness: float = 1.0) -> LlamaForCausalLM:
    """A random Llama; `sharpness` scales the output head (higher: peakier, fewer near-ties)."""
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=max_positions, tie_word_embeddings=False,
                         attn_implementation="sdpa")
    model = LlamaForCausalLM(config).to(dtype).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpness)
    return model


def perturbed_copy(model: LlamaForCausalLM, noise: float, seed: int) -> LlamaForCausalLM:
    """A draft that agrees with its target often but not always: weights plus relative noise."""
    draft = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in draft.parameters():
            scale = param.abs().mean() * noise
            param.add_(torch.randn(param.shape, generator=generator, dtype=torch.float64).to(param.dtype) * scale)
    return draft


def tiny_engine(seed: int = 0, dtype: torch.dtype = torch.float32, vocab_size: int = TINY_VOCAB,
                draft_noise: float = 0.2, sharpness: float = 1.0, codec: Codec | None = None,
                hidden: int = 64) -> SpecEngine:
    """A tiny target and a noisy copy of it as the draft LM, every drafter wired."""
    target_model = tiny_llama(seed, vocab_size, hidden=hidden, dtype=dtype, sharpness=sharpness)
    target = causal_lm(target_model, name="tiny-target")
    draft = causal_lm(perturbed_copy(target_model, draft_noise, seed + 1), name="tiny-draft")
    drafters = {
        "draft-lm": lambda: DraftLMDrafter(draft),
        "prompt-lookup": lambda: PromptLookupDrafter(),
        "suffix": lambda: SuffixDrafter(),
    }
    codec = codec or ByteCodec(vocab_size=vocab_size, eos_id=TINY_EOS)
    return SpecEngine(target, codec, drafters, default_drafter="draft-lm", draft_lm=draft)


class CopyLM(CachedLM):
    """A rule in a CachedLM's place: the next token is the one that followed the latest earlier
    occurrence of the current token (EOS where there is none). A prompt holding a passage of distinct
    tokens and then the passage's first token is copied verbatim, round and round: a target on which
    how deep a copy is drafted can be tested. Its "hidden states" are fixed random vectors per token,
    of the tiny Llama's width, so a head can read them.

    >>> lm = CopyLM(); lm.forward_chain([5, 6, 7, 5]).logits.argmax(-1).tolist()
    [256, 256, 256, 6]
    """

    def __init__(self, vocab_size: int = TINY_VOCAB, eos: int = TINY_EOS, hidden: int = 64, layers: int = 6,
                 name: str = "copy"):
        self.name = name
        self.model = None
        self.config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
                                  num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                                  max_position_embeddings=1024)
        self.device = torch.device("cpu")
        self.dtype = torch.float64
        self.eos = eos
        self.states = torch.randn(vocab_size, hidden, generator=torch.Generator().manual_seed(0),
                                  dtype=torch.float64)  # [V, H]
        self.reset()

    @property
    def cache_len(self) -> int:
        return len(self.tokens)

    def reset(self) -> None:
        self.tokens: list[int] = []

    def forward_chain(self, tokens: list[int], hidden_layers: tuple[int, ...] = (), logits: bool = True
                      ) -> ForwardOutput:
        start = len(self.tokens)
        self.tokens += tokens
        out = self._output([self.tokens[:start + i + 1] for i in range(len(tokens))], tokens, hidden_layers)
        return out if logits else ForwardOutput(logits=None, hidden=out.hidden)

    def forward_tree(self, tokens: list[int], positions: torch.Tensor, allowed: torch.Tensor,
                     hidden_layers: tuple[int, ...] = ()) -> ForwardOutput:
        self.tokens += tokens
        contexts = [[t for t, seen in zip(self.tokens, row) if seen] for row in allowed.tolist()]
        return self._output(contexts, tokens, hidden_layers)

    def session(self) -> "CopyLM":
        other = copy.copy(self)
        other.reset()
        return other

    def keep(self, positions: list[int]) -> None:
        self.tokens = [self.tokens[p] for p in positions]

    def crop(self, length: int) -> None:
        del self.tokens[length:]

    def _output(self, contexts: list[list[int]], tokens: list[int], hidden_layers: tuple[int, ...]) -> ForwardOutput:
        logits = torch.zeros(len(contexts), self.config.vocab_size, dtype=torch.float64)  # [N, V]
        for row, context in enumerate(contexts):
            logits[row, self._next(context)] = 10.0
        state = self.states[tokens]  # [N, H]
        return ForwardOutput(logits=logits, hidden=tuple(state * (layer + 1) for layer in hidden_layers))

    def _next(self, context: list[int]) -> int:
        last = context[-1]
        for j in range(len(context) - 2, -1, -1):
            if context[j] == last:
                return context[j + 1]
        return self.eos


class StubDrafter(Drafter):
    """Proposes, for every frontier node, children whose draft probabilities `qs_of(node, k)` returns (best
    first), with token ids `token_of(node, rank)`: a policy's decisions on chosen distributions, no model.
    Each call counts as one draft forward in its `meter`, as a model drafter's layer does (δ).

    >>> from engine.drafting import grow_tree
    >>> from engine.policies import make_policy
    >>> draft = grow_tree(make_policy("chain", {"gamma": 3}), StubDrafter(lambda node, k: [0.9] * k), 0, 10)
    >>> draft.tree.depth, [round(s, 3) for s in draft.tree.score]
    ([0, 1, 2, 3], [1.0, 0.9, 0.81, 0.729])
    """

    name = "stub"

    def __init__(self, qs_of: Callable[[int, int], list[float]],
                 token_of: Callable[[int, int], int] = lambda node, rank: 100 * node + rank,
                 grows_free: Callable[[DraftTree, int], bool] = lambda tree, node: False):
        super().__init__()
        self.qs_of = qs_of
        self.token_of = token_of
        self.grows_free = grows_free  # (tree, node) -> whether the children proposed at node grow free

    def start(self, context: list[int], features: torch.Tensor | None = None) -> None:
        pass

    def propose(self, tree: DraftTree, frontier: list[int], k: int, sample: bool = False,
                sampling: SamplingParams = SamplingParams(), generator: torch.Generator | None = None
                ) -> list[Proposal]:
        self.meter.forwards += 1  # one draft forward per layer, as a model drafter's
        proposals = []
        for node in frontier:
            qs = self.qs_of(node, k)[:k]
            proposals.append(Proposal(node=node, token=[self.token_of(node, rank) for rank in range(len(qs))],
                                      q=list(qs), source=self.name, grows_free=self.grows_free(tree, node)))
        return proposals

    def commit(self, tree: DraftTree, accepted_path: list[int], emitted: list[int],
               features: torch.Tensor | None = None) -> None:
        pass


class SampledTreeParams(PolicyParams):
    width: int = Field(2, ge=1, le=64, description="children drawn for every node")
    depth: int = Field(2, ge=1, le=32, description="draft layers")


class SampledTreePolicy(Policy):
    """A full tree of `width` children per node, `depth` layers deep, drawn from q at temperature > 0: several
    sampled siblings per node, for the distribution tests (register it with `monkeypatch.setitem(POLICIES, …)`).

    No policy of the papers samples more than one child per node: chain samples one, and EAGLE's rerank and
    TALON's gate choose among children by their path scores, which for drawn children would condition the
    draw and bias the output (Policy.sample_children). This one keeps every child it is given.
    """

    name = "sampled-tree"
    Params = SampledTreeParams

    def children_per_node(self, tree: DraftTree, depth: int) -> int:
        return self.params.width

    def sample_children(self, temperature: float) -> bool:
        return temperature > 0

    def select_layer(self, tree: DraftTree, pool: Pool) -> LayerSelection:
        grow = pool.depth < self.params.depth
        reason = "topk" if grow else "depth_limit"
        return LayerSelection(decisions=[Decision(kept=True, expanded=grow, reason=reason) for _ in range(len(pool))])
