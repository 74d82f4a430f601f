"""The default policy: the fastest one a bench measured on this device, recorded with the cost table and said."""

from __future__ import annotations

import json

from engine.costs import FASTEST, FASTEST_EVIDENCE, CostTable, resolve_costs
from engine.engine import DEFAULT_POLICY
from engine.policies import POLICIES
from engine.policies.base import PolicyContext
from engine.request import GenerationRequest
from test_cli import run_cli, tiny_target, write_prompts  # noqa: F401 (fixture)
from tools.bench import PolicySpec, fastest_policy, read_prompts, record_default, run_bench
from tools.profile import _keep_recorded_default
from tools.report import BenchReport, PolicyResult, read_report


def report_with(speeds: dict[str, float]) -> BenchReport:
    """A report that holds only what choosing the default reads: every policy's tokens/s and speedup."""
    results = [PolicyResult.model_construct(policy=name, tokens_per_s=tps, speedup_vs_ar=tps / speeds["ar"], tau=1.0)
               for name, tps in speeds.items()]
    return BenchReport.model_construct(results=results, prompts=8, max_new_tokens=96, drafter="hybrid",
                                       source="q.jsonl")


def test_the_fastest_engine_policy_with_default_parameters_is_chosen():
    speeds = {"ar": 20.0, "hf-prompt-lookup": 40.0, "talon:mu=0.1": 35.0, "chain": 24.0, "cast": 28.0}
    policy, evidence = fastest_policy(report_with(speeds))
    assert policy == "cast"  # not the Hugging Face baseline, not a parameterised column
    assert evidence["speedup_vs_ar"] == {"ar": 1.0, "chain": 1.2, "cast": 1.4}
    assert evidence["prompts"] == 8 and evidence["source"] == "q.jsonl" and "date" in evidence


def test_without_a_record_the_default_is_talon_and_says_it_was_not_measured(engine64):
    info = engine64.describe()
    assert info.default_policy == DEFAULT_POLICY == "talon"
    assert "not measured on this device" in info.default_policy_note


def test_a_recorded_default_is_saved_with_the_cost_table_and_used_by_requests_without_a_policy(engine64, tmp_path):
    write_prompts(tmp_path / "q.jsonl", ["hello world", "abcabcabc"])
    report = run_bench(engine64, read_prompts(tmp_path / "q.jsonl"), [PolicySpec.parse(p) for p in ("chain", "eagle")],
                       max_new_tokens=12, progress=False)
    report.source = "q.jsonl"
    saved_context = engine64.context
    try:
        engine64.context = PolicyContext(costs=CostTable.linear(1.6, 42.0))
        policy = record_default(engine64, report, tmp_path / "costs.json")
        table = resolve_costs(tmp_path / "costs.json", tmp_path / "none.json")
        assert table.meta[FASTEST] == policy and set(table.meta[FASTEST_EVIDENCE]["speedup_vs_ar"]) == {
            "ar", "chain", "eagle"}
        engine64.context = PolicyContext(costs=table)
        info = engine64.describe()
        assert info.default_policy == policy and "measured fastest on this device" in info.default_policy_note
        assert engine64.validate(GenerationRequest(prompt="hi")).policy.name == policy
    finally:
        engine64.context = saved_context


def test_profiling_again_keeps_the_recorded_default():
    old, new = CostTable.linear(1.0, 10.0), CostTable.linear(2.0, 20.0)
    old.meta.update({FASTEST: "cast", FASTEST_EVIDENCE: {"prompts": 8}})
    _keep_recorded_default(old, new)
    assert new.meta[FASTEST] == "cast" and new.meta[FASTEST_EVIDENCE] == {"prompts": 8}


