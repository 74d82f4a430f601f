"""The EAGLE-3 objective: a multi-step unroll that trains the head on its own predicted states.

A sequence of T tokens gives N = T - 1 pairs: pair i is (token x_{i+1},
target feature of x_i) and predicts the target's greedy token after x_{i+1}.
Unroll step k re-reads every pair one token further on, (x_{i+1+k}, the head's
own output state of step k-1 at pair i), exactly as the drafter does at depth
k of a tree rooted at x_{i+1}: its query attends to the real pairs 0..i of
step 0 (the cache and the root) and to pair i's keys of steps 1..k (its
ancestors and itself), at position i + k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from engine.models.head import Eagle3Head
from tools.training.selfdistill import Sample


NO_LABEL = -1  # a prompt or padding position: nothing to predict
OUTSIDE_DRAFT = -2  # the target's token is outside the draft vocabulary: a position every draft misses


@dataclass
class Batch:
    ids: torch.Tensor  # [B, T] long, right-padded with 0
    features: torch.Tensor  # [B, T - 1, F] target features of x_0 .. x_{T-2}
    labels: torch.Tensor  # [B, T] long: draft-vocabulary id of the target's token after x_p, NO_LABEL where none

    def to(self, device: torch.device | str) -> "Batch":
        return Batch(*(t.to(device, non_blocking=True) for t in (self.ids, self.features, self.labels)))


def make_batch(samples: list[Sample], target_to_draft: torch.Tensor, count_outside: bool = False) -> Batch:
    """Pads samples into a batch; `target_to_draft` [V] maps target ids to draft ids (-1 outside).

    A token outside the draft vocabulary is no label (training cannot learn it), or with `count_outside`
    OUTSIDE_DRAFT, so that measuring counts it as a miss: heads of different vocabularies are then measured on
    the same positions."""
    width = max(len(s.ids) for s in samples)
    feature_dim = samples[0].features.shape[-1]
    ids = torch.zeros(len(samples), width, dtype=torch.long)
    features = torch.zeros(len(samples), width - 1, feature_dim, dtype=samples[0].features.dtype)
    labels = torch.full((len(samples), width), NO_LABEL, dtype=torch.long)
    for b, s in enumerate(samples):
        t = len(s.ids)
        ids[b, :t] = s.ids
        features[b, :t - 1] = s.features
        drafted = target_to_draft[s.labels]  # [t - prompt_len]
        if count_outside:
            drafted = drafted.masked_fill(drafted < 0, OUTSIDE_DRAFT)
        labels[b, s.prompt_len - 1:t - 1] = drafted
    return Batch(ids, features, labels)


def _shift(x: torch.Tensor, by: int, n: int, fill: int) -> torch.Tensor:
    """[B, T] -> [B, n]: column i holds x[:, i + by], `fill` past the end."""
    out = torch.full((x.shape[0], n), fill, dtype=x.dtype, device=x.device)
    take = max(0, min(n, x.shape[1] - by))
    out[:, :take] = x[:, by:by + take]
    return out


@dataclass
class UnrollResult:
    loss: torch.Tensor  # scalar: step losses weighted by decay^k, averaged over labelled pairs
    step_losses: list[float]
    logits: list[torch.Tensor] = field(default_factory=list)  # per step [B, N, Vd] (only when kept)
    labels: list[torch.Tensor] = field(default_factory=list)  # per step [B, N]


def unroll(head: Eagle3Head, batch: Batch, steps: int, decay: float = 0.8, keep_logits: bool = False) -> UnrollResult:
    """Runs the training-time test for `steps` steps and returns the loss (and logits for evaluation)."""
    attn = head.midlayer.self_attn
    b, t = batch.ids.shape
    n = t - 1
    state = head.fuse(batch.features)  # [B, N, H]
    device = batch.ids.device
    causal = torch.ones(n, n, dtype=torch.bool, device=device).tril()
    causal_bias = torch.zeros(n, n, device=device).masked_fill(~causal, float("-inf"))  # [N, N]
    diagonal_keys: list[tuple[torch.Tensor, torch.Tensor]] = []  # steps 1..k: k, v [B, h, N, d]
    total, weight_sum, step_losses = 0.0, 0.0, []
    result = UnrollResult(loss=torch.zeros(()), step_losses=[])
    groups = attn.heads // attn.kv_heads
    for k in range(steps):
        tokens = _shift(batch.ids, 1 + k, n, 0)  # [B, N]
        x = head.layer_input(tokens, state)  # [B, N, 2H]
        positions = (torch.arange(n, device=device) + k)[None].expand(b, n)
        cos, sin = head.rope(positions, x)
        q, key, value = attn.project(x, cos, sin)  # q [B, h, N, d], key/value [B, kv, N, d]
        key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
        if k == 0:
            real_k, real_v = key, value
        else:
            diagonal_keys.append((key, value))
        attended = _ttt_attention(q, real_k, real_v, diagonal_keys, causal_bias)  # [B, N, h·d]
        state = head.finish(state, attn.o_proj(attended))
        labels = _shift(batch.labels, 1 + k, n, NO_LABEL)  # [B, N]
        mask = labels >= 0
        logits = head.draft_logits(state[mask])  # [M, Vd]
        loss = F.cross_entropy(logits.float(), labels[mask]) if mask.any() else state.sum() * 0
        step_losses.append(loss.item())
        total = total + loss * decay ** k
        weight_sum += decay ** k
        if keep_logits:
            full = torch.zeros(b, n, logits.shape[-1], dtype=logits.dtype, device=device)
            full[mask] = logits.detach()
            result.logits.append(full)
            result.labels.append(labels)
    result.loss = total / weight_sum
    result.step_losses = step_losses
    return result


def _ttt_attention(q: torch.Tensor, real_k: torch.Tensor, real_v: torch.Tensor,
                   diagonal: list[tuple[torch.Tensor, torch.Tensor]], causal_bias: torch.Tensor) -> torch.Tensor:
    """Each query sees the real keys up to its pair (causal) and its own pair's keys of later steps.

    q, real_k, real_v [B, h, N, d]; diagonal: per later step (k, v) [B, h, N, d]; -> [B, N, h·d]."""
    scale = 1 / math.sqrt(q.shape[-1])
    scores = [q @ real_k.transpose(-1, -2) * scale + causal_bias]  # [B, h, N, N]
    scores += [(q * k).sum(-1, keepdim=True) * scale for k, _ in diagonal]  # each [B, h, N, 1]
    weights = torch.softmax(torch.cat(scores, dim=-1).float(), dim=-1).to(q.dtype)
    n = real_k.shape[2]
    out = weights[..., :n] @ real_v  # [B, h, N, d]
    for s, (_, v) in enumerate(diagonal):
        out = out + weights[..., n + s:n + s + 1] * v
    b, h, _, d = out.shape
    return out.transpose(1, 2).reshape(b, n, h * d)


@dataclass
class DepthStats:
    """Agreement of the head with the target by draft depth, on greedy sequences."""

    top1: list[float]  # P(head's top-1 = target token) at depth k, inputs teacher-forced
    chain_accept: list[float]  # P(top-1 right at depth k | right at every shallower depth)
    tau_chain: float  # 1 + mean accepted length of a top-1 chain as deep as the unroll
    tau_tree: dict[int, float]  # width w -> same for a tree expanding the top-w of every node
    positions: int


@torch.no_grad()
def depth_stats(head: Eagle3Head, batches: list[Batch], steps: int, widths=(4, 10)) -> DepthStats:
    """Teacher-forced acceptance simulation. On greedy data the token fed at depth k is the target's
    own choice, so it equals the drafted token whenever every shallower draft was accepted."""
    hits = {1: [], **{w: [] for w in widths}}  # width -> list of [P, steps] bool
    for batch in batches:
        result = unroll(head, batch, steps, keep_logits=True)
        start = result.labels[0] != NO_LABEL  # [B, N] positions where a step could start
        for w in hits:
            per_step = []
            for logits, labels in zip(result.logits, result.labels):
                top = logits.topk(w, dim=-1).indices  # [B, N, w]
                per_step.append(((top == labels[..., None]).any(-1) & (labels >= 0))[start])
            hits[w].append(torch.stack(per_step, dim=-1))  # [P, steps]
    flat = {w: torch.cat(h).cpu() for w, h in hits.items()}
    top1 = flat[1].float().mean(0).tolist()
    leading = {w: h.long().cumprod(dim=-1) for w, h in flat.items()}  # [P, steps]: right at every depth so far
    chain = leading[1]
    reached = torch.cat([torch.ones(len(chain), 1, dtype=torch.long), chain[:, :-1]], dim=1)
    chain_accept = (chain.sum(0) / reached.sum(0).clamp(min=1)).tolist()
    return DepthStats(top1=top1, chain_accept=chain_accept, tau_chain=1 + chain.sum(1).float().mean().item(),
                      tau_tree={w: 1 + leading[w].sum(1).float().mean().item() for w in widths},
                      positions=len(chain))
