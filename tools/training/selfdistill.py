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

import json
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from engine.models import kvcache


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


def row_ids(tokenizer, row: dict) -> list[int]:
    """The ids of a prompt-set row: a first-turn `prompt`, or a conversation's `messages` ending with a user turn."""
    if "messages" not in row:
        return chat_ids(tokenizer, row["prompt"])
    return list(tokenizer.apply_chat_template(row["messages"], add_generation_prompt=True,
                                              return_dict=True)["input_ids"])


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


@torch.inference_mode()
def generate_batch(model, prompts: list[list[int]], prompt_ids: list[int], greedy: list[bool],
                   layers: tuple[int, ...], max_new_tokens: int, temperature: float,
                   eos_ids: set[int], pad_id: int, generator: torch.Generator) -> list[Sample]:
    """Answers a batch of prompts on the model's device, capturing features and greedy labels as it goes.

    Features of every row land in one [B, S + max_new_tokens, F] buffer, one write per step, and
    tokens cross to the host once per step: per-row work on the device would be a sync per row."""
    device = model.device
    ids, mask = (t.to(device) for t in _left_pad(prompts, pad_id))  # [B, S]
    width = ids.shape[1]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # [B, S]
    cache = kvcache.new_cache(model.config)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                output_hidden_states=True, logits_to_keep=1, **kvcache.cache_argument(model, cache))
    prefill = _features(out.hidden_states, layers)  # [B, S, F]
    feats = prefill.new_zeros(len(prompts), width + max_new_tokens, prefill.shape[-1])  # [B, S + M, F]
    feats[:, :width] = prefill
    labels: list[list[int]] = [[] for _ in prompts]
    response: list[list[int]] = [[] for _ in prompts]
    active = torch.arange(len(prompts), device=device)  # [B'] original row of each batch row
    is_greedy = torch.tensor(greedy, device=device)  # [B]
    logits = out.logits[:, -1].float()  # [B', V]
    last_pos = positions[:, -1]  # [B']
    for step in range(max_new_tokens):
        argmax = logits.argmax(-1)  # [B']
        drawn = torch.multinomial(torch.softmax(logits / max(temperature, 1e-5), -1), 1, generator=generator)[:, 0]
        nxt = torch.where(is_greedy[active], argmax, drawn)  # [B']
        still = []
        for j, (row, best, token) in enumerate(zip(active.tolist(), argmax.tolist(), nxt.tolist())):
            labels[row].append(best)
            response[row].append(token)
            if token not in eos_ids and len(response[row]) < max_new_tokens:
                still.append(j)
        if not still:
            break
        if len(still) < len(active):
            keep = torch.tensor(still, device=device)
            kvcache.select_rows(cache, keep)
            mask, active, nxt, last_pos = mask[keep], active[keep], nxt[keep], last_pos[keep]
        mask = torch.cat([mask, mask.new_ones(len(active), 1)], dim=1)
        last_pos = last_pos + 1
        out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=last_pos[:, None],
                    use_cache=True, output_hidden_states=True, **kvcache.cache_argument(model, cache))
        feats[active, width + step] = _features(out.hidden_states, layers)[:, 0]
        logits = out.logits[:, -1].float()
    feats = feats.cpu()
    samples = []
    for b, p in enumerate(prompts):
        full = torch.tensor(p + response[b])
        first = width - len(p)
        samples.append(Sample(prompt_ids[b], greedy[b], full, len(p), feats[b, first:first + len(full) - 1].clone(),
                              torch.tensor(labels[b])))
    return samples


@torch.inference_mode()
def extract(model, rows: list[tuple[int, bool, list[int], int]], layers: tuple[int, ...],
            pad_id: int) -> list[Sample]:
    """Teacher-forced features and labels for known sequences (prompt_id, greedy, ids, prompt_len)."""
    seqs = [r[2][:-1] for r in rows]  # the last token is never processed
    ids, mask = (t.to(model.device) for t in _left_pad(seqs, pad_id))  # [B, S]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    # The body alone, then the readout only where a label is read: a prompt's positions need features, not
    # logits, and over long prompts the [B, S, V] logits were most of the pass.
    out = model.model(input_ids=ids, attention_mask=mask, position_ids=positions, output_hidden_states=True)
    feats = _features(out.hidden_states, layers).cpu()  # [B, S, F]
    samples = []
    for b, (pid, greedy, full, plen) in enumerate(rows):
        n = len(full) - 1
        start = ids.shape[1] - n
        labels = model.lm_head(out.last_hidden_state[b, start + plen - 1:]).argmax(-1).cpu()  # [n - plen + 1]
        samples.append(Sample(pid, greedy, torch.tensor(full), plen, feats[b, start:].clone(), labels))
    return samples


