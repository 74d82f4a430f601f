"""Sampling through every policy leaves the output distributed exactly as the target's own.

On a 4-token vocabulary (id 3 ends the turn) the joint distribution of the
first three sampled tokens is known exactly from the target; a chi-square test
compares it with thousands of seeded speculative runs. The same test catches
a deliberately biased sampler, so passing it means something.

No policy of the papers samples more than one child per node, so a test policy
does (`sampled-tree`: two drawn children for every node, two layers): the walk
over sampled siblings is checked here end to end, and its old fault (siblings
tried best q first instead of in draw order) fails the same test.
"""

from collections import Counter

import pytest
import torch
from scipy.stats import chisquare

from engine import acceptance
from engine.policies import POLICIES
from engine.request import GenerationRequest
from engine.sampling import SamplingParams, probs_from_logits
from tiny_models import SampledTreePolicy, SymbolCodec, tiny_engine

VOCAB = 4
EOS = VOCAB - 1
TOKENS = 3
SAMPLES = 3000
PROMPT = "abcabd"
P_FLOOR = 1e-3


@pytest.fixture(scope="module")
def engine():
    return tiny_engine(seed=5, dtype=torch.float64, vocab_size=VOCAB, draft_noise=0.6, sharpness=6.0,
                       codec=SymbolCodec(VOCAB))


@pytest.fixture(autouse=True)
def sampled_tree(monkeypatch):
    """The test policy that samples several siblings per node, registered for these tests only."""
    monkeypatch.setitem(POLICIES, SampledTreePolicy.name, SampledTreePolicy)


def exact_joint(engine, sampling: SamplingParams) -> dict[tuple[int, ...], float]:
    """Probability of every outcome (up to TOKENS tokens, stopping after EOS) under the target alone."""
    model, prompt = engine.target.model, engine.codec.encode_prompt(PROMPT)
    joint: dict[tuple[int, ...], float] = {}

    def expand(prefix: tuple[int, ...], mass: float) -> None:
        if len(prefix) == TOKENS or (prefix and prefix[-1] == EOS):
            joint[prefix] = mass
            return
        with torch.no_grad():
            logits = model(torch.tensor([prompt + list(prefix)])).logits[0, -1:]  # [1, V]
        probs = probs_from_logits(logits, sampling)[0]
        for token in range(VOCAB):
            if probs[token] > 0:
                expand(prefix + (token,), mass * probs[token].item())

    expand((), 1.0)
    return joint


def sample_outcomes(engine, policy: str, sampling: SamplingParams, drafter: str = "draft-lm",
                    samples: int = SAMPLES) -> Counter:
    counts = Counter()
    for seed in range(samples):
        request = GenerationRequest(prompt=PROMPT, policy=policy, drafter=drafter, max_new_tokens=TOKENS,
                                    temperature=sampling.temperature, top_p=sampling.top_p, seed=seed)
        counts[tuple(engine.run(request, detail=False).tokens)] += 1
    return counts


def chi_square_p(counts: Counter, joint: dict) -> float:
    """p-value of the observed outcomes under the exact joint; sparse cells pooled so each expects ≥ 5."""
    assert set(counts) <= set(joint), "an outcome the target gives probability 0"
    samples = sum(counts.values())
    cells = sorted(joint, key=lambda outcome: -joint[outcome])
    observed, expected, pooled_o, pooled_e = [], [], 0, 0.0
    for outcome in cells:
        if joint[outcome] * samples >= 5:
            observed.append(counts[outcome])
            expected.append(joint[outcome] * samples)
        else:
            pooled_o += counts[outcome]
            pooled_e += joint[outcome] * samples
    if pooled_e > 0:
        observed.append(pooled_o)
        expected.append(pooled_e)
    scale = sum(observed) / sum(expected)
    return chisquare(observed, [e * scale for e in expected]).pvalue


@pytest.mark.parametrize("policy", sorted(p for p in POLICIES if POLICIES[p].drafts) + ["ar", "sampled-tree"])
def test_sampling_preserves_target_distribution(engine, policy):
    sampling = SamplingParams(temperature=1.0)
    p_value = chi_square_p(sample_outcomes(engine, policy, sampling), exact_joint(engine, sampling))
    assert p_value > P_FLOOR, f"{policy}: p = {p_value:.2e}"


