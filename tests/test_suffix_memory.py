"""Suffix memory: earlier requests drafted from, on hand-checkable strings; bounded; per policy and per client;
kept in a file; and lossless in the engine (greedy identity, and the sampled distribution through `suffix` and
`hybrid`, with a negative control)."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest
import torch
from fastapi.testclient import TestClient

from engine import acceptance
from engine.drafters.eagle_head import EagleHeadDrafter
from engine.drafters.hybrid import HybridDrafter
from engine.drafters.memory import MemoryBank, SuffixMemory
from engine.drafters.suffix import MEMORY, SuffixDrafter
from engine.drafters.suffix_index import COUNT_CAP, SuffixIndex
from engine.drafting import grow_tree
from engine.engine import SpecEngine
from engine.errors import LoadError
from engine.models.head import Eagle3Head, head_config
from engine.models.lm import CachedLM
from engine.policies import POLICIES, make_policy
from engine.request import GenerationRequest
from engine.sampling import SamplingParams
from tiny_models import SymbolCodec, tiny_engine, tiny_llama
from engine.tree import DraftTree
from test_sampling_distribution import P_FLOOR, PROMPT, TOKENS, VOCAB, chi_square_p, exact_joint

PASSAGE = random.Random(4).sample(range(10, 250), 30)  # distinct tokens: every match is unambiguous


def drafter_with(memory: SuffixMemory | None, context: list[int]) -> SuffixDrafter:
    drafter = SuffixDrafter()
    drafter.use_memory(memory)
    drafter.start(context)
    return drafter


def propose(drafter: SuffixDrafter, tree: DraftTree, node: int = 0, k: int = 10):
    return drafter.propose(tree, [node], k, False, SamplingParams(), torch.Generator())


# --- hand-checkable strings ------------------------------------------------------------------------------------

def test_a_repeated_request_drafts_its_earlier_answer_at_depth():
    memory = SuffixMemory()
    prompt = [1, 2, 3, 4]
    memory.remember(prompt, PASSAGE)
    drafter = drafter_with(memory, prompt)
    draft = grow_tree(make_policy("talon", {"budget": 20}), drafter, root=prompt[-1], max_depth=20)
    assert draft.tree.max_depth == 20
    path = [draft.tree.token[i] for i in range(1, len(draft.tree)) if draft.tree.source[i] == MEMORY]
    assert path[:20] == PASSAGE[:20]  # the earlier answer, token by token, from memory


def test_without_memory_the_same_request_drafts_nothing():
    assert propose(drafter_with(None, [1, 2, 3, 4]), DraftTree.with_root(4)) == []


def test_memory_frequencies_are_the_earlier_continuations_shares():
    memory = SuffixMemory()
    for follower in (7, 7, 9):  # the prompt "5 6" was answered 7 twice and 9 once
        memory.remember([5, 6], [follower, 8])
    [proposal] = propose(drafter_with(memory, [5, 6]), DraftTree.with_root(6))
    drafter_trust = SuffixDrafter().memory_trust(2)
    assert proposal.source == MEMORY and proposal.token == [7, 9]
    assert proposal.q == pytest.approx([drafter_trust * 2 / 3, drafter_trust / 3])


def test_no_match_spans_two_remembered_requests():
    memory = SuffixMemory()
    memory.remember([1], [2, 3])
    memory.remember([4], [5])
    length, followers = drafter_with(memory, [9, 2, 3]).match(DraftTree.with_root(3), 0)
    assert (length, followers) == (0, {})  # "2 3" ended a document: the next document's "4" does not follow it


def test_the_longer_match_wins_and_the_requests_own_text_wins_a_tie():
    memory = SuffixMemory()
    memory.remember([1, 2], [3])
    drafter = drafter_with(memory, [1, 2, 5, 1, 2])  # "1 2" followed by 5 here, by 3 in memory: same length
    source, length, followers = drafter.best_match(DraftTree.with_root(2), 0)
    assert (source, length, followers) == ("suffix", 2, {5: 1})
    drafter = drafter_with(memory, [7, 1, 2])  # only memory has "1 2" followed by something
    assert drafter.best_match(DraftTree.with_root(2), 0)[:2] == (MEMORY, 2)


def test_eviction_keeps_the_budget_and_drops_the_oldest_first():
    memory = SuffixMemory(budget=100)
    rng = random.Random(0)
    for request in range(60):
        memory.remember([request], [rng.randrange(300) for _ in range(rng.randrange(1, 30))])
        assert memory.tokens <= 100 and memory.index.size == memory.tokens
        assert memory.documents[-1][0] == request  # the newest request is always kept
    firsts = [document[0] for document in memory.documents]
    assert firsts == sorted(firsts) and firsts[-1] == 59


def test_a_document_longer_than_the_budget_keeps_its_end():
    memory = SuffixMemory(budget=10)
    memory.remember([1, 2, 3], list(range(10, 30)))
    assert list(memory.documents) == [list(range(21, 30))] and memory.tokens == 10


def test_counts_saturate_at_the_cap_and_stay_exact_below_it():
    index = SuffixIndex()
    index.extend_all([1] * (COUNT_CAP + 50) + [2])
    state = index.end()
    state = index.step(*state, 1)
    assert index.followers(*state)[1] == {1: COUNT_CAP, 2: 1}  # "1" followed by 1 saturates; by 2 stays exact


def test_counting_walks_are_bounded_on_repetitive_text():
    """On a text of one repeated token the suffix-link chain grows with the text; with saturation the
    counting walk stops at the first saturated state, so all walks together stay O(COUNT_CAP) per token."""
    index, steps = SuffixIndex(), 0
    tokens = 16 * COUNT_CAP
    for _ in range(tokens):  # no state is ever cloned on this text: every rise of a count is one step of a walk
        before = sum(index.count)
        index.extend(1)
        steps += sum(index.count) - before
    assert steps <= COUNT_CAP * tokens  # each of the text's states raised at most COUNT_CAP times
    assert steps < tokens * (tokens + 1) / 2 / 4  # an unsaturated walk is as long as the text: 8× this


def test_a_branch_drafts_no_deeper_than_its_match_is_long():
    drafter = drafter_with(None, [1, 2, 3, 1, 2])
    tree = DraftTree.with_root(2)
    a = tree.add(0, 8, 0.5, 0.5, "head")  # the head guessed 8; then 1: "8 1" is new, the match is "1" (L = 1)
    b = tree.add(a, 1, 0.5, 0.25, "head")
    assert drafter.match(tree, b)[0] == 1 and propose(drafter, tree, b) == []  # depth 3 > 1 × L
    assert propose(drafter, tree, 0)[0].token == [3]  # at the root, "1 2" (L = 2) drafts depth 1


# --- the bank: per policy, in a file ---------------------------------------------------------------------------

def test_each_policy_remembers_only_its_own_runs():
    bank = MemoryBank(budget=1000)
    bank.remember("talon", [1, 2], [3, 4])
    assert bank.for_policy("talon").tokens == 5 and bank.for_policy("chain").tokens == 0


def test_a_bank_file_round_trips_and_refuses_another_target(tmp_path):
    path = tmp_path / "memory.json"
    bank = MemoryBank(budget=1000, target="tiny", path=path)
    bank.remember("talon", [1, 2], [3, 4])
    again = MemoryBank(budget=1000, target="tiny", path=path)
    assert list(again.for_policy("talon").documents) == [[1, 2, 3, 4]]
    with pytest.raises(LoadError) as refused:
        MemoryBank(budget=1000, target="other", path=path)
    assert refused.value.field == "suffix_memory" and "tiny" in str(refused.value)
    path.write_text("{not json")
    with pytest.raises(LoadError, match="not a suffix memory file"):
        MemoryBank(path=path)
    assert not (tmp_path / "memory.json.partial").exists()


def test_a_file_needs_a_shared_scope_on_the_server(tmp_path):
    from pydantic import ValidationError

    from app.settings import ServerSettings

    with pytest.raises(ValidationError, match="suffix_memory_scope=shared"):
        ServerSettings(suffix_memory=tmp_path / "m.json")
    assert ServerSettings(suffix_memory=tmp_path / "m.json", suffix_memory_scope="shared").suffix_memory


# --- in the engine ----------------------------------------------------------------------------------------------

REPEATED = ["the cat sat on the mat", "a b c d e f", "the cat sat on the mat"]


@pytest.fixture(scope="module")
def memory_engine():
    engine = tiny_engine(seed=2, dtype=torch.float64)
    engine.memory = MemoryBank(budget=4096, target="tiny-target")
    return engine


@pytest.mark.parametrize("policy", sorted(p for p in POLICIES if POLICIES[p].drafts))
def test_greedy_output_identical_to_plain_decoding_with_memory_on(memory_engine, policy):
    for prompt in REPEATED:  # the third run repeats the first: its drafts come from memory
        request = GenerationRequest(prompt=prompt, policy=policy, drafter="suffix", max_new_tokens=24)
        reference = memory_engine.run(request.model_copy(update={"policy": "ar"}), detail=False, memory=None)
        assert memory_engine.run(request, detail=False).tokens == reference.tokens, (policy, prompt)
    assert sum(memory.tokens for key, memory in memory_engine.memory.memories.items() if key.startswith(policy + ":"))


def test_a_repeated_request_is_drafted_from_memory_and_accepts_more(memory_engine):
    request = GenerationRequest(prompt="one two three four five", policy="talon", drafter="suffix", max_new_tokens=32)
    bank = MemoryBank(budget=4096)
    first = memory_engine.run(request, detail=False, memory=bank)
    events: list = []
    second = memory_engine.run(request, emit=events.append, memory=bank)
    assert second.tokens == first.tokens and second.tau > first.tau
    sources = {c.source for e in events if e.type == "draft_layer" for c in e.candidates}
    assert MEMORY in sources


def test_a_policy_drafts_only_from_its_own_runs_at_the_same_parameters(memory_engine):
    bank, prompt = MemoryBank(budget=4096), "one two three four five"

    def memory_drafted(policy: str, params: dict) -> bool:
        events: list = []
        memory_engine.run(GenerationRequest(prompt=prompt, policy=policy, params=params, drafter="suffix",
                                            max_new_tokens=24), emit=events.append, memory=bank)
        return MEMORY in {c.source for e in events if e.type == "draft_layer" for c in e.candidates}

    assert not memory_drafted("talon", {"budget": 20})
    assert not memory_drafted("talon", {"budget": 30})  # another talon: not the first one's memory
    assert not memory_drafted("chain", {})
    assert memory_drafted("talon", {"budget": 20})


def test_a_run_without_memory_is_not_remembered(memory_engine):
    before = memory_engine.memory.tokens
    memory_engine.run(GenerationRequest(prompt="x y z", policy="chain", drafter="suffix", max_new_tokens=8),
                      detail=False, memory=None)
    assert memory_engine.memory.tokens == before


# --- sampled: the target's distribution through suffix and hybrid with memory, and a negative control -------------

SAMPLES = 2000


@pytest.fixture(scope="module")
def sampling_engine():
    """The distribution tests' 4-token target, with a random head beside the suffix drafter."""
    target = tiny_llama(5, VOCAB, layers=6, dtype=torch.float64, sharpness=6.0)
    torch.manual_seed(3)
    head = Eagle3Head(head_config(target.config, draft_vocab_size=VOCAB), target.get_input_embeddings().weight.detach())
    head = head.to(torch.float64).eval()
    drafters = {"suffix": SuffixDrafter,
                "hybrid": lambda: HybridDrafter(EagleHeadDrafter(head, num_target_layers=6))}
    return SpecEngine(CachedLM(target, name="tiny"), SymbolCodec(VOCAB), drafters, default_drafter="hybrid")


