"""A lean forward for Llama-family models, with a static KV cache that attends only over its filled prefix.

`FastLM` is a `LanguageModel` (engine/models/base.py) as `CachedLM` is
(forward_chain, forward_tree, keep, crop, reset, cache_len, max_length,
`.model`) and is built from a loaded Hugging Face model, in the spirit of
gpt-fast's model.py:

- q/k/v and gate/up are fused into one weight each; the model's own parameters
  become views of the fused tensors, so the Hugging Face model still works
  (baselines, the head's embeddings) and no weight is held twice;
- RoPE reads a table made by the model's own rotary module, with rotate_half's
  sign folded into the sine (the same products, so the same bits);
- the KV cache is one tensor [layers, 2, kv_heads, capacity, d], grown by
  doubling; new keys are written in place, attention reads only the filled
  prefix, and `keep` compacts every layer with one gather;
- a one-token forward needs no mask; N tokens get one additive bias for all
  layers, masking only the columns some token may not see (the [N, N] tree
  block for a verify), and SDPA reads the KV heads without repeating them;
- one-row products run as matrix-vector products (torch.mv), N rows as
  weight @ xᵀ: both measured faster on a CPU than F.linear (docs/fastpath.md);
- in bfloat16 on a CPU with AVX512-BF16 or AVX2, every forward runs in the native
  kernel (engine/models/native/forward.c), up to 256 new tokens a call (AMX tiles
  where the CPU has them, else AVX512-BF16 dot products, or the same as FMAs on
  AVX2, engine/models/native/avx2.h): the weights read
  at close to the read bandwidth, and each token's logits bit for bit those
  it gets when decoded alone, so greedy trees equal ar in bfloat16 too. A
  longer forward (a prompt, a tree past 256 nodes) is cut into calls, which
  gives the same bits; nothing in a run changes path. Float32 stays on
  torch's ops;
- `session()` is another cache over the same weights (and kernel), and
  `forward_batch` runs one item per session in one forward (engine/batch.py):
  the products once over every session's rows, attention per session over its
  own cache; in the kernel, `forward_batch` of forward.c, up to 256 rows a call,
  each session getting the bits of its call alone.

`causal_lm` picks this path where `unsupported_reason` finds nothing, else the
plain Hugging Face forward, and says so once; `SPECSCOPE_FORWARD` chooses
"native" (the default: the kernel where it runs), "lean" (torch's ops only) or
"plain".
"""

from __future__ import annotations

import copy
import os
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.models import kvcache, native
from engine.models.base import BatchItem, ForwardOutput, LanguageModel, NarrowOutput
from engine.models.device import inference
from engine.models.lm import CachedLM

MIN_CAPACITY = 256
FORWARDS = ("native", "lean", "plain")


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why the lean forward cannot run this model, or None when it can."""
    config = model.config
    if type(model).__name__ != "LlamaForCausalLM":
        return f"{type(model).__name__} is not LlamaForCausalLM"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r}"
    if getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        return "biased projections"
    if getattr(config, "pretraining_tp", 1) != 1:
        return "pretraining_tp > 1"
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type in ("dynamic", "longrope"):
        return f"rope type {rope_type!r} depends on the sequence length"
    custom = {type(m).__name__ for m in model.modules()
              if "Linear" in type(m).__name__ and type(m) is not torch.nn.Linear}
    if custom:
        return f"quantized or custom linear layers ({', '.join(sorted(custom))})"
    return None


@dataclass
class Layer:
    """One decoder layer's weights: fused projections [out, in], norm weights [H]."""

    qkv: torch.Tensor  # [(heads + 2 kv_heads) d, H]
    o: torch.Tensor  # [H, heads d]
    gate_up: torch.Tensor  # [2 I, H]
    down: torch.Tensor  # [H, I]
    attn_norm: torch.Tensor
    mlp_norm: torch.Tensor


