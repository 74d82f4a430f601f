"""Measuring what the engine's own forwards cost: the timers and the grid behind a cost table.

`specscope profile` (tools/profile.py) measures a full table with these and adds the device's floors;
a first load with nothing measured (engine/calibration.py) measures a small one with them before it
picks a default. Each timer times a forward as the engine runs it: batch 1 through the cached LM's
own verify forward (the lean one of engine/models/fastlm.py where it runs the model), B > 1 through
its batched forward over B sessions (engine/batch.py), the EAGLE-3 head through its own draft
forward; a bare model through Hugging Face's forward.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from engine.costs import CostTable, ModelCosts
from engine.drafters.base import run_draft_forwards
from engine.drafters.eagle_head import EagleHeadDrafter
from engine.models import kvcache
from engine.models.base import BatchItem
from engine.models.device import clock, device_name
from engine.tree import DraftTree, attention_bias, tree_attention_allowed

N_MAX_CPU, N_MAX_GPU = 64, 128  # every n up to this is measured by default
DEFAULT_CONTEXTS = (128, 512, 1024)
DEFAULT_BATCHES = (1, 2, 4)


@dataclass(frozen=True)
class Grid:
    """What to measure: every (batch, context, n) cell, `repeats` timed runs after `warmup`."""

    ns: tuple[int, ...] = tuple(range(1, N_MAX_CPU + 1))
    contexts: tuple[int, ...] = DEFAULT_CONTEXTS
    batches: tuple[int, ...] = DEFAULT_BATCHES
    context_step: int = 128
    repeats: int = 3
    warmup: int = 1
    statistic: str = "median"  # or "min": on a machine shared with other jobs, closer to the uncontended time

    @property
    def cells(self) -> int:
        return len(self.ns) * len(self.contexts) * len(self.batches)


def _filled_cache(model: torch.nn.Module, context: int, batch: int, device: torch.device) -> kvcache.Cache:
    """A cache holding `context` positions for `batch` rows: one prefill, repeated along the batch.

    The values are those of random tokens; timing does not depend on them.
    """
    cache = kvcache.new_cache(model.config)
    vocab = int(model.config.vocab_size)
    ids = torch.randint(0, vocab, (1, context), device=device)  # [1, C]
    with torch.inference_mode():
        model(input_ids=ids, use_cache=True, **kvcache.cache_argument(model, cache))
    kvcache.repeat_rows(cache, batch)
    return cache


def _chain_inputs(n: int, context: int, batch: int, vocab: int, dtype: torch.dtype, device: torch.device):
    """Token ids [B, n], position ids [B, n] and the additive mask [B, 1, n, C + n] of an n-token chain."""
    ids = torch.randint(0, vocab, (batch, n), device=device)
    positions = (torch.arange(n, device=device) + context).expand(batch, n)
    allowed = tree_attention_allowed([-1] + list(range(n - 1)), prefix_len=context)  # [n, C + n]
    mask = attention_bias(allowed, dtype).to(device).expand(batch, 1, n, context + n)
    return ids, positions, mask


def time_forward(model: torch.nn.Module, cache: kvcache.Cache, n: int, context: int, batch: int) -> float:
    """ms of one forward of n new tokens per row on a cache of `context` positions (left as it was)."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    ids, positions, mask = _chain_inputs(n, context, batch, int(model.config.vocab_size), dtype, device)
    start = clock(device)
    with torch.inference_mode():
        model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True,
              **kvcache.cache_argument(model, cache))
    elapsed = (clock(device) - start) * 1000
    kvcache.crop(cache, context)  # the next run starts from the same context
    return elapsed


def lm_timer(lm: Any, context: int) -> Callable[[int], float]:
    """Times the LM's own verify forward (the lean one where the engine runs it): an n-token chain given
    as a tree, the call and mask a verify makes, on `context` cached random tokens."""
    vocab = int(lm.config.vocab_size)
    lm.reset()
    lm.forward_chain(torch.randint(0, vocab, (context,)).tolist(), logits=False)

    def time_n(n: int) -> float:
        tokens = torch.randint(0, vocab, (n,)).tolist()
        allowed = tree_attention_allowed([-1] + list(range(n - 1)), prefix_len=context)  # [n, C + n]
        positions = torch.arange(context, context + n)
        start = clock(lm.device)
        lm.forward_tree(tokens, positions, allowed)
        elapsed = (clock(lm.device) - start) * 1000
        lm.crop(context)
        return elapsed

    return time_n


