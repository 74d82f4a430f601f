"""`specscope train-head` end to end on an in-code target, and the objective's agreement with the drafter."""

from __future__ import annotations

import json

import torch

from engine.drafters.eagle_head import EagleHeadDrafter
from engine.models.head import load_head
from engine.sampling import SamplingParams
from engine.tree import DraftTree
from tiny_models import TINY_EOS, tiny_llama
from tools.train_head import TrainHeadOptions, export_ids, model_card, rebuild_from_ids, train_head
from tools.training.objective import make_batch, unroll
from tools.training.selfdistill import (MAGPIE_FIRST_ID, GenerationPlan, Sample, extract, is_held_out,
                                         load_chunks)
from tools.training.selfdistill import write_prompts as self_written_prompts
from tools.training.trainer import LoopOptions, new_head, target_to_draft_map

LAYERS = 6


def write_prompts(path, count: int = 40) -> None:
    with path.open("w") as f:
        for i in range(count):
            f.write(json.dumps({"id": i, "kind": "test", "prompt": f"prompt number {i} about {'xyz'[i % 3]}"}) + "\n")


def tiny_options(tmp_path, steps: int = 6) -> TrainHeadOptions:
    prompts = tmp_path / "prompts.jsonl"
    write_prompts(prompts)
    return TrainHeadOptions(
        out=tmp_path / "head", work=tmp_path / "work", prompts=prompts, held_out=0.2, eval_prompts=4,
        max_tokens=150, chunk_size=8, gen_batch=8, max_new_tokens=12, draft_vocab=128,
        loop=LoopOptions(ttt_steps=2, batch_sequences=4, max_steps=steps, checkpoint_every=2, warmup_steps=2),
        eval_depth=3, command="specscope train-head --test")


def test_train_head_runs_end_to_end_and_the_head_loads_as_a_drafter(tmp_path):
    target = tiny_llama(0, layers=LAYERS)
    options = tiny_options(tmp_path)
    metrics = train_head(target, None, options, {TINY_EOS}, TINY_EOS, log=lambda *a: None)
    assert metrics["training"]["steps"] == 6
    assert len(metrics["heldout"]["top1_by_depth"]) == 3
    assert 0 < metrics["heldout_vocab_coverage"] <= 1
    assert metrics["data"]["train_response_tokens"] >= 150
    card = (options.out / "README.md").read_text()
    assert "specscope train-head --test" in card and "top-1 agreement" in card
    config = json.loads((options.out / "config.json").read_text())
    assert config["draft_vocab_size"] == 128 and config["architectures"] == ["LlamaForCausalLMEagle3"]
    drafter = EagleHeadDrafter.from_dir(options.out, target)
    assert drafter.feature_layers == (2, 3, 3)
    train_ids = {s.prompt_id for s in load_chunks(options.work / "train")}
    held_ids = {s.prompt_id for s in load_chunks(options.work / "heldout")}
    assert not train_ids & held_ids
    assert all(is_held_out(i, 0.2) for i in held_ids) and not any(is_held_out(i, 0.2) for i in train_ids)


def test_train_head_resumes_without_regenerating_or_retraining(tmp_path):
    target = tiny_llama(0, layers=LAYERS)
    options = tiny_options(tmp_path, steps=4)
    train_head(target, None, options, {TINY_EOS}, TINY_EOS, log=lambda *a: None)
    chunks = sorted((options.work / "train" / "chunks").glob("*.pt"))
    stamps = [c.stat().st_mtime_ns for c in chunks]
    lines = []
    metrics = train_head(target, None, options, {TINY_EOS}, TINY_EOS, log=lines.append)
    assert [c.stat().st_mtime_ns for c in chunks] == stamps
    assert any("resumed" in line for line in lines)
    assert metrics["training"]["steps"] == 4


