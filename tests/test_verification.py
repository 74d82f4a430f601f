"""Tree attention reproduces sequential decoding, and cache compaction leaves plain decoding's state."""

import torch

from engine.models.lm import CachedLM
from engine.tree import DraftTree, path_to, position_ids, root_to_leaf_paths, tree_attention_allowed
from tiny_models import tiny_llama


def random_tree(size: int, vocab: int, seed: int) -> DraftTree:
    generator = torch.Generator().manual_seed(seed)
    tree = DraftTree.with_root(int(torch.randint(vocab, (), generator=generator)))
    for _ in range(size - 1):
        parent = int(torch.randint(len(tree), (), generator=generator))
        tree.add(parent, int(torch.randint(vocab, (), generator=generator)), 0.5, 0.5)
    return tree


def sequential_logits(model, tokens: list[int]) -> torch.Tensor:
    """[N, V] next-token logits of a plain causal forward, no cache tricks."""
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0]


def test_tree_logits_equal_sequential_decoding_along_every_path():
    model = tiny_llama(seed=3, dtype=torch.float64)
    lm = CachedLM(model)
    prefix = [1, 2, 3, 4, 5, 6]
    tree = random_tree(size=24, vocab=model.config.vocab_size, seed=7)
    lm.forward_chain(prefix)
    allowed = tree_attention_allowed(tree.parent, len(prefix))
    tree_logits = lm.forward_tree(tree.token, position_ids(tree.depth, len(prefix)), allowed).logits  # [T, V]
    for path in root_to_leaf_paths(tree.parent):
        expected = sequential_logits(model, prefix + [tree.token[i] for i in path])[len(prefix):]  # [len(path), V]
        assert torch.allclose(tree_logits[path], expected, atol=1e-9, rtol=0)


def test_compacting_the_cache_to_a_path_equals_decoding_that_path():
    model = tiny_llama(seed=4, dtype=torch.float64)
    lm = CachedLM(model)
    prefix = [9, 8, 7]
    tree = random_tree(size=16, vocab=model.config.vocab_size, seed=11)
    lm.forward_chain(prefix)
    allowed = tree_attention_allowed(tree.parent, len(prefix))
    lm.forward_tree(tree.token, position_ids(tree.depth, len(prefix)), allowed)
    path = path_to(tree.parent, max(range(len(tree)), key=lambda i: tree.depth[i]))
    lm.keep(list(range(len(prefix))) + [len(prefix) + i for i in path])
    assert lm.cache_len == len(prefix) + len(path)
    next_logits = lm.forward_chain([42]).logits[-1]
    expected = sequential_logits(model, prefix + [tree.token[i] for i in path] + [42])[-1]
    assert torch.allclose(next_logits, expected, atol=1e-9, rtol=0)


def test_crop_drops_the_tail():
    lm = CachedLM(tiny_llama(seed=5, dtype=torch.float64))
    lm.forward_chain([1, 2, 3, 4])
    lm.crop(2)
    assert lm.cache_len == 2
