"""The suffix drafter: its index on hand-checkable strings, its proposals and trust, and deep copies in the engine."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch

from engine.costs import CostTable
from engine.drafters.eagle_head import EagleHeadDrafter
from engine.drafters.hybrid import HybridDrafter
from engine.drafters.suffix import PRIOR_TRUST, SuffixDrafter, TrustByLength
from engine.drafters.suffix_index import SuffixIndex
from engine.drafting import grow_tree
from engine.engine import SpecEngine
from engine.models.codec import ByteCodec
from engine.policies import POLICIES, make_policy
from engine.policies.base import PolicyContext
from engine.request import GenerationRequest
from engine.sampling import SamplingParams
from engine.tree import DraftTree
from tiny_models import TINY_EOS, TINY_VOCAB, CopyLM, tiny_llama
from test_hybrid import random_head


def text(s: str) -> list[int]:
    return [ord(c) for c in s]


def followers_after(index: SuffixIndex, extra: str = "") -> tuple[int, dict[str, int]]:
    """The match and followers of the indexed text continued by `extra`, with tokens as characters."""
    state = index.end()
    for token in text(extra):
        state = index.step(*state, token)
    length, followers = index.followers(*state)
    return length, {chr(t): c for t, c in followers.items()}


def test_index_counts_the_followers_of_the_longest_earlier_match():
    index = SuffixIndex()
    index.extend_all(text("abcabdab"))
    assert followers_after(index) == (2, {"c": 1, "d": 1})  # "ab" came before "c" and before "d"
    assert followers_after(index, "c") == (3, {"a": 1})  # "abc" once, then "a"
    assert followers_after(index, "ca") == (4, {"b": 1})
    assert followers_after(index, "x") == (0, {})  # nothing ends in "x"
    index.extend_all(text("c"))  # "abcabdabc": the end now matches "abc", seen once before
    assert followers_after(index) == (3, {"a": 1})


def test_index_counts_repeats_of_one_token():
    index = SuffixIndex()
    index.extend_all(text("aaaa"))
    assert followers_after(index) == (3, {"a": 1})  # "aaa" at 0..2 was followed by "a"
    assert followers_after(index, "b") == (0, {})
    index.extend_all(text("b"))
    assert followers_after(index, "a") == (1, {"a": 3, "b": 1})  # "ba" is new: fall back to "a"


def naive_followers(tokens: list[int], query: list[int]) -> tuple[int, dict[int, int]]:
    for length in range(len(query), 0, -1):
        pattern = query[-length:]
        counts = Counter(tokens[i + length] for i in range(len(tokens) - length) if tokens[i:i + length] == pattern)
        if counts:
            return length, dict(counts)
    return 0, {}


@pytest.mark.parametrize("seed", range(5))
def test_index_agrees_with_brute_force_as_it_grows(seed):
    rng = random.Random(seed)
    tokens: list[int] = []
    index = SuffixIndex()
    for _ in range(80):
        token = rng.randrange(4)
        tokens.append(token)
        index.extend(token)
        path = [rng.randrange(5) for _ in range(rng.randrange(4))]
        state = index.end()
        for t in path:
            state = index.step(*state, t)
        assert index.followers(*state) == naive_followers(tokens, tokens + path), (tokens, path)


def started(context: list[int], **kwargs) -> SuffixDrafter:
    drafter = SuffixDrafter(**kwargs)
    drafter.start(context)
    return drafter


def propose(drafter: SuffixDrafter, tree: DraftTree, frontier: list[int], k: int = 10):
    return drafter.propose(tree, frontier, k, False, SamplingParams(), torch.Generator())


def test_proposals_are_followers_with_frequencies_times_trust_as_q():
    drafter = started([7, 2, 3, 4, 8, 2, 3, 4, 9, 2, 3, 5, 6, 2, 3])  # "2 3" was followed by 4 twice, by 5 once
    [proposal] = propose(drafter, DraftTree.with_root(3), [0])
    trust = drafter.trust(2)
    assert proposal.token == [4, 5] and proposal.q == pytest.approx([trust * 2 / 3, trust * 1 / 3])
    assert proposal.source == "suffix" and drafter.meter.forwards == 0


def test_a_tree_follows_every_continuation_of_the_match():
    drafter = started([1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3])
    draft = grow_tree(make_policy("talon", {"budget": 6}), drafter, root=3, max_depth=10)
    tree = draft.tree
    assert tree.parent == [-1, 0, 0, 1, 2, 3, 4]  # two branches, "4 1 2" and "5 1 2", grown side by side
    assert tree.token == [3, 4, 5, 1, 1, 2, 2]
    matched = PRIOR_TRUST[1] * 0.5  # "1 2 3" (L = 3) then 4 or 5, once each
    assert tree.q == pytest.approx([1.0, matched, matched, PRIOR_TRUST[2], PRIOR_TRUST[2], PRIOR_TRUST[2],
                                    PRIOR_TRUST[2]])  # L = 4, 5: one follower each


def test_commit_extends_the_index_and_learns_trust_by_match_length():
    drafter = started([1, 2, 3, 9, 1, 2])
    tree = DraftTree.with_root(2)
    [proposal] = propose(drafter, tree, [0])
    assert proposal.token == [3]  # "1 2" (L = 2) was followed by 3
    good = tree.add(0, 3, proposal.q[0], proposal.q[0], "suffix")
    before = drafter.trust(2)
    drafter.commit(tree, [0, good], [3, 9])
    assert drafter.trust(2) > before  # the L = 2 candidate was accepted
    assert drafter.tokens == [1, 2, 3, 9, 1, 2, 3, 9]
    assert drafter.match(DraftTree.with_root(9), 0) == (4, {1: 1})  # "1 2 3 9" matches now, then 1


def test_trust_falls_when_matches_of_a_length_are_rejected():
    trust = TrustByLength()
    for _ in range(20):
        trust.record(20, accepted=False)
    assert trust(20) < trust(1) == PRIOR_TRUST[0]
    assert trust.bucket(1) == 0 and trust.bucket(3) == 1 and trust.bucket(16) == 4 and trust.bucket(500) == 5


PASSAGE = random.Random(1).sample(range(10, 250), 40)


FLAT = PolicyContext(costs=CostTable.linear(0.0, 10.0))  # a GPU's verify: more tokens cost nothing
STEEP = PolicyContext(costs=CostTable.linear(1.0, 10.0))  # a CPU's compute-bound one: a token adds 1/11 of a forward


def test_chain_follows_a_long_copy_past_gamma_at_no_draft_forward():
    context = [1, 2] + PASSAGE + [3] + PASSAGE[:3]
    drafter = started(context)
    draft = grow_tree(make_policy("chain", {"gamma": 5, "pick_gamma": False}, FLAT), drafter, root=context[-1], max_depth=64)
    assert draft.tree.token[1:31] == PASSAGE[3:33]  # one chain, the copy's own continuation
    assert draft.tree.max_depth == 32 and drafter.meter.forwards == 0
    reasons = [layer.selection.decisions[0].reason for layer in draft.layers]
    assert reasons[:5] == ["topk"] * 5 and set(reasons[5:]) == {"match"}


def test_chain_past_gamma_stops_where_a_token_no_longer_pays_its_verify_cost():
    """Each free token must be accepted more often than it adds to the verify forward, in one-token forwards
    (engine/policies/chain.py): a steep table cuts the copy where its path score falls below 1/11."""
    context = [1, 2] + PASSAGE + [3] + PASSAGE[:3]
    draft = grow_tree(make_policy("chain", {"gamma": 5, "pick_gamma": False}, STEEP), started(context), context[-1], 64)
    last = draft.layers[-1].selection.decisions[0]
    assert 5 < draft.tree.max_depth < 32 and last.reason == "cost" and last.detail["price"] == pytest.approx(1 / 11)
    scores = draft.tree.score[1:]
    assert min(scores[5:]) >= 1 / 11 > draft.layers[-1].pool.score[0]
    blind = grow_tree(make_policy("chain", {"gamma": 5, "pick_gamma": False, "cost_aware": False}, STEEP), started(context),
                      context[-1], 64)
    assert blind.tree.max_depth == 32


def test_chain_with_free_q_one_is_leviathans():
    context = [1, 2] + PASSAGE + [3] + PASSAGE[:3]
    draft = grow_tree(make_policy("chain", {"gamma": 5, "pick_gamma": False, "free_q": 1.0}), started(context), context[-1], 64)
    assert draft.tree.max_depth == 5


# --- in the engine: greedy identity, and deep copies on a target that copies ---------------------------------

@pytest.fixture(scope="module")
def copy_engine():
    head = random_head(tiny_llama(0, layers=6, dtype=torch.float64))
    drafters = {"suffix": SuffixDrafter,
                "hybrid": lambda: HybridDrafter(EagleHeadDrafter(head, num_target_layers=6))}
    return SpecEngine(CopyLM(), ByteCodec(TINY_VOCAB, TINY_EOS), drafters, "hybrid")


COPY_TEXT = "".join(chr(c) for c in random.Random(2).sample(range(33, 127), 60))  # distinct characters
COPY_PROMPT = "Copy: " + COPY_TEXT + " |" + COPY_TEXT[0]  # CopyLM copies the text on from its first character


def copy_run(engine, policy: str, drafter: str, events: list | None = None):
    return engine.run(GenerationRequest(prompt=COPY_PROMPT, policy=policy, drafter=drafter, max_new_tokens=120),
                      emit=events.append if events is not None else None, detail=events is not None)


@pytest.mark.parametrize("drafter", ["suffix", "hybrid"])
@pytest.mark.parametrize("policy", sorted(p for p in POLICIES if POLICIES[p].drafts))
def test_copies_are_identical_to_plain_decoding(copy_engine, policy, drafter):
    reference = copy_run(copy_engine, "ar", drafter).tokens
    assert copy_run(copy_engine, policy, drafter).tokens == reference


@pytest.mark.parametrize("drafter", ["suffix", "hybrid"])
@pytest.mark.parametrize("policy", ["chain", "talon", "cast"])
def test_a_verbatim_copy_is_drafted_deep(copy_engine, policy, drafter):
    """talon's default budget, chain past γ and cast's depth rule (through its calibration) all let a
    confident copy run to the depth limit; nothing special-cases the policy."""
    events: list = []
    result = copy_run(copy_engine, policy, drafter, events)
    depths = [e.depth for e in events if e.type == "step_metrics"]
    assert max(depths) == 32, depths
    assert result.tau >= 8


def test_the_head_is_not_run_deep_in_a_confident_copy(copy_engine):
    events: list = []
    copy_run(copy_engine, "talon", "hybrid", events)
    forwards = [e.draft_forwards for e in events if e.type == "step_metrics"]
    assert forwards[0] > 0 and forwards[-1] == 0
    sources = {c.source for e in events if e.type == "draft_layer" and e.step == 1 for c in e.candidates}
    assert {"head", "suffix"} <= sources or {"head", "head+suffix"} <= sources