@pytest.mark.parametrize("policy", ["chain", "talon", "sampled-tree"])
def test_sampling_with_top_p_preserves_target_distribution(engine, policy):
    sampling = SamplingParams(temperature=1.0, top_p=0.8)
    p_value = chi_square_p(sample_outcomes(engine, policy, sampling), exact_joint(engine, sampling))
    assert p_value > P_FLOOR, f"{policy}: p = {p_value:.2e}"


@pytest.mark.parametrize("policy", ["chain", "talon"])
def test_a_sampler_without_the_residual_fails_the_same_test(engine, policy, monkeypatch):
    """The classic bug: after a rejection, draw again from p instead of norm(max(0, p - q))."""
    monkeypatch.setattr(acceptance, "_residual", lambda p, q: p)
    monkeypatch.setattr(acceptance, "_zero_out", lambda p, token: p)
    sampling = SamplingParams(temperature=1.0)
    p_value = chi_square_p(sample_outcomes(engine, policy, sampling), exact_joint(engine, sampling))
    assert p_value < P_FLOOR, f"{policy}: the biased sampler passed with p = {p_value:.2e}"


def test_sampled_siblings_tried_best_q_first_fail_the_same_test(engine, monkeypatch):
    """The old walk's ordering: sampled siblings sorted by q rather than tried in the order they were drawn.
    The bias is gross on this draft (p ≈ 1e-260 at 3000 samples), so 600 samples show it."""
    original = acceptance.children_lists
    monkeypatch.setattr(acceptance, "children_lists",
                        lambda tree: [sorted(kids, key=lambda c: -tree.q[c]) for kids in original(tree)])
    sampling = SamplingParams(temperature=1.0)
    counts = sample_outcomes(engine, "sampled-tree", sampling, samples=600)
    p_value = chi_square_p(counts, exact_joint(engine, sampling))
    assert p_value < P_FLOOR, f"the old ordering passed with p = {p_value:.2e}"


def test_same_seed_same_sample(engine):
    request = GenerationRequest(prompt=PROMPT, policy="talon", temperature=1.0, seed=7, max_new_tokens=8)
    assert engine.run(request, detail=False).tokens == engine.run(request, detail=False).tokens



@pytest.mark.parametrize("policy", ["chain", "talon"])
def test_sampling_with_the_suffix_drafter_preserves_target_distribution(engine, policy):
    """Point-mass children from text matches, followed past γ by chain: still the target's distribution."""
    sampling = SamplingParams(temperature=1.0)
    p_value = chi_square_p(sample_outcomes(engine, policy, sampling, drafter="suffix"), exact_joint(engine, sampling))
    assert p_value > P_FLOOR, f"{policy}: p = {p_value:.2e}"


def test_sampling_where_no_draft_pays_preserves_target_distribution():
    """A cost table where a verified token costs a whole forward: chain's γ is 0 (its free matches still followed
    at depth 1: `cost_aware=false`, `free_q=0`, most steps verify one) and cast stands down; sampled, both still
    give the target's distribution."""
    from engine.costs import CostTable
    from engine.policies import make_policy
    from engine.policies.base import PolicyContext

    dear = tiny_engine(seed=5, dtype=torch.float64, vocab_size=VOCAB, draft_noise=0.6, sharpness=6.0,
                       codec=SymbolCodec(VOCAB))
    dear.context = PolicyContext(costs=CostTable.linear(20.0, 0.0))
    assert make_policy("chain", {}, dear.context).gamma_now == 0
    sampling = SamplingParams(temperature=1.0)
    joint = exact_joint(dear, sampling)
    for policy, params, drafter in [("chain", {"cost_aware": False, "free_q": 0.0}, "suffix"), ("cast", {}, "draft-lm")]:
        counts = Counter()
        for seed in range(SAMPLES):
            request = GenerationRequest(prompt=PROMPT, policy=policy, params=params, drafter=drafter,
                                        max_new_tokens=TOKENS, temperature=1.0, seed=seed)
            counts[tuple(dear.run(request, detail=False).tokens)] += 1
        p_value = chi_square_p(counts, joint)
        assert p_value > P_FLOOR, f"{policy}: p = {p_value:.2e}"
