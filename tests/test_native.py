"""The native bfloat16 kernel (engine/native/forward.c): as close to float32 as torch's bfloat16 forward,
a token's logits independent of the tokens beside it (so every policy is greedy-identical to ar in
bfloat16 too), and a clear fallback where it cannot run."""

import shutil
import warnings

import pytest
import torch

from conftest import random_prompts
from engine import native
from engine.fastlm import FastLM, causal_lm
from engine.policies import POLICIES
from engine.request import GenerationRequest
from engine.testing import tiny_engine, tiny_llama
from engine.tree import path_to, position_ids, tree_attention_allowed
from test_verification import random_tree

HIDDEN = 128  # head size 32: the kernel's smallest block


def cpu_has_the_kernel() -> bool:
    _, flags = native._cpu()
    return "avx512_bf16" in flags and shutil.which("gcc") is not None


needs_kernel = pytest.mark.skipif(not cpu_has_the_kernel(), reason="needs AVX512-BF16 and gcc")


def lms(seed: int = 3):
    """The kernel's LM and torch's lean LM in bfloat16, and a float32 LM on the same (rounded) weights."""
    model = tiny_llama(seed=seed, hidden=HIDDEN, layers=3, dtype=torch.bfloat16)
    reference = FastLM(tiny_llama(seed=seed, hidden=HIDDEN, layers=3, dtype=torch.bfloat16).float())
    return FastLM(model), FastLM(model, kernel=False), reference


def test_the_kernel_runs_where_the_cpu_and_a_compiler_allow_and_says_why_not_elsewhere():
    lm, _, reference = lms()
    if cpu_has_the_kernel():
        assert lm.forward_name == "native" and lm.kernel_max_tokens >= 4
    else:
        assert lm.forward_name == "lean" and lm.kernel_reason
    assert reference.forward_name == "lean" and "bfloat16" in reference.kernel_reason


@needs_kernel
def test_kernel_logits_are_as_close_to_float32_as_torchs_bfloat16_forward():
    kernel, torch_ops, reference = lms()
    prefix = [5, 17, 33, 2, 9, 41, 7]
    tree = random_tree(size=12, vocab=kernel.config.vocab_size, seed=5)
    errors = {}
    for name, lm in (("kernel", kernel), ("torch", torch_ops), ("float32", reference)):
        chain = lm.forward_chain(prefix[:3]).logits  # on an empty cache: causal among the new tokens
        one = lm.forward_chain(prefix[3:4]).logits
        rest = lm.forward_chain(prefix[4:]).logits
        allowed = tree_attention_allowed(tree.parent, len(prefix))
        verified = lm.forward_tree(tree.token, position_ids(tree.depth, len(prefix)), allowed).logits
        errors[name] = torch.cat([chain, one, rest, verified])
    kernel_error = (errors["kernel"] - errors["float32"]).abs().max().item()
    torch_error = (errors["torch"] - errors["float32"]).abs().max().item()
    assert 0 < kernel_error <= 1.5 * torch_error, (kernel_error, torch_error)


@needs_kernel
def test_a_tree_through_the_kernel_gives_each_node_its_paths_logits_bit_for_bit():
    """Each output is the same float32 sum in the same order whatever the tokens beside it, and masked
    columns add exact zeros: so a verify reproduces decoding one token at a time exactly."""
    lm, _, _ = lms(seed=4)
    prefix = [(7 * i) % 200 for i in range(37)]  # ancestors land at other slots, and other lanes, than alone
    tree = random_tree(size=40, vocab=lm.config.vocab_size, seed=8)
    lm.forward_chain(prefix)
    allowed = tree_attention_allowed(tree.parent, len(prefix))
    verified = lm.forward_tree(tree.token, position_ids(tree.depth, len(prefix)), allowed, (1, -1))
    for node in range(len(tree)):
        lm.crop(len(prefix))
        for token in [tree.token[i] for i in path_to(tree.parent, node)]:
            step = lm.forward_chain([token], (1, -1))
        assert torch.equal(verified.logits[node], step.logits[0]), node
        assert all(torch.equal(a[node], b[0]) for a, b in zip(verified.hidden, step.hidden))


