"""A head pruned to a smaller draft vocabulary: the kept tokens score exactly as before, nothing else moves."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from engine.models.head import load_head, save_head
from test_head import VOCAB, tiny_head, tiny_target
from test_train_head import trained_metrics as train_head_metrics
from tools.training.prune import answer_token_counts, head_vocab, prune_head, vocab_coverage


def token_counts(seed: int = 5) -> torch.Tensor:
    """[V] counts with ties, so the tie-break by lower target id is exercised."""
    return torch.randint(0, 4, (VOCAB,), generator=torch.Generator().manual_seed(seed))


def trained_metrics() -> dict:
    """metrics.json as training writes it, with its evaluation sets."""
    return {**train_head_metrics(draft_vocab=64),
            "evaluation": {"held-out": {"top1": [0.6, 0.4], "chain_accept": [0.6, 0.5], "tau_chain": 1.9,
                                        "tau_tree": {"4": 2.5}, "positions": 100}}}


def test_kept_tokens_score_bit_identically_and_dropped_ones_leave_the_vocabulary():
    target = tiny_target()
    head = tiny_head(target, draft_vocab=64)
    counts, always = token_counts(), {int(head_vocab(head)[-1])}
    pruned = prune_head(head, counts, 24, always)
    old_vocab, new_vocab = head_vocab(head), head_vocab(pruned)
    assert pruned.draft_vocab_size == 24 and pruned.config["draft_vocab_size"] == 24
    assert torch.equal(new_vocab, new_vocab.sort().values) and always <= set(new_vocab.tolist())
    assert int(pruned.t2d.sum()) == 24 and bool(pruned.t2d[new_vocab].all())
    state = torch.randn(5, head.fc.weight.shape[0], generator=torch.Generator().manual_seed(2))  # [N, H]
    with torch.no_grad():
        before, after = head.target_logits(state), pruned.target_logits(state)  # [N, V]
    assert torch.equal(after[:, new_vocab], before[:, new_vocab])
    assert torch.isinf(after[:, ~pruned.t2d]).all()
    for token in range(VOCAB):
        index = pruned.draft_index(token)
        assert (index >= 0) == (token in set(new_vocab.tolist()))
        if index >= 0:
            assert int(pruned.to_target(torch.tensor(index))) == token
    dropped = sorted(set(old_vocab.tolist()) - set(new_vocab.tolist()) - always)
    kept_counts = counts[new_vocab[~torch.isin(new_vocab, torch.tensor(sorted(always)))]]
    assert counts[dropped].max() <= kept_counts.min()  # the most frequent kept
    ties = [t for t in dropped if counts[t] == kept_counts.min()]
    assert all(t > k for t in ties for k in new_vocab.tolist() if counts[k] == kept_counts.min())  # lower id wins
    assert head.draft_vocab_size == 64 and torch.equal(head_vocab(head), old_vocab)  # the old head unchanged


def test_a_pruned_head_saves_and_loads_as_any_head(tmp_path):
    target = tiny_target()
    head = tiny_head(target, draft_vocab=64)
    pruned = prune_head(head, token_counts(), 16, set())
    save_head(pruned, tmp_path, dtype=torch.float32)
    loaded = load_head(tmp_path, target.get_input_embeddings().weight.detach())
    state = torch.randn(3, head.fc.weight.shape[0])
    with torch.no_grad():
        assert torch.equal(loaded.target_logits(state), pruned.target_logits(state))
    assert torch.equal(loaded.d2t, pruned.d2t)


def test_pruning_refuses_a_larger_vocabulary_or_one_too_small_for_the_tokens_always_kept():
    head = tiny_head(tiny_target(), draft_vocab=64)
    vocab = head_vocab(head).tolist()
    with pytest.raises(ValueError, match="larger one needs training"):
        prune_head(head, token_counts(), 65, set())
    with pytest.raises(ValueError, match="cannot hold"):
        prune_head(head, token_counts(), 1, set(vocab[:2]))
    missing = next(t for t in range(VOCAB) if t not in vocab)
    with pytest.raises(ValueError, match="no lm_head row"):
        prune_head(head, token_counts(), 8, {missing})


def test_counts_and_coverage_read_only_the_answers_of_the_split_asked_for(tmp_path):
    # two rows: prompt [1, 2] answer [3, 3, 4] (training); prompt [5] answer [6] (held out)
    path = tmp_path / "ids.npz"
    np.savez_compressed(path, ids=np.array([1, 2, 3, 3, 4, 5, 6], dtype=np.uint16), lengths=np.array([5, 2]),
                        prompt_len=np.array([2, 1]), heldout=np.array([False, True]))
    train = answer_token_counts(path, 8)
    assert train.tolist() == [0, 0, 0, 2, 1, 0, 0, 0]
    assert answer_token_counts(path, 8, heldout=True).tolist() == [0, 0, 0, 0, 0, 0, 1, 0]
    assert vocab_coverage(train, torch.tensor([3])) == pytest.approx(2 / 3)


def test_prune_mode_writes_the_smaller_head_with_its_record_and_model_card(tmp_path):
    from tools.train_head import TrainHeadOptions, prune_existing

    target = tiny_target()
    head = tiny_head(target, draft_vocab=64)
    save_head(head, tmp_path / "old")
    (tmp_path / "old" / "metrics.json").write_text(json.dumps(trained_metrics()))
    vocab = head_vocab(head).tolist()
    answer = vocab[:10] * 3 + vocab[10:20]  # 20 tokens of the draft vocabulary, the first 10 three times as often
    ids = tmp_path / "ids.npz"
    np.savez_compressed(ids, ids=np.array([1, 2, *answer, 3, *vocab[30:34]], dtype=np.uint16),
                        lengths=np.array([2 + len(answer), 5]), prompt_len=np.array([2, 1]),
                        heldout=np.array([False, True]))
    options = TrainHeadOptions(out=tmp_path / "new", work=tmp_path / "work", init=tmp_path / "old",
                               command="specscope train-head --prune-vocab 20")
    metrics = prune_existing(target, None, options, 20, ids, {vocab[-1]}, 0, log=lambda *a: None)
    pruned = load_head(tmp_path / "new", target.get_input_embeddings().weight.detach())
    assert pruned.draft_vocab_size == 20 and set(head_vocab(pruned).tolist()) == {*vocab[:19], vocab[-1]}
    record = metrics["pruned"]
    assert record["from_size"] == 64 and record["to_size"] == 20 and record["counts"] == str(ids.name)
    assert record["train_answer_coverage"] == {"before": 1.0, "after": pytest.approx(39 / 40)}
    assert record["heldout_answer_coverage"]["after"] == 0.0
    assert json.loads((tmp_path / "new" / "metrics.json").read_text())["draft_vocab_size"] == 20
    card = (tmp_path / "new" / "README.md").read_text()
    assert "## Draft vocabulary pruned" in card and "Cut from 64 to the 20" in card
    assert "the unpruned head's" in card  # not measured after pruning: the card says whose numbers it shows


def test_measuring_with_outside_tokens_counted_puts_both_vocabularies_on_the_same_positions():
    from tools.training.objective import depth_stats
    from tools.training.selfdistill import Sample
    from tools.training.trainer import eval_batches, target_to_draft_map

    target = tiny_target()
    head = tiny_head(target, draft_vocab=64)
    pruned = prune_head(head, token_counts(), 16, set())
    g = torch.Generator().manual_seed(4)
    features = 3 * target.config.hidden_size
    samples = [Sample(i, True, torch.randint(0, VOCAB, (14,), generator=g), 4,
                      torch.randn(13, features, generator=g), torch.randint(0, VOCAB, (10,), generator=g))
               for i in range(3)]  # 30 answer positions, their tokens drawn from the whole target vocabulary

    def measure(one, count_outside):
        mapping = target_to_draft_map(head_vocab(one), VOCAB)
        with torch.no_grad():
            return depth_stats(one, eval_batches(samples, mapping, 2, count_outside=count_outside), 2)

    old, new = measure(head, True), measure(pruned, True)
    assert old.positions == new.positions == 30
    inside = measure(pruned, False)
    assert inside.positions == sum(int(pruned.t2d[s.labels].sum()) for s in samples) < 30  # training's own count
