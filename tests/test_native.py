"""The native bfloat16 kernel (engine/models/native/forward.c): as close to float32 as torch's bfloat16 forward,
a token's logits independent of the tokens beside it (so every policy is greedy-identical to ar in
bfloat16 too), and a clear fallback where it cannot run.

Which tests run where. The kernel has two paths: AMX tiles (Intel Xeons with AMX) and dot products over
paired weights: AVX512-BF16's `vdpbf16ps` (the AMD Zen 5 among them), or on a CPU with AVX2 and FMA but no
AVX512-BF16 (the AMD Zen 3) the same path built from avx2.h, two FMAs per pair. Each bit-for-bit and accuracy test runs
once per path, `[amx]` and `[dot-products]`: on an AMX CPU both (`native_use_amx(0)` forces the second),
elsewhere the second only, the first skipped saying the CPU has no AMX. Both paths take trees of up to
256 tokens a call, and longer forwards in several calls, so every forward of a bfloat16 run goes through
the path the machine has. Where the kernel does not run at all (no AVX2, no gcc), the kernel tests
are skipped naming why, and `test_on_torchs_ops_...` checks what the docs promise there instead (it runs
on every machine: torch's ops are everywhere).
"""

import warnings

import pytest
import torch

from conftest import random_prompts
from engine.models import native
from engine.models.base import BatchItem
from engine.models.fastlm import FastLM, causal_lm
from engine.policies import POLICIES
from engine.request import GenerationRequest
from engine.tree import path_to, position_ids, tree_attention_allowed
from tiny_models import tiny_engine, tiny_llama
from test_verification import random_tree

HIDDEN = 128  # head size 32: the kernel's smallest block


def kernel_unavailable() -> str | None:
    """Why the native kernel does not run here (built and loaded, as the engine would), or None."""
    try:
        native.kernel()
    except native.NativeUnavailable as error:
        return str(error)
    return None


def cpu_has_the_kernel() -> bool:
    return kernel_unavailable() is None


needs_kernel = pytest.mark.skipif(not cpu_has_the_kernel(),
                                  reason=f"the native kernel does not run here: {kernel_unavailable()}")


@pytest.fixture(params=["amx", "dot-products"])
def kernel_path(request):
    """Each of the kernel's two paths that this CPU can run, selected for the test and restored after."""
    library = native.kernel()
    library.native_use_amx(1)
    if request.param == "amx" and not library.native_amx_active():
        pytest.skip("the AMX path: this CPU has no AMX (its dot-product path is tested instead)")
    library.native_use_amx(request.param == "amx")
    yield request.param
    library.native_use_amx(1)


def lms(seed: int = 3):
    """The kernel's LM and torch's lean LM in bfloat16, and a float32 LM on the same (rounded) weights."""
    model = tiny_llama(seed=seed, hidden=HIDDEN, layers=3, dtype=torch.bfloat16)
    reference = FastLM(tiny_llama(seed=seed, hidden=HIDDEN, layers=3, dtype=torch.bfloat16).float())
    return FastLM(model), FastLM(model, kernel=False), reference


def test_the_kernel_runs_where_the_cpu_and_a_compiler_allow_and_says_why_not_elsewhere():
    lm, _, reference = lms()
    if cpu_has_the_kernel():
        assert lm.forward_name == "native" and lm.kernel_max_tokens == 256
    else:
        assert lm.forward_name == "lean" and lm.kernel_reason
    assert reference.forward_name == "lean" and "bfloat16" in reference.kernel_reason


@needs_kernel
def test_kernel_logits_are_as_close_to_float32_as_torchs_bfloat16_forward(kernel_path):
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
@pytest.mark.parametrize("context", [37, 300])
def test_a_tree_through_the_kernel_gives_each_node_its_paths_logits_bit_for_bit(kernel_path, context):
    """Each output is the same float32 sum in the same order whatever the tokens beside it, and masked
    columns add exact zeros: so a verify reproduces decoding one token at a time exactly. A context of 300
    is a prompt of two calls and attention over more columns than one block of anything in the kernel."""
    lm, _, _ = lms(seed=4)
    prefix = [(7 * i) % 200 for i in range(context)]  # ancestors land at other slots, and other lanes, than alone
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
def test_the_cache_compacted_to_a_path_continues_as_if_only_that_path_was_fed(kernel_path):
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
def test_a_caches_key_tiles_give_the_bits_of_transposing_every_key_in_every_call(kernel_path):
    """A session keeps its keys in tiles where the kernel reads them so (forward.c's Sequence) and another
    transposes every key in every call: through a prompt in two parts, a tree that grows the cache, a
    compaction that moves rows inside earlier tiles, decoding, and a crop into a tile, both give the same bits."""
    lm, _, _ = lms(seed=9)
    kept, transposed = lm.session(), lm.session()
    transposed._new_key_tiles = lambda capacity: None
    transposed.key_tiles = None
    assert kept.key_tiles is not None and lm.kernel.reads_key_tiles  # both paths without AMX read tiles
    prefix = [(11 * i) % 200 for i in range(250)]
    tree = random_tree(size=30, vocab=lm.config.vocab_size, seed=3)
    path = path_to(tree.parent, len(tree) - 1)
    outputs = {}
    for name, session in (("kept", kept), ("transposed", transposed)):
        steps = [session.forward_chain(prefix[:203]).logits, session.forward_chain(prefix[203:]).logits]
        steps.append(session.forward_tree(tree.token, position_ids(tree.depth, len(prefix)),
                                          tree_attention_allowed(tree.parent, len(prefix))).logits)
        session.keep(list(range(len(prefix) - 20)) + [len(prefix) - 20 + 2 * i for i in range(10)]
                     + [len(prefix) + i for i in path])
        steps += [session.forward_chain([5 + i]).logits for i in range(3)]
        session.crop(session.cache_len - 7)
        steps.append(session.forward_chain(list(range(40, 80))).logits)
        outputs[name] = steps
    assert kept.capacity > lm.capacity  # the tree grew it
    assert all(torch.equal(a, b) for a, b in zip(outputs["kept"], outputs["transposed"]))


