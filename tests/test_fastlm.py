"""The lean forward (engine/models/fastlm.py) computes what Hugging Face's forward computes, call for call."""

import copy
import warnings

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from engine.models.base import LanguageModel
from engine.models.fastlm import FastLM, causal_lm
from engine.models.lm import CachedLM
from engine.tree import path_to, position_ids, tree_attention_allowed
from tiny_models import tiny_llama
from test_verification import random_tree, sequential_logits

EXACT = 1e-9  # float64: the same operations in the same order, so in practice 0


def pair(seed: int = 3, dtype: torch.dtype = torch.float64, layers: int = 3):
    """The plain and the lean LM over one model (the lean one's fused weights are the model's own)."""
    model = tiny_llama(seed=seed, dtype=dtype, layers=layers)
    return CachedLM(model), FastLM(model)


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def test_lean_chain_logits_and_features_equal_hugging_face():
    plain, lean = pair()
    layers = (0, 1, 2, 3, -1)  # the inputs of every layer, the last hidden state (after the final norm) twice
    prompt = list(range(10, 40))
    for tokens in (prompt, [7], [8, 9, 10]):
        a, b = plain.forward_chain(tokens, layers), lean.forward_chain(tokens, layers)
        assert max_diff(a.logits, b.logits) < EXACT
        assert len(b.hidden) == len(layers)
        assert all(max_diff(x, y) < EXACT for x, y in zip(a.hidden, b.hidden))
    assert lean.cache_len == plain.cache_len == len(prompt) + 4


def test_lean_tree_logits_equal_sequential_decoding_along_every_path():
    _, lean = pair(seed=3)
    prefix = [1, 2, 3, 4, 5, 6]
    tree = random_tree(size=24, vocab=lean.config.vocab_size, seed=7)
    lean.forward_chain(prefix)
    allowed = tree_attention_allowed(tree.parent, len(prefix))
    logits = lean.forward_tree(tree.token, position_ids(tree.depth, len(prefix)), allowed, (2,))  # [T, V]
    for leaf in range(len(tree)):
        path = path_to(tree.parent, leaf)
        expected = sequential_logits(lean.model, prefix + [tree.token[i] for i in path])[-1]
        assert torch.allclose(logits.logits[leaf], expected, atol=EXACT, rtol=0)


def test_lean_cache_compacted_to_a_path_then_cropped_equals_hugging_face():
    plain, lean = pair(seed=4)
    prefix = [9, 8, 7]
    tree = random_tree(size=16, vocab=lean.config.vocab_size, seed=11)
    for lm in (plain, lean):
        lm.forward_chain(prefix)
        lm.forward_tree(tree.token, position_ids(tree.depth, len(prefix)), tree_attention_allowed(tree.parent, 3))
    path = path_to(tree.parent, max(range(len(tree)), key=lambda i: tree.depth[i]))
    kept = list(range(len(prefix))) + [len(prefix) + i for i in path]
    plain.keep(kept)
    lean.keep(kept)
    assert lean.cache_len == len(kept)
    assert max_diff(plain.forward_chain([42, 43]).logits, lean.forward_chain([42, 43]).logits) < EXACT
    plain.crop(2)
    lean.crop(2)
    assert lean.cache_len == 2
    assert max_diff(plain.forward_chain([5]).logits, lean.forward_chain([5]).logits) < EXACT


def test_a_frontier_that_hides_earlier_frontier_nodes_is_masked_like_hugging_face():
    """A draft LM's frontier sees the context and its own ancestors, not the other cached nodes."""
    plain, lean = pair(seed=6)
    first = torch.zeros(2, 7, dtype=torch.bool)  # two children of the root, each seeing itself
    first[:, :5] = True
    first[0, 5] = first[1, 6] = True
    for lm in (plain, lean):
        lm.forward_chain([3, 1, 4, 1, 5])
        lm.forward_tree([9, 2], torch.tensor([5, 5]), first)
    allowed = torch.zeros(3, 10, dtype=torch.bool)
    allowed[:, :5] = True
    allowed[0, 5] = allowed[1, 6] = allowed[2, 6] = True  # ancestors: node 5 for the first, node 6 for two
    allowed[torch.arange(3), torch.arange(7, 10)] = True
    positions = torch.tensor([6, 6, 6])
    a = plain.forward_tree([6, 5, 3], positions, allowed).logits
    b = lean.forward_tree([6, 5, 3], positions, allowed).logits
    assert max_diff(a, b) < EXACT