def sampled_with_memory(engine, policy: str, drafter: str) -> Counter:
    """Outcomes of seeded runs that each draft from the runs before them (one bank for all)."""
    bank, counts = MemoryBank(budget=1 << 16), Counter()
    for seed in range(SAMPLES):
        request = GenerationRequest(prompt=PROMPT, policy=policy, drafter=drafter, max_new_tokens=TOKENS,
                                    temperature=1.0, seed=seed)
        counts[tuple(engine.run(request, detail=False, memory=bank).tokens)] += 1
    assert bank.tokens > 0
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("policy, drafter", [("chain", "suffix"), ("talon", "hybrid"), ("eagle", "hybrid")])
def test_sampling_with_memory_preserves_target_distribution(sampling_engine, policy, drafter):
    """Each run's drafts come from the samples before it; the output, given any draft, is the target's, so
    the outcomes are still independent draws of the target's joint."""
    joint = exact_joint(sampling_engine, SamplingParams(temperature=1.0))
    p_value = chi_square_p(sampled_with_memory(sampling_engine, policy, drafter), joint)
    assert p_value > P_FLOOR, f"{policy}/{drafter}: p = {p_value:.2e}"


@pytest.mark.slow
def test_a_sampler_without_the_residual_fails_the_same_test_with_memory(sampling_engine, monkeypatch):
    monkeypatch.setattr(acceptance, "_residual", lambda p, q: p)
    monkeypatch.setattr(acceptance, "_zero_out", lambda p, token: p)
    joint = exact_joint(sampling_engine, SamplingParams(temperature=1.0))
    p_value = chi_square_p(sampled_with_memory(sampling_engine, "chain", "suffix"), joint)
    assert p_value < P_FLOOR, f"the biased sampler passed with p = {p_value:.2e}"