def head_timer(drafter: EagleHeadDrafter, context: int, batch: int = 1) -> Callable[[int], float]:
    """Times one draft forward of an EAGLE-3 head as a step's layer runs it: n drafted nodes, children of
    the root, over `context` committed pairs of random tokens and features (the kernel's head step where it
    runs the head): what δ counts and c prices. At `batch` B > 1, B sessions' layers of n nodes each in one
    call, as engine/batch.py runs a batch's draft forwards (`HeadForward.run_together`)."""
    head = drafter.head
    vocab = int(head.vocab_size)
    sessions = [drafter.session() for _ in range(batch)]
    for session in sessions:
        features = 0.1 * torch.randn(context, head.fc.in_features, dtype=session.dtype, device=session.device)
        session.start(torch.randint(0, vocab, (context + 1,)).tolist(), features)  # [C] features: all but the root's
        session.frontier_draft_logits(DraftTree.with_root(0), [0])  # the context's pairs join the head's cache

    def time_n(n: int) -> float:
        forwards = []
        for session in sessions:
            tree = DraftTree.with_root(0)
            nodes = [tree.add(0, token, 0.1, 0.1) for token in torch.randint(0, vocab, (n,)).tolist()]
            session.discard_tree()
            session.frontier_draft_logits(tree, [0])  # the root pair, as every step's first layer runs it
            forwards.append(session.draft_forward(tree, nodes))
        start = clock(drafter.device)
        run_draft_forwards(forwards)
        return (clock(drafter.device) - start) * 1000

    return time_n


def measure_head(drafter: EagleHeadDrafter, grid: Grid, tick: Callable[[str], None] = lambda _: None
                 ) -> list[list[list[float]]]:
    """ms[b][c][k] of the head's draft forwards: batch b's layer of k nodes per request in one call."""
    return [[measure_row(head_timer(drafter, context, batch), grid.ns, grid.repeats, grid.warmup, tick,
                         f"head B={batch} ctx={context}", grid.statistic) for context in grid.contexts]
            for batch in grid.batches]


def batch_timer(lm: Any, context: int, batch: int) -> Callable[[int], float]:
    """Times the LM's batched verify forward as engine/batch.py runs it: `batch` sessions, each on
    `context` cached random tokens, each verifying an n-token chain given as a tree, in one forward_batch."""
    vocab = int(lm.config.vocab_size)
    sessions = [lm.session() for _ in range(batch)]
    for session in sessions:
        session.forward_chain(torch.randint(0, vocab, (context,)).tolist(), logits=False)

    def time_n(n: int) -> float:
        allowed = tree_attention_allowed([-1] + list(range(n - 1)), prefix_len=context)  # [n, C + n]
        positions = torch.arange(context, context + n)
        items = [BatchItem(session, torch.randint(0, vocab, (n,)).tolist(), positions, allowed)
                 for session in sessions]
        start = clock(lm.device)
        lm.forward_batch(items)
        elapsed = (clock(lm.device) - start) * 1000
        for session in sessions:
            session.crop(context)
        return elapsed

    return time_n


def measure_row(time_n: Callable[[int], float], ns: tuple[int, ...], repeats: int, warmup: int,
                tick: Callable[[str], None], label: str, statistic: str = "median",
                between: Callable[[], None] | None = None) -> list[float]:
    """Median (or minimum) ms for every n, `time_n(n)` timing one forward; `between()` after each timed
    pass (the floors' rates are sampled there, in the moments the forwards ran).

    Repeats are the outer loop: on a shared machine a burst of load then lands on one run of
    many n, which the median discards, rather than on every run of one n.
    """
    times: dict[int, list[float]] = {n: [] for n in ns}
    for run in range(warmup + repeats):
        for n in ns:
            elapsed = time_n(n)
            if run >= warmup:
                times[n].append(elapsed)
            if run == warmup + repeats - 1:
                tick(f"{label} n={n}")
        if between is not None and run >= warmup:
            between()
    summarise = min if statistic == "min" else statistics.median
    return [summarise(times[n]) for n in ns]


