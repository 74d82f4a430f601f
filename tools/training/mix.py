"""A varied prompt set the target writes for itself: what a draft head must see to draft for anyone.

A head learns the target's answers to the prompts it is trained on; a head
trained on one template generator drafts well only for that generator. This
module builds a mix in the proportions of `SHARES`, every prompt new, none
from a benchmark:

- self-written: the target writes a request itself, steered to a task kind,
  a topic and sometimes a language (`TASKS`, `TOPICS`, `LANGUAGES`), half of
  them Magpie-style (a system message names the kind and topic and the model
  continues the chat template's opening of a user turn), half self-instruct
  style (the model is asked, as an assistant, to write such a request); some
  get a format or length constraint appended (`FORMATS`);
- code and maths: templated tasks over languages, tasks and random numbers;
- copy: the target writes a passage (an article, a letter, a recipe...) and
  the prompt asks to summarise, extract, quote, reformat or proofread it, so
  the answer copies from the context (what the suffix drafter and a head both
  meet in real use);
- multi-turn: a self-written request, the target's own greedy answer, then a
  follow-up (a generic one, or one the target writes as the user).

Every stage is saved as JSON lines under the work folder and reused, so an
interrupted build resumes. Rows are {"id", "kind", "prompt"} or, for
conversations, {"id", "kind", "messages"}; ids start at `MIX_FIRST_ID`, so the
same hash split (`is_held_out`) holds some out of training.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Callable

import torch

from tools.training.selfdistill import generate_batch, read_prompts

MIX_FIRST_ID = 2_000_000
SHARES = {"self-written": 0.40, "copy": 0.20, "multi-turn": 0.16, "code": 0.12, "maths": 0.12}

TASKS = {
    "explain": "asks for an explanation of how or why something works",
    "how-to": "asks for step-by-step instructions to do something",
    "advice": "asks for practical advice on a personal situation",
    "compare": "asks to compare two things and say which is better for what",
    "list": "asks for a list of ideas, examples or options",
    "story": "asks for a short story with a given character or setting",
    "poem": "asks for a poem or song lyrics",
    "email": "asks to write an email or a letter for a given purpose",
    "opinion": "asks for the pros and cons of something",
    "definition": "asks what a term means and for an example",
    "plan": "asks for a plan, a schedule or an itinerary",
    "trivia": "asks a factual question",
    "rewrite": "gives a sentence and asks to rewrite it in another style",
    "classify": "gives a few items and asks to sort them into groups",
    "brainstorm": "asks for names, titles or slogans",
    "roleplay": "asks the assistant to act as a character or an expert",
    "reasoning": "asks a riddle or a logic puzzle",
    "programming": "asks for help with a programming problem",
}
TOPICS = [
    "cooking", "gardening", "personal finance", "space exploration", "ancient Rome", "climate", "football",
    "chess", "photography", "job interviews", "learning a language", "sleep", "running", "dogs", "cats",
    "birds", "the ocean", "volcanoes", "electric cars", "trains", "airplanes", "smartphones", "social media",
    "music theory", "painting", "architecture", "medieval castles", "the human heart", "vaccines", "nutrition",
    "coffee", "tea", "baking bread", "camping", "mountains", "deserts", "rainforests", "recycling", "solar power",
    "batteries", "the internet", "databases", "machine learning", "spreadsheets", "small businesses", "marketing",
    "history of writing", "philosophy", "poetry", "film", "video games", "board games", "friendship", "parenting",
    "school", "university", "exams", "public speaking", "time management", "meditation", "first aid", "weather",
    "maps", "the moon", "dinosaurs", "bees", "mushrooms", "rivers", "bridges", "robots", "chemistry", "physics",
    "geometry", "statistics", "economics", "elections", "law", "museums", "fashion", "furniture", "moving house",
]
LANGUAGES = ["French", "Spanish", "German", "Italian", "Portuguese", "Dutch", "Chinese"]
FORMATS = [
    "Answer in a bulleted list.", "Answer in numbered steps.", "Put the answer in a table.", "Reply in JSON.",
    "Keep it under 50 words.", "Answer in one paragraph.", "Give a detailed answer.", "Use simple words.",
    "Use a formal tone.", "Make it funny.", "Start with a one-sentence summary.", "Answer in two sentences.",
]
FOLLOW_UPS = [
    "Can you make that shorter?", "Give me an example.", "Explain it to a ten-year-old.", "Now put it in a table.",
    "Can you explain the second point in more detail?", "Translate your answer into Spanish.",
    "Rewrite it in a more formal tone.", "What are the risks?", "Summarize your answer in one sentence.",
    "Can you give me three more?", "Why is that?", "Turn that into a checklist.", "What would you do differently?",
]
PASSAGE_GENRES = ["news article", "encyclopedia entry", "product description", "short story", "formal letter",
                  "set of meeting notes", "recipe", "set of instructions", "biography", "travel guide entry",
                  "company announcement", "school report"]
COPY_TASKS = [
    "Summarize the following text in three sentences, keeping the names and numbers as written.",
    "List every name, date and number in the text below.", "Copy out the sentences of this text that give facts.",
    "Rewrite the following text as a bulleted list, keeping the original wording.",
    "Fix any spelling mistakes in the following text and return the whole text.",
    "Turn the following text into a numbered list of steps or points, using the same words where possible.",
    "Answer using sentences quoted from the text: what is the main point of the text below?",
    "Give the following text a title, then repeat the text unchanged under it.",
    "Extract the key facts from the text below as 'fact: value' lines.",
    "Split the following text into short paragraphs and return it.",
    "Which sentence of the text below is the most important? Quote it, then explain why.",
    "Write a short summary of the text below, then list three quotes from it.",
]
CODE_LANGUAGES = ["Python", "JavaScript", "TypeScript", "Java", "C", "C++", "Go", "Rust", "Ruby", "PHP", "Bash",
                  "SQL", "Kotlin", "C#"]
CODE_TASKS = [
    "reverses a string", "checks whether a word is a palindrome", "prints FizzBuzz up to 100",
    "reads a CSV file and sums one column", "performs a binary search on a sorted list",
    "merges two sorted lists", "counts how often each word appears in a text", "validates an email address",
    "removes duplicates from a list while keeping the order", "computes a factorial recursively",
    "sorts a list of records by one field", "finds the largest number in a list", "converts Celsius to Fahrenheit",
    "checks whether a number is prime", "flattens a nested list", "computes the Fibonacci numbers up to n",
    "parses a date string and prints the weekday", "implements a stack with push and pop",
    "counts the vowels in a string", "returns the second largest element of an array",
]
CODE_ASKS = ["Write a {lang} function that {task}.", "How do I write a {lang} program that {task}?",
             "Show me {lang} code that {task}, with comments.", "Explain step by step a {lang} function that {task}.",
             "Write a {lang} function that {task}, and a few tests for it.",
             "What is the simplest way in {lang} to write a function that {task}?"]
NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivan", "Jade", "Kofi", "Lena", "Maya"]
ITEMS = ["apples", "pencils", "books", "tickets", "cupcakes", "marbles", "stamps", "bottles of water", "shirts"]


def maths_prompt(rng: random.Random) -> str:
    """A templated maths question with fresh numbers."""
    a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 999)
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    forms = [
        f"{name} buys {a} {item} at {b} dollars each. How much does {name} pay? Show your working.",
        f"What is {a} × {b} + {c}?", f"Solve for x: {a}x + {b} = {c}.", f"What is {a}% of {c}?",
        f"{name} has {c} {item}, gives away {a}, then buys {b} more. How many are left? Explain step by step.",
        f"Is {c} a prime number? Explain how you know.", f"What is the average of {a}, {b} and {c}?",
        f"A train travels {c} km in {a % 9 + 1} hours. What is its average speed?",
        f"Simplify the fraction {a * 2}/{b * 2}.", f"Convert {c} minutes into hours and minutes.",
        f"A rectangle is {a} cm long and {b} cm wide. What are its area and perimeter?",
        f"If a price of {c} euros rises by {a % 30 + 1}%, what is the new price?",
        f"Write {c} in binary and explain the method.", f"What is the greatest common divisor of {a} and {b}?",
        f"{name} saves {a} dollars a week. How many weeks until {name} has {c * 10} dollars?",
    ]
    return rng.choice(forms)


def code_prompt(rng: random.Random) -> str:
    return rng.choice(CODE_ASKS).format(lang=rng.choice(CODE_LANGUAGES), task=rng.choice(CODE_TASKS))


def steering(rng: random.Random) -> tuple[str, str, str | None]:
    """(task description, topic, language or None) for one self-written prompt."""
    kind = rng.choice(list(TASKS))
    topic = rng.choice(CODE_LANGUAGES) if kind == "programming" else rng.choice(TOPICS)
    language = rng.choice(LANGUAGES) if rng.random() < 0.12 else None
    return TASKS[kind], topic, language


def writer_input(tokenizer, rng: random.Random) -> list[int]:
    """The ids the target continues to write a request: Magpie with a steering system message, or asked as an
    assistant (self-instruct), in equal shares."""
    task, topic, language = steering(rng)
    in_language = f" Write it in {language}." if language else ""
    if rng.random() < 0.5:
        system = f"You are a person chatting with an AI assistant. Your message {task}, about {topic}.{in_language}"
        text = tokenizer.apply_chat_template([{"role": "system", "content": system},
                                              {"role": "user", "content": "\x00"}], tokenize=False)
        return tokenizer(text[:text.index("\x00")], add_special_tokens=False)["input_ids"]
    ask = (f"Write one message that a user might send to an AI assistant. The message {task}, about {topic}."
           f"{in_language} Write only the message itself.")
    return list(tokenizer.apply_chat_template([{"role": "user", "content": ask}], add_generation_prompt=True,
                                              return_dict=True)["input_ids"])


def clean_request(text: str) -> str | None:
    """The written request without labels and quotes; None if it is too short or too long to be one."""
    text = text.strip().strip('"').strip()
    for label in ("Message:", "User:", "Request:", "Question:"):
        if text.startswith(label):
            text = text[len(label):].strip().strip('"').strip()
    return text if 12 <= len(text) <= 800 else None


def with_constraint(prompt: str, rng: random.Random) -> str:
    return f"{prompt} {rng.choice(FORMATS)}" if rng.random() < 0.3 else prompt


class Writer:
    """Batched sampling from the target (no features kept): texts for the stages of the mix."""

    def __init__(self, model, tokenizer, eos_ids: set[int], pad_id: int, batch_size: int, seed: int, log=print):
        self.model, self.tokenizer = model, tokenizer
        self.eos_ids, self.pad_id, self.batch_size = eos_ids, pad_id, batch_size
        self.generator = torch.Generator(model.device).manual_seed(seed)
        self.log = log
        self.tokens = 0
        self.seconds = 0.0

    def write(self, inputs: list[list[int]], max_new_tokens: int, temperature: float,
              whole: bool = True) -> list[str | None]:
        """The completion of every input. Where it hit the length limit before EOS: None, or with `whole`
        off the text up to its last finished sentence (a passage or an answer is still one when cut)."""
        texts: list[str | None] = []
        for start in range(0, len(inputs), self.batch_size):
            batch = inputs[start:start + self.batch_size]
            began = time.time()
            greedy = [temperature == 0] * len(batch)
            samples = generate_batch(self.model, batch, [0] * len(batch), greedy, (0,), max_new_tokens,
                                     max(temperature, 1e-5), self.eos_ids, self.pad_id, self.generator)
            self.seconds += time.time() - began
            for sample in samples:
                response = sample.ids[sample.prompt_len:].tolist()
                self.tokens += len(response)
                finished = bool(response) and response[-1] in self.eos_ids
                text = self.tokenizer.decode(response, skip_special_tokens=True).strip()
                texts.append(text if finished else None if whole else _last_sentence_end(text))
        return texts

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def _last_sentence_end(text: str) -> str | None:
    """The text up to its last full stop, question or exclamation mark; None if it has none.

    >>> _last_sentence_end("One. Two! Thr")
    'One. Two!'
    """
    cut = max(text.rfind(mark) for mark in ".!?")
    return text[:cut + 1] if cut > 0 else None


def build_mix(writer: Writer, count: int, work: Path, seed: int = 0) -> list[dict]:
    """The mixed prompt set of `count` prompts, built (or resumed) under `work`; see the module docstring."""
    path = work / "prompts.jsonl"
    if path.exists():
        return read_prompts(path)
    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    wanted = {kind: round(share * count) for kind, share in SHARES.items()}
    self_written = _stage(work / "self-written.jsonl",
                          lambda: _self_written(writer, wanted["self-written"] + wanted["multi-turn"], rng))
    rows = [{"kind": "self-written", "prompt": with_constraint(p, rng)}
            for p in self_written[:wanted["self-written"]]]
    rows += [{"kind": "code", "prompt": with_constraint(code_prompt(rng), rng)} for _ in range(wanted["code"])]
    rows += [{"kind": "maths", "prompt": maths_prompt(rng)} for _ in range(wanted["maths"])]
    rows += _stage(work / "copy.jsonl", lambda: _copy_tasks(writer, wanted["copy"], rng))
    rows += _stage(work / "multi-turn.jsonl",
                   lambda: _conversations(writer, self_written[wanted["self-written"]:], rng))
    rng.shuffle(rows)
    rows = [{"id": MIX_FIRST_ID + i, **row} for i, row in enumerate(rows)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    writer.log(f"mix: {len(rows)} prompts in {path} ({_counts(rows)}); writing ran at {writer.tokens_per_s:.0f} "
               f"tokens/s ({writer.tokens} tokens)")
    return rows


def _stage(path: Path, build: Callable[[], list]) -> list:
    """A stage's output, read back if an earlier run saved it."""
    if path.exists():
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = build()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def _self_written(writer: Writer, count: int, rng: random.Random) -> list[str]:
    """Requests the target writes, steered; kept when finished, of a sensible length, and new."""
    seen: set[str] = set()
    out: list[str] = []
    for _ in range(8):  # a bounded number of rounds: a model that rarely finishes a request yields fewer
        if len(out) >= count:
            break
        need = int((count - len(out)) * 1.3) + 4
        for text in writer.write([writer_input(writer.tokenizer, rng) for _ in range(need)], 96, 0.8):
            request = clean_request(text) if text else None
            if request and request not in seen and len(out) < count:
                seen.add(request)
                out.append(request)
    return out


