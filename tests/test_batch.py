"""Several requests in one forward (engine/batch.py): every request's output is the one it gets alone.

Greedy: a batch of mixed prompts (different lengths), policies and drafters, some joining mid-way, emits
token for token what each request emits run alone, on a tiny float64 model and on the embedded model in
float32. Sampled: the chi-square test of tests/test_sampling_distribution.py through a batch, with its
negative control. And the batch's plumbing: each request hears only its own events, a cancelled one leaves
within a step while the others go on, a failing one fails alone, and the batched forward gives each
session the logits it gets alone.
"""

from collections import Counter

import pytest
import torch

from engine import acceptance
from engine.batch import Batch
from engine.models.base import BatchItem
from engine.models.fastlm import FastLM
from engine.request import GenerationRequest
from engine.sampling import SamplingParams
from engine.tree import position_ids, tree_attention_allowed
from test_native import HIDDEN, cpu_has_the_kernel, kernel_unavailable
from test_sampling_distribution import EOS, PROMPT, TOKENS, chi_square_p, exact_joint
from test_verification import random_tree
from tiny_models import SymbolCodec, tiny_engine, tiny_llama

P_FLOOR = 1e-3

# (policy, drafter) pairs: every policy, each model-based and model-free drafter
MIXED = [("ar", None), ("chain", "draft-lm"), ("eagle", "draft-lm"), ("talon", "suffix"), ("cast", "draft-lm"),
         ("talon-adaptive", "prompt-lookup"), ("talon", "draft-lm"), ("chain", "suffix"), ("eagle", "prompt-lookup")]
PROMPTS = ["a", "hello hello hello", "the cat sat on the mat, the cat", "abcabcabcabcabcabcabcabc",
           "zyx", "one two three four five six seven", "ab", "qwertyqwerty", "lorem ipsum dolor sit amet"]
FIXED_TREES = {"ar", "chain", "eagle", "talon"}  # policies whose trees do not follow measured times


def requests(max_new_tokens: int = 24) -> list[GenerationRequest]:
    return [GenerationRequest(prompt=prompt, policy=policy, drafter=drafter, max_new_tokens=max_new_tokens)
            for prompt, (policy, drafter) in zip(PROMPTS, MIXED)]


def run_batched(engine, batch_requests: list[GenerationRequest], max_batch: int, join_after: int = 0,
                **submit) -> list:
    """Runs the requests through one batch: the first half at once, the rest after `join_after` steps."""
    batch = Batch(engine, max_batch=max_batch)
    half = len(batch_requests) // 2 if join_after else len(batch_requests)
    tickets = [batch.submit(request, memory=None, **submit) for request in batch_requests[:half]]
    for _ in range(join_after):
        batch.step()
    tickets += [batch.submit(request, memory=None, **submit) for request in batch_requests[half:]]
    batch.run()
    return [ticket.outcome(0) for ticket in tickets]


@pytest.mark.parametrize("max_batch,join_after", [(4, 0), (9, 3), (3, 2)])
def test_greedy_output_of_every_request_in_a_batch_is_identical_to_its_run_alone(engine64, max_batch, join_after):
    alone = [engine64.run(request, detail=False, memory=None) for request in requests()]
    batched = run_batched(engine64, requests(), max_batch, join_after, detail=False)
    for request, one, many in zip(requests(), alone, batched):
        assert many.tokens == one.tokens, (request.policy, request.drafter, request.prompt)
        assert many.stop_reason == one.stop_reason
        if request.policy in FIXED_TREES:  # the same trees, so the same steps
            assert many.steps == one.steps, (request.policy, request.drafter)


def test_each_request_hears_only_its_own_events_the_ones_it_hears_alone(engine64):
    chosen = requests()[1:4]
    heard_alone, heard_batched = [[] for _ in chosen], [[] for _ in chosen]
    for request, heard in zip(chosen, heard_alone):
        engine64.run(request, heard.append, memory=None)
    batch = Batch(engine64, max_batch=3)
    for request, heard in zip(chosen, heard_batched):
        batch.submit(request, heard.append, memory=None)
    batch.run()
    for alone, batched in zip(heard_alone, heard_batched):
        assert len({event.run_id for event in batched if hasattr(event, "run_id")}) == 1
        assert [event.type for event in batched] == [event.type for event in alone]
        assert [getattr(event, "text", None) for event in batched] == [getattr(event, "text", None) for event in alone]


