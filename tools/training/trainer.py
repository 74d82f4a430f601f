"""Training a head: draft vocabulary from token frequencies, initialisation, the resumable loop."""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from engine.models.head import Eagle3Head, head_config, set_vocab_map, target_to_draft_map  # noqa: F401 (re-exported)
from tools.training.objective import Batch, make_batch, unroll
from tools.training.selfdistill import Sample


def choose_draft_vocab(samples: list[Sample], size: int, vocab_size: int, always: set[int]) -> torch.Tensor:
    """[Vd] target ids, ascending: the `size` most frequent target tokens in the responses, plus `always`."""
    if size >= vocab_size:
        return torch.arange(vocab_size)
    counts: Counter = Counter()
    for s in samples:
        counts.update(s.labels.tolist())
        counts.update(s.ids[s.prompt_len:].tolist())
    chosen = set(always)
    for token, _ in counts.most_common():
        if len(chosen) >= size:
            break
        chosen.add(token)
    filler = (t for t in range(vocab_size) if t not in chosen)  # rare data: pad with low ids
    while len(chosen) < size:
        chosen.add(next(filler))
    return torch.tensor(sorted(chosen))


def coverage(samples: list[Sample], draft_vocab: torch.Tensor, vocab_size: int) -> float:
    """Share of the target's greedy tokens in `samples` that the draft vocabulary holds."""
    inside = torch.zeros(vocab_size, dtype=torch.bool)
    inside[draft_vocab] = True
    labels = torch.cat([s.labels for s in samples])
    return inside[labels].float().mean().item()


def new_head(target_model, draft_vocab: torch.Tensor, intermediate_size: int | None,
             feature_layers: tuple[int, ...], seed: int, readout_scale: float = 0.5) -> Eagle3Head:
    """A float32 head whose output norm and lm_head rows start as the target's own.

    The attention and MLP branches start at zero, so the untrained head reads the target's
    readout off the fused features alone and every branch grows from there. The output norm
    starts at `readout_scale` times the target's: a random direction read at full scale gives
    confidently wrong logits, and the first steps are spent unlearning that confidence."""
    torch.manual_seed(seed)
    vocab_size = target_model.config.vocab_size
    config = head_config(target_model.config, draft_vocab_size=len(draft_vocab),
                         intermediate_size=intermediate_size, feature_layers=feature_layers)
    embeddings = target_model.get_input_embeddings().weight.detach().float()  # [V, H]
    head = Eagle3Head(config, embeddings)
    if len(draft_vocab) < vocab_size:
        set_vocab_map(head, draft_vocab)
    with torch.no_grad():
        # The head's output plays the role of the target's last hidden state: start from its readout.
        head.lm_head.weight.copy_(target_model.get_output_embeddings().weight.detach().float()[draft_vocab])
        final_norm = getattr(getattr(target_model, "model", None), "norm", None)
        if final_norm is not None:
            head.norm.weight.copy_(final_norm.weight.detach().float() * readout_scale)
        head.midlayer.self_attn.o_proj.weight.zero_()
        head.midlayer.mlp.down_proj.weight.zero_()
    return head.to(embeddings.device)


@dataclass
class LoopOptions:
    ttt_steps: int = 3
    step_decay: float = 0.8
    batch_sequences: int = 16
    batch_tokens: int = 8192  # a batch's padded tokens at most: long conversations go in smaller batches
    lr: float = 1e-3
    weight_decay: float = 0.01
    warmup_steps: int = 10
    max_steps: int = 0  # 0: no step limit
    epochs: float = 0.0  # 0: no epoch limit
    minutes: float = 0.0  # 0: no time limit
    checkpoint_every: int = 50
    train_lm_head: bool = False  # False: keep the target's readout rows frozen (EAGLE-1 style), a third cheaper
    seed: int = 0
    bf16: bool = False  # autocast matmuls to bfloat16 (GPUs, CPUs with native bf16)


def batches_for_epoch(samples: list[Sample], batch_sequences: int, rng: random.Random,
                      batch_tokens: int = 0) -> list[list[int]]:
    """Shuffled batches of similar-length samples (less padding), as sample indices: up to `batch_sequences`
    each and, with `batch_tokens`, no more padded tokens than that (a batch of long conversations is cut
    into smaller ones: the unrolled draft steps hold [B, T, draft vocabulary] logits each, and 16 rows of
    2 000 tokens took a 24 GB machine's memory). A sample longer than the budget is a batch alone.

    >>> samples = [Sample(0, True, torch.zeros(n, dtype=torch.long), 0, None, None) for n in (2, 3, 9, 9)]
    >>> sorted(map(sorted, batches_for_epoch(samples, 4, random.Random(0), batch_tokens=18)))
    [[0, 1], [2, 3]]
    """
    order = list(range(len(samples)))
    rng.shuffle(order)
    group = batch_sequences * 16
    batches = []
    for g in range(0, len(order), group):
        block = sorted(order[g:g + group], key=lambda i: len(samples[i].ids))
        for b in range(0, len(block), batch_sequences):
            batches += _within_budget(block[b:b + batch_sequences], samples, batch_tokens)
    rng.shuffle(batches)
    return batches