@needs_kernel
def test_every_policy_is_greedy_identical_to_ar_in_bfloat16_through_the_kernel(kernel_path):
    engine = tiny_engine(dtype=torch.bfloat16, hidden=HIDDEN, sharpness=4.0)
    assert engine.target.forward_name == "native"
    for prompt in random_prompts(4, seed=2):
        ar = engine.run(GenerationRequest(prompt=prompt, policy="ar", max_new_tokens=40), detail=False)
        for policy in sorted(POLICIES):
            result = engine.run(GenerationRequest(prompt=prompt, policy=policy, max_new_tokens=40), detail=False)
            assert result.tokens == ar.tokens, (policy, prompt)


@needs_kernel
def test_a_forward_longer_than_one_call_is_cut_into_calls_that_give_the_same_bits(kernel_path):
    """A prompt or a tree past the kernel's tokens per call (256) runs in several calls, never on torch's
    ops: each call sees the earlier calls' tokens in the cache and its own rows of the mask."""
    whole, _, _ = lms(seed=5)
    cut, _, _ = lms(seed=5)
    cut.kernel_max_tokens = 5  # as a 600-token prompt or a 300-node tree meets the real limit
    prefix = [(11 * i) % 200 for i in range(23)]
    tree = random_tree(size=19, vocab=whole.config.vocab_size, seed=7)
    allowed = tree_attention_allowed(tree.parent, len(prefix))
    outputs = []
    for lm in (whole, cut):
        chain = lm.forward_chain(prefix, (2, -1))
        verified = lm.forward_tree(tree.token, position_ids(tree.depth, len(prefix)), allowed, (2, -1))
        outputs.append((chain, verified, lm.kv[:, :, :, :lm.cache_len].clone()))
    for a, b in zip(outputs[0][:2], outputs[1][:2]):
        assert torch.equal(a.logits, b.logits)
        assert all(torch.equal(x, y) for x, y in zip(a.hidden, b.hidden))
    assert torch.equal(outputs[0][2], outputs[1][2])


@needs_kernel
@pytest.mark.parametrize("calls", ["one call", "several calls"])
def test_a_forward_without_logits_leaves_the_cache_features_and_next_logits_bit_for_bit(kernel_path, calls):
    """A prefill asks for no logits (`logits=False`): the kernel skips its output head, and nothing else
    changes: the same features, the same cache, so the same logits at the next step."""
    outputs = []
    for want in (True, False):
        lm, _, _ = lms(seed=6)
        if calls == "several calls":
            lm.kernel_max_tokens = 5
        prefix = [(13 * i) % 200 for i in range(23)]
        prefill = lm.forward_chain(prefix, (2, -1), logits=want)
        assert (prefill.logits is None) == (not want)
        step = lm.forward_chain([42], (2, -1))
        outputs.append((prefill.hidden, lm.kv[:, :, :, :lm.cache_len].clone(), step.logits, step.hidden))
    (hidden, kv, logits, step_hidden), (hidden_, kv_, logits_, step_hidden_) = outputs
    assert all(torch.equal(a, b) for a, b in zip(hidden + step_hidden, hidden_ + step_hidden_))
    assert torch.equal(kv, kv_) and torch.equal(logits, logits_)


@needs_kernel
def test_the_kernels_logits_stay_bf16_until_read_then_widen_to_the_same_float32_once(kernel_path):
    """A kernel forward hands back its logits as the output head wrote them (`narrow`, bf16) and widens them
    on the first read of `logits`: exactly `narrow.float()`, the same tensor on every later read; a batched
    call's items each a view of their rows. A greedy walk reads argmaxes off `narrow` (engine/engine.py)."""
    lm, _, _ = lms(seed=3)
    out = lm.forward_chain([5, 9, 14], (2,))
    assert out.narrow.dtype == torch.bfloat16 and out.narrow.shape == (3, lm.config.vocab_size)
    assert torch.equal(out.logits.view(torch.int32), out.narrow.float().view(torch.int32))
    assert out.logits is out.logits and out.logits.dtype == torch.float32
    for row in range(3):
        assert native.argmax_row(out.narrow, row) == int(out.logits[row].argmax())
    assert lm.forward_chain([1, 2], logits=False).narrow is None
    other = lm.session()
    other.forward_chain([7, 8])
    both = lm.forward_batch([BatchItem(lm, [3]), BatchItem(other, [4, 6])])
    assert [tuple(o.narrow.shape) for o in both] == [(1, lm.config.vocab_size), (2, lm.config.vocab_size)]
    assert all(torch.equal(o.logits, o.narrow.float()) for o in both)


def test_torchs_lean_forward_without_logits_leaves_the_cache_and_features_as_they_are():
    outputs = []
    for want in (True, False):
        _, lean, reference = lms(seed=6)
        for lm in (lean, reference):
            prefill = lm.forward_chain(list(range(3, 40)), (1, -1), logits=want)
            assert (prefill.logits is None) == (not want)
            outputs.append((prefill.hidden, lm.forward_chain([42]).logits))
    for (hidden, logits), (hidden_, logits_) in zip(outputs[:2], outputs[2:]):
        assert all(torch.equal(a, b) for a, b in zip(hidden, hidden_)) and torch.equal(logits, logits_)