def test_cli_generate_and_bench_say_which_default_they_used(tiny_target, capsys, tmp_path):  # noqa: F811
    table = tmp_path / "costs.json"
    code, out, _ = run_cli(capsys, "generate", "w5 w6 w7", "--target", tiny_target, "--dtype", "float32",
                           "--max-new-tokens", "8", "--cost-table", str(CostTable.linear(1.6, 42.0).save(table)))
    assert code == 0 and "default policy talon: not measured on this device" in out
    write_prompts(tmp_path / "q.jsonl", ["w3 w4 w5 w3 w4", "w7 w7 w7"])
    code, out, _ = run_cli(capsys, "bench", "--prompts", str(tmp_path / "q.jsonl"), "--policies", "ar,chain,talon",
                           "--max-new-tokens", "8", "--target", tiny_target, "--dtype", "float32",
                           "--cost-table", str(table), "--out", str(tmp_path / "out"), "--record-default")
    assert code == 0 and "recorded in" in out
    chosen = json.loads(table.read_text())["meta"][FASTEST]
    assert chosen in ("ar", "chain", "talon")
    code, out, _ = run_cli(capsys, "bench", "--prompts", str(tmp_path / "q.jsonl"), "--max-new-tokens", "8",
                           "--target", tiny_target, "--dtype", "float32", "--cost-table", str(table),
                           "--out", str(tmp_path / "out2"))
    assert code == 0 and f"policies: ar and the default, {chosen}: measured fastest" in out
    labels = [r.policy for r in read_report(tmp_path / "out2" / "results.json").results]
    assert labels == list(dict.fromkeys(["ar", chosen]))
    code, out, _ = run_cli(capsys, "generate", "w5 w6 w7", "--target", tiny_target, "--dtype", "float32",
                           "--max-new-tokens", "8", "--cost-table", str(table), "--json")
    assert code == 0 and json.loads(out)["policy"] == chosen
    assert "measured fastest" in json.loads(out)["default_policy_note"]


def test_a_first_load_calibration_measures_costs_then_records_the_fastest_policy_ar_included_a_near_tie_to_ar(
        engine64, tmp_path):
    from engine import calibration
    from engine.loading import calibrate_and_save

    saved_context = engine64.context
    try:
        engine64.context = PolicyContext(costs=CostTable.linear(1.6, 42.0))
        assert calibration.needs_calibration(engine64)
        calibrate_and_save(engine64, tmp_path / "costs.json")
        table = resolve_costs(tmp_path / "costs.json", tmp_path / "none.json")
        # nothing measured before: the calibration measured its small table first, and saved it with the default
        assert table.measured and table.batches == list(calibration.COST_GRID.batches)
        assert table.ns == list(calibration.COST_GRID.ns) and table.draft is not None
        evidence = table.meta[FASTEST_EVIDENCE]
        assert set(evidence["speedup_vs_ar"]) == set(POLICIES) and evidence["speedup_vs_ar"]["ar"] == 1.0
        best = table.meta[FASTEST]
        speedup = evidence["speedup_vs_ar"]
        fastest = max(speedup, key=speedup.get)
        assert best == (fastest if speedup[fastest] >= calibration.MARGIN else "ar")  # never below ar, a tie to ar
        engine64.context = PolicyContext(costs=table)
        assert not calibration.needs_calibration(engine64) and engine64.default_policy == best
        assert "from a first-load calibration" in engine64.describe().default_policy_note
        measured = CostTable.linear(2.0, 20.0)
        _keep_recorded_default(table, measured)  # a profile's new costs: the calibration is measured again
        assert FASTEST not in measured.meta
    finally:
        engine64.context = saved_context


def test_calibration_follows_its_option_then_specscope_calibrate(monkeypatch):
    from engine.loading import calibrates
    from engine.options import EngineOptions

    monkeypatch.setenv("SPECSCOPE_CALIBRATE", "0")
    assert not calibrates(EngineOptions()) and calibrates(EngineOptions(calibrate=True))
    monkeypatch.delenv("SPECSCOPE_CALIBRATE")
    assert calibrates(EngineOptions()) and not calibrates(EngineOptions(calibrate=False))