@needs_kernel
def test_the_cache_compacted_to_a_path_continues_as_if_only_that_path_was_fed():
    lm, _, _ = lms(seed=6)
    prefix = [8, 6, 7, 5, 3, 0, 9]
    tree = random_tree(size=16, vocab=lm.config.vocab_size, seed=2)
    lm.forward_chain(prefix)
    lm.forward_tree(tree.token, position_ids(tree.depth, len(prefix)),
                    tree_attention_allowed(tree.parent, len(prefix)))
    path = path_to(tree.parent, len(tree) - 1)
    lm.keep(list(range(len(prefix))) + [len(prefix) + i for i in path])
    after = lm.forward_chain([11, 12]).logits
    lm.reset()
    fed = lm.forward_chain(prefix)
    fed = lm.forward_chain([tree.token[i] for i in path] + [11, 12]).logits[-2:]
    assert torch.equal(after, fed)


@needs_kernel
def test_every_policy_is_greedy_identical_to_ar_in_bfloat16_through_the_kernel():
    engine = tiny_engine(dtype=torch.bfloat16, hidden=HIDDEN, sharpness=4.0)
    assert engine.target.forward_name == "native"
    for prompt in random_prompts(4, seed=2):
        ar = engine.run(GenerationRequest(prompt=prompt, policy="ar", max_new_tokens=40), detail=False)
        for policy in sorted(POLICIES):
            result = engine.run(GenerationRequest(prompt=prompt, policy=policy, max_new_tokens=40), detail=False)
            assert result.tokens == ar.tokens, (policy, prompt)


@pytest.fixture
def without_amx():
    """The path a CPU with AVX512-BF16 but no AMX takes (dot products, at most 4 tokens), run here."""
    library = native.kernel()
    library.native_use_amx(0)
    yield
    library.native_use_amx(1)


@needs_kernel
def test_without_amx_the_dot_product_path_is_as_accurate_and_as_exact(without_amx):
    kernel, torch_ops, reference = lms(seed=9)
    assert kernel.kernel_max_tokens == 4
    prefix = [(5 * i) % 200 for i in range(21)]
    tree = random_tree(size=4, vocab=kernel.config.vocab_size, seed=4)  # within the 4 tokens the path takes
    allowed = tree_attention_allowed(tree.parent, len(prefix))
    logits = {}
    for name, lm in (("kernel", kernel), ("torch", torch_ops), ("float32", reference)):
        lm.forward_chain(prefix)
        logits[name] = lm.forward_tree(tree.token, position_ids(tree.depth, len(prefix)), allowed).logits
    kernel_error = (logits["kernel"] - logits["float32"]).abs().max().item()
    torch_error = (logits["torch"] - logits["float32"]).abs().max().item()
    assert 0 < kernel_error <= 1.5 * torch_error, (kernel_error, torch_error)
    for node in range(len(tree)):
        kernel.crop(len(prefix))
        for token in [tree.token[i] for i in path_to(tree.parent, node)]:
            step = kernel.forward_chain([token]).logits
        assert torch.equal(logits["kernel"][node], step[0]), node


def test_the_kernel_can_be_turned_off_and_a_shape_it_cannot_block_falls_back_with_a_reason(monkeypatch):
    monkeypatch.setenv("SPECSCOPE_FORWARD", "lean")
    assert causal_lm(tiny_llama(seed=0, hidden=HIDDEN, dtype=torch.bfloat16)).forward_name == "lean"
    monkeypatch.delenv("SPECSCOPE_FORWARD")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        odd = causal_lm(tiny_llama(seed=0, hidden=48, dtype=torch.bfloat16), name="odd")
    assert odd.forward_name == "lean"
    if cpu_has_the_kernel():
        assert "multiples of 32" in odd.kernel_reason
    monkeypatch.setenv("SPECSCOPE_FORWARD", "fast")
    with pytest.raises(ValueError, match="SPECSCOPE_FORWARD"):
        causal_lm(tiny_llama(seed=0))


