"""The profiler on a tiny in-code model, the cost table's lookups, and the one decision about which table a run reads."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from engine.costs import CostTable, _non_decreasing, costs_note, resolve_costs
from engine.errors import LoadError
from engine.models.fastlm import causal_lm
from engine.models.lm import CachedLM
from tiny_models import tiny_engine, tiny_llama
from tools.profile import Grid, add_arguments, command, floor_lines, grid_from_args, profile

SMALL = Grid(ns=(1, 8, 64, 256), contexts=(32, 64), batches=(1, 2), repeats=3, warmup=1)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Two threads on a shared 2-core machine stall whenever one is descheduled; one thread times cleanly."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_table(one_thread) -> CostTable:
    target = CachedLM(tiny_llama(0, hidden=256, layers=2), name="tiny-target")
    draft = CachedLM(tiny_llama(1, hidden=32, layers=1), name="tiny-draft")
    return profile(target, draft, SMALL, progress=False)


def test_profile_writes_a_table_of_the_grid_shape(tiny_table, tmp_path):
    path = tiny_table.save(tmp_path / "costs.json")
    table = CostTable.load(path)
    for costs in (table.target, table.draft):
        assert len(costs.ms) == len(SMALL.batches)
        assert all(len(rows) == len(SMALL.contexts) for rows in costs.ms)
        assert all(len(row) == len(SMALL.ns) for rows in costs.ms for row in rows)
        assert all(ms > 0 for rows in costs.ms for row in rows for ms in row)
    assert (table.target.name, table.draft.name) == ("tiny-target", "tiny-draft")
    assert table.key.endswith("__tiny-target__float32")


def test_profiled_cost_grows_with_new_tokens_within_noise(tiny_table):
    """256 new tokens cost more than 1; no measured point falls far below a smaller n's.

    A shared CPU deschedules whole runs (for a few ms at a time), so the cell-wise minimum of two
    profiles is checked, against a noise floor of 10 ms or half the smaller n's time."""
    second = profile(CachedLM(tiny_llama(0, hidden=256, layers=2), name="tiny-target"), None, SMALL, progress=False)
    for rows_a, rows_b in zip(tiny_table.target.ms, second.target.ms):
        for row_a, row_b in zip(rows_a, rows_b):
            row = [min(a, b) for a, b in zip(row_a, row_b)]
            assert row[-1] > 2 * row[0]
            assert all(later >= earlier - max(10.0, 0.5 * earlier) for earlier, later in zip(row, row[1:]))


def test_cost_rounds_n_context_and_batch_up_to_the_next_measured_value():
    table = CostTable.linear(lam=2.0, delta=10.0, ns=(1, 2, 4, 8), contexts=(128, 512), batches=(1, 4))
    table.target.ms[1][1] = [100.0 * n for n in (1, 2, 4, 8)]  # batch 4, context 512
    assert table.cost(3, context=100) == pytest.approx(18.0)  # read at n = 4: no slope between measured n
    assert table.cost(8, context=100) == pytest.approx(26.0)
    assert table.cost(16, context=100) == pytest.approx(42.0)  # past the grid: the last octave's slope, 2 per n
    assert table.cost(3, context=300, batch=2) == pytest.approx(400.0)  # select(c): 512, batch bucket 4
    assert table.select_context(129) == 512 and table.select_context(5000) == 512
    assert table.cost(0, context=100) == 0.0


def test_a_staircase_between_measured_n_is_not_smoothed_into_a_slope():
    """17 tokens cost what 32 do on a GPU; a table measured at 16 and 32 must not say 17 is cheaper."""
    table = CostTable.linear(lam=0.0, delta=10.0, ns=(1, 16, 32, 64))
    table.target.ms[0][0] = [10.0, 10.0, 12.0, 14.0]
    assert [table.cost(n, context=100) for n in (16, 17, 31, 32, 33)] == [10.0, 12.0, 12.0, 12.0, 14.0]


def test_a_table_says_whether_it_measured_every_n():
    assert CostTable.linear(1.0, 2.0, ns=tuple(range(1, 65))).n_grid == "every n from 1 to 64"
    sparse = CostTable.linear(1.0, 2.0, ns=(1, 2, 4))
    assert "next measured" in sparse.n_grid and sparse.to_json()["n_grid"] == sparse.n_grid
    assert sparse.summary()[0] == f"measured {sparse.n_grid}"


