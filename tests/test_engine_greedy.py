"""Greedy decoding through every policy and drafter is token-for-token plain greedy decoding."""

import pytest
import torch

from conftest import random_prompts
from engine.policies import POLICIES
from engine.request import GenerationRequest
from tiny_models import TINY_EOS

PROMPTS = random_prompts(20, seed=1)
NEW_TOKENS = 64


def plain_greedy(model, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """Hugging Face's own greedy generate, as the reference the engine must reproduce."""
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens, do_sample=False,
                             eos_token_id=TINY_EOS, pad_token_id=TINY_EOS, top_k=None, top_p=None)
    return out[0, len(prompt_ids):].tolist()


@pytest.fixture(scope="module")
def reference(engine64):
    return {prompt: plain_greedy(engine64.target.model, engine64.codec.encode_prompt(prompt), NEW_TOKENS)
            for prompt in PROMPTS}


@pytest.mark.parametrize("drafter", ["draft-lm", "prompt-lookup", "suffix"])
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_greedy_output_identical_to_plain_decoding(engine64, reference, policy, drafter):
    accepted = 0
    for prompt in PROMPTS:
        request = GenerationRequest(prompt=prompt, policy=policy, drafter=drafter, max_new_tokens=NEW_TOKENS)
        result = engine64.run(request, detail=False)
        assert result.tokens == reference[prompt], prompt
        accepted += result.new_tokens - result.steps
    if POLICIES[policy].drafts and drafter == "draft-lm":
        assert accepted > 0, "the noisy-copy draft should get some drafts accepted"


def test_detailed_events_do_not_change_the_output(engine64, reference):
    events = []
    result = engine64.run(GenerationRequest(prompt=PROMPTS[0], policy="talon", max_new_tokens=NEW_TOKENS),
                          emit=events.append)
    assert result.tokens == reference[PROMPTS[0]]
    assert {"draft_layer", "tree", "verify"} <= {event.type for event in events}