@needs_kernel
def test_the_kernel_refuses_calls_past_its_cache_or_table_with_a_reason_not_a_crash(kernel_path):
    lm, _, _ = lms(seed=1)
    x = lm.embed[:2].clone()
    with pytest.raises(RuntimeError, match="past the cache's capacity"):
        lm.kernel(x, torch.tensor([0, 1]), None, lm.capacity - 1, [])
    with pytest.raises(RuntimeError, match="rotary position outside the cache"):
        lm.kernel(x, torch.tensor([0, lm.capacity]), None, 0, [])
    with pytest.raises(RuntimeError, match="more new tokens than one call takes"):
        lm.kernel(lm.embed[:1].repeat(257, 1).contiguous(), torch.arange(257), None, 0, [])
    after = lm.forward_chain([1, 2, 3]).logits  # nothing was written: the cache still works
    assert torch.isfinite(after).all()


def test_a_kernel_whose_structs_differ_from_their_mirrors_is_refused_at_load():
    class Stale:
        def native_struct_sizes(self, sizes):
            sizes[0], sizes[1], sizes[2] = 32, 48, 64

        def native_head_struct_size(self, size):
            size._obj.value = 64

        def native_sequence_struct_size(self, size):
            size._obj.value = 16

        def native_line_struct_size(self, size):
            size._obj.value = 8

    with pytest.raises(native.NativeUnavailable, match="do not match their ctypes mirrors"):
        native._checked(Stale())


@needs_kernel
def test_a_cached_kernel_that_does_not_load_is_built_again_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECSCOPE_CACHE", str(tmp_path))
    _, path = native.build_plan()
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a shared object")  # as a build cut short would leave it
    native.kernel.cache_clear()
    try:
        with pytest.warns(UserWarning, match="does not load"):
            rebuilt = native.kernel()
        assert rebuilt.native_max_tokens() == 256
        assert path.read_bytes()[:4] == b"\x7fELF"
    finally:
        native.kernel.cache_clear()


@needs_kernel
def test_the_heads_kernel_linears_follow_the_path_and_a_weight_changed_in_place(kernel_path):
    linear = torch.nn.Linear(64, 48, bias=False).to(torch.bfloat16)
    swapped = native.KernelLinear(linear)
    x = torch.randn(7, 64).to(torch.bfloat16)
    with torch.inference_mode():
        exact = x.float() @ linear.weight.float().t()
        assert (swapped(x).float() - exact).abs().max() < 0.05 * exact.abs().max()
        with torch.no_grad():
            linear.weight.mul_(2)
        assert torch.allclose(swapped(x).float(), 2 * exact, rtol=0.02, atol=0.05 * exact.abs().max().item())


@needs_kernel
@pytest.mark.parametrize("rows, inputs", [(16, 32), (48, 96), (80, 64), (592, 128), (64, 96), (96, 64)])
def test_a_products_bits_depend_on_neither_the_tokens_beside_it_nor_how_the_threads_cut_it(kernel_path, rows, inputs):
    """The products' blocks must leave every output one chain in its own order: a token's row is the same
    alone, among up to 69 others, and on 1, 2 or 3 threads. On the dot-product path: up to 12 tokens a
    block, one or two 16-row vectors, a thread's run of vectors starting anywhere (odd vector counts put a
    run's edge inside a 32-row group); on AVX2, a lone token over 64 rows, blocks of 2–4 tokens, a first block
    of 3 in one pass (3, 5, 7, 9, 13 tokens) and the 4-token blocks in runs of 64 pairs (inputs under 128: a run
    cut short). On AMX: 16-row groups one token block at a time (rows not a multiple of 32, or under 6 tokens),
    else 32 rows × 32 tokens a pass, several passes over a group (33–70 tokens)."""
    library = native.kernel()
    generator = torch.Generator().manual_seed(rows)
    weight = torch.randn(rows, inputs, generator=generator).to(torch.bfloat16)
    amx = library.native_amx_active() and rows % 16 == 0
    tiles, pairs = (native.tile_rows(weight), None) if amx else (None, native.pair_rows(weight))

    def product(x: torch.Tensor, threads: int, tiled: bool = True) -> torch.Tensor:
        out = torch.empty(x.shape[0], rows, dtype=torch.bfloat16)
        code = library.linear(x.data_ptr(), x.shape[0], inputs, weight.data_ptr(),
                              None if tiles is None or not tiled else tiles.data_ptr(),
                              None if pairs is None else pairs.data_ptr(), rows, out.data_ptr(), threads)
        assert code == 0
        return out

    x = torch.randn(70, inputs, generator=generator).to(torch.bfloat16)
    alone = torch.cat([product(x[t:t + 1].contiguous(), 1) for t in range(70)])  # [70, R]
    exact = x.float() @ weight.float().t()
    assert (alone.float() - exact).abs().max() < 0.05 * exact.abs().max()
    for n in (1, 2, 3, 4, 5, 6, 7, 9, 12, 13, 25, 33, 70):
        for threads in (1, 2, 3):
            assert torch.equal(product(x[:n].contiguous(), threads).view(torch.int16), alone[:n].view(torch.int16)), \
                (n, threads)
        if tiles is not None:  # AMX without the copy in tiles (the down product has none): the weights as they lie
            assert torch.equal(product(x[:n].contiguous(), 2, tiled=False).view(torch.int16),
                               alone[:n].view(torch.int16)), n


