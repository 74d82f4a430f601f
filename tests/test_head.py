"""The EAGLE-3 head: published checkpoint layout, and the drafter's tree and cache bookkeeping."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM

from engine.drafters.eagle_head import EagleHeadDrafter
from engine.models.head import Eagle3Head, head_config, load_head, resolve_head_dir, save_head, set_vocab_map
from engine.sampling import SamplingParams
from engine.tree import DraftTree

VOCAB, HIDDEN, LAYERS = 96, 32, 8


def tiny_target(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=LAYERS,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    return LlamaForCausalLM(config).eval()


def tiny_head(target, draft_vocab: int = 64, seed: int = 1) -> Eagle3Head:
    torch.manual_seed(seed)
    head = Eagle3Head(head_config(target.config, draft_vocab_size=draft_vocab),
                      target.get_input_embeddings().weight.detach())
    for p in head.parameters():
        torch.nn.init.normal_(p, std=0.2)
    if draft_vocab < VOCAB:
        set_vocab_map(head, torch.randperm(VOCAB)[:draft_vocab].sort().values)
    return head.eval()


def features(target, ids: list[int], layers) -> torch.Tensor:
    """[len(ids), 3H]: the inputs of `layers` for every token."""
    with torch.no_grad():
        out = target(input_ids=torch.tensor([ids]), output_hidden_states=True)
    return torch.cat([out.hidden_states[i][0] for i in layers], dim=-1)


def published_config(target) -> dict:
    """A config.json written the way published EAGLE-3 heads write it (no eagle_config block)."""
    c = target.config
    return {"architectures": ["LlamaForCausalLMEagle3"], "bos_token_id": 1, "eos_token_id": 2,
            "hidden_act": "silu", "hidden_size": c.hidden_size, "initializer_range": 0.02,
            "intermediate_size": 48, "max_position_embeddings": 256, "model_type": "llama",
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1, "pad_token_id": 0,
            "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "rope_scaling": None, "tie_word_embeddings": False,
            "torch_dtype": "float16", "transformers_version": "4.28.1", "use_cache": True,
            "vocab_size": c.vocab_size, "draft_vocab_size": 40}


def published_state(config: dict, seed: int = 3) -> dict[str, torch.Tensor]:
    """Weights under the published names, shaped as EAGLE-3 shapes them."""
    g = torch.Generator().manual_seed(seed)
    h, i, d = config["hidden_size"], config["intermediate_size"], config["draft_vocab_size"]
    kv = config["num_key_value_heads"] * h // config["num_attention_heads"]

    def w(*shape):
        return torch.randn(*shape, generator=g) * 0.1

    draft_to_target = torch.arange(0, 2 * d, 2)  # every other target id
    t2d = torch.zeros(config["vocab_size"], dtype=torch.bool)
    t2d[draft_to_target] = True
    return {
        "fc.weight": w(h, 3 * h),
        "midlayer.self_attn.q_proj.weight": w(h, 2 * h), "midlayer.self_attn.k_proj.weight": w(kv, 2 * h),
        "midlayer.self_attn.v_proj.weight": w(kv, 2 * h), "midlayer.self_attn.o_proj.weight": w(h, h),
        "midlayer.mlp.gate_proj.weight": w(i, h), "midlayer.mlp.up_proj.weight": w(i, h),
        "midlayer.mlp.down_proj.weight": w(h, i),
        "midlayer.input_layernorm.weight": 1 + w(h), "midlayer.hidden_norm.weight": 1 + w(h),
        "midlayer.post_attention_layernorm.weight": 1 + w(h), "norm.weight": 1 + w(h),
        "lm_head.weight": w(d, h), "d2t": draft_to_target - torch.arange(d), "t2d": t2d,
    }


@pytest.mark.parametrize("filename", ["pytorch_model.bin", "model.safetensors"])
def test_published_layout_loads_unchanged(tmp_path, filename):
    target = tiny_target()
    config = published_config(target)
    state = published_state(config)
    (tmp_path / "config.json").write_text(json.dumps(config))
    if filename == "pytorch_model.bin":
        torch.save({k: (v.half() if v.is_floating_point() else v) for k, v in state.items()}, tmp_path / filename)
    else:
        save_file({k: (v.half() if v.is_floating_point() else v) for k, v in state.items()}, str(tmp_path / filename))
    head = load_head(tmp_path, target.get_input_embeddings().weight.detach())
    for name, value in state.items():
        assert torch.allclose(head.state_dict()[name].float(), value.half().float()), name
    assert head.to_target(torch.tensor([0, 1, 39])).tolist() == [0, 2, 78]
    logits = head.target_logits(torch.randn(2, HIDDEN))  # [2, V]
    assert torch.isinf(logits[:, 1]).all() and torch.isfinite(logits[:, 2]).all()
    assert [head.draft_index(t) for t in (0, 1, 2, 78)] == [0, -1, 1, 39]


def test_a_hub_id_resolves_to_the_downloaded_published_folder(tmp_path, monkeypatch):
    import huggingface_hub

    target = tiny_target()
    config = published_config(target)
    (tmp_path / "config.json").write_text(json.dumps(config))
    save_file({k: v.half() if v.is_floating_point() else v for k, v in published_state(config).items()},
              str(tmp_path / "model.safetensors"))
    asked = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda repo, **kw: asked.append(repo) or str(tmp_path))
    head = load_head(resolve_head_dir("yuhuili/EAGLE3-tiny"), target.get_input_embeddings().weight.detach())
    assert asked == ["yuhuili/EAGLE3-tiny"] and head.to_target(torch.tensor([39])).tolist() == [78]
    assert resolve_head_dir(tmp_path) == tmp_path and asked == ["yuhuili/EAGLE3-tiny"]  # a folder is not fetched


def test_an_unreachable_hub_id_fails_with_one_clear_message(monkeypatch):
    import huggingface_hub

    def offline(repo, **kw):
        raise OSError("no network")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(FileNotFoundError, match="no such head folder, and the hub could not provide it"):
        resolve_head_dir("someone/missing-head")


def test_full_vocabulary_head_has_no_index_buffers(tmp_path):
    target = tiny_target()
    head = tiny_head(target, draft_vocab=VOCAB)
    save_head(head, tmp_path)
    from safetensors.torch import load_file
    names = set(load_file(str(tmp_path / "model.safetensors")))
    assert "d2t" not in names and "t2d" not in names and "embed_tokens.weight" not in names
    loaded = load_head(tmp_path, target.get_input_embeddings().weight.detach())
    assert loaded.feature_layers == (2, 4, 5)


def test_saved_head_reloads_to_the_same_outputs(tmp_path):
    target = tiny_target()
    head = tiny_head(target)
    save_head(head, tmp_path, dtype=torch.float32)
    loaded = load_head(tmp_path, target.get_input_embeddings().weight.detach())
    state = torch.randn(1, 3, HIDDEN)
    tokens = torch.tensor([[5, 6, 7]])
    bias = torch.zeros(1, 1, 3, 3)
    a, _ = head.step(tokens, state, torch.arange(3)[None], None, bias)
    b, _ = loaded.step(tokens, state, torch.arange(3)[None], None, bias)
    assert torch.allclose(a, b)


def reference_chain_logits(head: Eagle3Head, ids: list[int], feats: torch.Tensor, drafts: list[int]):
    """Target-vocab logits at the root and after each draft of a chain, with no cache at all.

    Pair i is (ids[i + 1], feats[i]); draft j pairs its token with the previous output state.
    Every pass is a plain causal pass over all pairs so far."""
    tokens = list(ids[1:])
    with torch.no_grad():
        states = list(head.fuse(feats))  # [H] each
        outputs = [_causal(head, tokens, states)]
        for d in drafts:
            tokens.append(d)
            states.append(outputs[-1])
            outputs.append(_causal(head, tokens, states))
        return [head.target_logits(o[None])[0] for o in outputs]


def _causal(head, tokens, states) -> torch.Tensor:
    """[H]: the last pair's output in a causal pass at positions 0..n-1."""
    n = len(tokens)
    mask = torch.zeros(1, 1, n, n).masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    out, _ = head.step(torch.tensor([tokens]), torch.stack(states)[None], torch.arange(n)[None], None, mask)
    return out[0, -1]