def _copy_tasks(writer: Writer, count: int, rng: random.Random) -> list[dict]:
    """The target writes passages; each becomes a task whose answer copies from it."""
    asks = []
    for _ in range(count):
        words = rng.choice([80, 120, 180, 250])
        asks.append(f"Write a {rng.choice(PASSAGE_GENRES)} of about {words} words about {rng.choice(TOPICS)}. "
                    "Give names, places and numbers.")
    inputs = [_chat(writer.tokenizer, [{"role": "user", "content": a}]) for a in asks]
    passages = writer.write(inputs, 320, 0.7, whole=False)
    return [{"kind": "copy", "prompt": f"{rng.choice(COPY_TASKS)}\n\n{p}"} for p in passages
            if p and len(p) >= 200]


def _conversations(writer: Writer, requests: list[str], rng: random.Random) -> list[dict]:
    """A request, the target's greedy answer, and a follow-up: generic, or written by the target as the user."""
    inputs = [_chat(writer.tokenizer, [{"role": "user", "content": r}]) for r in requests]
    answers = writer.write(inputs, 192, 0.0, whole=False)
    chats = [[{"role": "user", "content": r}, {"role": "assistant", "content": a}]
             for r, a in zip(requests, answers) if a]
    own = [c for c in chats if rng.random() < 0.5]
    written = writer.write([_user_turn(writer.tokenizer, c) for c in own], 64, 1.0) if own else []
    follow = {id(c): clean_request(t) if t else None for c, t in zip(own, written)}
    rows = []
    for chat in chats:
        turn = follow.get(id(chat)) or rng.choice(FOLLOW_UPS)
        rows.append({"kind": "multi-turn", "messages": chat + [{"role": "user", "content": turn}]})
    return rows


def _chat(tokenizer, messages: list[dict]) -> list[int]:
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"])


def _user_turn(tokenizer, messages: list[dict]) -> list[int]:
    """The ids of a conversation up to where the user's next message begins."""
    text = tokenizer.apply_chat_template(messages + [{"role": "user", "content": "\x00"}], tokenize=False)
    return tokenizer(text[:text.index("\x00")], add_special_tokens=False)["input_ids"]


def _counts(rows: list[dict]) -> str:
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["kind"]] = counts.get(row["kind"], 0) + 1
    return ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items()))
