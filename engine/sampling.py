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


def draw_without_replacement(dist: torch.Tensor, k: int, generator: torch.Generator | None = None) -> list[int]:
    """k tokens drawn one after another from dist [V] without replacement, in draw order: the first from
    dist, each next from dist without the earlier draws, renormalised (k is capped at the support).

    An exponential race: token i arrives at E_i / dist_i with E_i ~ Exp(1), that is at an Exp(dist_i) time;
    the first arrival is i with probability dist_i / Σ dist, and by memorylessness the later arrivals
    continue the race among the rest. So the arrival order is exactly that sequential draw (the Gumbel-top-k
    trick, Kool et al. 2019), in one pass over V.

    >>> draw_without_replacement(torch.tensor([0.0, 0.5, 0.5, 0.0], dtype=torch.float64), 5,
    ...                          torch.Generator().manual_seed(0)) in ([1, 2], [2, 1])
    True
    """
    device = generator.device if generator is not None else dist.device
    clocks = torch.empty(dist.shape, dtype=torch.float64, device=device).exponential_(generator=generator)  # [V]
    positive = dist > 0
    arrival = torch.where(positive, clocks.to(dist.device) / dist.double(), torch.inf)  # [V]
    return torch.topk(arrival, min(k, int(positive.sum())), largest=False).indices.tolist()