def test_a_version_1_table_is_refused_with_the_reason_and_the_cure(tmp_path):
    data = CostTable.linear(1.0, 2.0).to_json() | {"version": 1}
    with pytest.raises(ValueError, match="interpolated.*re-run specscope profile"):
        CostTable.from_json(data)
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    with pytest.raises(LoadError, match="version 1"):
        resolve_costs(path, tmp_path / "saved.json")
    assert resolve_costs(None, path).target.source == "assumed", "an old saved table is not read"


def test_measured_dips_and_spikes_in_cost_are_smoothed_to_the_nearest_non_decreasing_row():
    """A dip is pooled with the value before it, a spike with the values after it (isotonic regression): one
    slow sample does not raise every larger n, as a running maximum would."""
    table = CostTable.linear(lam=1.0, delta=10.0, ns=(1, 2, 4))
    table.target.ms[0][0] = [10.0, 9.0, 14.0]
    assert table.cost(1, context=10) == table.cost(2, context=10) == 9.5
    table = CostTable.linear(lam=1.0, delta=10.0, ns=(1, 2, 3, 4, 5, 6))
    table.target.ms[0][0] = [8.0, 8.5, 11.5, 9.0, 9.5, 12.0]  # a slow 3-token sample
    prices = table.prices(6, context=10)
    assert prices == [0.0, 8.0, 8.5, 10.0, 10.0, 10.0, 12.0]
    assert all(a <= b for a, b in zip(prices, prices[1:]))


def test_summary_reports_verify_ratios_and_c(tiny_table):
    text = "\n".join(tiny_table.summary())
    assert "n=64:" in text and "c = " in text


def test_a_table_without_a_draft_assumes_a_tenth_of_the_target():
    table = CostTable.linear(lam=1.0, delta=9.0)
    table.draft = None
    assert table.draft_cost(1, 100) == pytest.approx(1.0)


def test_a_run_reads_the_named_table_else_the_saved_one_else_assumed_costs_it_says_so(tiny_table, tmp_path):
    named, saved = tmp_path / "named.json", tmp_path / "saved.json"
    assumed = resolve_costs(None, saved)
    assert assumed.target.source == "assumed" and "specscope profile" in costs_note(assumed)
    tiny_table.save(saved)
    assert resolve_costs(None, saved).target.ms == tiny_table.target.ms and costs_note(tiny_table) is None
    CostTable.linear(1.0, 2.0).save(named)
    assert resolve_costs(named, saved).target.source == "synthetic"
    with pytest.raises(LoadError) as err:
        resolve_costs(tmp_path / "missing.json", saved)
    assert err.value.field == "cost_table"