def test_a_cancelled_request_leaves_within_a_step_and_the_others_finish(engine64):
    chosen = requests(max_new_tokens=32)[:3]
    batch = Batch(engine64, max_batch=3)
    stop = {"now": False}
    tickets = [batch.submit(request, memory=None, cancelled=(lambda: stop["now"]) if i == 1 else None)
               for i, request in enumerate(chosen)]
    batch.step()
    stop["now"] = True
    batch.step()
    assert tickets[1].done.is_set() and tickets[1].outcome(0).stop_reason == "cancelled"
    assert tickets[1].outcome(0).steps == 1
    batch.run()
    alone = [engine64.run(request, detail=False, memory=None) for request in chosen]
    assert [tickets[i].outcome(0).tokens for i in (0, 2)] == [alone[i].tokens for i in (0, 2)]


def test_a_request_whose_drafting_fails_leaves_with_its_error_and_the_others_finish(engine64, monkeypatch):
    chosen = requests()[1:3]  # chain on draft-lm, eagle on draft-lm
    batch = Batch(engine64, max_batch=2)
    tickets = [batch.submit(request, memory=None) for request in chosen]
    batch.step()  # both joined
    broken = tickets[0]
    run = next(member.run for member in batch._members if member.ticket is broken)

    def broken_drafting():  # the batch grows every member's tree through `drafting`
        raise RuntimeError("drafter broke")
        yield
    monkeypatch.setattr(run, "drafting", broken_drafting)
    batch.run()
    with pytest.raises(RuntimeError, match="drafter broke"):
        broken.outcome(0)
    assert tickets[1].outcome(0).tokens == engine64.run(chosen[1], detail=False, memory=None).tokens


def test_the_lean_batched_forward_gives_each_session_its_logits_alone():
    """Three sessions of one FastLM, caches of different lengths, a chain and two trees of different sizes."""
    lm = FastLM(tiny_llama(3, dtype=torch.float64), kernel=False)
    contexts = [[5, 6, 7], list(range(20, 61)), [9] * 11]
    shapes = [None, random_tree(size=9, vocab=200, seed=1), random_tree(size=17, vocab=200, seed=2)]

    def items_for(sessions):
        items = []
        for session, tree in zip(sessions, shapes):
            if tree is None:
                items.append(BatchItem(session, [1, 2, 3], hidden_layers=(0, -1)))
            else:
                prefix = session.cache_len
                items.append(BatchItem(session, tree.token, position_ids(tree.depth, prefix),
                                       tree_attention_allowed(tree.parent, prefix), (1,)))
        return items

    def fresh_sessions():
        sessions = [lm.session() for _ in contexts]
        for session, context in zip(sessions, contexts):
            session.forward_chain(context)
        return sessions

    alone = [item.run_alone() for item in items_for(fresh_sessions())]
    sessions = fresh_sessions()
    batched = lm.forward_batch(items_for(sessions))
    for one, many, session, context, tree in zip(alone, batched, sessions, contexts, shapes):
        assert torch.allclose(one.logits, many.logits, atol=1e-10, rtol=0)
        assert all(torch.allclose(a, b, atol=1e-10, rtol=0) for a, b in zip(one.hidden, many.hidden))
        assert session.cache_len == len(context) + (3 if tree is None else len(tree))


def test_sessions_share_the_weights_and_not_the_cache():
    lm = FastLM(tiny_llama(3, dtype=torch.float64), kernel=False)
    session = lm.session()
    session.forward_chain([1, 2, 3])
    assert lm.cache_len == 0 and session.cache_len == 3
    assert session.layers is lm.layers and session.kv.data_ptr() != lm.kv.data_ptr()


@pytest.fixture(scope="module")
def symbols():
    return tiny_engine(seed=5, dtype=torch.float64, vocab_size=4, draft_noise=0.6, sharpness=6.0,
                       codec=SymbolCodec(4))