def test_the_lean_cache_grows_past_its_first_capacity_keeping_what_it_holds():
    plain, lean = pair(seed=8, layers=2)
    first = lean.capacity
    prompt = [i % 250 for i in range(first - 3)]
    for lm in (plain, lean):
        lm.forward_chain(prompt)
    for _ in range(3):  # one token at a time across the boundary
        assert max_diff(plain.forward_chain([17, 18]).logits, lean.forward_chain([17, 18]).logits) < EXACT
    assert lean.capacity > first and lean.cache_len == plain.cache_len


def test_float32_lean_forward_equals_hugging_face_to_rounding():
    plain, lean = pair(seed=9, dtype=torch.float32)
    prompt = list(range(50))
    assert max_diff(plain.forward_chain(prompt).logits, lean.forward_chain(prompt).logits) < 1e-5
    tree = random_tree(size=12, vocab=lean.config.vocab_size, seed=2)
    args = (tree.token, position_ids(tree.depth, len(prompt)), tree_attention_allowed(tree.parent, len(prompt)))
    assert max_diff(plain.forward_tree(*args).logits, lean.forward_tree(*args).logits) < 1e-5


def test_fusing_keeps_one_copy_of_the_weights_and_the_model_unchanged():
    model = tiny_llama(seed=1, dtype=torch.float64)
    before = sequential_logits(model, [1, 2, 3])
    lean = FastLM(model)
    attn, mlp = model.model.layers[0].self_attn, model.model.layers[0].mlp
    fused = lean.layers[0].qkv
    assert attn.q_proj.weight.data_ptr() == fused.data_ptr()
    assert attn.k_proj.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
    assert mlp.up_proj.weight.untyped_storage().data_ptr() == lean.layers[0].gate_up.untyped_storage().data_ptr()
    assert torch.equal(sequential_logits(model, [1, 2, 3]), before)


def test_a_model_the_lean_forward_cannot_run_falls_back_to_hugging_face_and_says_so_once():
    config = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, attention_bias=True)
    model = LlamaForCausalLM(config).eval()
    with pytest.warns(UserWarning, match="biased projections.*plain Hugging Face forward"):
        lm = causal_lm(model, name="biased-test-model")
    assert type(lm) is CachedLM
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert type(causal_lm(copy.deepcopy(model), name="biased-test-model")) is CachedLM
    with pytest.raises(ValueError, match="biased projections"):
        FastLM(model)


def test_the_plain_forward_can_be_asked_for(monkeypatch):
    assert type(causal_lm(tiny_llama(seed=0))) is FastLM
    assert type(causal_lm(tiny_llama(seed=0), forward="plain")) is CachedLM
    monkeypatch.setenv("SPECSCOPE_FORWARD", "plain")
    assert type(causal_lm(tiny_llama(seed=0))) is CachedLM


def test_both_forwards_are_language_models_the_engine_can_verify_with():
    plain, lean = pair()
    assert isinstance(plain, LanguageModel) and isinstance(lean, LanguageModel)
    assert (plain.forward_name, lean.forward_name) == ("plain", "lean")


@pytest.mark.slow
def test_lean_forward_equals_hugging_face_on_the_real_model_in_float32():
    from transformers import AutoModelForCausalLM

    from engine.models.embedded import embedded_model_dir

    model = AutoModelForCausalLM.from_pretrained(str(embedded_model_dir()), dtype=torch.float32).eval()
    plain, lean = CachedLM(model), FastLM(model)
    prefix = [int(t) for t in torch.randint(0, 49152, (300,), generator=torch.Generator().manual_seed(0))]
    layers = (2, 15, 27)
    a, b = plain.forward_chain(prefix, layers), lean.forward_chain(prefix, layers)
    assert max_diff(a.logits, b.logits) < 1e-4
    assert all(max_diff(x, y) < 1e-4 for x, y in zip(a.hidden, b.hidden))
    tree = random_tree(size=40, vocab=49152, seed=3)
    args = (tree.token, position_ids(tree.depth, len(prefix)), tree_attention_allowed(tree.parent, len(prefix)))
    a, b = plain.forward_tree(*args, layers), lean.forward_tree(*args, layers)
    assert max_diff(a.logits, b.logits) < 1e-4
    assert all(max_diff(x, y) < 1e-4 for x, y in zip(a.hidden, b.hidden))
    path = path_to(tree.parent, max(range(len(tree)), key=lambda i: tree.depth[i]))
    kept = list(range(len(prefix))) + [len(prefix) + i for i in path]
    plain.keep(kept)
    lean.keep(kept)
    assert max_diff(plain.forward_chain([42]).logits, lean.forward_chain([42]).logits) < 1e-4
    plain.crop(200)
    lean.crop(200)
    assert max_diff(plain.forward_chain([42, 7, 9]).logits, lean.forward_chain([42, 7, 9]).logits) < 1e-4
