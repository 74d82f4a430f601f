"""`suffix`: model-free drafting from the longest earlier match of the text, in the spirit of SuffixDecoding.

The prompt and the output so far are indexed by a suffix automaton (`SuffixIndex`),
extended by every committed token. For a tree node, the text up to it (the context
and the path from the root) is matched against the index: the longest suffix of it
that occurred before *and was followed by something* is the node's match, of length
L, and the tokens that followed its occurrences are the node's children, each with
its empirical frequency. Following a child extends the match by one token, so a
copied passage yields a chain as deep as the copy, one layer per token, at no model
forward (δ counts none of it).

A frequency is not an acceptance probability: one earlier occurrence gives
frequency 1 whether the match is one token long or forty. So q = trust(L) ×
frequency, where trust(L) is the share of this drafter's candidates the target has
accepted at that match length in this request (a Beta prior whose mean rises with L,
buckets 1, 2–3, 4–7, 8–15, 16–31, 32+): long matches earn deep paths in a budgeted
tree because copies of that length were accepted, short ones stay modest.

Optionally the drafter also keeps a bounded store of earlier outputs of the same
engine (`history_tokens`), a second index queried beside the request's: the longer
match wins. It is off by default: a benchmark that runs one prompt through several
policies would otherwise draft later policies from earlier ones' outputs.
"""

from __future__ import annotations

from collections import deque

import torch

from engine.drafters.base import Drafter, Proposal
from engine.sampling import SamplingParams
from engine.tree import DraftTree

SEPARATOR = -1  # ends an output in the history index: no real token matches it, so no match spans two outputs
BUCKET_FLOORS = (1, 2, 4, 8, 16, 32)  # match lengths at which trust buckets begin
# Prior acceptance of a candidate in each bucket: how often the most frequent follower was the target's next
# token in 400 of the target's greedy answers (the shipped head's selfdistill-ids.npz): 0.24, 0.59, 0.77, 0.91,
# 0.92, 0.99 by bucket, rounded down where few matches were that long.
PRIOR_TRUST = (0.25, 0.55, 0.75, 0.9, 0.92, 0.95)
PRIOR_WEIGHT = 6.0  # pseudo-candidates behind each prior


class SuffixIndex:
    """An online suffix automaton of a token sequence, with occurrence counts.

    Every state is a class of substrings with the same end positions; `count[s]` is how
    many times they occur, and a transition s --t--> s' exists iff some occurrence is
    followed by t, s' holding the extended strings (so `count[s']` occurrences of them).
    Appending a token costs amortised O(1) to build and O(suffix-link chain) to count.

    >>> index = SuffixIndex(); index.extend_all([1, 2, 3, 1, 2, 4, 1, 2])
    >>> length, followers = index.followers(*index.end())
    >>> length, followers  # "1 2" was followed by 3 once and by 4 once
    (2, {3: 1, 4: 1})
    """

    def __init__(self) -> None:
        self.length = [0]  # longest string of each state
        self.link = [-1]  # suffix link: the state of the longest shorter suffix in another class
        self.next: list[dict[int, int]] = [{}]
        self.count = [0]
        self.last = 0  # the state of the whole text
        self.size = 0  # tokens indexed

    def extend_all(self, tokens: list[int]) -> None:
        for token in tokens:
            self.extend(token)

    def extend(self, token: int) -> None:
        """Appends one token (the textbook construction), then counts the new end position."""
        cur = self._new_state(self.length[self.last] + 1, 0, {}, 0)
        p = self.last
        while p != -1 and token not in self.next[p]:
            self.next[p][token] = cur
            p = self.link[p]
        if p != -1:
            q = self.next[p][token]
            if self.length[p] + 1 == self.length[q]:
                self.link[cur] = q
            else:
                clone = self._new_state(self.length[p] + 1, self.link[q], dict(self.next[q]), self.count[q])
                while p != -1 and self.next[p].get(token) == q:
                    self.next[p][token] = clone
                    p = self.link[p]
                self.link[q] = self.link[cur] = clone
        self.last = cur
        self.size += 1
        state = cur
        while state > 0:  # every suffix of the text ends here once more
            self.count[state] += 1
            state = self.link[state]

    def _new_state(self, length: int, link: int, transitions: dict[int, int], count: int) -> int:
        self.length.append(length)
        self.link.append(link)
        self.next.append(transitions)
        self.count.append(count)
        return len(self.length) - 1

    def end(self) -> tuple[int, int]:
        """(state, matched length) of the whole text: where a query that continues the text starts."""
        return self.last, self.size

    def step(self, state: int, length: int, token: int) -> tuple[int, int]:
        """The longest suffix of (matched text + token) that occurs: its state and length."""
        while state > 0 and token not in self.next[state]:
            state = self.link[state]
            length = self.length[state]
        if token in self.next[state]:
            return self.next[state][token], length + 1
        return 0, 0

    def followers(self, state: int, length: int) -> tuple[int, dict[int, int]]:
        """The longest suffix of the match that was followed by something: its length and
        {next token: occurrences}. (0, {}) when only the empty match is left."""
        while state > 0 and not self.next[state]:
            state = self.link[state]
            length = self.length[state]
        if state <= 0:
            return 0, {}
        return length, {t: self.count[s] for t, s in self.next[state].items() if t != SEPARATOR}