def batched_outcomes(engine, policy: str, sampling: SamplingParams, samples: int, max_batch: int = 8) -> Counter:
    """Seeded sampled runs, `max_batch` at a time through one batch (requests join as others leave)."""
    batch = Batch(engine, max_batch=max_batch)
    tickets = [batch.submit(GenerationRequest(prompt=PROMPT, policy=policy, max_new_tokens=TOKENS, seed=seed,
                                              temperature=sampling.temperature), detail=False, memory=None)
               for seed in range(samples)]
    batch.run()
    return Counter(tuple(ticket.outcome(0).tokens) for ticket in tickets)


@pytest.mark.parametrize("policy", ["chain", "talon"])
def test_sampling_through_a_batch_preserves_target_distribution(symbols, policy):
    sampling = SamplingParams(temperature=1.0)
    p_value = chi_square_p(batched_outcomes(symbols, policy, sampling, 3000), exact_joint(symbols, sampling))
    assert p_value > P_FLOOR, f"{policy}: p = {p_value:.2e}"


def test_a_sampler_without_the_residual_fails_the_same_test_through_a_batch(symbols, monkeypatch):
    monkeypatch.setattr(acceptance, "_residual", lambda p, q: p)
    monkeypatch.setattr(acceptance, "_zero_out", lambda p, token: p)
    sampling = SamplingParams(temperature=1.0)
    p_value = chi_square_p(batched_outcomes(symbols, "chain", sampling, 3000), exact_joint(symbols, sampling))
    assert p_value < P_FLOOR, f"the biased sampler passed through a batch with p = {p_value:.2e}"


def test_a_sampled_request_in_a_batch_draws_what_it_draws_alone(symbols):
    """The same seed, the same sample: a request's generator is its own, whoever shares its forward."""
    chosen = [GenerationRequest(prompt=PROMPT, policy=policy, max_new_tokens=TOKENS, seed=seed, temperature=1.0)
              for seed, policy in enumerate(["chain", "talon", "eagle", "ar"] * 3)]
    alone = [symbols.run(request, detail=False, memory=None).tokens for request in chosen]
    assert [finished.tokens for finished in run_batched(symbols, chosen, 5, join_after=1, detail=False)] == alone


@pytest.mark.slow
def test_greedy_output_in_a_batch_is_identical_to_each_run_alone_on_the_embedded_model():
    """SmolLM2-135M in float32 on torch's lean forward: mixed prompts, policies and drafters, two joining late."""
    from engine.loading import load_engine
    from engine.options import EngineOptions

    smol = load_engine(EngineOptions(dtype="float32"))
    prompts = ["Write a haiku about trees", "List three uses of a paperclip.", "Count from one to twenty.",
               "Explain what a hash map is in two sentences.", "Say hi."]
    mixed = [("ar", None), ("talon", "hybrid"), ("eagle", "suffix"), ("cast", "hybrid"), ("chain", "prompt-lookup")]
    chosen = [GenerationRequest(prompt=prompt, policy=policy, drafter=drafter, max_new_tokens=32)
              for prompt, (policy, drafter) in zip(prompts, mixed)]
    alone = [smol.run(request, detail=False, memory=None).tokens for request in chosen]
    batched = run_batched(smol, chosen, max_batch=4, join_after=2, detail=False)
    assert [finished.tokens for finished in batched] == alone


def test_a_batch_on_hugging_faces_plain_forward_is_identical_to_each_run_alone(monkeypatch):
    """The plain forward has no batched product (forward_each): sessions and the batch still hold."""
    monkeypatch.setenv("SPECSCOPE_FORWARD", "plain")
    plain = tiny_engine(dtype=torch.float64)
    assert plain.forward_name == "plain"
    chosen = requests(max_new_tokens=16)[:5]
    alone = [plain.run(request, detail=False, memory=None).tokens for request in chosen]
    assert [finished.tokens for finished in run_batched(plain, chosen, 3, join_after=1, detail=False)] == alone


def test_a_bfloat16_batch_through_the_native_kernel_is_identical_to_each_run_alone():
    """Where the kernel runs, a batch's verify gives each tree the kernel's bits for it alone."""
    if not cpu_has_the_kernel():
        pytest.skip(f"the native kernel does not run here: {kernel_unavailable()}")
    bf16 = tiny_engine(dtype=torch.bfloat16, hidden=HIDDEN)
    assert bf16.forward_name == "native"
    chosen = requests(max_new_tokens=16)[:6]
    alone = [bf16.run(request, detail=False, memory=None).tokens for request in chosen]
    assert [finished.tokens for finished in run_batched(bf16, chosen, 4, join_after=2, detail=False)] == alone


