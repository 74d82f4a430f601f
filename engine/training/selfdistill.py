"""Self-distillation data: the target answers prompts, and we keep what a head learns from.

For every answered prompt a chunk file holds the token ids (prompt then
response), the target's features at every processed position (the inputs of
the head's three layers, concatenated) and the target's greedy next token at
every position from the prompt's last token on. Features are captured during
generation itself, so no second teacher-forced pass is needed; `extract`
recomputes them from token ids alone (for the committed id file).

Generation is batched with left padding (pad = EOS), rows are trimmed from the
batch and its KV cache as soon as they finish, and work is saved in chunks
named by index so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import inspect
import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import DynamicCache


@dataclass
class Sample:
    prompt_id: int
    greedy: bool
    ids: torch.Tensor  # [T] long: prompt then response
    prompt_len: int
    features: torch.Tensor  # [T - 1, F] bfloat16: target features of every token but the last
    labels: torch.Tensor  # [T - prompt_len] long: target argmax after positions prompt_len - 1 .. T - 2

    def as_dict(self) -> dict:
        return {"prompt_id": self.prompt_id, "greedy": self.greedy, "ids": self.ids.to(torch.int32),
                "prompt_len": self.prompt_len, "features": self.features, "labels": self.labels.to(torch.int32)}

    @classmethod
    def from_dict(cls, d: dict) -> "Sample":
        return cls(d["prompt_id"], d["greedy"], d["ids"].long(), d["prompt_len"], d["features"], d["labels"].long())


def read_prompts(path: Path) -> list[dict]:
    with path.open() as f:
        return [json.loads(line) for line in f if line.strip()]


def is_held_out(prompt_id: int, fraction: float) -> bool:
    """A fixed, order-independent split: held-out prompts are never generated for training.

    >>> [is_held_out(i, 0.1) for i in range(4)]
    [True, False, False, False]
    """
    return (prompt_id * 2654435761) % 10007 < fraction * 10007


def chat_ids(tokenizer, prompt: str) -> list[int]:
    """The ids the engine reads for a first-turn prompt (the codec does the same)."""
    if tokenizer is None:
        return list(prompt.encode("utf-8"))
    if tokenizer.chat_template:
        return list(tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                  add_generation_prompt=True, return_dict=True)["input_ids"])
    return tokenizer(prompt)["input_ids"]


def _left_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, S] ids and [B, S] 0/1 attention mask, padded on the left."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, width - len(r):] = torch.tensor(r)
        mask[b, width - len(r):] = 1
    return ids, mask


def _features(hidden_states: tuple[torch.Tensor, ...], layers: tuple[int, ...]) -> torch.Tensor:
    """[B, N, F] bfloat16: the inputs of `layers` concatenated (hidden_states[i] is layer i's input)."""
    return torch.cat([hidden_states[i] for i in layers], dim=-1).to(torch.bfloat16)


def _cache_kwarg(model, cache: DynamicCache) -> dict:
    """transformers renamed `past_key_values` to `cache`; pass whichever this model takes."""
    params = inspect.signature(model.forward).parameters
    return {"cache" if "cache" in params else "past_key_values": cache}


def _trim_cache(cache: DynamicCache, rows: torch.Tensor) -> None:
    """Keeps only the batch rows `rows` [B'] in every layer of the cache."""
    for layer in cache.layers:
        layer.keys = layer.keys.index_select(0, rows)
        layer.values = layer.values.index_select(0, rows)


@torch.inference_mode()
def generate_batch(model, prompts: list[list[int]], prompt_ids: list[int], greedy: list[bool],
                   layers: tuple[int, ...], max_new_tokens: int, temperature: float,
                   eos_ids: set[int], pad_id: int, generator: torch.Generator) -> list[Sample]:
    """Answers a batch of prompts, capturing features and greedy labels as it goes."""
    ids, mask = _left_pad(prompts, pad_id)  # [B, S]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, S]
    cache = DynamicCache(config=model.config)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                output_hidden_states=True, logits_to_keep=1, **_cache_kwarg(model, cache))
    prefill = _features(out.hidden_states, layers)  # [B, S, F]
    feats = [[prefill[b, ids.shape[1] - len(p):]] for b, p in enumerate(prompts)]
    labels: list[list[int]] = [[] for _ in prompts]
    response: list[list[int]] = [[] for _ in prompts]
    active = torch.arange(len(prompts))  # [B'] original row of each batch row
    is_greedy = torch.tensor(greedy)  # [B]
    logits = out.logits[:, -1].float()  # [B', V]
    last_pos = positions[:, -1]  # [B']
    while True:
        argmax = logits.argmax(-1)  # [B']
        probs = torch.softmax(logits / max(temperature, 1e-5), -1)
        drawn = torch.multinomial(probs, 1, generator=generator)[:, 0]
        nxt = torch.where(is_greedy[active], argmax, drawn)  # [B']
        still = []
        for j, row in enumerate(active.tolist()):
            labels[row].append(int(argmax[j]))
            response[row].append(int(nxt[j]))
            if int(nxt[j]) not in eos_ids and len(response[row]) < max_new_tokens:
                still.append(j)
        if not still:
            break
        keep = torch.tensor(still)
        if len(still) < len(active):
            _trim_cache(cache, keep)
            mask = mask.index_select(0, keep)
            active, nxt, last_pos = active[keep], nxt[keep], last_pos[keep]
        mask = torch.cat([mask, torch.ones(len(active), 1, dtype=torch.long)], dim=1)
        last_pos = last_pos + 1
        out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=last_pos[:, None],
                    use_cache=True, output_hidden_states=True, **_cache_kwarg(model, cache))
        step = _features(out.hidden_states, layers)  # [B', 1, F]
        for j, row in enumerate(active.tolist()):
            feats[row].append(step[j])
        logits = out.logits[:, -1].float()
    samples = []
    for b, p in enumerate(prompts):
        full = torch.tensor(p + response[b])
        f = torch.cat(feats[b], dim=0)[: len(full) - 1]  # [T - 1, F]
        samples.append(Sample(prompt_ids[b], greedy[b], full, len(p), f.clone(), torch.tensor(labels[b])))
    return samples