def measure_model(lm: Any, grid: Grid, tick: Callable[[str], None] = lambda _: None,
                  rates: Any = None) -> list[list[list[float]]]:
    """ms[b][c][k] over grid.batches × grid.contexts × grid.ns.

    Batch 1 runs through the cached LM itself (`lm_timer`), as a run alone verifies; B > 1 through its
    batched forward over B sessions (`batch_timer`), as engine/batch.py verifies B requests: the rows
    cast and talon-adaptive read in a batch. A bare model is timed through Hugging Face's forward throughout.
    `rates` (tools/floors.py's RateSampler, or None) samples the floors' rates after each timed pass of batch 1,
    the rows the floors are printed for.
    """
    bare = isinstance(lm, torch.nn.Module)
    model = lm if bare else lm.model
    device = next(model.parameters()).device
    table = []
    for batch in grid.batches:
        rows = []
        for context in grid.contexts:
            if batch == 1 and not bare:
                time_n = lm_timer(lm, context)
            elif not bare:
                time_n = batch_timer(lm, context, batch)
            else:
                cache = _filled_cache(model, context, batch, device)
                time_n = lambda n, cache=cache, context=context, batch=batch: time_forward(model, cache, n, context,
                                                                                         batch)
            between = rates.sample if rates is not None and batch == 1 else None
            rows.append(measure_row(time_n, grid.ns, grid.repeats, grid.warmup, tick, f"B={batch} ctx={context}",
                                    grid.statistic, between))
        table.append(rows)
    if not bare:
        lm.reset()  # left empty: the engine's next run starts from its own prompt
    return table


def measure_costs(target: Any, draft: Any | None = None, grid: Grid = Grid(), progress: bool = True,
                  device_label: str | None = None, head: EagleHeadDrafter | None = None, rates: Any = None
                  ) -> CostTable:
    """Measures the target and the draft and returns their cost table: the draft LM when there is one,
    else the EAGLE-3 `head` when given (its own draft forward, `measure_head`); neither: the table's
    draft costs stay assumed.

    `target` and `draft` are cached LMs (anything with `.model`, `.name` and the forward methods) or bare
    models. `rates` (tools/floors.py's RateSampler, or None) samples the floors' rates between the target's
    timed passes of batch 1.
    """
    from tqdm import tqdm

    lms = [target] + ([draft] if draft is not None else [])
    head = head if draft is None else None
    bar = tqdm(total=grid.cells * (len(lms) + (head is not None)), desc="profile", unit="cell",
               disable=not progress)

    def ticker(name: str) -> Callable[[str], None]:
        def tick(label: str) -> None:
            bar.set_postfix_str(f"{name} {label}")
            bar.update()
        return tick

    param = next(model_and_name(target)[0].parameters())
    measured = []
    for lm in lms:
        name = model_and_name(lm)[1]
        measured.append(ModelCosts(name=name, ms=measure_model(lm, grid, ticker(name), rates if lm is target else None)))
    if head is not None:
        name = head.model_name or "head"
        measured.append(ModelCosts(name=name, ms=measure_head(head, grid, ticker(name))))
    bar.close()
    meta = {"repeats": grid.repeats, "warmup": grid.warmup, "statistic": grid.statistic,
            "threads": torch.get_num_threads(), "load_average": _load_average(), "forward": _forward_kind(target),
            "torch": torch.__version__, "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return CostTable(
        device=device_label or device_name(param.device), dtype=str(param.dtype).replace("torch.", ""),
        batches=list(grid.batches), contexts=list(grid.contexts), ns=list(grid.ns),
        target=measured[0], draft=measured[1] if len(measured) > 1 else None, context_step=grid.context_step,
        meta=meta,
    )


def _forward_kind(lm: Any) -> str:
    """Which forward batch 1 was timed through: "native" (engine/models/fastlm.py with its kernel), "lean"
    (engine/models/fastlm.py on torch's ops) or "plain" (Hugging Face's)."""
    return getattr(lm, "forward_name", "plain")


def _load_average() -> float | None:
    """The 1-minute load average while measuring: a table taken on a busy machine says so."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def model_and_name(lm: Any) -> tuple[torch.nn.Module, str]:
    """The torch model under a cached LM (or the bare model itself) and the name its costs are filed under."""
    if isinstance(lm, torch.nn.Module):
        return lm.eval(), getattr(lm.config, "name_or_path", "") or type(lm).__name__
    return lm.model, lm.name
