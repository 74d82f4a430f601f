"""The head and hybrid drafters inside the engine: lossless under every policy, sources recorded."""

from __future__ import annotations

import pytest
import torch

from conftest import random_prompts
from engine.drafters.eagle_head import EagleHeadDrafter
from engine.drafters.hybrid import MATCH, HybridDrafter
from engine.drafters.prompt_lookup import PromptLookupDrafter
from engine.engine import SpecEngine
from engine.models.codec import ByteCodec
from engine.models.head import Eagle3Head, head_config, set_vocab_map
from engine.models.lm import CachedLM
from engine.policies import POLICIES
from engine.request import GenerationRequest
from engine.sampling import SamplingParams
from engine.tree import DraftTree
from tiny_models import TINY_EOS, TINY_VOCAB, tiny_llama

PROMPTS = random_prompts(2, seed=3) + ["the cat the cat the"]
NEW_TOKENS = 16


def random_head(target, dtype=torch.float64, draft_vocab: int = 200) -> Eagle3Head:
    torch.manual_seed(5)
    head = Eagle3Head(head_config(target.config, draft_vocab_size=draft_vocab),
                      target.get_input_embeddings().weight.detach())
    set_vocab_map(head, torch.randperm(TINY_VOCAB)[:draft_vocab].sort().values)
    return head.to(dtype).eval()


@pytest.fixture(scope="module")
def engine():
    target_model = tiny_llama(0, layers=6, dtype=torch.float64)
    head = random_head(target_model)
    drafters = {
        "head": lambda: EagleHeadDrafter(head, num_target_layers=6),
        "hybrid": lambda: HybridDrafter(EagleHeadDrafter(head, num_target_layers=6)),
        "prompt-lookup": lambda: PromptLookupDrafter(),
    }
    return SpecEngine(CachedLM(target_model, name="tiny"), ByteCodec(vocab_size=TINY_VOCAB, eos_id=TINY_EOS),
                      drafters, default_drafter="hybrid")


@pytest.fixture(scope="module")
def reference(engine):
    return {p: engine.run(GenerationRequest(prompt=p, policy="ar", max_new_tokens=NEW_TOKENS), detail=False).tokens
            for p in PROMPTS}


@pytest.mark.parametrize("drafter", ["head", "hybrid"])
@pytest.mark.parametrize("policy", sorted(p for p in POLICIES if POLICIES[p].drafts))
def test_greedy_output_identical_to_plain_decoding(engine, reference, policy, drafter):
    for prompt in PROMPTS:
        result = engine.run(GenerationRequest(prompt=prompt, policy=policy, drafter=drafter,
                                              max_new_tokens=NEW_TOKENS), detail=False)
        assert result.tokens == reference[prompt], (policy, drafter, prompt)
        assert result.delta > 0  # the head ran


def test_sampling_runs_with_the_head(engine):
    result = engine.run(GenerationRequest(prompt=PROMPTS[0], policy="talon", drafter="hybrid", temperature=0.8,
                                          seed=1, max_new_tokens=NEW_TOKENS), detail=False)
    assert result.new_tokens > 0


def test_hybrid_nodes_record_who_proposed_them(engine):
    events = []
    engine.run(GenerationRequest(prompt="abcabcabcabcab", policy="eagle", drafter="hybrid", max_new_tokens=12),
               emit=events.append)
    sources = {c.source for e in events if e.type == "draft_layer" for c in e.candidates}
    assert "head" in sources
    assert any(MATCH in s for s in sources)


def test_match_candidate_scored_at_least_by_the_head_probability():
    target_model = tiny_llama(0, layers=6, dtype=torch.float64)
    head = EagleHeadDrafter(random_head(target_model), num_target_layers=6)
    hybrid = HybridDrafter(head)
    context = [1, 2, 3, 1, 2, 3, 1, 2]
    with torch.no_grad():
        out = target_model(input_ids=torch.tensor([context]), output_hidden_states=True)
    feats = torch.cat([out.hidden_states[i][0] for i in head.feature_layers], dim=-1)
    hybrid.start(context, feats[:-1])
    tree = DraftTree.with_root(context[-1])
    proposals = hybrid.propose(tree, [0], 2, False, SamplingParams(), torch.Generator())
    head_probs = torch.softmax(head.frontier_logits(tree, [0])[0].double(), -1)
    candidates = {t: (q, p.source) for p in proposals for t, q in zip(p.token, p.q)}
    assert 3 in candidates and MATCH in candidates[3][1]  # "1 2" was followed by 3
    assert candidates[3][0] >= head_probs[3].item() - 1e-12
