"""A trained head with a smaller draft vocabulary: its most frequent tokens kept, nothing retrained.

A draft forward of a small head is memory-bound, and its lm_head is most of the bytes it reads (the
shipped SmolLM2 head's was 12 288 × 576, 14 of its 24 MB in fp16). Dropping the rarest draft tokens' rows leaves every
kept token's logit bit-identical (each is its own row's product with the same state), so acceptance
changes only where the target's token was one of the dropped ones.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from engine.models.head import Eagle3Head, cast_head, set_vocab_map


def answer_token_counts(ids_path: Path, vocab_size: int, heldout: bool = False) -> torch.Tensor:
    """[V] long: how often each target token occurs in the answers of an exported id file (tools/train_head.py's
    `export_ids`), of its training rows or, with `heldout`, of its held-out rows; prompts are not counted."""
    data = np.load(ids_path)
    starts = np.concatenate([[0], np.cumsum(data["lengths"])[:-1]])
    answers = [data["ids"][start + prompt:start + length]
               for start, length, prompt, held in zip(starts, data["lengths"], data["prompt_len"], data["heldout"])
               if bool(held) == heldout]
    tokens = np.concatenate(answers).astype(np.int64) if answers else np.zeros(0, dtype=np.int64)
    return torch.from_numpy(np.bincount(tokens, minlength=vocab_size)[:vocab_size])


def head_vocab(head: Eagle3Head) -> torch.Tensor:
    """[Vd] long: the target id of each draft id, in draft order."""
    return head.to_target(torch.arange(head.draft_vocab_size, device=head.lm_head.weight.device)).cpu()


def vocab_coverage(counts: torch.Tensor, vocab: torch.Tensor) -> float:
    """Share of the counted tokens (`counts` [V]) that the target ids `vocab` [Vd] hold."""
    total = counts.sum().item()
    return counts[vocab].sum().item() / total if total else 0.0


def kept_draft_ids(vocab: torch.Tensor, counts: torch.Tensor, size: int, always: set[int]) -> torch.Tensor:
    """[size] long, ascending: the draft ids to keep, `always` first, then by count, ties to the lower target id.

    `vocab` [Vd] target ids in draft order, `counts` [V].

    >>> kept_draft_ids(torch.tensor([3, 5, 8, 9]), torch.tensor([0, 0, 0, 4, 0, 7, 0, 0, 4, 1]), 2, set()).tolist()
    [0, 1]
    >>> kept_draft_ids(torch.tensor([3, 5, 8, 9]), torch.tensor([0, 0, 0, 4, 0, 7, 0, 0, 4, 1]), 2, {9}).tolist()
    [1, 3]
    """
    current = len(vocab)
    where = {int(t): d for d, t in enumerate(vocab.tolist())}
    outside = sorted(t for t in always if t not in where)
    if outside:
        raise ValueError(f"tokens to keep {outside} are not in the head's draft vocabulary: they have no lm_head row")
    if size > current:
        raise ValueError(f"cannot prune a draft vocabulary of {current} tokens to {size}: a larger one needs training")
    if size < len(always):
        raise ValueError(f"a draft vocabulary of {size} cannot hold the {len(always)} tokens always kept")
    by_id = torch.argsort(vocab, stable=True)  # [Vd] draft ids by target id: the tie-break
    score = counts[vocab[by_id]].double()
    score[torch.tensor([int(vocab[d]) in always for d in by_id.tolist()], dtype=torch.bool)] = float("inf")
    order = by_id[torch.argsort(-score, stable=True)]  # [Vd] draft ids, most frequent first
    return order[:size].sort().values


def prune_head(head: Eagle3Head, counts: torch.Tensor, size: int, always: set[int]) -> Eagle3Head:
    """A new head whose draft vocabulary is `head`'s `size` most frequent tokens (`counts` [V] target-token
    counts, `always` kept whatever their count), in ascending target id order; `head` is left as it is.

    The kept lm_head rows are the old ones, so their logits are bit-identical for the same state."""
    vocab = head_vocab(head)  # [Vd]
    keep = kept_draft_ids(vocab, counts.cpu(), size, always)  # [size]
    weight = head.lm_head.weight
    state = {k: v for k, v in head.state_dict().items() if k not in ("d2t", "t2d")}
    state["lm_head.weight"] = weight.detach()[keep.to(weight.device)]  # [size, H]
    pruned = cast_head(Eagle3Head(dict(head.config, draft_vocab_size=size), head._embed).to(weight.device),
                       weight.dtype)
    missing, unexpected = pruned.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"d2t", "t2d"}, (missing, unexpected)
    if pruned.d2t is not None:
        set_vocab_map(pruned, vocab[keep])
    return pruned.eval()
