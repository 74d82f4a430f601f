"""A head whose products' rows are int8 × 2^e (`specscope train-head --int8-rows`): what rounding keeps, and the
head it writes. The kernel's reading of such rows, bit for bit, is tests/test_native.py's."""

from __future__ import annotations

import json

import torch

from engine.models.head import INT8_PRODUCTS, int8_rows, load_head, round_to_int8_rows, save_head
from test_head import tiny_head, tiny_target
from test_prune_head import trained_metrics


def test_rounding_keeps_each_row_within_half_its_step_and_is_a_fixed_point():
    weight = torch.randn(40, 96, generator=torch.Generator().manual_seed(1)) * torch.logspace(-4, 1, 40)[:, None]
    weight[3] = 0  # a zero row stays zero, at scale 1
    rounded = round_to_int8_rows(weight)
    q, scale = int8_rows(rounded)
    assert torch.equal(q.float() * scale[:, None], rounded)
    assert bool((q.abs().amax(dim=1)[torch.arange(40) != 3] >= 64).all())  # the largest weight keeps 64–127 steps
    assert bool(((rounded - weight).abs() <= scale[:, None] / 2).all())
    assert torch.equal(round_to_int8_rows(rounded), rounded)
    assert torch.equal(rounded.to(torch.bfloat16).float(), rounded)  # exact in bf16 and fp16
    assert torch.equal(rounded.to(torch.float16).float(), rounded)
    assert int8_rows(weight) is None  # rows as they were are not of that form


def test_int8_rows_mode_writes_the_rounded_head_with_its_record_and_model_card(tmp_path):
    from tools.train_head import TrainHeadOptions, round_existing

    target = tiny_target()
    head = tiny_head(target, draft_vocab=64)
    save_head(head, tmp_path / "old")
    (tmp_path / "old" / "metrics.json").write_text(json.dumps(trained_metrics()))
    options = TrainHeadOptions(out=tmp_path / "new", work=tmp_path / "work", init=tmp_path / "old",
                               command="specscope train-head --int8-rows")
    metrics = round_existing(target, None, options, set(), 0, log=lambda *a: None)
    embeddings = target.get_input_embeddings().weight.detach()
    old, new = load_head(tmp_path / "old", embeddings), load_head(tmp_path / "new", embeddings)
    for name in INT8_PRODUCTS:
        assert int8_rows(new.get_submodule(name).weight) is not None
        assert torch.equal(new.get_submodule(name).weight, round_to_int8_rows(old.get_submodule(name).weight))
    assert torch.equal(new.fc.weight, old.fc.weight) and torch.equal(new.d2t, old.d2t)
    record = metrics["int8_rows"]
    assert record["products"] == list(INT8_PRODUCTS) and 0 < max(record["largest_change"].values()) < 0.01
    assert record["int8_bytes"] < 0.6 * record["bf16_bytes"]
    card = (tmp_path / "new" / "README.md").read_text()
    assert "## Rows rounded to int8 × 2^e" in card
    assert "Not measured after rounding" in card  # the card says whose numbers it shows