@torch.inference_mode()
def extract_in_engine(lm, rows: list[tuple[int, bool, list[int], int]], layers: tuple[int, ...]) -> list[Sample]:
    """`extract` through the engine's own forward (`lm`: a LanguageModel), one sequence at a time: the features
    and greedy tokens the drafter reads at run time, bit for bit."""
    samples = []
    for pid, greedy, full, plen in rows:
        lm.reset()
        hidden = []
        if plen > 1:  # the prompt's own labels are never read: its forward computes no logits
            hidden.append(torch.cat(lm.forward_chain(full[:plen - 1], hidden_layers=layers, logits=False).hidden,
                                    dim=-1))  # [P - 1, F]
        out = lm.forward_chain(full[plen - 1:-1], hidden_layers=layers)  # logits [A, V], hidden each [A, H]
        hidden.append(torch.cat(out.hidden, dim=-1))  # [A, F]
        features = torch.cat(hidden).to(torch.bfloat16)
        samples.append(Sample(pid, greedy, torch.tensor(full), plen, features, _greedy_labels(out)))
    return samples


def _greedy_labels(out, last: bool = False) -> torch.Tensor | int:
    """Each row's argmax (`last`: the last row's, as an int), read off the kernel's bf16 logits where it has
    them: the same indices as the widened rows' (widening is exact), and the float32 copy is never made."""
    from engine.models import native

    narrow = out.narrow
    if narrow is None or not narrow.is_contiguous():
        return int(out.logits[-1].argmax()) if last else out.logits.argmax(-1)
    if last:
        return native.argmax_row(narrow, narrow.shape[0] - 1)
    return torch.tensor([native.argmax_row(narrow, row) for row in range(narrow.shape[0])], dtype=torch.long)


@torch.inference_mode()
def generate_in_engine(lm, prompts: list[list[int]], prompt_ids: list[int], greedy: list[bool],
                       layers: tuple[int, ...], max_new_tokens: int, temperature: float, eos_ids: set[int],
                       generator: torch.Generator, batch_size: int = 8) -> list[Sample]:
    """`generate_batch` through the engine's own forward (`lm`: a FastLM with the native kernel): up to
    `batch_size` answers decoded together, one `forward_batch` a token (the weights read once for all, as a
    server's batch reads them), a finished answer's place taken by the next prompt at once (continuous
    batching). Features and greedy labels are those the drafter will be given, bit for bit: a row's logits
    and features do not depend on the rows beside it."""
    from engine.models.base import BatchItem

    free = [lm.session() for _ in range(min(batch_size, len(prompts)))]
    waiting = list(range(len(prompts)))[::-1]  # popped from the end: prompt order
    running: dict[int, tuple] = {}  # row -> (session, next token)
    features: list[list[torch.Tensor]] = [[] for _ in prompts]  # each [n, F]
    response: list[list[int]] = [[] for _ in prompts]
    labels: list[list[int]] = [[] for _ in prompts]

    def choose(row: int, out) -> int:
        """The row's next token from its output's last logits (its greedy label kept beside it); a greedy
        row's argmax is read off the kernel's bf16 row, never widened (the same index)."""
        best = _greedy_labels(out, last=True)
        token = best if greedy[row] else int(torch.multinomial(
            torch.softmax(out.logits[-1] / max(temperature, 1e-5), -1), 1, generator=generator))
        labels[row].append(best)
        response[row].append(token)
        return token

    def done(row: int) -> bool:
        return response[row][-1] in eos_ids or len(response[row]) >= max_new_tokens

    while waiting or running:
        # Newcomers take the free places: their prompts but the last token run without logits (nobody reads
        # them); the last joins the batch's next forward, whose logits give the first answer token.
        while waiting and free:
            row, session = waiting.pop(), free.pop()
            session.reset()
            if len(prompts[row]) > 1:
                out = session.forward_chain(prompts[row][:-1], hidden_layers=layers, logits=False)
                features[row].append(torch.cat(out.hidden, dim=-1).to(torch.bfloat16))  # [P - 1, F]
            running[row] = (session, prompts[row][-1])
        rows = list(running)
        outs = lm.forward_batch([BatchItem(running[r][0], [running[r][1]], hidden_layers=layers) for r in rows])
        for row, out in zip(rows, outs):
            features[row].append(torch.cat(out.hidden, dim=-1).to(torch.bfloat16))
            token = choose(row, out)
            if done(row):
                free.append(running.pop(row)[0])
            else:
                running[row] = (running[row][0], token)
    samples = []
    for row, prompt in enumerate(prompts):
        full = prompt + response[row]
        seen = torch.cat(features[row])[:len(full) - 1]  # every token but the last was run
        samples.append(Sample(prompt_ids[row], greedy[row], torch.tensor(full), len(prompt), seen,
                              torch.tensor(labels[row])))
    return samples