def _fuse(linears: list[torch.nn.Linear]) -> torch.Tensor:
    """One weight [sum out, in] for several linears, which become views of it (no second copy)."""
    fused = torch.cat([linear.weight.detach() for linear in linears])
    row = 0
    for linear in linears:
        rows = linear.weight.shape[0]
        linear.weight.data = fused[row:row + rows]
        row += rows
    return fused


class FastLM(LanguageModel):
    """A Llama causal LM with a static KV cache and a lean forward; see the module docstring."""

    def __init__(self, model: torch.nn.Module, name: str = "model", kernel: bool = True):
        reason = unsupported_reason(model)
        if reason:
            raise ValueError(f"{name}: the lean forward cannot run this model: {reason}")
        self.model = model.eval()
        self.name = name
        self.config = config = model.config
        first = next(model.parameters())
        self.device, self.dtype = first.device, first.dtype
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.eps = config.rms_norm_eps
        body = model.model
        self.rotary = body.rotary_emb
        self.embed = body.embed_tokens.weight.detach()  # [V, H]
        self.norm = body.norm.weight.detach()  # [H]
        self.lm_head = model.lm_head.weight.detach()  # [V, H]: the embeddings when tied
        with torch.no_grad():
            self.layers = [Layer(qkv=_fuse([l.self_attn.q_proj, l.self_attn.k_proj, l.self_attn.v_proj]),
                                 o=l.self_attn.o_proj.weight.detach(),
                                 gate_up=_fuse([l.mlp.gate_proj, l.mlp.up_proj]),
                                 down=l.mlp.down_proj.weight.detach(),
                                 attn_norm=l.input_layernorm.weight.detach(),
                                 mlp_norm=l.post_attention_layernorm.weight.detach())
                           for l in body.layers]
        self.length = 0
        self.kv = torch.empty(0, dtype=self.dtype, device=self.device)  # [L, 2, kv, C, d] once grown
        self.cos = self.sin_signed = self.kv  # [C, d] each once grown
        # the cached keys as the kernel scores them, where it reads them so (forward.c's Sequence; as many bytes
        # as the keys): columns [0, tiled) match the cache, and whatever moves or drops cached rows lowers `tiled`
        self.key_tiles: torch.Tensor | None = None  # [L, kv, C / 16, d / 2, 16] int32
        self.tiled = 0
        self.kernel = None  # bound below, once the cache exists; until then no tiles (`_new_key_tiles`)
        self._grow(MIN_CAPACITY)
        self.kernel, self.kernel_reason = self._bind_kernel(name) if kernel else (None, "not asked for")
        self.kernel_max_tokens = self.kernel.max_tokens if self.kernel else 0  # per call; longer forwards are cut
        self.key_tiles = self._new_key_tiles(self.capacity)

    def _bind_kernel(self, name: str) -> tuple[native.NativeForward | None, str | None]:
        """The native kernel bound to these weights, or None and why it cannot run them (said once where
        it is the machine or the model's shape, not the dtype, that keeps it out)."""
        if self.dtype != torch.bfloat16 or self.device.type != "cpu":
            return None, f"it runs bfloat16 on a CPU, not {str(self.dtype).removeprefix('torch.')} on {self.device.type}"
        reason = native.unsupported_shape(self.config)
        if reason is None:
            try:
                return native.NativeForward(self), None
            except native.NativeUnavailable as error:
                reason = str(error)
        if reason not in _said:
            _said.add(reason)
            warnings.warn(f"{name}: the native kernel does not run here ({reason}); using torch's ops", stacklevel=3)
        return None, reason

    @property
    def forward_name(self) -> str:
        """Which forward runs a few tokens: "native" (the kernel) or "lean" (torch's ops)."""
        return "native" if self.kernel else "lean"

    @property
    def max_length(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 2048))

    @property
    def cache_len(self) -> int:
        return self.length

    @property
    def capacity(self) -> int:
        return self.kv.shape[3] if self.kv.dim() == 5 else 0

    def reset(self) -> None:
        self.length = self.tiled = 0

    def crop(self, length: int) -> None:
        """Drops every cached position from `length` on."""
        self.length = min(self.length, length)
        self.tiled = min(self.tiled, self.length)

    @inference
    def keep(self, positions: list[int]) -> None:
        """Compacts the cache to the given increasing sequence positions (one gather for all layers)."""
        in_place = kvcache.gather_positions(self.kv, 3, positions)  # [L, 2, kv, C, d]: positions on dim 3
        self.length = len(positions)
        self.tiled = min(self.tiled, in_place)  # the rows after those moved

    def session(self) -> "FastLM":
        """Another FastLM over these weights (and this kernel) with an empty cache of its own: the weights
        are shared, not copied, so a batch of B requests holds B caches and one model."""
        other = copy.copy(self)  # shallow: the layers, embeddings and kernel are this model's
        other.length = other.tiled = 0
        other.kv = other.cos = other.sin_signed = torch.empty(0, dtype=self.dtype, device=self.device)
        other._grow(MIN_CAPACITY)
        return other

    @inference
    def forward_chain(self, tokens: list[int], hidden_layers: tuple[int, ...] = (), logits: bool = True
                      ) -> ForwardOutput:
        """Appends `tokens` causally after the cache; with `logits=False` no output head runs."""
        return self._forward(self._share(BatchItem(self, tokens, hidden_layers=hidden_layers)), logits)

    @inference
    def forward_tree(self, tokens: list[int], positions: torch.Tensor, allowed: torch.Tensor,
                     hidden_layers: tuple[int, ...] = ()) -> ForwardOutput:
        """Appends N tree tokens; `allowed` [N, cache_len + N] says which columns each may attend to."""
        return self._forward(self._share(BatchItem(self, tokens, positions, allowed, hidden_layers)))

    @inference
    def forward_batch(self, items: list[BatchItem]) -> list[ForwardOutput]:
        """Every item over its own session's cache in one forward: the products run once over all items'
        tokens, attention per item under its own mask. The kernel takes up to `kernel_max_tokens` rows a
        call (a longer item runs alone, cut into calls as ever), each item getting its bits alone."""
        assert all(item.lm.layers is self.layers for item in items), "a batch runs sessions of one model"
        shares = [item.lm._share(item) for item in items]
        if not self.kernel:
            return self._lean(shares)
        outputs: dict[int, ForwardOutput] = {}
        group: list[int] = []
        for index, share in enumerate(shares):
            if len(share.tokens) > self.kernel_max_tokens:
                outputs[index] = share.lm._forward(share)
                continue
            if sum(len(shares[i].tokens) for i in group) + len(share.tokens) > self.kernel_max_tokens:
                outputs.update(self._native_batch(shares, group))
                group = []
            group.append(index)
        outputs.update(self._native_batch(shares, group))
        return [outputs[index] for index in range(len(shares))]

    def _native_batch(self, shares: list["_Share"], indices: list[int]) -> dict[int, ForwardOutput]:
        """The shares at `indices` (at most `kernel_max_tokens` rows in all) in one kernel call."""
        if not indices:
            return {}
        chosen = [shares[i] for i in indices]
        layers = len(self.layers) + 1  # Hugging Face's hidden_states: every layer's input, then the last
        wanted = sorted({layer % layers for share in chosen for layer in share.hidden_layers})
        sequences = []
        for share in chosen:
            lm, n = share.lm, len(share.tokens)
            lm._grow(lm.length + n)
            sequences.append((lm, share.positions, native.kernel_rows(share.masked, n, 0, n), lm.length))
        tokens = [token for share in chosen for token in share.tokens]
        x = self.embed[torch.tensor(tokens, device=self.device)]  # [ΣN, H]
        # logits [ΣN, V] bf16: each share's rows a view of them, widened only if read
        logits, features = self.kernel.batch(x, sequences, wanted)
        outputs, row = {}, 0
        for index, share, seen in zip(indices, chosen, features):
            n = len(share.tokens)
            share.lm.length = share.lm.tiled = share.lm.length + n
            hidden = tuple(seen[wanted.index(layer % layers)] for layer in share.hidden_layers)
            outputs[index] = NarrowOutput(logits[row:row + n], hidden, native.widen)
            row += n
        return outputs

    def _share(self, item: BatchItem) -> "_Share":
        """An item as the forward takes it: positions [N] and the masked columns `masked` [N, M] (None:
        causal among the new tokens). Only the columns from the first one some token may not see are
        masked: for a tree verify that is the [N, N] tree block, for a draft LM's frontier the earlier
        frontier nodes too."""
        n = len(item.tokens)
        if item.allowed is None:
            positions = torch.arange(self.length, self.length + n, device=self.device)
            return _Share(self, item.tokens, positions, None, item.hidden_layers)
        assert item.allowed.shape == (n, self.length + n), item.allowed.shape
        visible = int(item.allowed.all(dim=0).int().cumprod(0).sum())  # leading columns every token sees
        return _Share(self, item.tokens, item.positions.to(self.device), item.allowed[:, visible:], item.hidden_layers)

    def _forward(self, share: "_Share", want_logits: bool = True) -> ForwardOutput:
        """One session's new tokens: in the kernel where it runs, else torch's lean forward."""
        if self.kernel:
            self._grow(self.length + len(share.tokens))
            x = self.embed[torch.tensor(share.tokens, device=self.device)]  # [N, H]
            return self._forward_native(x, share.positions, share.masked, share.hidden_layers, want_logits)
        return self._lean([share], want_logits)[0]

    def _lean(self, shares: list["_Share"], want_logits: bool = True) -> list[ForwardOutput]:
        """torch's forward over every share's tokens at once (each share a session of this model): one
        product per weight over the rows of all, each share's rows attending over its own cache."""
        parts, row = [], 0
        for share in shares:
            lm, n = share.lm, len(share.tokens)
            lm._grow(lm.length + n)
            parts.append(_Part(lm, slice(row, row + n), lm.length, lm._mask(share.masked, n, lm.length)))
            lm.tiled = min(lm.tiled, lm.length)  # torch writes these rows, not their tiles
            row += n
        tokens = [token for share in shares for token in share.tokens]
        x = self.embed[torch.tensor(tokens, device=self.device)]  # [ΣN, H]
        cos = _joined([share.lm.cos[share.positions] for share in shares])[:, None]  # [ΣN, 1, d]
        sin = _joined([share.lm.sin_signed[share.positions] for share in shares])[:, None]
        features = {}
        for i, layer in enumerate(self.layers):
            features[i] = x  # the input of layer i, as Hugging Face's hidden_states[i]
            x = self._layer(i, layer, x, cos, sin, parts)
        for part in parts:
            part.lm.length = part.start + part.rows.stop - part.rows.start
        x = self._norm(x, self.norm)
        features[len(self.layers)] = x  # Hugging Face's last hidden state is after the final norm
        logits = linear(x, self.lm_head) if want_logits else None  # [ΣN, V]
        if logits is not None and logits.dtype != torch.float64:
            logits = logits.float()
        return [ForwardOutput(logits=logits[part.rows] if logits is not None else None,
                              hidden=tuple(features[i % len(features)][part.rows] for i in share.hidden_layers))
                for part, share in zip(parts, shares)]

    def _forward_native(self, x: torch.Tensor, positions: torch.Tensor, masked: torch.Tensor | None,
                        hidden_layers: tuple[int, ...], want_logits: bool = True) -> ForwardOutput:
        """The same forward in the native kernel, in calls of at most `kernel_max_tokens` new tokens;
        `masked` as in `_forward`; without `want_logits` the kernel skips the output head, with it the logits
        stay bf16 until read (NarrowOutput). Call j holds rows
        [a, b): they see every column before the masked ones and, of those, the ones up to b (later rows are
        not in the cache yet, and no row may see them anyway: a tree lists parents before children, a chain
        is causal)."""
        n, start, step = x.shape[0], self.length, self.kernel_max_tokens
        layers = len(self.layers) + 1  # Hugging Face's hidden_states: every layer's input, then the last
        wanted = [i % layers for i in hidden_layers]
        logits, features = [], []
        for a in range(0, n, step):
            b = min(n, a + step)
            rows = native.kernel_rows(masked, n, a, b)
            part, seen = self.kernel(x[a:b], positions[a:b], rows, start + a, wanted, cache=self, logits=want_logits)
            self.length = self.tiled = start + b
            logits.append(part)
            features.append(seen)
        if len(features) == 1:  # every decode and verify step: nothing to join
            hidden, logits = tuple(features[0]), logits[0]
        else:
            hidden = tuple(torch.cat([f[i] for f in features]) for i in range(len(wanted)))
            logits = torch.cat(logits) if want_logits else None
        return NarrowOutput(logits, hidden, native.widen) if want_logits else ForwardOutput(logits=None, hidden=hidden)

    def _layer(self, index: int, layer: Layer, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               parts: list["_Part"]) -> torch.Tensor:
        """Decoder layer `index` over x [ΣN, H], the rows of every part; each part's new keys and values
        go into its own session's cache, and its rows attend over that cache alone."""
        n, heads, kv_heads = x.shape[0], self.heads, self.kv_heads
        qkv = linear(self._norm(x, layer.attn_norm), layer.qkv).view(n, heads + 2 * kv_heads, self.head_dim)
        qk = _rope(qkv[:, :heads + kv_heads], cos, sin)  # [ΣN, h + kv, d]
        outs = [self._attend(part.lm.kv[index], qk[part.rows], qkv[part.rows, heads + kv_heads:], part)
                for part in parts]
        x = x + linear(_joined(outs), layer.o)
        gate, up = linear(self._norm(x, layer.mlp_norm), layer.gate_up).chunk(2, dim=-1)  # [ΣN, I] each
        return x + linear(F.silu(gate) * up, layer.down)

    def _attend(self, cache: torch.Tensor, qk: torch.Tensor, v: torch.Tensor, part: "_Part") -> torch.Tensor:
        """One part's attention: writes its keys qk[:, h:] and values v [N, kv, d] into `cache` [2, kv, C, d]
        from `part.start`, and attends its queries qk[:, :h] over the cache; [N, h d]."""
        n, heads = qk.shape[0], self.heads
        start, end = part.start, part.start + n
        cache[0, :, start:end] = qk[:, heads:].transpose(0, 1)
        cache[1, :, start:end] = v.transpose(0, 1)
        q = qk[:, :heads].transpose(0, 1)[None]  # [1, h, N, d]
        out = F.scaled_dot_product_attention(q, cache[0, :, :end][None], cache[1, :, :end][None], enable_gqa=True,
                                             **part.attend)  # [1, h, N, d]
        return out[0].transpose(0, 1).reshape(n, heads * self.head_dim)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """Llama's RMSNorm in its own order of casts: normalise in float32, cast back, then scale."""
        if x.dtype == torch.float32:
            return F.rms_norm(x, weight.shape, weight, self.eps)
        return weight * F.rms_norm(x.float(), weight.shape, None, self.eps).to(x.dtype)

    def _mask(self, masked: torch.Tensor | None, n: int, start: int) -> dict:
        """SDPA's mask arguments, shared by every layer: none for one token or a fully visible block,
        `is_causal` for a prompt on an empty cache, else one additive bias [1, 1, N, S]."""
        if masked is None:
            if n == 1:
                return {}
            if start == 0:
                return {"is_causal": True}
            masked = torch.ones(n, n, dtype=torch.bool).tril()
        if masked.shape[1] == 0 or bool(masked.all()):
            return {}
        bias = torch.zeros(n, start + n, dtype=self.dtype)  # [N, S]
        bias[:, start + n - masked.shape[1]:].masked_fill_(~masked.cpu(), float("-inf"))
        return {"attn_mask": bias.to(self.device)[None, None]}

    def _new_key_tiles(self, capacity: int) -> torch.Tensor | None:
        """Room for the cache's keys in tiles, [L, kv, C / 16, d / 2, 16], where the kernel runs and reads them."""
        if self.kernel is None or not self.kernel.reads_key_tiles:
            return None
        return torch.empty(len(self.layers), self.kv_heads, capacity // 16, self.head_dim // 2, 16, dtype=torch.int32)

    def _grow(self, needed: int) -> None:
        """Reallocates the cache (doubling) and the RoPE table to hold `needed` positions, keeping what
        the cache holds."""
        if needed <= self.capacity:
            return
        capacity = max(MIN_CAPACITY, self.capacity)
        while capacity < needed:
            capacity *= 2
        kv = torch.empty(len(self.layers), 2, self.kv_heads, capacity, self.head_dim, dtype=self.dtype,
                         device=self.device)  # [L, 2, kv, C, d]
        if self.length:
            kv[:, :, :, :self.length] = self.kv[:, :, :, :self.length]
        self.kv = kv
        self.key_tiles, self.tiled = self._new_key_tiles(capacity), 0  # the next kernel call tiles the cache again
        self.cos, self.sin_signed = native.rope_tables(self.rotary, capacity, self.dtype, self.head_dim, self.device)


@dataclass
class _Share:
    """One session's new tokens as a forward takes them: `positions` [N]; `masked` [N, M] bool over the
    last M columns (None: causal among the new tokens)."""

    lm: FastLM
    tokens: list[int]
    positions: torch.Tensor
    masked: torch.Tensor | None
    hidden_layers: tuple[int, ...]


@dataclass
class _Part:
    """A share's place in a lean forward: its rows of the joined tokens, where its cache is written from
    (`start`), and its SDPA mask arguments."""

    lm: FastLM
    rows: slice
    start: int
    attend: dict


def _joined(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The parts' rows as one tensor; one part is itself, not a copy."""
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [N, in] @ weight [out, in]ᵀ -> [N, out]: one row as a matrix-vector product, more as weight @ xᵀ
    (on CPU both stream the weight faster than F.linear's x @ weightᵀ; docs/fastpath.md)."""
    if x.shape[0] == 1:
        return torch.mv(weight, x[0])[None]
    return torch.mm(weight, x.t()).t().contiguous()


def _rope(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
    """x [N, heads, d] -> x·cos + rotate_half(x)·sin, rotate_half's sign living in `sin_signed` [N, 1, d]."""
    n, heads, d = x.shape
    swapped = x.reshape(n, heads, 2, d // 2).flip(2).view(n, heads, d)  # halves swapped: one kernel
    return x * cos + swapped * sin_signed


_said: set[str] = set()


def forward_choice() -> str:
    """SPECSCOPE_FORWARD: "native" (the default), "lean" or "plain"; the target and the draft head both follow it."""
    return os.environ.get("SPECSCOPE_FORWARD") or "native"


def causal_lm(model: torch.nn.Module, name: str = "model", forward: str | None = None) -> LanguageModel:
    """The lean forward (with the native kernel where it runs) where it supports the model, else the
    plain Hugging Face forward, said once per model. `forward` None reads SPECSCOPE_FORWARD:
    "native" (the default), "lean" (torch's ops only) or "plain" (Hugging Face's forward)."""
    forward = forward or forward_choice()
    if forward not in FORWARDS:
        raise ValueError(f"SPECSCOPE_FORWARD: {forward!r} is not one of {', '.join(FORWARDS)}")
    lean = forward != "plain"
    reason = unsupported_reason(model) if lean else None
    if lean and reason is None:
        return FastLM(model, name, kernel=forward == "native")
    if reason and name not in _said:
        _said.add(name)
        warnings.warn(f"{name}: the lean forward does not support this model ({reason}); "
                      "using the plain Hugging Face forward", stacklevel=2)
    return CachedLM(model, name)