@torch.inference_mode()
def extract(model, rows: list[tuple[int, bool, list[int], int]], layers: tuple[int, ...],
            pad_id: int) -> list[Sample]:
    """Teacher-forced features and labels for known sequences (prompt_id, greedy, ids, prompt_len)."""
    seqs = [r[2][:-1] for r in rows]  # the last token is never processed
    ids, mask = _left_pad(seqs, pad_id)  # [B, S]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, output_hidden_states=True)
    feats = _features(out.hidden_states, layers)  # [B, S, F]
    argmax = out.logits.argmax(-1)  # [B, S]
    samples = []
    for b, (pid, greedy, full, plen) in enumerate(rows):
        n = len(full) - 1
        start = ids.shape[1] - n
        samples.append(Sample(pid, greedy, torch.tensor(full), plen, feats[b, start:].clone(),
                              argmax[b, start + plen - 1:].clone()))
    return samples


def chunk_path(work: Path, index: int) -> Path:
    return work / "chunks" / f"chunk-{index:05d}.pt"


def load_chunks(work: Path) -> list[Sample]:
    return [Sample.from_dict(d) for p in sorted((work / "chunks").glob("chunk-*.pt"))
            for d in torch.load(p, weights_only=True)]


def save_chunk(path: Path, samples: list[Sample]) -> None:
    """Writes atomically, so a killed run never leaves a half chunk that resume would trust."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    torch.save([s.as_dict() for s in samples], partial)
    partial.rename(path)


@dataclass
class GenerationPlan:
    prompts: list[dict]  # rows of the prompt file, training split only
    chunk_size: int = 64
    batch_size: int = 32
    max_new_tokens: int = 160
    temperature: float = 0.8
    greedy_share: float = 0.6  # the rest is sampled, for variety
    seed: int = 0
    max_tokens: int = 0  # stop after this many response tokens (0: no limit)
    deadline: float = 0.0  # stop starting chunks after this time.time() (0: none)
    descending: bool = False  # walk the chunks from the last: a second process can share the work


def run_generation(model, tokenizer, plan: GenerationPlan, layers: tuple[int, ...], work: Path,
                   eos_ids: set[int], pad_id: int, log=print) -> int:
    """Generates chunk after chunk, skipping finished ones; returns the response tokens on disk."""
    chunks = [plan.prompts[i:i + plan.chunk_size] for i in range(0, len(plan.prompts), plan.chunk_size)]
    total = _tokens_on_disk(work)
    bar = tqdm(total=plan.max_tokens or None, initial=total, desc="self-distillation tokens", unit="tok")
    order = range(len(chunks) - 1, -1, -1) if plan.descending else range(len(chunks))
    for index in order:
        chunk = chunks[index]
        path = chunk_path(work, index)
        if path.exists():
            continue
        if (plan.max_tokens and total >= plan.max_tokens) or (plan.deadline and time.time() > plan.deadline):
            break
        generator = torch.Generator().manual_seed(plan.seed * 100_003 + index)
        rows = sorted(chunk, key=lambda r: len(chat_ids(tokenizer, r["prompt"])))  # less padding per batch
        samples: list[Sample] = []
        start = time.time()
        for b in range(0, len(rows), plan.batch_size):
            if samples and plan.deadline and time.time() > plan.deadline:
                break  # out of time: the chunk keeps the answers already made
            batch = rows[b:b + plan.batch_size]
            samples += generate_batch(
                model, [chat_ids(tokenizer, r["prompt"]) for r in batch], [r["id"] for r in batch],
                [_greedy_row(r["id"], plan.greedy_share) for r in batch], layers, plan.max_new_tokens,
                plan.temperature, eos_ids, pad_id, generator)
        save_chunk(path, samples)
        new = sum(len(s.ids) - s.prompt_len for s in samples)
        total += new
        bar.update(new)
        log(f"chunk {index}: {len(samples)} answers, {new} tokens in {time.time() - start:.0f} s "
            f"({new / (time.time() - start):.0f} tok/s), {total} in all")
    bar.close()
    return total


def _greedy_row(prompt_id: int, share: float) -> bool:
    return (prompt_id * 40503) % 1000 < share * 1000


def _tokens_on_disk(work: Path) -> int:
    index = work / "chunks"
    if not index.exists():
        return 0
    return sum(len(d["ids"]) - d["prompt_len"] for p in sorted(index.glob("chunk-*.pt"))
               for d in torch.load(p, weights_only=True))
