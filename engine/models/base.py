"""What the engine may know of a language model: a KV cache it extends by a chain or a tree of new tokens,
then compacts to the accepted ones.

Two forwards declare it: `CachedLM` (engine/models/lm.py, Hugging Face's forward over its DynamicCache)
and `FastLM` (engine/models/fastlm.py, the lean forward over one static cache, with the native kernel
where it runs). The engine, the draft-LM drafter and the profiler are typed against `LanguageModel`,
never against either class, so either verifies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch


@dataclass
class ForwardOutput:
    logits: torch.Tensor  # [N, V] float32 (float64 for a float64 model)
    hidden: tuple[torch.Tensor, ...] = ()  # each [N, H]: inputs of the requested layers


@runtime_checkable
class LanguageModel(Protocol):
    """A causal LM with its own KV cache of `cache_len` positions."""

    model: torch.nn.Module  # the Hugging Face model whose weights it runs (baselines, the head's embeddings)
    name: str
    config: Any  # the Hugging Face model's config
    device: torch.device
    dtype: torch.dtype

    @property
    def forward_name(self) -> str:
        """Which forward runs: "plain" (Hugging Face's), "lean" (torch's ops) or "native" (the kernel)."""

    @property
    def max_length(self) -> int:
        """The longest context the model takes (its position embeddings)."""

    @property
    def cache_len(self) -> int:
        """How many positions the cache holds."""

    def reset(self) -> None:
        """Empties the cache."""

    def forward_chain(self, tokens: list[int], hidden_layers: tuple[int, ...] = ()) -> ForwardOutput:
        """Appends `tokens` causally after the cache."""

    def forward_tree(self, tokens: list[int], positions: torch.Tensor, allowed: torch.Tensor,
                     hidden_layers: tuple[int, ...] = ()) -> ForwardOutput:
        """Appends N tree tokens at `positions` [N]; `allowed` [N, cache_len + N] says which columns each
        may attend to."""

    def keep(self, positions: list[int]) -> None:
        """Compacts the cache to the given increasing sequence positions."""

    def crop(self, length: int) -> None:
        """Drops every cached position from `length` on."""
