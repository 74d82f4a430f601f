"""Turning logits into the distributions that decoding samples from."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 means greedy
    top_k: int = 0  # 0 means no top-k filter
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0


def probs_from_logits(logits: torch.Tensor, sampling: SamplingParams) -> torch.Tensor:
    """[N, V] logits -> [N, V] float64 probabilities after temperature, top-k and top-p.

    Greedy gives a one-hot on the argmax, so every acceptance rule reads the
    same kind of distribution.
    """
    logits = logits.double()
    if sampling.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).double()
    logits = logits / sampling.temperature
    if sampling.top_k > 0:
        kth = torch.topk(logits, min(sampling.top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if sampling.top_p < 1.0:
        probs = _top_p_filter(probs, sampling.top_p)
    return probs


def _top_p_filter(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Keeps the smallest set of most likely tokens whose mass reaches top_p, renormalised."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)  # [N, V]
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p, 0.0)
    filtered = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return filtered / filtered.sum(-1, keepdim=True)
