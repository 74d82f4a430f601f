"""An EAGLE-3 draft head, in the published architecture and checkpoint layout.

The head reads the target's hidden states at three layers (the inputs of
layers 2, L//2 and L-3 by default), fuses them with `fc` (3·H_target -> H, no
bias) and runs one Llama decoder layer, `midlayer`, whose attention reads
concat(input_layernorm(token embedding), hidden_norm(fused state)), 2·H wide.
The residual is the fused state itself; `post_attention_layernorm`, the MLP and
the final `norm` follow, and `lm_head` scores a draft vocabulary that `d2t`
maps back to the target's (target id = draft id + d2t[draft id]); `t2d` marks
the target ids the draft vocabulary holds. Both buffers are absent when the
two vocabularies are the same. Token embeddings are the target's, never stored.

Deeper draft steps feed the layer's own output state back in place of the
fused target state (EAGLE-3's training-time test), so one module serves every
depth. A directory holds `config.json` and `model.safetensors` or
`pytorch_model.bin` with the published parameter names, so heads such as
yuhuili/EAGLE3-LLaMA3.1-Instruct-8B load unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import (LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding,
                                                      apply_rotary_pos_emb)

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
SHIPPED_HEADS = Path(__file__).parent / "data" / "heads"
_SHIPPED = {"SmolLM2-135M-Instruct": "smollm2-135m"}  # target name -> folder under data/heads


def shipped_head_dir(target_name: str) -> Path | None:
    """The head this package ships for a target, if any (the embedded SmolLM2 has one)."""
    folder = _SHIPPED.get(target_name)
    path = SHIPPED_HEADS / folder if folder else None
    return path if path is not None and (path / "config.json").exists() else None


def resolve_head_dir(name: str | Path) -> Path:
    """A head folder from a local path or a Hugging Face hub id (e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B),
    fetched once into the hub's cache: only its config and weights."""
    path = Path(name)
    if path.exists():
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(str(name), allow_patterns=["config.json", "*.safetensors", "*.bin"]))
    except Exception as err:  # offline, unknown repo, no access: one clear message
        raise FileNotFoundError(f"{name}: no such head folder, and the hub could not provide it ({err})") from None


def default_feature_layers(num_target_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's choice: the inputs of an early, a middle and a late layer.

    >>> default_feature_layers(30)
    (2, 15, 27)
    """
    return (2, num_target_layers // 2, num_target_layers - 3)


def head_config(target_config, draft_vocab_size: int | None = None, intermediate_size: int | None = None,
                feature_layers: tuple[int, ...] | None = None) -> dict:
    """A config.json dict for a new head on `target_config`, in the published keys."""
    hidden = target_config.hidden_size
    layers = feature_layers or default_feature_layers(target_config.num_hidden_layers)
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_act": getattr(target_config, "hidden_act", "silu"),
        "hidden_size": hidden,
        "intermediate_size": intermediate_size or target_config.intermediate_size,
        "num_attention_heads": target_config.num_attention_heads,
        "num_key_value_heads": target_config.num_key_value_heads,
        "head_dim": getattr(target_config, "head_dim", None) or hidden // target_config.num_attention_heads,
        "num_hidden_layers": 1,
        "max_position_embeddings": target_config.max_position_embeddings,
        "rms_norm_eps": target_config.rms_norm_eps,
        "rope_theta": _rope_theta(target_config),
        "rope_scaling": _rope_scaling(target_config),
        "vocab_size": target_config.vocab_size,
        "draft_vocab_size": draft_vocab_size or target_config.vocab_size,
        "tie_word_embeddings": False,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(layers)},
    }
    return config


def _rope_theta(target_config) -> float:
    theta = getattr(target_config, "rope_theta", None)
    if theta is None:
        theta = (getattr(target_config, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
    return float(theta)


def _rope_scaling(target_config) -> dict | None:
    """The target's rope scaling, or None where it is plain RoPE (as published configs write it)."""
    scaling = getattr(target_config, "rope_scaling", None) or getattr(target_config, "rope_parameters", None)
    if not scaling or scaling.get("rope_type", scaling.get("type", "default")) == "default":
        return None
    return {k: v for k, v in scaling.items() if k != "rope_theta"}


def _llama_config(config: dict) -> LlamaConfig:
    """The subset of a head's config that the Llama building blocks read."""
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
            "max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling", "hidden_act", "vocab_size")
    kwargs = {k: config[k] for k in keys if config.get(k) is not None}
    return LlamaConfig(num_hidden_layers=1, mlp_bias=False, attention_bias=False, **kwargs)


