"""What the engine may know of a language model: a KV cache it extends by a chain or a tree of new tokens,
then compacts to the accepted ones.

Two forwards declare it: `CachedLM` (engine/models/lm.py, Hugging Face's forward over its DynamicCache)
and `FastLM` (engine/models/fastlm.py, the lean forward over one static cache, with the native kernel
where it runs). The engine, the draft-LM drafter and the profiler are typed against `LanguageModel`,
never against either class, so either verifies.

Several requests at once (engine/batch.py): `session()` gives another cache over the same weights, and
`forward_batch` runs one `BatchItem` (tokens, positions, mask) per session in one call. A forward that
cannot do better runs them one after another (`forward_each`); FastLM reads its weights once for all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, runtime_checkable

import torch


@dataclass
class ForwardOutput:
    logits: torch.Tensor | None  # [N, V] float32 (float64 for a float64 model); None where none were asked for
    hidden: tuple[torch.Tensor, ...] = ()  # each [N, H]: inputs of the requested layers

    @property
    def narrow(self) -> torch.Tensor | None:
        """The logits as the forward wrote them in bfloat16 [N, V], where it did and they are not widened
        yet (NarrowOutput); None: read `logits`."""
        return None


class NarrowOutput(ForwardOutput):
    """A forward whose logits came out in bfloat16 (the native kernel's) and are widened to float32, exactly,
    only when `logits` is first read: a greedy walk reads its argmaxes off `narrow` (engine/engine.py), so a
    step that reports no odds never writes the [N, V] float32 copy."""

    def __init__(self, narrow: torch.Tensor, hidden: tuple[torch.Tensor, ...],
                 widen: Callable[[torch.Tensor], torch.Tensor]):
        self._narrow, self.hidden, self._widen, self._wide = narrow, hidden, widen, None

    @property
    def narrow(self) -> torch.Tensor:
        return self._narrow

    @property
    def logits(self) -> torch.Tensor:  # type: ignore[override]
        if self._wide is None:
            self._wide = self._widen(self._narrow)  # [N, V] float32
        return self._wide


@dataclass
class BatchItem:
    """One session's share of a batched forward: a chain after its cache, or a tree under a mask."""

    lm: "LanguageModel"  # a session of the model the batch runs on: its cache is the one extended
    tokens: list[int]
    positions: torch.Tensor | None = None  # [N] for a tree; None: a chain at cache_len, cache_len + 1, …
    allowed: torch.Tensor | None = None  # [N, cache_len + N] bool for a tree; None: causal
    hidden_layers: tuple[int, ...] = ()

    def run_alone(self) -> ForwardOutput:
        """This item's forward by itself, as a run of one request does it."""
        if self.allowed is None:
            return self.lm.forward_chain(self.tokens, hidden_layers=self.hidden_layers)
        return self.lm.forward_tree(self.tokens, self.positions, self.allowed, hidden_layers=self.hidden_layers)


def forward_each(items: list[BatchItem]) -> list[ForwardOutput]:
    """A batch one item after another: the forward of a model that has no batched one (the same bits
    as each alone, none of the saving)."""
    return [item.run_alone() for item in items]


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

    def forward_chain(self, tokens: list[int], hidden_layers: tuple[int, ...] = (), logits: bool = True
                      ) -> ForwardOutput:
        """Appends `tokens` causally after the cache; `logits=False` asks for the cache and the hidden
        states alone (a prefill, whose logits no one reads: the output head is a fifth of its arithmetic)."""

    def forward_tree(self, tokens: list[int], positions: torch.Tensor, allowed: torch.Tensor,
                     hidden_layers: tuple[int, ...] = ()) -> ForwardOutput:
        """Appends N tree tokens at `positions` [N]; `allowed` [N, cache_len + N] says which columns each
        may attend to."""

    def keep(self, positions: list[int]) -> None:
        """Compacts the cache to the given increasing sequence positions."""

    def crop(self, length: int) -> None:
        """Drops every cached position from `length` on."""

    def session(self) -> "LanguageModel":
        """Another model over the same weights with an empty cache of its own: one per request of a batch."""

    def forward_batch(self, items: list[BatchItem]) -> list[ForwardOutput]:
        """Each item's forward over its own session's cache (every `item.lm` a session of this model), as
        `item.run_alone()` would give it, in one call where the forward can share the weights' reads."""