# Per model, not per id(model): a model without the kernel keeps no reference to itself here, so once it is
# freed its id may come back as another model's, which was then given the first one's answer (None).
_engines: "weakref.WeakKeyDictionary[torch.nn.Module, object]" = weakref.WeakKeyDictionary()


def native_forward(model):
    """The engine's forward over `model` where the native kernel runs it (bf16 on a CPU that has the kernel),
    built once per model; else None. On the Zen 5 it teacher-forces about twice as fast as Hugging Face's
    batched forward, and its features are the ones the drafter will be given."""
    from engine.models.fastlm import causal_lm

    if model not in _engines:
        first = next(model.parameters())
        native = first.dtype == torch.bfloat16 and first.device.type == "cpu"
        lm = causal_lm(model, "target") if native else None
        _engines[model] = lm if lm is not None and lm.forward_name == "native" else None
    return _engines[model]


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
    answers_per_prompt: int = 1  # answers after the first are sampled: more data from the same prompts
    engine_batch: int = 12  # answers decoded together where the engine's native forward generates

    def rows(self) -> list[dict]:
        """Every prompt once, then again for each extra (sampled) answer; chunk k is rows[k·size:(k+1)·size]."""
        extra = [dict(r, answer=k) for k in range(1, self.answers_per_prompt) for r in self.prompts]
        return self.prompts + extra

    def greedy(self, row: dict) -> bool:
        return not row.get("answer") and _greedy_row(row["id"], self.greedy_share)


def run_generation(model, tokenizer, plan: GenerationPlan, layers: tuple[int, ...], work: Path,
                   eos_ids: set[int], pad_id: int, log=print) -> int:
    """Generates chunk after chunk, skipping finished ones; returns the response tokens on disk."""
    rows = plan.rows()
    chunks = [rows[i:i + plan.chunk_size] for i in range(0, len(rows), plan.chunk_size)]
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
        generator = torch.Generator(model.device).manual_seed(plan.seed * 100_003 + index)
        ordered = sorted(chunk, key=lambda r: len(row_ids(tokenizer, r)))  # less padding per batch
        samples: list[Sample] = []
        start = time.time()
        lm = native_forward(model)
        if lm is not None:  # the engine's batched forward, continuous batching over the whole chunk
            samples = generate_in_engine(lm, [row_ids(tokenizer, r) for r in ordered], [r["id"] for r in ordered],
                                         [plan.greedy(r) for r in ordered], layers, plan.max_new_tokens,
                                         plan.temperature, eos_ids, generator, plan.engine_batch)
            ordered = []
        for b in range(0, len(ordered), plan.batch_size):
            if samples and plan.deadline and time.time() > plan.deadline:
                break  # out of time: the chunk keeps the answers already made
            batch = ordered[b:b + plan.batch_size]
            samples += generate_batch(
                model, [row_ids(tokenizer, r) for r in batch], [r["id"] for r in batch],
                [plan.greedy(r) for r in batch], layers, plan.max_new_tokens,
                plan.temperature, eos_ids, pad_id, generator)
        save_chunk(path, samples)
        new = sum(len(s.ids) - s.prompt_len for s in samples)
        total += new
        bar.update(new)
        log(f"chunk {index}: {len(samples)} answers, {new} tokens in {time.time() - start:.0f} s "
            f"({new / (time.time() - start):.0f} tok/s), {total} in all")
    bar.close()
    return total