class HeadAttention(nn.Module):
    """Llama attention whose projections read 2·H (embedding and state side by side)."""

    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        width = 2 * cfg.hidden_size
        self.q_proj = nn.Linear(width, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(width, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, cfg.hidden_size, bias=False)

    def project(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """x [B, N, 2H] -> q [B, heads, N, d], k and v [B, kv_heads, N, d], rotary applied."""
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        return q, k, v

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """q [B, h, N, d] over k, v [B, kv, S, d] with additive bias [B or 1, 1, N, S] -> [B, N, H]."""
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.to(q.dtype), enable_gqa=True)  # [B, h, N, d]
        b, _, n, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


class MidLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig):
        super().__init__()
        self.self_attn = HeadAttention(cfg)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.hidden_norm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)


class Eagle3Head(nn.Module):
    def __init__(self, config: dict, embed_tokens: torch.Tensor):
        """`embed_tokens` [V, H]: the target's token embeddings, shared and never saved."""
        super().__init__()
        self.config = dict(config)
        cfg = _llama_config(config)
        hidden = cfg.hidden_size
        self.vocab_size = int(config["vocab_size"])
        self.draft_vocab_size = int(config.get("draft_vocab_size") or self.vocab_size)
        target_hidden = int(config.get("target_hidden_size") or hidden)
        self.norm_before_residual = bool(config.get("norm_before_residual", False))
        self.fc = nn.Linear(3 * target_hidden, hidden, bias=False)
        self.midlayer = MidLayer(cfg)
        self.norm = LlamaRMSNorm(hidden, eps=cfg.rms_norm_eps)
        self.lm_head = nn.Linear(hidden, self.draft_vocab_size, bias=False)
        self.rotary = LlamaRotaryEmbedding(cfg)
        if self.draft_vocab_size != self.vocab_size:
            self.register_buffer("d2t", torch.zeros(self.draft_vocab_size, dtype=torch.long))
            self.register_buffer("t2d", torch.zeros(self.vocab_size, dtype=torch.bool))
        else:
            self.d2t = None
            self.t2d = None
        assert embed_tokens.shape == (self.vocab_size, hidden), (
            f"target embeddings {tuple(embed_tokens.shape)} do not fit a head of vocab {self.vocab_size}, hidden {hidden}")
        self._embed = embed_tokens  # a plain attribute: not a parameter, not in the state dict
        self._draft_index: list[int] | None = None  # [V] target id -> draft id, -1 outside
        self._target_ids: list[int] | None = None  # [Vd] draft id -> target id

    @property
    def feature_layers(self) -> tuple[int, ...]:
        ids = (self.config.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        return tuple(ids) if ids else ()

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """[...] target ids -> [..., H] embeddings in the head's dtype (one op where the target's embeddings
        already are on the head's device in its dtype: a draft forward's inputs come every layer)."""
        weight = self.fc.weight
        if tokens.device != self._embed.device:
            tokens = tokens.to(self._embed.device)
        rows = self._embed[tokens]
        if rows.dtype != weight.dtype or rows.device != weight.device:
            rows = rows.to(weight.device, weight.dtype)
        return rows

    def fuse(self, features: torch.Tensor) -> torch.Tensor:
        """[..., 3·H_target] target features -> [..., H] fused state."""
        dtype = self.fc.weight.dtype
        return self.fc(features if features.dtype == dtype else features.to(dtype))

    def rope(self, positions: torch.Tensor, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [B, N] -> cos, sin [B, N, d]."""
        return self.rotary(like, positions)

    def layer_input(self, tokens: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """tokens [B, N], state [B, N, H] -> [B, N, 2H] attention input."""
        layer = self.midlayer
        return torch.cat([layer.input_layernorm(self.embed(tokens)), layer.hidden_norm(state)], dim=-1)

    def finish(self, state: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """Residual and MLP after attention: state, attended [B, N, H] -> [B, N, H] output state."""
        layer = self.midlayer
        residual = layer.hidden_norm(state) if self.norm_before_residual else state
        hidden = residual + attended
        return hidden + layer.mlp(layer.post_attention_layernorm(hidden))

    def draft_logits(self, state: torch.Tensor) -> torch.Tensor:
        """[..., H] output state -> [..., V_draft] logits."""
        return self.lm_head(self.norm(state))

    def to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary ids -> target ids."""
        return draft_ids if self.d2t is None else draft_ids + self.d2t[draft_ids]

    def to_target_ids(self, draft_ids: list[list[int]]) -> list[list[int]]:
        """`to_target` for a frontier's top-k ids as Python lists, read off a list made once: a draft layer's
        few ids, where two torch ops on a tiny tensor cost tens of microseconds after a target forward."""
        if self.d2t is None:
            return draft_ids
        if self._target_ids is None:  # built on first use: the buffers are final by then
            self._target_ids = self.to_target(torch.arange(self.draft_vocab_size, device=self.d2t.device)).tolist()
        target = self._target_ids
        return [[target[i] for i in row] for row in draft_ids]

    def target_logits(self, state: torch.Tensor) -> torch.Tensor:
        """[N, H] -> [N, V] float32 logits over the target vocabulary, -inf outside the draft vocabulary."""
        return self.expand_logits(self.draft_logits(state).float())

    def expand_logits(self, draft: torch.Tensor) -> torch.Tensor:
        """[N, Vd] draft-vocabulary logits -> [N, V] float32, -inf outside the draft vocabulary."""
        if self.d2t is None:
            return draft.float()
        full = torch.full((draft.shape[0], self.vocab_size), float("-inf"), dtype=torch.float32, device=draft.device)
        full[:, self.to_target(torch.arange(self.draft_vocab_size, device=draft.device))] = draft.float()
        return full

    def draft_index(self, token: int) -> int:
        """The draft-vocabulary id of a target token, -1 outside the draft vocabulary."""
        if self.d2t is None:
            return token
        if self._draft_index is None:  # built on first use: the buffers are final by then
            draft_vocab = self.to_target(torch.arange(self.draft_vocab_size, device=self.d2t.device)).cpu()
            self._draft_index = target_to_draft_map(draft_vocab, self.vocab_size).tolist()
        return self._draft_index[token]

    def step(self, tokens: torch.Tensor, state: torch.Tensor, positions: torch.Tensor,
             past: tuple[torch.Tensor, torch.Tensor] | None, bias: torch.Tensor):
        """One pass of the layer over N new inputs attending to `past` and themselves.

        tokens [B, N], state [B, N, H] (fused target state or a previous output), positions [B, N],
        past (k, v) each [B, kv, P, d] or None, bias [B or 1, 1, N, P + N] additive.
        Returns the output state [B, N, H] and the new (k, v) [B, kv, N, d] (not yet appended).
        """
        x = self.layer_input(tokens, state)  # [B, N, 2H]
        cos, sin = self.rope(positions, x)
        attn = self.midlayer.self_attn
        q, k, v = attn.project(x, cos, sin)
        keys = k if past is None else torch.cat([past[0], k], dim=2)
        values = v if past is None else torch.cat([past[1], v], dim=2)
        out = self.finish(state, attn.attend(q, keys, values, bias))
        return out, (k, v)


def target_to_draft_map(draft_vocab: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """[V] long: the draft id of each target id, -1 outside the draft vocabulary; `draft_vocab` [Vd] target ids."""
    mapping = torch.full((vocab_size,), -1, dtype=torch.long)
    mapping[draft_vocab] = torch.arange(len(draft_vocab))
    return mapping


def set_vocab_map(head: Eagle3Head, draft_to_target: torch.Tensor) -> None:
    """Fills d2t and t2d from the target ids of the draft vocabulary, [V_draft] long in draft order."""
    assert head.d2t is not None and len(draft_to_target) == head.draft_vocab_size
    head.d2t.copy_(draft_to_target - torch.arange(head.draft_vocab_size))
    head.t2d.zero_()
    head.t2d[draft_to_target] = True
    head._draft_index = head._target_ids = None


INT8_PRODUCTS = ("midlayer.self_attn.q_proj", "midlayer.self_attn.k_proj", "midlayer.self_attn.v_proj",
                 "midlayer.self_attn.o_proj", "midlayer.mlp.gate_proj", "midlayer.mlp.up_proj",
                 "midlayer.mlp.down_proj", "lm_head")  # the products a draft step reads (fc runs once a step)


def _row_scales(weight: torch.Tensor) -> torch.Tensor:
    """[R] float32: each row's 2^e, the least power of two with every |w| / 2^e ≤ 127 (1 for a zero row)."""
    top = weight.detach().float().abs().amax(dim=1)
    return torch.where(top > 0, torch.exp2(torch.ceil(torch.log2(top / 127))), torch.ones_like(top))


def int8_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """W [R, K] as q [R, K] int8 and each row's scale 2^e [R] float32 with W = q · 2^e exactly, or None where a
    row is not of that form (a head trained as it is; `round_to_int8_rows` makes one that is).

    >>> w = torch.tensor([[0.5, -0.25, 0.0], [3.0, 96.0, -127.0]])
    >>> q, scale = int8_rows(w)
    >>> q.tolist(), scale.tolist()
    ([[64, -32, 0], [3, 96, -127]], [0.0078125, 1.0])
    >>> int8_rows(torch.tensor([[0.3, 1.0]])) is None
    True
    """
    scale = _row_scales(weight)
    q = weight.detach().float() / scale[:, None]  # exact: a power of two
    if not torch.equal(q, q.round()) or bool(q.abs().gt(127).any()):
        return None
    return q.to(torch.int8), scale


def round_to_int8_rows(weight: torch.Tensor) -> torch.Tensor:
    """W with each row rounded to q · 2^e, q an integer in [−127, 127], 2^e the row's least power of two that
    keeps its largest |w| within 127 of them (7 significant bits where bf16 has 8): exact in bf16 and fp16,
    and half the bytes where the kernel reads int8 (forward.c, matmul_int8). The row's largest |w| keeps
    64–127 steps, so no row loses more than 2^e / 2 anywhere.

    >>> round_to_int8_rows(torch.tensor([[0.3, 1.0]])).tolist()
    [[0.296875, 1.0]]
    >>> int8_rows(round_to_int8_rows(torch.randn(4, 8))) is not None
    True
    """
    scale = _row_scales(weight)
    q = torch.round(weight.detach().float() / scale[:, None]).clamp(-127, 127)
    return (q * scale[:, None]).to(weight.dtype)


def load_head(path: str | Path, embed_tokens: torch.Tensor, dtype: torch.dtype = torch.float32) -> Eagle3Head:
    """A head from a directory holding config.json and published-name weights."""
    path = Path(path)
    config = json.loads((path / "config.json").read_text())
    state = _read_weights(path)
    head = Eagle3Head(config, embed_tokens)
    state = {k: v for k, v in state.items() if not k.startswith("embed_tokens")}  # some heads ship a copy
    missing, unexpected = head.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith("rotary")]
    if missing or unexpected:
        raise ValueError(f"{path}: not an EAGLE-3 head (missing {missing}, unexpected {unexpected})")
    return cast_head(head, dtype).eval()


def cast_head(head: Eagle3Head, dtype: torch.dtype) -> Eagle3Head:
    """Weights in `dtype`, rotary frequencies kept in float32 (a bf16 copy drifts by radians at long positions)."""
    head = head.to(dtype)
    head.rotary = LlamaRotaryEmbedding(_llama_config(head.config)).to(head.fc.weight.device)
    return head


def _read_weights(path: Path) -> dict[str, torch.Tensor]:
    if (path / "model.safetensors").exists():
        from safetensors.torch import load_file
        return load_file(str(path / "model.safetensors"))
    if (path / "pytorch_model.bin").exists():
        return torch.load(path / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"{path} holds neither of {WEIGHT_FILES}")


def save_head(head: Eagle3Head, path: str | Path, dtype: torch.dtype = torch.float16) -> Path:
    """Writes config.json and model.safetensors (weights in `dtype`, index buffers as they are)."""
    from safetensors.torch import save_file
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {k: (v.to("cpu", dtype) if v.is_floating_point() else v.cpu()).contiguous()
             for k, v in head.state_dict().items() if not k.startswith("rotary")}
    save_file(state, str(path / "model.safetensors"))
    config = dict(head.config, torch_dtype=str(dtype).removeprefix("torch."))
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return path