# --- on the server: a client's memory is its own -----------------------------------------------------------------

def run_over_socket(socket, prompt: str) -> list[dict]:
    socket.send_text(json.dumps({"type": "run", "prompt": prompt, "policy": "talon", "drafter": "suffix",
                                 "max_new_tokens": 24}))
    events = []
    while True:
        event = json.loads(socket.receive_text())
        events.append(event)
        if event["type"] in ("run_finished", "error"):
            assert event["type"] == "run_finished", event
            return events


def memory_sources(events: list[dict]) -> set[str]:
    return {c["source"] for e in events if e["type"] == "draft_layer" for c in e["candidates"]} & {MEMORY}


def test_one_clients_text_never_appears_in_anothers_drafts():
    from app.main import create_app
    from app.settings import ServerSettings

    engine = tiny_engine(seed=2, dtype=torch.float64)
    engine.memory = MemoryBank(budget=4096, target="tiny-target")
    prompt = "the cat sat on the mat"
    with TestClient(create_app(ServerSettings(), engine_factory=lambda settings: engine)) as client:
        assert client.get("/api/info").json()["suffix_memory"]["scope"] == "client"
        with client.websocket_connect("/ws") as tab:
            assert memory_sources(run_over_socket(tab, prompt)) == set()
            assert memory_sources(run_over_socket(tab, prompt)) == {MEMORY}  # the tab's own earlier run
        with client.websocket_connect("/ws") as other_tab:
            assert memory_sources(run_over_socket(other_tab, prompt)) == set()  # not the first tab's
    with TestClient(create_app(ServerSettings(suffix_memory_scope="shared"),
                               engine_factory=lambda settings: engine)) as client:
        assert "another client" in client.get("/api/info").json()["suffix_memory"]["note"]
        with client.websocket_connect("/ws") as tab:
            run_over_socket(tab, prompt)
        with client.websocket_connect("/ws") as other_tab:
            assert memory_sources(run_over_socket(other_tab, prompt)) == {MEMORY}  # shared: the operator's choice