def run_teacher_forcing(model, rows: list[tuple[int, bool, list[int], int]], layers: tuple[int, ...], work: Path,
                        pad_id: int, chunk_size: int = 96, batch_tokens: int = 4096, log=print) -> int:
    """Features and the target's labels for known sequences, chunk after chunk, skipping finished ones;
    returns the response tokens on disk. Batches hold rows of similar length, up to `batch_tokens` padded;
    where the native kernel runs, the engine's forward takes them one by one instead."""
    lm = native_forward(model)
    total = _tokens_on_disk(work)
    todo = [i for i in range(0, len(rows), chunk_size) if not chunk_path(work, i // chunk_size).exists()]
    bar = tqdm(total=sum(len(r[2]) for i in todo for r in rows[i:i + chunk_size]), desc="teacher forcing", unit="tok")
    for index in todo:
        started = time.time()
        chunk = sorted(rows[index:index + chunk_size], key=lambda r: len(r[2]))
        samples: list[Sample] = []
        while chunk:
            width = len(chunk[-1][2])
            take = max(1, min(len(chunk), batch_tokens // width))
            batch, chunk = chunk[-take:], chunk[:-take]
            samples += extract_in_engine(lm, batch, layers) if lm else extract(model, batch, layers, pad_id)
            bar.update(sum(len(r[2]) for r in batch))
        save_chunk(chunk_path(work, index // chunk_size), samples)
        tokens = sum(len(s.ids) for s in samples)
        total += sum(len(s.ids) - s.prompt_len for s in samples)
        log(f"teacher-forced {work.name}/chunk {index // chunk_size}: {len(samples)} rows, {tokens} tokens in "
            f"{time.time() - started:.0f} s ({tokens / (time.time() - started):.0f} tok/s)")
    bar.close()
    return total


MAGPIE_FIRST_ID = 1_000_000  # ids of self-written prompts: apart from the prompt set's


def write_prompts(model, tokenizer, count: int, path: Path, eos_ids: set[int], pad_id: int, batch_size: int = 64,
                  max_new_tokens: int = 64, seed: int = 0, log=print) -> list[dict]:
    """Prompts the target writes itself (Magpie, Xu et al. 2024): sampled continuations of its chat
    template's opening of a user turn, kept when finished (EOS) and new. Saved to `path` as JSON lines
    and reused from there, so a resumed run answers the same prompts. A model that rarely finishes
    a question within `max_new_tokens` yields fewer than `count` after a bounded number of batches."""
    if path.exists():
        return read_prompts(path)
    opening = _user_turn_opening(tokenizer)
    generator = torch.Generator(model.device).manual_seed(seed)
    seen: set[str] = set()
    rows: list[dict] = []
    bar = tqdm(total=count, desc="self-written prompts", unit="prompt")
    for _ in range(4 * -(-count // batch_size) + 4):
        if len(rows) >= count:
            break
        batch = generate_batch(model, [opening] * batch_size, [0] * batch_size, [False] * batch_size, (0,),
                               max_new_tokens, 1.0, eos_ids, pad_id, generator)
        for sample in batch:
            response = sample.ids[sample.prompt_len:].tolist()
            if not response or response[-1] not in eos_ids:
                continue  # cut off by the length limit: not a whole question
            text = tokenizer.decode(response, skip_special_tokens=True).strip()
            if len(text) >= 12 and text not in seen and len(rows) < count:
                seen.add(text)
                rows.append({"id": MAGPIE_FIRST_ID + len(rows), "kind": "self-written", "prompt": text})
                bar.update(1)
    bar.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    log(f"the target wrote {len(rows)} prompts into {path}")
    return rows


def _user_turn_opening(tokenizer) -> list[int]:
    """The ids of a chat up to where a user's message begins (the template's system prompt included)."""
    marker = "\x00MARK\x00"
    text = tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False,
                                         add_generation_prompt=False)
    return tokenizer(text[:text.index(marker)], add_special_tokens=False)["input_ids"]


def _greedy_row(prompt_id: int, share: float) -> bool:
    return (prompt_id * 40503) % 1000 < share * 1000


def _tokens_on_disk(work: Path) -> int:
    index = work / "chunks"
    if not index.exists():
        return 0
    return sum(len(d["ids"]) - d["prompt_len"] for p in sorted(index.glob("chunk-*.pt"))
               for d in torch.load(p, weights_only=True))