def test_chain_drafts_match_uncached_computation():
    target = tiny_target()
    head = tiny_head(target)
    drafter = EagleHeadDrafter(head, num_target_layers=LAYERS)
    ids = [3, 9, 14, 15, 26, 53, 58, 9, 7]
    feats = features(target, ids, drafter.feature_layers)
    drafter.start(ids, feats[:-1])
    tree = DraftTree.with_root(ids[-1])
    gen = torch.Generator().manual_seed(0)
    drafts = []
    logits = []
    frontier = [0]
    for _ in range(3):
        logits.append(drafter.frontier_logits(tree, frontier)[0])
        proposal = drafter.propose(tree, frontier, 1, False, SamplingParams(), gen)[0]
        node = tree.add(frontier[0], proposal.token[0], proposal.q[0], proposal.q[0], proposal.source)
        drafts.append(proposal.token[0])
        frontier = [node]
    expected = reference_chain_logits(head, ids, feats[:-1], drafts[:2])
    for got, want in zip(logits, expected):
        finite = torch.isfinite(want)
        assert torch.allclose(got[finite], want[finite], atol=1e-4)
    assert drafter.meter.forwards == 3


def test_tree_siblings_do_not_see_each_other():
    target = tiny_target()
    head = tiny_head(target, draft_vocab=VOCAB)
    ids = [4, 8, 15, 16, 23, 42]
    feats = features(target, ids, head.feature_layers)
    drafter = EagleHeadDrafter(head)
    drafter.start(ids, feats[:-1])
    tree = DraftTree.with_root(ids[-1])
    gen = torch.Generator().manual_seed(0)
    children = drafter.propose(tree, [0], 3, False, SamplingParams(), gen)[0]
    nodes = [tree.add(0, t, q, q, "head") for t, q in zip(children.token, children.q)]
    together = drafter.frontier_logits(tree, nodes)  # [3, V]
    for i, node in enumerate(nodes):
        alone = EagleHeadDrafter(head)
        alone.start(ids, feats[:-1])
        single = DraftTree.with_root(ids[-1])
        alone.frontier_logits(single, [0])
        n = single.add(0, tree.token[node], 0.5, 0.5, "head")
        assert torch.allclose(alone.frontier_logits(single, [n])[0], together[i], atol=1e-5)


