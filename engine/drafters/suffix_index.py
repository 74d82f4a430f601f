"""`SuffixIndex`: an online suffix automaton of a token sequence with occurrence counts, the suffix drafter's index.

A text's suffix automaton has one state per class of substrings with the same end
positions; following a token from the state of a matched string reaches the state
of the extended one, so the longest earlier match of a growing text, and what
followed it, are found a token at a time. The construction is the textbook
online one (amortised O(1) states and transitions per token).

Counts saturate at COUNT_CAP occurrences: the counting walk up the suffix links
stops at the first saturated state (every state above it holds a shorter,
hence at least as frequent, string): each state is raised at most COUNT_CAP
times, so an update costs amortised O(COUNT_CAP), a constant, even on repetitive
text, where the chain of suffix links grows with the text (one repeated token:
the unsaturated walk is as long as the text).
Only ratios between followers seen more than COUNT_CAP times lose precision.
"""

from __future__ import annotations

SEPARATOR = -1  # ends a document in a memory's index: no real token matches it, so no match spans two requests
COUNT_CAP = 64  # occurrences counted per string; past it a count stays at the cap


class SuffixIndex:
    """An online suffix automaton of a token sequence, with occurrence counts.

    Every state is a class of substrings with the same end positions; `count[s]` is how
    many times they occur, and a transition s --t--> s' exists iff some occurrence is
    followed by t, s' holding the extended strings (so `count[s']` occurrences of them,
    up to COUNT_CAP). Appending a token costs amortised O(1) to build and to count.

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
        # Every suffix of the text ends here once more. A saturated state's suffix links lead to
        # shorter strings, at least as frequent, so saturated too: the walk stops there. Each state
        # is raised at most COUNT_CAP times, so the walks cost O(COUNT_CAP) per token amortised.
        while state > 0 and self.count[state] < COUNT_CAP:
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
        while state > 0:
            followers = {t: self.count[s] for t, s in self.next[state].items() if t != SEPARATOR}
            if followers:
                return length, followers
            state = self.link[state]
            length = self.length[state]
        return 0, {}
