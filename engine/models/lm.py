"""A causal LM with its own KV cache, fed chains or trees of new tokens.

Both the target and a draft LM run through this: a chain (prefill, pending
tokens) attends causally; a tree attends through an explicit [N, S] matrix of
allowed cache columns with position ids prefix length + depth. After
verification the cache is compacted to the accepted positions, so the next
step starts from exactly the state plain decoding would have reached.
"""

from __future__ import annotations

import torch

from engine.models import kvcache
from engine.models.base import BatchItem, ForwardOutput, LanguageModel, forward_each
from engine.models.device import inference
from engine.tree import attention_bias


class CachedLM(LanguageModel):
    """Hugging Face's forward over its own DynamicCache: the plain forward, for any causal LM."""

    forward_name = "plain"  # Hugging Face's forward (FastLM says "lean" or "native")

    def __init__(self, model: torch.nn.Module, name: str = "model"):
        self.model = model.eval()
        self.name = name
        self.config = model.config
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.reset()

    @property
    def max_length(self) -> int:
        return int(getattr(self.config, "max_position_embeddings", 2048))

    @property
    def cache_len(self) -> int:
        return kvcache.cache_length(self.cache)

    def reset(self) -> None:
        self.cache = kvcache.new_cache(self.config)

    @inference
    def forward_chain(self, tokens: list[int], hidden_layers: tuple[int, ...] = (), logits: bool = True
                      ) -> ForwardOutput:
        """Appends `tokens` causally after the cache (Hugging Face's forward computes the logits either way;
        `logits=False` only leaves them out of the output)."""
        ids = torch.tensor([tokens], device=self.device)  # [1, N]
        start = self.cache_len
        positions = torch.arange(start, start + len(tokens), device=self.device)[None]  # [1, N]
        out = self._run(ids, positions, None, hidden_layers)
        return out if logits else ForwardOutput(logits=None, hidden=out.hidden)

    @inference
    def forward_tree(self, tokens: list[int], positions: torch.Tensor, allowed: torch.Tensor,
                     hidden_layers: tuple[int, ...] = ()) -> ForwardOutput:
        """Appends N tree tokens; `allowed` [N, cache_len + N] says which columns each may attend to."""
        assert allowed.shape == (len(tokens), self.cache_len + len(tokens)), allowed.shape
        ids = torch.tensor([tokens], device=self.device)  # [1, N]
        mask = attention_bias(allowed, self.dtype).to(self.device)  # [1, 1, N, S]
        return self._run(ids, positions.to(self.device)[None], mask, hidden_layers)

    def _run(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
             hidden_layers: tuple[int, ...]) -> ForwardOutput:
        out = self.model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True,
                         output_hidden_states=bool(hidden_layers), **kvcache.cache_argument(self.model, self.cache))
        hidden = tuple(out.hidden_states[i][0] for i in hidden_layers) if hidden_layers else ()
        logits = out.logits[0]  # [N, V]
        return ForwardOutput(logits=logits if logits.dtype == torch.float64 else logits.float(), hidden=hidden)

    @inference
    def keep(self, positions: list[int]) -> None:
        """Compacts the cache to the given increasing sequence positions."""
        kvcache.keep_positions(self.cache, positions)

    def crop(self, length: int) -> None:
        """Drops every cached position from `length` on."""
        kvcache.crop(self.cache, length)

    def session(self) -> "CachedLM":
        """The same model with a DynamicCache of its own."""
        return CachedLM(self.model, self.name)

    def forward_batch(self, items: list[BatchItem]) -> list[ForwardOutput]:
        """One Hugging Face forward per item: padding unequal caches into one would change their bits."""
        return forward_each(items)