def test_the_engine_names_the_path_its_profiled_table_is_saved_at_and_read_from(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECSCOPE_CACHE", str(tmp_path))
    engine = tiny_engine()
    table = profile(engine.target, None, Grid(ns=(1, 2), contexts=(32,), batches=(1,), repeats=1, warmup=0),
                    progress=False, floors=False)
    assert engine.cost_table_path == tmp_path / "costs" / f"{table.key}.json"


def test_a_narrower_profile_keeps_the_saved_table_and_says_what_it_lacks_unless_told_to_replace_it(
        monkeypatch, tmp_path, capsys):
    """The floors' command (five n, no draft) must not replace the table the policies price trees with."""
    monkeypatch.setenv("SPECSCOPE_CACHE", str(tmp_path))
    engine = tiny_engine()
    parser = argparse.ArgumentParser()
    add_arguments(parser)

    def run(*extra: str) -> str:
        grid = ["--contexts", "128", "--batches", "1", "--repeats", "1", "--warmup", "0"]
        assert command(parser.parse_args([*grid, *extra]), engine) == 0
        return capsys.readouterr().out

    assert "wrote" in run("--ns", "1,2,4")
    out = run("--ns", "1,4", "--no-draft")
    assert "kept the saved table" in out and "(n 2; the draft)" in out and "wrote" not in out
    assert CostTable.load(engine.cost_table_path).ns == [1, 2, 4]
    assert "wrote" in run("--ns", "1,4", "--no-draft", "--replace")
    assert CostTable.load(engine.cost_table_path).ns == [1, 4]
    assert "wrote" in run("--ns", "1,2,4")  # a run that covers the saved table replaces it


def test_cli_grid_rounds_contexts_to_the_step_and_caps_n():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--contexts", "100,512", "--context-step", "128", "--n-max", "32"])
    grid = grid_from_args(args)
    assert grid.contexts == (128, 512)
    assert grid.ns == tuple(range(1, 33)) and grid.batches == (1, 2, 4)
    chosen = parser.parse_args(["--ns", "1,2,4,16,17,32,64", "--n-max", "32"])
    assert grid_from_args(chosen).ns == (1, 2, 4, 16, 17, 32)


def test_cli_grid_measures_every_n_to_64_on_a_cpu_and_to_128_on_a_gpu():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args([])
    assert grid_from_args(args, "cpu").ns == tuple(range(1, 65))
    assert grid_from_args(args, "cuda").ns == tuple(range(1, 129))


def test_profiling_a_lean_lm_times_its_own_forward_and_records_the_floors():
    lean = causal_lm(tiny_llama(0, hidden=128, layers=2), name="tiny-lean")
    grid = Grid(ns=(1, 4), contexts=(32,), batches=(1, 2), repeats=1, warmup=0)
    table = profile(lean, None, grid, progress=False)
    assert table.meta["forward"] == "lean"
    floors = table.meta["floors"]["target"]
    assert floors["read_gb_s"] > 0 and floors["gemm_gflops"] > 0
    assert floors["samples"] == grid.repeats * len(grid.contexts)  # one after each timed pass of batch 1
    lines = floor_lines(table)
    assert "samples taken between the timed passes" in lines[0]
    assert "memory floor" in lines[1] and "×compute" in lines[1]
    assert len(lines) == 2 + len(grid.ns)  # one row per n at batch 1
    assert all("×" in line for line in lines[2:])
    assert lean.cache_len == 0  # left empty: the engine's next run starts from its own prompt


def test_a_table_saved_before_floors_prints_no_floor_lines():
    assert floor_lines(CostTable.linear(lam=1.0, delta=9.0)) == []


def test_the_profile_measures_an_eagle_head_as_the_draft_when_there_is_no_draft_lm(monkeypatch):
    """The shipped drafters run a head, no draft LM: its forwards are measured (c is then the table's, not an
    assumed tenth of the target), one request's row per context, and a batch's as engine/batch.py drafts it:
    b sessions' layers handed to one run (HeadForward.run_together)."""
    from engine.drafters.eagle_head import EagleHeadDrafter, HeadForward
    from engine.models.head import Eagle3Head, head_config

    together = []
    run_together = HeadForward.run_together.__func__
    monkeypatch.setattr(HeadForward, "run_together",
                        classmethod(lambda cls, forwards: together.append(len(forwards)) or run_together(cls, forwards)))

    model = tiny_llama(0, hidden=64, layers=2)
    head = Eagle3Head(head_config(model.config, draft_vocab_size=32), model.get_input_embeddings().weight.detach())
    grid = Grid(ns=(1, 4, 16), contexts=(16, 48), batches=(1, 3), repeats=2, warmup=1)
    table = profile(CachedLM(model, name="tiny-target"), None, grid, progress=False,
                    head=EagleHeadDrafter(head.eval(), "tiny-head", 2))
    assert table.draft is not None and (table.draft.name, table.draft.source) == ("tiny-head", "measured")
    one, three = table.draft.ms
    assert all(ms > 0 for row in one + three for ms in row)
    assert set(together) == {1, 3}  # a request's layer alone, a batch's three together
    # read at the next measured context (48), its row made non-decreasing in n as every lookup reads it (a tiny
    # head's n = 1 can time slower than its n = 4: then the two are pooled, test_measured_dips_and_spikes...)
    smoothed = _non_decreasing(one[1])
    assert table.draft_cost(4, context=40) == smoothed[1] and smoothed == sorted(smoothed)


def test_a_table_measured_while_the_memory_changed_speed_says_its_ratios_mix_two_machines():
    table = CostTable.linear(lam=1.0, delta=9.0)
    steady = {"weight_bytes": 10**8, "kv_bytes_per_position": 100, "matmul_weights": 5 * 10**7,
              "attention_flops_per_pair": 100, "read_gb_s": 40.0, "gemm_gflops": 300.0, "read_gb_s_best": 44.0,
              "gemm_gflops_best": 310.0, "read_gb_s_worst": 38.0, "samples": 9}
    table.meta["floors"] = {"target": steady}
    assert "mix two machines" not in floor_lines(table)[0]
    table.meta["floors"] = {"target": {**steady, "read_gb_s_best": 66.0, "read_gb_s_worst": 35.0}}
    assert "the memory read from 35.0 to 66.0 GB/s" in floor_lines(table)[0]
    del table.meta["floors"]["target"]["read_gb_s_worst"]  # a table from before the slowest sample was kept
    assert "mix two machines" not in floor_lines(table)[0]