@pytest.fixture(scope="module")
def smol_bf16():
    from engine.loading import load_engine
    from engine.options import EngineOptions

    return load_engine(EngineOptions(dtype="bfloat16"))


@pytest.mark.slow
@needs_kernel
def test_on_the_real_model_the_kernel_is_as_close_to_float32_as_torchs_bfloat16(smol_bf16):
    from engine.fastlm import FastLM

    model = smol_bf16.target.model
    kernel, torch_ops = smol_bf16.target, FastLM(model, kernel=False)
    prompt = smol_bf16.codec.encode_prompt("Explain what a hash map is in two sentences.")
    tree = random_tree(size=40, vocab=smol_bf16.codec.vocab_size, seed=3)
    allowed = tree_attention_allowed(tree.parent, len(prompt))
    outputs = {}
    for name, lm in (("kernel", kernel), ("torch", torch_ops)):
        lm.reset()
        lm.forward_chain(prompt)
        outputs[name] = lm.forward_tree(tree.token, position_ids(tree.depth, len(prompt)), allowed).logits
    kernel.reset()
    reference = FastLM(type(model)(model.config).to(torch.float32).eval())
    reference.model.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    reference = FastLM(reference.model)
    reference.forward_chain(prompt)
    exact = reference.forward_tree(tree.token, position_ids(tree.depth, len(prompt)), allowed).logits
    kernel_error = (outputs["kernel"] - exact).abs().mean().item()
    torch_error = (outputs["torch"] - exact).abs().mean().item()
    assert kernel_error <= 1.25 * torch_error, (kernel_error, torch_error)


@pytest.mark.slow
@needs_kernel
@pytest.mark.parametrize("policy", ["chain", "eagle", "talon", "cast", "talon-adaptive"])
def test_on_the_real_model_in_bfloat16_every_policy_is_greedy_identical_to_ar(smol_bf16, policy):
    assert smol_bf16.target.forward_name == "native"
    for prompt in ["Write a haiku about trees", "List three uses of a paperclip."]:
        ar = smol_bf16.run(GenerationRequest(prompt=prompt, policy="ar", max_new_tokens=48), detail=False)
        spec = smol_bf16.run(GenerationRequest(prompt=prompt, policy=policy, max_new_tokens=48), detail=False)
        assert spec.tokens == ar.tokens, prompt
        assert spec.steps < ar.steps


@pytest.mark.slow
@needs_kernel
def test_on_the_real_model_a_61_node_tree_gives_each_node_its_paths_logits_bit_for_bit(smol_bf16):
    """The case that caught a softmax sum taken lane by lane (18 of 61 nodes differed): with 30 layers
    one float32 rounding of a sum that depends on where the ancestors sit shows in the bfloat16 output."""
    lm = smol_bf16.target
    prefix = torch.randint(0, smol_bf16.codec.vocab_size, (60,), generator=torch.Generator().manual_seed(60)).tolist()
    tree = random_tree(size=61, vocab=smol_bf16.codec.vocab_size, seed=1)
    lm.reset()
    lm.forward_chain(prefix)
    verified = lm.forward_tree(tree.token, position_ids(tree.depth, len(prefix)),
                               tree_attention_allowed(tree.parent, len(prefix))).logits
    differing = []
    for node in range(len(tree)):
        lm.crop(len(prefix))
        for token in [tree.token[i] for i in path_to(tree.parent, node)]:
            step = lm.forward_chain([token]).logits
        if not torch.equal(verified[node], step[0]):
            differing.append(node)
    lm.reset()
    assert differing == []