def test_captured_features_match_a_teacher_forced_pass(tmp_path):
    target = tiny_llama(0, layers=LAYERS)
    options = tiny_options(tmp_path, steps=1)
    train_head(target, None, options, {TINY_EOS}, TINY_EOS, log=lambda *a: None)
    samples = load_chunks(options.work / "train")[:4]
    again = extract(target, [(s.prompt_id, s.greedy, s.ids.tolist(), s.prompt_len) for s in samples],
                    (2, 3, 3), TINY_EOS)
    for a, b in zip(samples, again):
        assert torch.allclose(a.features.float(), b.features.float(), atol=0.05, rtol=0.02)
        assert (a.labels == b.labels).float().mean() > 0.9  # bf16 storage may flip near-ties


def test_exported_ids_rebuild_the_same_data_without_generating(tmp_path):
    target = tiny_llama(0, layers=LAYERS)
    options = tiny_options(tmp_path, steps=1)
    train_head(target, None, options, {TINY_EOS}, TINY_EOS, log=lambda *a: None)
    train, held = load_chunks(options.work / "train"), load_chunks(options.work / "heldout")
    export_ids(train, held, tmp_path / "ids.npz")
    rebuild_from_ids(target, tmp_path / "ids.npz", tmp_path / "again", (2, 3, 3), TINY_EOS, log=lambda *a: None)
    for split, originals in (("train", train), ("heldout", held)):
        rebuilt = load_chunks(tmp_path / "again" / split)
        assert [s.ids.tolist() for s in rebuilt] == [s.ids.tolist() for s in originals]
        assert [s.prompt_id for s in rebuilt] == [s.prompt_id for s in originals]
        agree = torch.cat([a.labels == b.labels for a, b in zip(rebuilt, originals)]).float().mean()
        assert agree > 0.9


def test_unroll_equals_the_drafter_on_a_greedy_chain():
    """Training and inference see the same head: step k of the unroll at pair i is the drafter's
    depth-k node in a tree rooted at token i + 1, when the chain's drafts are the data tokens."""
    torch.manual_seed(0)
    target = tiny_llama(0, layers=LAYERS)
    ids = torch.randint(0, 250, (12,))
    with torch.no_grad():
        out = target(input_ids=ids[None], output_hidden_states=True)
    layers = (2, 3, 3)
    feats = torch.cat([out.hidden_states[i][0] for i in layers], dim=-1)  # [T, F]
    argmax = out.logits[0].argmax(-1)
    prompt_len = 5
    sample = Sample(0, True, ids, prompt_len, feats[:-1], argmax[prompt_len - 1:-1])
    vocab = torch.arange(260)
    head = new_head(target, vocab, None, layers, seed=0)
    for p in head.midlayer.parameters():
        torch.nn.init.normal_(p, std=0.1)
    with torch.no_grad():
        result = unroll(head, make_batch([sample], target_to_draft_map(vocab, 260)), steps=3, keep_logits=True)
    root = 6  # context ids[:7], root ids[6]: pair i = 5
    drafter = EagleHeadDrafter(head)
    drafter.start(ids[:root + 1].tolist(), feats[:root])
    tree = DraftTree.with_root(int(ids[root]))
    node = 0
    for k in range(3):
        logits = drafter.frontier_logits(tree, [node])[0]
        assert torch.allclose(logits, result.logits[k][0, root - 1], atol=1e-4), k
        node = tree.add(node, int(ids[root + 1 + k]), 0.5, 0.5)
    drafter.propose(tree, [node], 1, False, SamplingParams(), torch.Generator())


def test_extra_answers_per_prompt_are_sampled_and_follow_the_first_pass():
    plan = GenerationPlan(prompts=[{"id": i, "prompt": "p"} for i in range(5)], answers_per_prompt=3, greedy_share=1.0)
    rows = plan.rows()
    assert [r["id"] for r in rows] == list(range(5)) * 3
    assert [plan.greedy(r) for r in rows] == [True] * 5 + [False] * 10