def test_cache_after_commit_equals_a_fresh_start_on_the_longer_context():
    target = tiny_target()
    head = tiny_head(target)
    drafter = EagleHeadDrafter(head, num_target_layers=LAYERS)
    ids = [3, 9, 14, 15, 26, 53, 58]
    drafter.start(ids, features(target, ids, drafter.feature_layers)[:-1])
    tree = DraftTree.with_root(ids[-1])
    gen = torch.Generator().manual_seed(0)
    first = drafter.propose(tree, [0], 2, False, SamplingParams(), gen)[0]
    a = tree.add(0, first.token[0], first.q[0], first.q[0])
    tree.add(0, first.token[1], first.q[1], first.q[1])
    second = drafter.propose(tree, [a], 1, False, SamplingParams(), gen)[0]
    tree.add(a, second.token[0], second.q[0], second.q[0])
    emitted = [tree.token[a], 11]  # the first draft accepted, then a recovered token
    longer = ids + emitted
    all_feats = features(target, longer, drafter.feature_layers)  # [len(longer), F]
    drafter.commit(tree, [0, a], emitted, all_feats[len(ids) - 1:len(ids) + 1])
    fresh = EagleHeadDrafter(head, num_target_layers=LAYERS)
    fresh.start(longer, all_feats[:-1])
    root = DraftTree.with_root(longer[-1])
    got = drafter.frontier_logits(root, [0])
    want = fresh.frontier_logits(DraftTree.with_root(longer[-1]), [0])
    assert torch.allclose(got, want, atol=1e-5)
    assert drafter.cache_len == fresh.cache_len == len(longer) - 2  # every pair but the root's


def test_sampled_children_come_with_their_distribution():
    target = tiny_target()
    head = tiny_head(target)
    drafter = EagleHeadDrafter(head, num_target_layers=LAYERS)
    ids = [1, 2, 3, 4, 5]
    drafter.start(ids, features(target, ids, drafter.feature_layers)[:-1])
    tree = DraftTree.with_root(ids[-1])
    proposal = drafter.propose(tree, [0], 4, True, SamplingParams(temperature=0.8),
                               torch.Generator().manual_seed(0))[0]
    assert proposal.sampled and proposal.q_dist.shape == (VOCAB,)
    assert len(set(proposal.token)) == 4
    assert all(head.t2d[t] for t in proposal.token)  # drawn inside the draft vocabulary
    assert proposal.q == [proposal.q_dist[t].item() for t in proposal.token]


def test_head_and_hybrid_drafters_share_one_loaded_head(tmp_path):
    from engine.loading import head_drafters
    from engine.models.head import shipped_head_dir

    target = tiny_target()
    save_head(tiny_head(target), tmp_path)
    factories = head_drafters(tmp_path, target, torch.float32)
    head, hybrid = factories["head"](), factories["hybrid"]()
    assert head.name == "head" and hybrid.name == "hybrid"
    assert head.head is hybrid.head.head
    assert hybrid.feature_layers == head.feature_layers == (2, 4, 5)
    assert shipped_head_dir("no-such-target") is None


def test_a_bf16_head_keeps_float32_rotary_frequencies(tmp_path):
    target = tiny_target()
    save_head(tiny_head(target), tmp_path)
    head = load_head(tmp_path, target.get_input_embeddings().weight.detach(), torch.bfloat16)
    assert head.fc.weight.dtype == torch.bfloat16
    assert head.rotary.inv_freq.dtype == torch.float32
