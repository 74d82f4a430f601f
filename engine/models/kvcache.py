"""The one place that knows Hugging Face's cache API: create, measure, compact, crop, select rows.

transformers 5 keeps a DynamicCache's tensors as `cache.layers[i].keys` /
`.values`, each [B, kv_heads, S, head_dim], and renamed the forward's
`past_key_values` argument to `cache` in some models. Everything that feeds a
Hugging Face model a cache (the target and draft LMs, the profiler, the head
trainer's batched generation) goes through these functions, so a change in
the library's API is mended here once.
"""

from __future__ import annotations

import bisect
import inspect

import torch
from transformers import DynamicCache

Cache = DynamicCache


def new_cache(config) -> DynamicCache:
    return DynamicCache(config=config)


def cache_argument(model: torch.nn.Module, cache: DynamicCache) -> dict[str, DynamicCache]:
    """The keyword under which this model's forward takes its cache."""
    params = inspect.signature(model.forward).parameters
    return {"cache" if "cache" in params else "past_key_values": cache}


def cache_length(cache: DynamicCache | None) -> int:
    return cache.get_seq_length() if cache is not None else 0


def gather_positions(tensor: torch.Tensor, dim: int, positions: list[int]) -> int:
    """Moves the entries at the increasing sequence `positions` along `dim` to the front, in place: KV
    compaction for either cache (a DynamicCache's keys and values, FastLM's one tensor). The leading
    positions that already sit where they belong are not copied; returns how many those are.

    >>> t = torch.arange(6)
    >>> gather_positions(t, 0, [0, 1, 3, 5])
    2
    >>> t[:4].tolist()
    [0, 1, 3, 5]
    """
    # Increasing positions never fall behind their index, so the ones in place are a prefix: found by
    # bisection, not by a Python walk over the whole context every step.
    shared = bisect.bisect_left(range(len(positions)), True, key=lambda i: positions[i] != i)
    if shared < len(positions):
        moved = torch.tensor(positions[shared:], dtype=torch.long, device=tensor.device)
        tensor.narrow(dim, shared, len(positions) - shared).copy_(tensor.index_select(dim, moved))
    return shared


def keep_positions(cache: DynamicCache, positions: list[int]) -> None:
    """Compacts every layer to the given increasing sequence positions, in place."""
    end = len(positions)
    for layer in cache.layers:
        if not layer.is_initialized:
            continue
        gather_positions(layer.keys, 2, positions)  # [B, kv_heads, S, head_dim]: positions on dim 2
        gather_positions(layer.values, 2, positions)
        layer.keys = layer.keys[:, :, :end]
        layer.values = layer.values[:, :, :end]


def crop(cache: DynamicCache, length: int) -> None:
    """Drops every cached position from `length` on."""
    if length < cache_length(cache):
        keep_positions(cache, list(range(length)))


def select_rows(cache: DynamicCache, rows: torch.Tensor) -> None:
    """Keeps only the batch rows `rows` [B'] (indices into the current batch), in place."""
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, rows)
        layer.values = layer.values.index_select(0, rows)


def repeat_rows(cache: DynamicCache, batch: int) -> None:
    """Repeats a one-row cache `batch` times along the batch dimension, in place."""
    for layer in cache.layers:
        layer.keys = layer.keys.repeat(batch, 1, 1, 1)  # [B, kv_heads, S, head_dim]
        layer.values = layer.values.repeat(batch, 1, 1, 1)