def test_self_written_prompts_are_whole_new_questions_and_are_reused(tmp_path):
    from test_engine_behaviour import word_tokenizer

    words = ["<unk>", "<eos>", "<user>", "<bot>"] + [f"w{i}" for i in range(256)]  # the tiny vocabulary: 260
    tokenizer = word_tokenizer(words)
    tokenizer.chat_template = ("{% for m in messages %}<user> {{ m['content'] }} <eos>{% endfor %}"
                               "{% if add_generation_prompt %}<bot>{% endif %}")
    target = tiny_llama(0, layers=LAYERS)
    path = tmp_path / "prompts.jsonl"
    rows = self_written_prompts(target, tokenizer, 5, path, {1}, 1, batch_size=16, max_new_tokens=40, log=lambda *a: None)
    assert rows and len(rows) <= 5
    assert [r["id"] for r in rows] == list(range(MAGPIE_FIRST_ID, MAGPIE_FIRST_ID + len(rows)))
    assert len({r["prompt"] for r in rows}) == len(rows) and all("<eos>" not in r["prompt"] for r in rows)
    assert self_written_prompts(target, tokenizer, 5, path, {1}, 1, log=lambda *a: None) == rows


def trained_metrics(draft_vocab: int = 16384) -> dict:
    """metrics.json as training writes it, in brief."""
    return {"command": "specscope train-head --out x", "draft_vocab_size": draft_vocab, "heldout_vocab_coverage": 0.99,
            "data": {"train_answers": 10, "train_prompts": 10, "train_response_tokens": 1000,
                     "train_greedy_answers": 6, "heldout_answers": 2, "heldout_response_tokens": 200,
                     "heldout_share_of_prompts": 0.05},
            "training": {"steps": 5, "epochs": 1.0, "wall_s": 60.0, "final_loss": 2.0, "final_loss_by_step": [1.0],
                         "ttt_steps": 1, "step_decay": 0.8, "lr": 1e-3, "weight_decay": 0.01, "batch_sequences": 4,
                         "seed": 0},
            "heldout": {"top1_by_depth": [0.6, 0.4], "chain_accept_by_depth": [0.6, 0.5], "tau_chain": 1.9,
                        "tau_tree": {4: 2.5}, "positions": 100, "depth": 2}}


def test_model_card_lists_acceptance_by_depth():
    card = model_card(trained_metrics())
    assert "| 1 | 0.600 | 0.600 |" in card and "top-4 tree τ = 2.50" in card


def chat_tokenizer():
    from test_engine_behaviour import word_tokenizer

    words = ["<unk>", "<eos>", "<user>", "<bot>"] + [f"w{i}" for i in range(256)]  # the tiny vocabulary: 260
    tokenizer = word_tokenizer(words)
    tokenizer.chat_template = ("{% for m in messages %}<{{ 'bot' if m['role'] == 'assistant' else 'user' }}> "
                               "{{ m['content'] }} <eos>{% endfor %}{% if add_generation_prompt %}<bot>{% endif %}")
    return tokenizer


def test_the_mix_covers_every_kind_resumes_and_conversations_end_with_a_user_turn(tmp_path):
    from tools.training.mix import MIX_FIRST_ID, Writer, build_mix

    target = tiny_llama(0, layers=LAYERS)
    writer = Writer(target, chat_tokenizer(), {1}, 1, batch_size=16, seed=0, log=lambda *a: None)
    rows = build_mix(writer, 30, tmp_path / "mix")
    kinds = {r["kind"] for r in rows}
    assert {"code", "maths"} <= kinds and kinds <= {"self-written", "copy", "multi-turn", "code", "maths"}
    assert sorted(r["id"] for r in rows) == list(range(MIX_FIRST_ID, MIX_FIRST_ID + len(rows)))
    for row in rows:
        assert ("prompt" in row) != ("messages" in row)
        if "messages" in row:
            assert [m["role"] for m in row["messages"]] == ["user", "assistant", "user"]
    assert writer.tokens > 0 and writer.tokens_per_s > 0
    assert build_mix(writer, 30, tmp_path / "mix") == rows  # resumed from disk, nothing written again