def _within_budget(batch: list[int], samples: list[Sample], batch_tokens: int) -> list[list[int]]:
    """`batch` (sorted by length) cut into runs whose padded size, count × longest, fits `batch_tokens`."""
    if not batch_tokens:
        return [batch]
    runs, run = [], []
    for i in batch:
        if run and (len(run) + 1) * len(samples[i].ids) > batch_tokens:
            runs.append(run)
            run = []
        run.append(i)
    return runs + [run]


@dataclass
class LoopResult:
    steps: int
    wall_s: float
    epochs: float
    final_loss: float  # mean weighted loss over the last 20 steps
    step_losses: list[float]  # per unroll step, mean over the last 20 steps


def train_loop(head: Eagle3Head, samples: list[Sample], target_to_draft: torch.Tensor, options: LoopOptions,
               checkpoint: Path | None, log=print) -> LoopResult:
    """AdamW with warmup and cosine decay over whichever budget (steps, epochs, minutes) runs out first."""
    device = head.fc.weight.device
    head.lm_head.weight.requires_grad_(options.train_lm_head)
    params = [p for p in head.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=options.lr, weight_decay=options.weight_decay, betas=(0.9, 0.95))
    state = {"step": 0, "elapsed": 0.0, "epoch": 0, "batch": 0, "recent": []}
    if checkpoint is not None and checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=False)
        head.load_state_dict(saved["head"])
        optimizer.load_state_dict(saved["optimizer"])
        state = saved["state"]
        log(f"resumed from {checkpoint} at step {state['step']}")
    per_epoch = math.ceil(len(samples) / options.batch_sequences)
    bar = tqdm(initial=state["step"], total=options.max_steps or None, desc="training head", unit="step")
    started = time.time() - state["elapsed"]
    while not _done(state, options, per_epoch, time.time() - started):
        order = batches_for_epoch(samples, options.batch_sequences, random.Random(options.seed * 1000 + state["epoch"]),
                                  options.batch_tokens)
        for indices in order[state["batch"]:]:
            progress = _progress(state, options, per_epoch, time.time() - started)
            if progress >= 1:
                break
            _set_lr(optimizer, options, state["step"], progress)
            batch = make_batch([samples[i] for i in indices], target_to_draft).to(device)
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=options.bf16):
                result = unroll(head, batch, options.ttt_steps, options.step_decay)
            optimizer.zero_grad(set_to_none=True)
            result.loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            state["step"] += 1
            state["batch"] += 1
            state["recent"] = (state["recent"] + [[result.loss.item()] + result.step_losses])[-20:]
            bar.update(1)
            bar.set_postfix(loss=f"{result.loss.item():.3f}", depth1=f"{result.step_losses[0]:.3f}")
            if checkpoint is not None and state["step"] % options.checkpoint_every == 0:
                state["elapsed"] = time.time() - started
                _save(checkpoint, head, optimizer, state)
        else:
            state["epoch"] += 1
            state["batch"] = 0
            continue
        break
    bar.close()
    state["elapsed"] = time.time() - started
    if checkpoint is not None:
        _save(checkpoint, head, optimizer, state)
    recent = torch.tensor(state["recent"]) if state["recent"] else torch.zeros(1, options.ttt_steps + 1)
    return LoopResult(steps=state["step"], wall_s=state["elapsed"],
                      epochs=state["epoch"] + state["batch"] / max(per_epoch, 1),
                      final_loss=recent[:, 0].mean().item(), step_losses=recent[:, 1:].mean(0).tolist())


def _progress(state: dict, options: LoopOptions, per_epoch: int, elapsed: float) -> float:
    """How far through the budget we are, 0..1, by the tightest of steps, epochs and minutes."""
    parts = []
    if options.max_steps:
        parts.append(state["step"] / options.max_steps)
    if options.epochs:
        parts.append((state["epoch"] + state["batch"] / max(per_epoch, 1)) / options.epochs)
    if options.minutes:
        parts.append(elapsed / (options.minutes * 60))
    assert parts, "give the loop a budget: steps, epochs or minutes"
    return max(parts)


def _done(state: dict, options: LoopOptions, per_epoch: int, elapsed: float) -> bool:
    return _progress(state, options, per_epoch, elapsed) >= 1


def _set_lr(optimizer, options: LoopOptions, step: int, progress: float) -> None:
    warm = min(1.0, (step + 1) / max(options.warmup_steps, 1))
    cosine = 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))
    for group in optimizer.param_groups:
        group["lr"] = options.lr * warm * cosine


def _save(path: Path, head: Eagle3Head, optimizer, state: dict) -> None:
    """Atomic, so an interrupted run resumes from the last whole checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save({"head": head.state_dict(), "optimizer": optimizer.state_dict(), "state": state}, partial)
    partial.rename(path)


def eval_batches(samples: list[Sample], target_to_draft: torch.Tensor, batch_sequences: int,
                 device: torch.device | str = "cpu", count_outside: bool = False) -> list[Batch]:
    ordered = sorted(samples, key=lambda s: len(s.ids))
    return [make_batch(ordered[i:i + batch_sequences], target_to_draft, count_outside).to(device)
            for i in range(0, len(ordered), batch_sequences)]
