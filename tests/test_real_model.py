"""The embedded SmolLM2-135M in float32: tree verification and greedy equality on the real thing."""

import pytest
import torch

from engine.loading import load_engine
from engine.options import EngineOptions
from engine.request import GenerationRequest
from engine.tree import position_ids, root_to_leaf_paths, tree_attention_allowed
from test_verification import random_tree

pytestmark = pytest.mark.slow

PROMPTS = ["Write a haiku about trees", "List three uses of a paperclip.",
           "Explain what a hash map is in two sentences."]


@pytest.fixture(scope="module")
def smol():
    return load_engine(EngineOptions(dtype="float32", drafter="prompt-lookup"))


def test_tree_logits_match_sequential_decoding_on_the_real_model(smol):
    lm = smol.target
    lm.reset()
    prefix = smol.codec.encode_prompt(PROMPTS[0])
    lm.forward_chain(prefix)
    tree = random_tree(size=20, vocab=smol.codec.vocab_size, seed=3)
    allowed = tree_attention_allowed(tree.parent, len(prefix))
    tree_logits = lm.forward_tree(tree.token, position_ids(tree.depth, len(prefix)), allowed).logits  # [T, V]
    for path in root_to_leaf_paths(tree.parent)[:4]:
        with torch.no_grad():
            sequential = lm.model(torch.tensor([prefix + [tree.token[i] for i in path]])).logits[0, len(prefix):]
        assert (tree_logits[path] - sequential).abs().max().item() < 1e-4


@pytest.mark.parametrize("policy", ["talon", "chain"])
def test_greedy_with_prompt_lookup_is_identical_to_ar(smol, policy):
    for prompt in PROMPTS:
        ar = smol.run(GenerationRequest(prompt=prompt, policy="ar", max_new_tokens=64), detail=False)
        spec = smol.run(GenerationRequest(prompt=prompt, policy=policy, drafter="prompt-lookup", max_new_tokens=64),
                        detail=False)
        assert spec.tokens == ar.tokens, prompt
        assert spec.new_tokens == len(ar.tokens)