def test_on_torchs_ops_bfloat16_outputs_differ_from_ar_only_at_near_ties(monkeypatch):
    """What a machine without the kernel gets (docs/fastpath.md): trees on torch's ops round differently
    from one token at a time, so in bfloat16 a policy may leave ar's output, but only where the target's
    two best tokens are within bfloat16 rounding of each other (the bench's 0.5-nat near-tie bound,
    static/js/model/compare.js); float32 equality is tests/test_engine_greedy.py's. Runs everywhere."""
    monkeypatch.setenv("SPECSCOPE_FORWARD", "lean")
    engine = tiny_engine(dtype=torch.bfloat16, hidden=HIDDEN, sharpness=4.0)
    assert engine.target.forward_name == "lean"
    for prompt in random_prompts(3, seed=5):
        ar = engine.run(GenerationRequest(prompt=prompt, policy="ar", max_new_tokens=32), detail=False)
        for policy in sorted(POLICIES):
            tokens = engine.run(GenerationRequest(prompt=prompt, policy=policy, max_new_tokens=32),
                                detail=False).tokens
            if tokens == ar.tokens:
                continue
            position = next((i for i, (a, b) in enumerate(zip(ar.tokens, tokens)) if a != b),
                            min(len(ar.tokens), len(tokens)))
            ids = engine.codec.encode_prompt(prompt) + ar.tokens[:position]
            with torch.inference_mode():
                logits = engine.target.model(torch.tensor([ids])).logits[0, -1].float()
            top2 = torch.topk(logits, 2).values
            assert float(top2[0] - top2[1]) <= 0.5, (policy, prompt, position)


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
def test_on_the_real_model_the_kernel_is_as_close_to_float32_as_torchs_bfloat16(smol_bf16, kernel_path):
    from engine.models.fastlm import FastLM

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
def test_on_the_real_model_in_bfloat16_every_policy_is_greedy_identical_to_ar(smol_bf16, policy, kernel_path):
    assert smol_bf16.target.forward_name == "native"
    for prompt in ["Write a haiku about trees", "List three uses of a paperclip."]:
        ar = smol_bf16.run(GenerationRequest(prompt=prompt, policy="ar", max_new_tokens=48), detail=False)
        spec = smol_bf16.run(GenerationRequest(prompt=prompt, policy=policy, max_new_tokens=48), detail=False)
        assert spec.tokens == ar.tokens, prompt
        assert spec.steps < ar.steps


@pytest.mark.slow
@needs_kernel
def test_on_the_real_model_a_61_node_tree_gives_each_node_its_paths_logits_bit_for_bit(smol_bf16, kernel_path):
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