def test_a_trained_head_is_measured_on_benchmark_answers_it_never_saw(tmp_path):
    from tools.train_head import evaluate_existing

    target = tiny_llama(0, layers=LAYERS)
    options = tiny_options(tmp_path)
    bench = tmp_path / "bench.jsonl"
    bench.write_text("".join(json.dumps({"question_id": i, "category": "c", "turns": [f"question {i}", "again"]})
                             + "\n" for i in range(3)))
    options.eval_benches = (bench,)
    metrics = train_head(target, None, options, {TINY_EOS}, TINY_EOS, log=lambda *a: None)
    assert set(metrics["evaluation"]) == {"held-out", "bench"}
    assert "| bench |" in (options.out / "README.md").read_text()
    train_ids = {s.prompt_id for s in load_chunks(options.work / "train")}
    bench_ids = {s.prompt_id for s in load_chunks(options.work / "eval-bench")}
    assert len(bench_ids) == 3 and not train_ids & bench_ids
    options.out = tmp_path / "evaluation"
    results = evaluate_existing(target, None, tmp_path / "head", options, {TINY_EOS}, TINY_EOS, log=lambda *a: None)
    assert results["bench"].top1 == metrics["evaluation"]["bench"]["top1"]
    assert "| bench |" in (tmp_path / "evaluation" / "evaluation.md").read_text()


def test_a_continued_head_is_measured_beside_the_head_it_started_from(tmp_path):
    target = tiny_llama(0, layers=LAYERS)
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    first = tiny_options(tmp_path / "first")
    train_head(target, None, first, {TINY_EOS}, TINY_EOS, log=lambda *a: None)
    options = tiny_options(tmp_path / "second", steps=4)
    options.init = first.out
    metrics = train_head(target, None, options, {TINY_EOS}, TINY_EOS, log=lambda *a: None)
    before, after = metrics["compared"]["before"], metrics["compared"]["this head"]
    assert set(before) == set(after) == {"held-out"}
    assert before["held-out"]["positions"] == after["held-out"]["positions"] > 0  # the same positions for both
    card = (options.out / "README.md").read_text()
    assert "beside the one it continued from" in card and "| held-out | before |" in card
    assert "| held-out | this head |" in card


def test_the_kernel_forward_of_a_freed_model_is_not_given_to_a_model_that_reuses_its_id():
    """native_forward once kept its answers by id(model): a float32 model's None outlived the model, and a bf16
    model born at the same address was told it had no kernel (CI, Dec 3). Answers now die with their model."""
    import gc

    from tools.training import selfdistill

    model = tiny_llama(0, hidden=128, layers=LAYERS)  # float32: no kernel forward
    assert selfdistill.native_forward(model) is None
    assert model in selfdistill._engines
    before = len(selfdistill._engines)
    del model
    gc.collect()
    assert len(selfdistill._engines) == before - 1


def test_answers_decoded_in_the_engines_batch_are_bit_for_bit_its_teacher_forced_pass():
    """Where the native kernel runs (bf16 on this CPU), self-distillation decodes up to 12 answers together
    through the engine's batched forward, a finished answer's place taken by the next prompt: each answer's
    tokens are its greedy labels, and its features and labels are those of one teacher-forced pass over it."""
    import pytest

    from engine.models import native
    from tools.training.selfdistill import extract_in_engine, generate_in_engine, native_forward

    target = tiny_llama(0, hidden=128, layers=LAYERS).to(torch.bfloat16)
    try:
        native.kernel()
    except native.NativeUnavailable as error:
        pytest.skip(f"the native kernel does not run here: {error}")
    lm = native_forward(target)
    assert lm is not None
    prompts = [[(7 * i + j) % 200 + 1 for j in range(3 + i % 5)] for i in range(7)]
    greedy = [True] * 7
    alone = generate_in_engine(lm, prompts, list(range(7)), greedy, (2, 3, 3), 9, 0.8, {TINY_EOS},
                               torch.Generator(), batch_size=1)
    together = generate_in_engine(lm, prompts, list(range(7)), greedy, (2, 3, 3), 9, 0.8, {TINY_EOS},
                                  torch.Generator(), batch_size=3)
    forced = extract_in_engine(lm, [(s.prompt_id, True, s.ids.tolist(), s.prompt_len) for s in together], (2, 3, 3))
    for a, b, c in zip(alone, together, forced):
        assert torch.equal(a.ids, b.ids) and torch.equal(b.labels, b.ids[b.prompt_len:])
        assert torch.equal(b.features, c.features) and torch.equal(b.labels, c.labels)