def test_a_batch_tells_every_policy_how_many_requests_share_its_forward(engine64, monkeypatch):
    from engine.policies.base import Policy

    seen = []
    original = Policy.see_batch
    monkeypatch.setattr(Policy, "see_batch", lambda self, size: (seen.append((self.name, size)), original(self, size)))
    batch = Batch(engine64, max_batch=3)
    for request in requests(max_new_tokens=4)[:3]:
        batch.submit(request, memory=None)
    batch.step()
    assert sorted(seen) == sorted((policy, 3) for policy, _ in MIXED[:3])


def test_cast_reads_the_cost_rows_of_its_batch_and_verifies_fewer_nodes_where_they_are_dear():
    """A table whose batch-4 forward grows steeply with n: cast in a batch of 4 sends fewer nodes to
    verification than alone, and `batch` given as a parameter still wins."""
    from engine.costs import CostTable
    from engine.policies import make_policy
    from engine.policies.base import PolicyContext
    from test_cast import FLAT, grow

    table = CostTable.linear(0.1, 20.0, draft_lam=0.05, draft_delta=1.0, batches=(1, 4))
    table.target.ms[1] = [[20.0 + 5.0 * n for n in table.ns] for _ in table.contexts]  # batch 4: dear nodes

    def verified(params: dict, batch: int) -> int:
        cast = make_policy("cast", {"c3": 1.0, "max_width": 8, "max_depth": 4, **params}, PolicyContext(costs=table))
        cast.see_batch(batch)
        tree, _ = grow(cast, FLAT)
        return len(cast.finalize(tree).keep)

    alone, in_batch = verified({}, 1), verified({}, 4)
    assert 1 < in_batch < alone
    assert verified({"batch": 1}, 4) == alone and verified({"batch": 4}, 1) == in_batch


def test_the_profile_times_a_batch_through_the_engines_own_batched_forward(monkeypatch):
    from engine.profiling import Grid, measure_model

    lm = FastLM(tiny_llama(3, dtype=torch.float64), kernel=False)
    calls = []
    original = FastLM.forward_batch
    monkeypatch.setattr(FastLM, "forward_batch", lambda self, items: (calls.append(len(items)), original(self, items))[1])
    table = measure_model(lm, Grid(ns=(1, 4), contexts=(16,), batches=(1, 3), repeats=1, warmup=0))
    assert len(table) == 2 and all(ms > 0 for row in table[1] for ms in row)
    assert calls and set(calls) == {3}  # batch 3's rows, one forward of three sessions each; batch 1 runs alone
    assert lm.cache_len == 0


@pytest.mark.slow
def test_a_bfloat16_batch_on_the_embedded_model_through_the_kernel_is_identical_to_each_run_alone():
    """SmolLM2-135M in bfloat16 where the kernel runs: one batched kernel call per step, the hybrid drafter's
    head sessions drafting beside each other, every output bit for bit the run's alone."""
    if not cpu_has_the_kernel():
        pytest.skip(f"the native kernel does not run here: {kernel_unavailable()}")
    from engine.loading import load_engine
    from engine.options import EngineOptions

    smol = load_engine(EngineOptions(dtype="bfloat16"))
    assert smol.forward_name == "native"
    prompts = ["Write a haiku about trees", "Count from one to twenty.", "Say hi.", "List three colours."]
    mixed = [("talon", "hybrid"), ("eagle", "hybrid"), ("ar", None), ("chain", "suffix")]
    chosen = [GenerationRequest(prompt=prompt, policy=policy, drafter=drafter, max_new_tokens=32)
              for prompt, (policy, drafter) in zip(prompts, mixed)]
    alone = [smol.run(request, detail=False, memory=None).tokens for request in chosen]
    batched = run_batched(smol, chosen, max_batch=3, join_after=2, detail=False)
    assert [finished.tokens for finished in batched] == alone