class TrustByLength:
    """Accepted share of evaluated candidates per match-length bucket, with a prior rising with length.

    >>> trust = TrustByLength(); round(trust(1), 2), round(trust(40), 2)
    (0.25, 0.95)
    >>> trust.record(40, accepted=False); round(trust(40), 2)  # (0.95·6 + 0) / (6 + 1)
    0.81
    """

    def __init__(self) -> None:
        self.tried = [0] * len(BUCKET_FLOORS)
        self.accepted = [0] * len(BUCKET_FLOORS)

    @staticmethod
    def bucket(length: int) -> int:
        return max(b for b, floor in enumerate(BUCKET_FLOORS) if length >= floor)

    def __call__(self, length: int) -> float:
        b = self.bucket(length)
        return (self.accepted[b] + PRIOR_WEIGHT * PRIOR_TRUST[b]) / (self.tried[b] + PRIOR_WEIGHT)

    def record(self, length: int, accepted: bool) -> None:
        b = self.bucket(length)
        self.tried[b] += 1
        self.accepted[b] += accepted


class SuffixDrafter(Drafter):
    name = "suffix"

    def __init__(self, history_tokens: int = 0):
        super().__init__()
        self.history_tokens = history_tokens
        self.history = SuffixIndex()
        self.outputs: deque[list[int]] = deque()  # earlier outputs in the history index, oldest first
        self.index = SuffixIndex()
        self.tokens: list[int] = []  # the request's context: prompt, then every emitted token
        self.prompt_len = 0
        self.trust = TrustByLength()
        self._states: dict[int, tuple[tuple[int, int], ...]] = {}  # tree node -> (state, length) per index
        self._history_end = (0, 0)  # the request's text matched in the history index

    @property
    def indexes(self) -> tuple[SuffixIndex, ...]:
        return (self.index, self.history) if self.history_tokens else (self.index,)

    def start(self, context: list[int], features: torch.Tensor | None = None) -> None:
        if self.history_tokens and len(self.tokens) > self.prompt_len:
            self._remember(self.tokens[self.prompt_len:])
        self.index = SuffixIndex()
        self.index.extend_all(context)
        self.tokens = list(context)
        self._history_end = self._walk_history((0, 0), context)
        self.prompt_len = len(context)
        self.trust = TrustByLength()
        self._states = {}

    def propose(self, tree: DraftTree, frontier: list[int], k: int, sample: bool,
                sampling: SamplingParams, generator: torch.Generator) -> list[Proposal]:
        """The k most frequent followers of each node's match; nodes without a match get none.
        Children are chosen deterministically even when sampling (a point mass is lossless)."""
        proposals = []
        for node in frontier:
            length, followers = self.match(tree, node)
            if not followers:
                continue
            best = sorted(followers.items(), key=lambda item: (-item[1], item[0]))[:max(k, 0)]
            total = sum(followers.values())
            trust = self.trust(length)
            proposals.append(Proposal(node=node, token=[t for t, _ in best], q=[trust * c / total for _, c in best],
                                      source=self.name))
        return proposals

    def free_proposals(self, tree: DraftTree, frontier: list[int], k: int) -> list[Proposal]:
        """Every proposal is free: no model runs."""
        return self.propose(tree, frontier, k, False, SamplingParams(), torch.Generator())

    def match(self, tree: DraftTree, node: int) -> tuple[int, dict[int, int]]:
        """The node's match length and its followers {token: occurrences}: the longest over the indexes."""
        best: tuple[int, dict[int, int]] = (0, {})
        for index, (state, length) in zip(self.indexes, self._state(tree, node)):
            found = index.followers(state, length)
            if found[0] > best[0]:
                best = found
        return best

    def _state(self, tree: DraftTree, node: int) -> tuple[tuple[int, int], ...]:
        """Each index's (state, length) for the text up to `node`, walked from the nearest known ancestor."""
        if node in self._states:
            return self._states[node]
        if node == 0:
            states = (self.index.end(), self._history_end)[:len(self.indexes)]
        else:
            token = tree.token[node]
            states = tuple(index.step(state, length, token)
                           for index, (state, length) in zip(self.indexes, self._state(tree, tree.parent[node])))
        self._states[node] = states
        return states

    def commit(self, tree: DraftTree, accepted_path: list[int], emitted: list[int],
               features: torch.Tensor | None = None) -> None:
        self._states = {}  # the verified tree may be reindexed from the drafted one: walk it afresh
        self.learn(tree, accepted_path)
        self.index.extend_all(emitted)
        self.tokens.extend(emitted)
        self._history_end = self._walk_history(self._history_end, emitted)
        self._states = {}

    def _walk_history(self, state: tuple[int, int], tokens: list[int]) -> tuple[int, int]:
        if not self.history_tokens:
            return state
        for token in tokens:
            state = self.history.step(*state, token)
        return state

    def learn(self, tree: DraftTree, accepted_path: list[int]) -> None:
        """Counts this drafter's candidates the target evaluated (their parent was accepted), by match length."""
        on_path = set(accepted_path)
        for child in range(1, len(tree)):
            parent = tree.parent[child]
            if parent in on_path and self.name in tree.source[child].split("+"):
                self.trust.record(self.match(tree, parent)[0], child in on_path)

    def _remember(self, output: list[int]) -> None:
        """Adds a finished output to the bounded history, rebuilding the index when the oldest must go."""
        self.outputs.append(output[-(self.history_tokens - 1):])
        if sum(len(o) + 1 for o in self.outputs) > self.history_tokens:
            while sum(len(o) + 1 for o in self.outputs) > self.history_tokens:
                self.outputs.popleft()
            self.history = SuffixIndex()
            for earlier in self.outputs:
                self.history.extend_all(earlier + [SEPARATOR])
        else:
            self.history.extend_all(self.outputs[-1] + [SEPARATOR])