@needs_kernel
def test_the_heads_draft_step_in_the_kernel_drafts_as_its_torch_modules_do(kernel_path):
    """One C call per head forward (engine/models/native: head_step) against the head's own torch modules, in
    bfloat16 on the same weights: the root with pending pairs, a layer of siblings, a deeper node, a
    commit, and the next step's root agree to bfloat16 rounding, and so do the proposals."""
    from engine.drafters.eagle_head import EagleHeadDrafter
    from engine.sampling import SamplingParams
    from engine.tree import DraftTree
    from test_hybrid import random_head

    target = tiny_llama(seed=2, hidden=HIDDEN, layers=3, dtype=torch.bfloat16)
    head = random_head(target, dtype=torch.bfloat16)
    native_head, torch_head = EagleHeadDrafter(head, num_target_layers=3), EagleHeadDrafter(head, num_target_layers=3)
    torch_head.native = None
    assert native_head.native is not None
    context = [(13 * i) % 200 + 1 for i in range(30)]
    features = torch.randn(len(context), 3 * HIDDEN, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    logits = {}
    for name, drafter in (("kernel", native_head), ("torch", torch_head)):
        drafter.start(context, features[:-1])
        tree, seen = DraftTree.with_root(context[-1]), []
        proposal = drafter.propose(tree, [0], 3, False, SamplingParams(), torch.Generator())[0]
        nodes = [tree.add(0, t, q, q, "head") for t, q in zip(proposal.token, proposal.q)]
        seen.append(drafter.frontier_draft_logits(tree, [0] + nodes))
        deeper = tree.add(nodes[1], 7, 0.5, 0.5, "head")
        seen.append(drafter.frontier_draft_logits(tree, [deeper]))
        drafter.commit(tree, [0, nodes[1]], [tree.token[nodes[1]], 9], features[-2:])
        seen.append(drafter.frontier_draft_logits(DraftTree.with_root(9), [0]))
        logits[name] = (torch.cat(seen), proposal.token, drafter.cache_len)
    (kernel, kernel_tokens, kernel_len), (reference, torch_tokens, torch_len) = logits["kernel"], logits["torch"]
    assert kernel_len == torch_len == len(context)  # every pair but the new root's: 28 + the old root + its child
    assert kernel_tokens == torch_tokens
    scale = reference.abs().max().item()
    assert (kernel - reference).abs().max().item() <= 0.03 * scale, ((kernel - reference).abs().max(), scale)


@needs_kernel
def test_a_context_longer_than_one_head_step_takes_runs_in_calls_bit_for_bit(kernel_path):
    """A prompt's context is read by the head at the first step, in one forward of every pair: past the
    kernel's limit (256) it runs in calls of that many, and each row gets the bits it gets in one call."""
    from engine.drafters.eagle_head import EagleHeadDrafter
    from engine.tree import DraftTree
    from test_hybrid import random_head

    target = tiny_llama(seed=2, hidden=HIDDEN, layers=3, dtype=torch.bfloat16)
    head = random_head(target, dtype=torch.bfloat16)
    context = [(13 * i) % 200 + 1 for i in range(23)]
    features = torch.randn(len(context) - 1, 3 * HIDDEN, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    seen = {}
    for limit in (256, 5):  # one call; calls of 5 pairs (4 calls and a 2-pair one)
        drafter = EagleHeadDrafter(head, num_target_layers=3)
        drafter.native.max_tokens = limit
        drafter.start(context, features)
        tree = DraftTree.with_root(context[-1])
        root = drafter.frontier_draft_logits(tree, [0]).clone()
        children = [tree.add(0, t, 0.1, 0.1, "head") for t in (5, 6, 7, 8, 9, 10, 11)]
        seen[limit] = (root, drafter.frontier_draft_logits(tree, children).clone(),
                       drafter.kv[:, :, :drafter.cache_len + 8].clone())
    for one, split in zip(seen[256], seen[5]):
        assert torch.equal(one, split)


@needs_kernel
def test_heads_of_several_requests_drafting_in_one_call_get_the_bits_of_their_own_calls(kernel_path):
    """A batch's layer (engine/batch.py): the draft forwards of four head sessions, on contexts of different
    lengths, run together (HeadForward.run_together, head_step_batch): four roots with their pending pairs,
    the longest more than a call takes (it runs alone, in calls of its own), then layers of 1, 3, 7 and 12
    siblings. Every output state, logit and cached key and value is the one the same forward gives alone."""
    from engine.drafters.base import run_draft_forwards
    from engine.drafters.eagle_head import EagleHeadDrafter
    from engine.tree import DraftTree
    from test_hybrid import random_head

    target = tiny_llama(seed=2, hidden=HIDDEN, layers=3, dtype=torch.bfloat16)
    head = random_head(target, dtype=torch.bfloat16)
    generator = torch.Generator().manual_seed(5)
    contexts = [[(7 * i + j) % 200 + 1 for i in range(length)] for j, length in enumerate((30, 300, 2, 9))]
    widths = (1, 3, 7, 12)
    seen = {}
    for together in (False, True):
        generator.manual_seed(5)
        drafters = [EagleHeadDrafter(head, num_target_layers=3) for _ in contexts]
        trees = [DraftTree.with_root(context[-1]) for context in contexts]
        for drafter, context in zip(drafters, contexts):
            drafter.start(context, torch.randn(len(context) - 1, 3 * HIDDEN, generator=generator).to(torch.bfloat16))
        calls = []
        drafters[0].native.batch = (lambda batch: lambda steps: calls.append(len(steps)) or batch(steps))(
            drafters[0].native.batch)
        frontiers = [[0]] * len(contexts)
        for layer in range(2):
            forwards = [d.draft_forward(tree, frontier) for d, tree, frontier in zip(drafters, trees, frontiers)]
            if together:
                run_draft_forwards(forwards)
            else:
                for forward in forwards:
                    forward.run()
            if layer == 0:
                frontiers = [[tree.add(0, (11 * i + w) % 200 + 1, 0.1, 0.1, "head") for i in range(w)]
                             for tree, w in zip(trees, widths)]
        seen[together] = ([torch.stack([d.node_logits[0] for d in drafters]),
                           torch.cat([d.frontier_draft_logits(t, f) for d, t, f in zip(drafters, trees, frontiers)]),
                           torch.cat([d.node_state[n] for d, f in zip(drafters, frontiers) for n in f])]
                          + [d.kv[:, :, :d.cache_len + d.ran].clone() for d in drafters], calls)
    (alone, no_calls), (batched, calls) = seen[False], seen[True]
    assert no_calls == [] and calls == [2, 4]  # 29 pairs and 299 alone (no room for both), 1 + 8 in one call
    for one, many in zip(alone, batched):
        assert torch.equal(one, many)


@needs_kernel
@pytest.mark.parametrize("draft_vocab", [200, 196])  # 196: the output head's last 8-row store a partial one
def test_a_head_of_int8_rows_drafts_the_bits_its_weights_give_as_bf16(kernel_path, draft_vocab):
    """A head whose products' rows are int8 × 2^e (`round_to_int8_rows`, as the shipped head's are) is read as
    int8 where the kernel reads it so (the AVX2 build: matmul_int8, half the bytes) and as bf16 pairs or tiles
    elsewhere: the same values, so every output state, logit and cached key and value has the same bits either
    way, for the root with its pending pairs and layers of 1, 2, 3, 5 and 12 siblings, and again after the
    reading is switched back (each switch binds the weights anew, and no call prepared for the old binding is
    kept). A head whose rows are not of that form is read as bf16 wherever it runs."""
    import ctypes

    from engine.drafters.eagle_head import EagleHeadDrafter
    from engine.models.head import INT8_PRODUCTS, round_to_int8_rows
    from engine.tree import DraftTree
    from test_hybrid import random_head

    target = tiny_llama(seed=2, hidden=HIDDEN, layers=3, dtype=torch.bfloat16)
    head = random_head(target, dtype=torch.bfloat16, draft_vocab=draft_vocab)
    assert not EagleHeadDrafter(head, num_target_layers=3).native.session().int8_weights  # rows as trained
    with torch.no_grad():
        for name in INT8_PRODUCTS:
            weight = head.get_submodule(name).weight
            weight.copy_(round_to_int8_rows(weight))
    context = [(7 * i) % 200 + 1 for i in range(30)]
    features = torch.randn(len(context) - 1, 3 * HIDDEN, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    seen, drafter = [], EagleHeadDrafter(head, num_target_layers=3)
    for int8 in (True, False, True):
        drafter.native.int8 = int8
        drafter.native._bound()
        layer = ctypes.addressof(drafter.native.layer)  # every call it keeps reads this binding's weights
        assert all(call.layer == layer for call in drafter.native._prepared_calls.values())
        reads_int8 = int8 and bool(native.kernel().native_reads_int8())
        assert sorted(drafter.native.int8_weights) == (["down", "gate_up", "lm_head", "o", "qkv"] if reads_int8 else [])
        drafter.start(context, features)
        tree, frontier, outputs = DraftTree.with_root(context[-1]), [0], []
        for width in (1, 2, 3, 5, 12, 0):  # the root's forward, then each layer's; 0: the last one run
            drafter.draft_forward(tree, frontier).run()
            outputs += [drafter.frontier_draft_logits(tree, frontier).clone(),
                        torch.stack([drafter.node_state[node] for node in frontier])]
            frontier = [tree.add(frontier[0], (11 * i + width) % 200 + 1, 0.1, 0.1, "head") for i in range(width)]
        seen.append(outputs + [drafter.kv[:, :, :drafter.cache_len + drafter.ran].clone()])
    for as_int8, as_bf16, again in zip(*seen):
        assert torch.equal(as_int8, as_bf16) and torch.equal(again, as_int8)


@needs_kernel
@pytest.mark.parametrize("draft_vocab", [200, 196])
def test_a_line_run_with_the_roots_forward_drafts_the_bits_each_nodes_own_forward_gives(kernel_path, draft_vocab):
    """A chain's next layers run in the root's forward (`draft_forward(..., line)`, forward.c's head_step_line):
    each the head's top-1 child of the node above, in the next column. Every node the chain then drafts with
    that token takes its pair without a forward of its own, with the output state, logits and cached keys and
    values its own forward gives (a head of int8 rows too, as the shipped one); a node of another token ends
    the line and runs as ever, over the line's columns; each pair the line ran counts as a draft forward."""
    from engine.drafters.eagle_head import EagleHeadDrafter
    from engine.models.head import INT8_PRODUCTS, round_to_int8_rows
    from engine.sampling import SamplingParams
    from engine.tree import DraftTree
    from test_hybrid import random_head

    target = tiny_llama(seed=2, hidden=HIDDEN, layers=3, dtype=torch.bfloat16)
    head = random_head(target, dtype=torch.bfloat16, draft_vocab=draft_vocab)
    if draft_vocab == 196:
        with torch.no_grad():
            for name in INT8_PRODUCTS:
                head.get_submodule(name).weight.copy_(round_to_int8_rows(head.get_submodule(name).weight))
    context = [(7 * i) % 200 + 1 for i in range(30)]
    features = torch.randn(len(context) - 1, 3 * HIDDEN, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    seen = {}
    for line in (3, 0):
        drafter = EagleHeadDrafter(head, num_target_layers=3)
        drafter.start(context, features)
        tree, node, forwards, outputs = DraftTree.with_root(context[-1]), 0, [], []
        drafter.draft_forward(tree, [0], line).run()
        for depth in range(1, 5):  # the line's three pairs, then a node past it; at depth 3, not the line's token
            best = drafter.propose(tree, [node], 1, False, SamplingParams(), None)[0].token[0]
            node = tree.add(node, best if depth != 3 else best + 1, 0.5, 0.5, "head")
            forward = drafter.draft_forward(tree, [node])
            forwards.append(forward is not None)
            if forward is not None:
                forward.run()
            outputs += [drafter.node_logits[node], drafter.node_state[node]]
        seen[line] = (forwards, drafter.meter.forwards, outputs, drafter.kv[:, :, :drafter.cache_len + drafter.ran])
    (forwards, counted, with_line, cache), (own_forwards, own_counted, alone, own_cache) = seen[3], seen[0]
    assert forwards == [False, False, True, True] and own_forwards == [True] * 4
    assert counted == 1 + 3 + 2 and own_counted == 5  # the root's call ran 4 passes, one of them dropped
    for one, other in zip(with_line + [cache], alone + [own_cache]):
        assert torch.equal(one, other)


@needs_kernel
def test_head_sessions_share_the_bound_weights_not_the_scratch_and_rebind_when_a_weight_changes():
    """A request's session of the head reads the copies of the weights its head made once (a request's first
    step used to copy them again), has scratch of its own, and drafts the bits a head of its own drafts; a
    weight changed in place (a head trained, then drafted with) is copied again, by each session."""
    from engine.drafters.eagle_head import EagleHeadDrafter
    from engine.tree import DraftTree
    from test_hybrid import random_head

    target = tiny_llama(seed=2, hidden=HIDDEN, layers=3, dtype=torch.bfloat16)
    head = random_head(target, dtype=torch.bfloat16)
    features = torch.randn(11, 3 * HIDDEN, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    base = EagleHeadDrafter(head, num_target_layers=3)
    first, second = base.session(), base.session()

    def root_logits(drafter: EagleHeadDrafter) -> torch.Tensor:
        drafter.start(list(range(1, 13)), features)
        drafter.draft_forward(DraftTree.with_root(9), [0]).run()
        return drafter.node_logits[0]

    alone = root_logits(EagleHeadDrafter(head, num_target_layers=3))
    assert torch.equal(root_logits(first), alone) and torch.equal(root_logits(second), alone)
    assert first.native.weights["qkv"] is second.native.weights["qkv"] is base.native.weights["qkv"]
    assert first.native._buffers and first.native._buffers is not second.native._buffers
    with torch.no_grad():
        head.midlayer.self_attn.q_proj.weight.mul_(2)
    changed = root_logits(EagleHeadDrafter(head, num_target_layers=3))
    assert not torch.equal(changed, alone)
    assert torch.equal(root_logits(first), changed) and torch.equal(root_logits(second), changed)


@needs_kernel
def test_a_head_forward_handed_out_before_propose_runs_as_propose_runs_it(kernel_path):
    """`draft_forward` hands the root's forward out before `propose`, outside its inference mode: run alone or
    with another's, it still runs without autograd (the fusion through the kernel's linear, not torch's) and
    gives the logits `propose` gets when it runs the same forward itself."""
    from engine.drafters.base import run_draft_forwards
    from engine.drafters.eagle_head import EagleHeadDrafter
    from engine.sampling import SamplingParams
    from engine.tree import DraftTree
    from test_hybrid import random_head

    target = tiny_llama(seed=2, hidden=HIDDEN, layers=3, dtype=torch.bfloat16)
    head = random_head(target, dtype=torch.bfloat16)
    modes = []
    fuse = head.fuse
    head.fuse = lambda features: modes.append(torch.is_inference_mode_enabled()) or fuse(features)
    features = torch.randn(11, 3 * HIDDEN, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)

    def root_logits(how: str) -> list[torch.Tensor]:
        drafters = [EagleHeadDrafter(head, num_target_layers=3) for _ in range(2)]
        trees = [DraftTree.with_root(9), DraftTree.with_root(9)]
        for drafter in drafters:
            drafter.start(list(range(1, 13)), features)
        if how == "propose":
            for drafter, tree in zip(drafters, trees):
                drafter.propose(tree, [0], 2, False, SamplingParams(), None)
        elif how == "alone":
            for drafter, tree in zip(drafters, trees):
                drafter.draft_forward(tree, [0]).run()
        else:
            run_draft_forwards([d.draft_forward(t, [0]) for d, t in zip(drafters, trees)])
        return [d.node_logits[0] for d in drafters]

    proposed = root_logits("propose")
    assert modes == [True, True]
    for how in ("alone", "together"):
        modes.clear()
        got = root_logits(how)
        assert modes and all(modes), how
        for one, other in zip(proposed, got):
            assert torch.equal(one, other), how


@needs_kernel
@pytest.mark.parametrize("vocab, k", [(12288, 10), (200, 3), (49, 64 - 15), (4096, 64)])
def test_the_kernels_top_k_and_log_sum_exp_are_torchs_on_bfloat16_rows(vocab, k):
    """A drafter's read of its logits in one C call (native.top_k_lse): the same values as torch.topk over the
    same rows, ties to the lower index, and the log-sum-exp to float32 rounding, on rows with many ties
    (bf16 has 8 bits of mantissa) and lengths that are not a multiple of 16."""
    generator = torch.Generator().manual_seed(vocab)
    rows = (torch.randn(5, vocab, generator=generator) * 3).to(torch.bfloat16)
    rows[1, vocab // 3] = rows[1].max()  # a tie for the best
    rows[2, :] = rows[2, 0]  # every logit equal
    values, indices, lse = native.top_k_lse(rows, k)
    exact = rows.float()
    for r in range(len(rows)):
        order = sorted(range(vocab), key=lambda i: (-exact[r, i].item(), i))[:k]  # ties to the lower index
        assert indices[r].tolist() == order, r
        assert torch.equal(values[r], exact[r, order])
    assert torch.allclose(lse, torch.logsumexp(exact, dim=-1), rtol=2e-6, atol=0)


@needs_kernel
@pytest.mark.parametrize("vocab", [49152, 49153, 31, 16, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_kernels_argmax_is_torchs_ties_nans_and_infinities_included(vocab, dtype):
    """Greedy acceptance's argmax in one C call (native.argmax_row): torch's index on every row, the first
    where several tie, the first NaN where there is one, 0 where every logit is -inf; on lengths that are
    and are not a multiple of the 16 lanes it reads at a time; on float32 rows and on bf16 ones as the
    output head writes them, whose answer is their float32 widening's."""
    generator = torch.Generator().manual_seed(vocab)
    rows = torch.randn(9, vocab, generator=generator).round()  # integers: many ties for the best
    rows[1] = float("-inf")
    rows[2] = 0.0
    rows[3, vocab // 2] = float("nan")
    rows[3, vocab - 1] = float("nan")
    rows[4, [vocab // 3, vocab - 1]] = float("inf")
    rows[5, vocab - 1] = rows[5].max() + 1  # the best in the tail the lanes do not cover
    rows[6, 0] = float("nan")
    rows[7, :] = float("-inf")
    rows[7, vocab - 1] = -1e30
    rows = rows.to(dtype)
    for r in range(len(rows)):
        assert native.argmax_row(rows, r) == int(rows[r].float().argmax()), r


@needs_kernel
@pytest.mark.parametrize("shape", [(3, 37), (1, 16), (2, 49152), (0, 5)])
def test_the_kernels_widen_is_torchs_float(shape):
    """native.widen, the native forward's bf16 → float32 of its logits: torch's `.float()` bit for bit (the
    widening is exact), on lengths that are and are not a multiple of its lanes, infinities and NaN included."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape))).to(torch.bfloat16)
    if x.numel():
        x.view(-1)[0], x.view(-1)[-1] = float("inf"), float("nan")
    assert torch.equal(native.widen(x).view(torch.int32), x.float().view(torch.int32))


def test_greedy_acceptance_reads_the_kernels_argmax_only_where_it_answers_as_torch_does():
    """The engine hands greedy acceptance the kernel's argmax for float32 CPU logits it can read, and
    torch's for anything else (float64 logits of a tiny model, SPECSCOPE_FORWARD=plain)."""
    from engine.acceptance import row_argmax

    engine = tiny_engine()
    wanted = native.argmax_row if cpu_has_the_kernel() else row_argmax
    assert engine.argmax_for(torch.zeros(2, 50)) is wanted
    assert engine.argmax_for(torch.zeros(2, 50, dtype=torch.bfloat16)) is wanted
    assert engine.argmax_for(torch.zeros(2, 50, dtype=torch.float64)) is row_argmax
    assert engine.argmax_for(torch.zeros(50, 2).t()) is row_argmax  # not contiguous


@needs_kernel
def test_a_batched_kernel_call_gives_every_sequence_the_bits_of_its_call_alone(kernel_path):
    """B sessions with caches of different lengths, a chain and trees of different sizes, in one call
    (weights read once for all): each sequence's logits, features and cache are those of its call alone."""
    from engine.models.base import BatchItem

    lm, _, _ = lms()
    contexts = [[5, 6, 7], list(range(20, 61)), [9] * 17, [4]]
    shapes = [None, random_tree(size=9, vocab=200, seed=1), random_tree(size=30, vocab=200, seed=2),
              random_tree(size=2, vocab=200, seed=4)]

    def items_for(sessions):
        items = []
        for session, tree in zip(sessions, shapes):
            if tree is None:
                items.append(BatchItem(session, [1, 2, 3], hidden_layers=(0, -1)))
            else:
                prefix = session.cache_len
                items.append(BatchItem(session, tree.token, position_ids(tree.depth, prefix),
                                       tree_attention_allowed(tree.parent, prefix), (1, 2)))
        return items

    def fresh_sessions():
        sessions = [lm.session() for _ in contexts]
        for session, context in zip(sessions, contexts):
            session.forward_chain(context)
        return sessions

    alone_sessions = fresh_sessions()
    alone = [item.run_alone() for item in items_for(alone_sessions)]
    sessions = fresh_sessions()
    batched = lm.forward_batch(items_for(sessions))
    for one, many, by_itself, together in zip(alone, batched, alone_sessions, sessions):
        assert torch.equal(one.logits, many.logits)
        assert len(one.hidden) == len(many.hidden) and all(torch.equal(a, b) for a, b in zip(one.hidden, many.hidden))
        assert by_itself.cache_len == together.cache_len
        assert torch.equal(by_itself.kv[:, :, :, :by_itself.cache_len], together.kv[:, :, :, :together.cache_len])


@needs_kernel
def test_a_batched_kernel_call_checks_every_sequence_at_its_boundary():
    lm, _, _ = lms()
    good, bad = lm.session(), lm.session()
    x = lm.embed[:2].clone()
    fits = (good, torch.tensor([0]), None, 0)
    with pytest.raises(RuntimeError, match="past the cache's capacity"):
        lm.kernel.batch(x, [fits, (bad, torch.tensor([0]), None, bad.capacity)], [])
    with pytest.raises(RuntimeError, match="rotary position outside the cache"):
        lm.kernel.batch(x, [fits, (bad, torch.tensor([bad.capacity]), None, 0)], [])
    if lm.kernel.reads_key_tiles:  # key tiles off their 64-byte alignment, or claiming columns past the cache
        shape, size = bad.key_tiles.shape, bad.key_tiles.numel()
        bad.key_tiles = torch.empty(size + 16, dtype=torch.int32)[1:size + 1].view(shape)
        with pytest.raises(RuntimeError, match="dimensions it cannot block"):
            lm.kernel.batch(x, [fits, (bad, torch.tensor([0]), None, 0)], [])
        bad.key_tiles, bad.tiled = torch.empty(shape, dtype=torch.int32), bad.capacity + 1
        with pytest.raises(RuntimeError, match="dimensions it cannot block"):
            lm.kernel.batch(x, [fits, (bad, torch.tensor([0]), None, 0)], [])


@needs_kernel
def test_a_head_on_the_kernel_proposes_more_children_than_its_top_k_ranks(kernel_path):
    """talon's gated layers ask for every child the budget has left (up to 512 with talon-adaptive), beyond the
    kernel's TOP_K_MAX: the head then ranks its bf16 logits with torch, the same children best first (up to
    the order among tied logits, which torch.topk leaves open)."""
    from engine.drafters.eagle_head import EagleHeadDrafter
    from engine.sampling import SamplingParams
    from engine.tree import DraftTree
    from test_hybrid import random_head

    target = tiny_llama(seed=2, hidden=HIDDEN, layers=3, dtype=torch.bfloat16)
    drafter = EagleHeadDrafter(random_head(target, dtype=torch.bfloat16), num_target_layers=3)
    assert drafter.native is not None
    context = [(13 * i) % 200 + 1 for i in range(30)]
    features = torch.randn(len(context) - 1, 3 * HIDDEN, generator=torch.Generator().manual_seed(3))
    drafter.start(context, features.to(torch.bfloat16))
    tree = DraftTree.with_root(context[-1])
    ranked, wide = (drafter.propose(tree, [0], k, False, SamplingParams(), torch.Generator())[0]
                    for k in (native.TOP_K_MAX, native.TOP_K_MAX + 36))
    assert len(wide.token) == native.TOP_K_MAX + 36 and wide.q == sorted(wide.q, reverse=True)
    assert wide.q[:native.TOP_K_MAX] == pytest.approx(ranked.q, rel=1e-5)
    last = ranked.q[-1]
    assert {t for t, q in zip(wide.token, wide.q) if q > last * (1 + 1e-5)} == \
        {t for t, q in zip(ranked.token, ranked.q) if q > last * (1 + 1e-5)}


def test_bfloat16_is_the_default_wherever_the_kernel_runs_and_a_requested_dtype_wins():
    """pick_dtype: on a CPU the kernel runs on (AVX2 is enough) a bf16 forward reads half the bytes and runs at the
    read's rate, so bf16 is the default there even without bf16 instructions; elsewhere fp32 unless the CPU has them."""
    from engine.models.device import cpu_has_native_bf16, pick_dtype

    cpu = torch.device("cpu")
    assert pick_dtype(cpu, None, bf16_kernel=True) == torch.bfloat16
    assert pick_dtype(cpu, None, bf16_kernel=False) == (torch.bfloat16 if cpu_has_native_bf16() else torch.float32)
    assert pick_dtype(cpu, "float32", bf16_kernel=True) == torch.float32
    assert native.available() == cpu_has_the_kernel()