@pytest.mark.slow
def test_a_batch_drafts_its_heads_layers_in_one_call_each_and_every_tree_is_the_one_drafted_alone(monkeypatch):
    """SmolLM2-135M in bfloat16 where the kernel runs: the requests' trees grow a layer at a time together and
    each layer's head forwards run in one kernel call (engine/batch.py's drafting), yet every step drafts the
    tree it drafts alone (the same size, depth and width, the same drafts accepted) and every output is the
    run's alone, a sampled run's draws included."""
    if not cpu_has_the_kernel():
        pytest.skip(f"the native kernel does not run here: {kernel_unavailable()}")
    from engine.events import StepMetrics
    from engine.loading import load_engine
    from engine.models.native import NativeHead
    from engine.options import EngineOptions

    smol = load_engine(EngineOptions(dtype="bfloat16"))
    prompts = ["Write a haiku about trees", "Count from one to twenty.", "Name three rivers.", "Say hello."]
    chosen = [GenerationRequest(prompt=prompt, policy=policy, drafter=drafter, max_new_tokens=24,
                                temperature=temperature, seed=3)
              for prompt, (policy, drafter, temperature) in zip(prompts, [  # trees of fixed rules
                  ("eagle", "hybrid", 0.0), ("talon", "head", 0.0), ("talon", "hybrid", 0.0),
                  ("eagle", "hybrid", 0.8)])]  # sampled: the same draws as alone

    def shapes(steps: list) -> list[tuple]:
        return [(s.tree_size, s.depth, s.width, s.accepted, s.draft_forwards) for s in steps]

    alone_steps = [[] for _ in chosen]
    alone = [smol.run(request, emit=lambda e, kept=kept: kept.append(e) if isinstance(e, StepMetrics) else None,
                      detail=False, memory=None).tokens for request, kept in zip(chosen, alone_steps)]
    calls = []
    batch_call = NativeHead.batch
    monkeypatch.setattr(NativeHead, "batch", lambda self, steps: calls.append(len(steps)) or batch_call(self, steps))
    batch = Batch(smol, max_batch=4)
    batched_steps = [[] for _ in chosen]
    tickets = [batch.submit(request, detail=False, memory=None,
                            emit=lambda e, kept=kept: kept.append(e) if isinstance(e, StepMetrics) else None)
               for request, kept in zip(chosen, batched_steps)]
    batch.run()
    assert [ticket.outcome(0).tokens for ticket in tickets] == alone
    assert [shapes(steps) for steps in batched_steps] == [shapes(steps) for steps in alone_steps]
    assert calls and max(calls) == 4  # every request's forward of a layer in one call while all four grow
    assert all(step.shared == 4 for step in batched_steps[0][:3])


def test_where_a_batchs_costs_say_no_tree_pays_cast_and_chain_decode_as_ar_with_the_same_output():
    """A table whose batch-4 rows charge a whole forward for each token a request adds: in a batch of 4, cast
    and chain draft nothing from the model (each says why) and every output is the one drafted alone."""
    from engine.costs import CostTable
    from engine.policies.base import PolicyContext

    engine = tiny_engine(dtype=torch.float64)
    table = CostTable.linear(0.1, 20.0, batches=(1, 4))
    table.target.ms[1] = [[20.0 * n for n in table.ns] for _ in table.contexts]
    engine.context = PolicyContext(costs=table)
    chosen = [GenerationRequest(prompt=prompt, policy=policy, drafter="draft-lm", max_new_tokens=16)
              for prompt, policy in zip(PROMPTS[1:5], ["cast", "chain", "cast", "chain"])]
    alone = [engine.run(request, detail=False, memory=None) for request in chosen]
    assert all(one.steps < 16 for one in alone)  # alone the nodes are cheap: trees every step
    heard: list[list] = [[] for _ in chosen]
    batch = Batch(engine, max_batch=4)
    tickets = [batch.submit(request, emit=heard[i].append, memory=None) for i, request in enumerate(chosen)]
    batch.run()
    assert [ticket.outcome(0).tokens for ticket in tickets] == [one.tokens for one in alone]
    for request, events in zip(chosen, heard):
        moves = [e for e in events if e.type == "policy_adjusted" and e.param in ("speculates", "gamma")]
        assert moves and moves[0].new == 0.0, request.policy  # off at once, and the move says why
    steps = [(ticket.outcome(0).steps, ticket.outcome(0).new_tokens) for ticket in tickets]
    assert all(taken == emitted for (taken, emitted), r in zip(steps, chosen) if r.policy == "cast"), steps
