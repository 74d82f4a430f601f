"""Suffix memory: earlier requests' text, indexed for the suffix drafter, bounded and optionally kept in a file.

SuffixDecoding's central idea is that a model's outputs repeat across requests
(agents re-asking, templates, the same question twice), so it drafts from a
suffix tree over earlier outputs as well as the current prompt. A `SuffixMemory`
is that store: every finished request adds its prompt and its output as one
document (prompt tokens, output tokens, then a separator no token matches, so
no match spans two requests), indexed by one suffix automaton that the
`suffix` drafter (and `hybrid`, through it) queries beside the request's own.

Bounded: a token budget. When a new document would exceed it, the oldest
documents go until the store is at three quarters of the budget and the
index is rebuilt from what is left; the slack makes each rebuild pay for a
quarter of the budget's worth of new tokens, so upkeep stays O(1) amortised
per token.

Scoped, because every draft is drawn on the page, rejected ones included, and
because a comparison must be fair: a `MemoryBank` holds one memory per policy
and parameters (a policy never drafts from another policy's runs of the same
prompt, so a bench or a compare pane is not flattered by the pane before it;
`engine.engine.memory_key`); the engine
keeps one bank for its process (the CLI, a bench run), and the server one per
client unless its operator shares one (app/settings.py). Runs take turns
(the engine's lock), so a memory never changes under a run that reads it.
"""

from __future__ import annotations

import json
import os
import threading
from collections import deque
from pathlib import Path

from engine.drafters.suffix_index import SEPARATOR, SuffixIndex
from engine.errors import LoadError

DEFAULT_BUDGET = 65_536  # tokens per policy: about 40 MB of index in Python, a few hundred answers
FILE_VERSION = 1
REFILL = 0.75  # after an eviction the store holds at most this share of its budget


class SuffixMemory:
    """Earlier requests' documents (prompt + output), oldest first, with their suffix index.

    >>> memory = SuffixMemory(budget=12)
    >>> memory.remember([1, 2], [3, 4]); memory.remember([5], [6, 7, 8])
    >>> memory.tokens, memory.index.size  # each document ends in a separator
    (10, 10)
    >>> memory.remember([9], [9]); list(memory.documents)  # over budget: the oldest go, down to 3/4 of it
    [[5, 6, 7, 8], [9, 9]]
    """

    def __init__(self, budget: int = DEFAULT_BUDGET):
        assert budget > 0, budget
        self.budget = budget
        self.documents: deque[list[int]] = deque()
        self.index = SuffixIndex()
        self.tokens = 0  # indexed tokens, separators included

    def remember(self, prompt: list[int], output: list[int]) -> None:
        """Adds one finished request; evicts the oldest where the budget would overflow."""
        document = list(prompt) + list(output)
        document = document[max(0, len(document) - (self.budget - 1)):]  # with its separator, within the budget
        if not output or not document:
            return  # a request that produced nothing teaches nothing
        self.documents.append(document)
        if self.tokens + len(document) + 1 <= self.budget:
            self._index(document)
            return
        kept, total = deque(), 0
        for earlier in reversed(self.documents):  # newest first, while they fit in the refill share
            if total + len(earlier) + 1 > max(REFILL * self.budget, len(document) + 1):
                break
            kept.appendleft(earlier)
            total += len(earlier) + 1
        self.documents, self.index, self.tokens = kept, SuffixIndex(), 0
        for earlier in kept:
            self._index(earlier)

    def _index(self, document: list[int]) -> None:
        self.index.extend_all(document)
        self.index.extend(SEPARATOR)
        self.tokens += len(document) + 1


class MemoryBank:
    """One suffix memory per policy (a key: its name and parameters), each with its own budget; optionally
    loaded from and saved to a file.

    The file (JSON) records the target it was drafted for: token ids of another tokenizer would be noise.
    """

    def __init__(self, budget: int = DEFAULT_BUDGET, target: str | None = None, path: Path | None = None):
        self.budget = budget
        self.target = target
        self.path = path
        self.memories: dict[str, SuffixMemory] = {}
        self._lock = threading.Lock()  # a file save must not see a half-added document
        if path is not None and path.exists():
            self._load(path)

    def for_policy(self, policy: str) -> SuffixMemory:
        if policy not in self.memories:
            self.memories[policy] = SuffixMemory(self.budget)
        return self.memories[policy]

    def remember(self, policy: str, prompt: list[int], output: list[int]) -> None:
        """Adds a finished request to its policy's memory, then saves the bank if it has a file."""
        with self._lock:
            self.for_policy(policy).remember(prompt, output)
            if self.path is not None:
                self._save(self.path)

    @property
    def tokens(self) -> int:
        return sum(memory.tokens for memory in self.memories.values())

    def _save(self, path: Path) -> None:
        """Writes the bank atomically: a crash mid-write leaves the previous file."""
        payload = {"version": FILE_VERSION, "target": self.target, "budget": self.budget,
                   "policies": {name: list(memory.documents) for name, memory in self.memories.items()}}
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(json.dumps(payload, separators=(",", ":")))
        os.replace(partial, path)

    def _load(self, path: Path) -> None:
        try:
            payload = json.loads(path.read_text())
            version, target, policies = payload["version"], payload.get("target"), payload["policies"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise LoadError(f"{path} is not a suffix memory file: {err}", field="suffix_memory") from None
        if version != FILE_VERSION:
            raise LoadError(f"{path} is a suffix memory file of version {version}; this specscope reads "
                            f"version {FILE_VERSION}", field="suffix_memory")
        if self.target is not None and target != self.target:
            raise LoadError(f"{path} remembers drafts of {target}, not of this target {self.target}: its token ids "
                            f"would not mean the same", field="suffix_memory")
        for name, documents in policies.items():
            memory = self.for_policy(name)
            for document in documents:
                memory.remember([], [int(token) for token in document])
