"""The bench's report as Spec-Bench gives it (per category, per prompt), its step shapes (tree sizes, per-depth
acceptance, tokens per step), its declared types and versions, and its charts (`--plots`)."""

import dataclasses
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

from pydantic import ValidationError

from tools.bench import PolicySpec, Prompt, run_bench
from engine.costs import MEMORY_DRIFT, MEMORY_SWING, CostTable, memory_note
from tools.report import (INTERVAL_DRAWS, INTERVAL_LEVEL, REPORT_VERSION, BenchReport, CostCurve, SpeedupInterval,
                          cost_curve, read_report, report_json, speedup_interval)
from tools.report_markdown import markdown_table, memory_reading
from test_cli import run_cli, tiny_target, write_prompts  # noqa: F401  (tiny_target is a fixture)
from tools.plots import CHARTS, nice_ticks, speedup_chart, write_plots

ROOT = Path(__file__).resolve().parent.parent

SVG = "{http://www.w3.org/2000/svg}"
PROMPTS = [Prompt(1, "hello world", "writing"), Prompt(2, "abcabcabc", "coding"), Prompt(3, "the cat sat", "writing")]


@pytest.fixture(scope="module")
def report(engine64):
    specs = [PolicySpec.parse(text) for text in ("hf-generate", "chain", "talon")]
    return run_bench(engine64, PROMPTS, specs, max_new_tokens=16, progress=False)


def test_bench_keeps_every_summary_key_and_adds_the_breakdowns(report):
    assert report.categories == ["writing", "coding"]
    for result in report.model_dump()["results"]:
        assert set(result) >= {"policy", "params", "tau", "delta", "c", "tokens_per_s", "speedup_vs_ar", "new_tokens",
                               "steps", "share_draft", "share_verify", "share_other", "share_outside_forwards",
                               "identical_to_ar", "divergences", "by_category", "per_prompt", "tree_sizes",
                               "acceptance_by_depth", "accept_lengths"}


def test_each_category_sums_its_own_prompt_rows(report):
    for result in report.results:
        rows = result.per_prompt
        assert [row.question_id for row in rows] == [1, 2, 3]
        assert [row.category for row in rows] == ["writing", "coding", "writing"]
        assert sum(row.new_tokens for row in rows) == result.new_tokens
        writing = result.by_category["writing"]
        tokens = rows[0].new_tokens + rows[2].new_tokens
        seconds = rows[0].wall_s + rows[2].wall_s
        assert writing.prompts == 2 and writing.new_tokens == tokens
        assert writing.tokens_per_s == pytest.approx(tokens / seconds)
        if result.steps is not None:
            assert writing.tau == pytest.approx(tokens / (rows[0].steps + rows[2].steps))
        else:
            assert writing.tau is None and rows[0].tau is None


def test_category_speedups_are_against_ar_on_the_same_prompts(report):
    ar = report.results[0]
    assert ar.policy == "ar"
    assert all(cat.speedup_vs_ar == pytest.approx(1.0) for cat in ar.by_category.values())
    talon = report.results[-1]
    for name, cat in talon.by_category.items():
        assert cat.speedup_vs_ar == pytest.approx(cat.tokens_per_s / ar.by_category[name].tokens_per_s)
    for mine, base in zip(talon.per_prompt, ar.per_prompt):
        assert mine.speedup_vs_ar == pytest.approx(mine.tokens_per_s / base.tokens_per_s)
        assert mine.identical_to_ar is True and mine.first_difference is None


def test_each_speedup_carries_the_interval_its_prompts_drawn_again_give(report):
    ar, *others = report.results
    assert ar.speedup_interval is None
    for result in others:
        low, high = result.speedup_interval
        assert low <= high
        assert f"{result.speedup_vs_ar:.2f}× ({low:.2f}–{high:.2f})" in markdown_table(report)
        if result.policy in ("chain", "talon"):  # ar's tokens on every prompt: each draw's ratio is a mediant
            per_prompt = [row.speedup_vs_ar for row in result.per_prompt]
            assert min(per_prompt) - 1e-9 <= low and high <= max(per_prompt) + 1e-9
    assert report.interval == SpeedupInterval(level=INTERVAL_LEVEL, draws=INTERVAL_DRAWS)
    assert "drawn again with replacement (2000 draws)" in markdown_table(report)
    assert "drawn again" not in markdown_table(report.model_copy(update={"interval": None}))
    rows = [row.model_dump() for row in others[0].per_prompt]
    assert speedup_interval(rows[:2], [row.model_dump() for row in ar.per_prompt]) is None  # two prompts: no interval
    assert speedup_interval(rows, [row.model_dump() for row in ar.per_prompt]) == others[0].speedup_interval


def test_the_speedup_chart_draws_each_interval_as_a_whisker(report):
    root = ET.fromstring(speedup_chart(report))
    whiskers = {line.get("data-policy"): (float(line.get("data-low")), float(line.get("data-high")))
                for line in root.iter(f"{SVG}line") if line.get("class") == "interval"}
    assert whiskers == {r.policy: pytest.approx(r.speedup_interval, abs=0.005) for r in report.results
                        if r.speedup_interval}
    assert "ar" not in whiskers and len(whiskers) == len(report.results) - 1
    assert "whiskers: where 95% of the speedups fall" in speedup_chart(report)
    assert "whiskers" not in speedup_chart(report.model_copy(update={"interval": None}))


def test_step_shapes_account_for_every_step_and_token(report):
    for result in report.results:
        if result.steps is None:
            assert result.tree_sizes == []
            continue
        sizes = result.tree_sizes
        assert sum(steps for _, steps, _ in sizes) == result.steps
        assert sum(emitted for _, _, emitted in sizes) == result.new_tokens
        assert [size for size, _, _ in sizes] == sorted({size for size, _, _ in sizes})
    assert report.results[0].tree_sizes == [(0, 48, 48)]  # ar: no drafts, one token per step


def test_per_depth_acceptance_counts_every_drafting_step_and_accepted_draft(report):
    for result in report.results:
        if result.steps is None or result.policy == "ar":
            continue
        depths = result.acceptance_by_depth
        assert [d.depth for d in depths] == list(range(1, len(depths) + 1))
        assert depths[0].drafted == result.steps - sum(steps for size, steps, _ in result.tree_sizes if size == 0)
        assert depths[0].reached == depths[0].drafted  # nothing above depth 1 to reject
        for d in depths:
            assert d.accepted <= d.reached <= d.drafted
            assert d.rate == pytest.approx(d.accepted / d.drafted)
            # None where no step reached the depth (a chain whose γ fell below it once its drafts were rejected)
            assert d.conditional_rate == (pytest.approx(d.accepted / d.reached) if d.reached else None)
        for above, below in zip(depths, depths[1:]):
            assert below.drafted <= above.drafted and below.accepted <= above.accepted
            assert below.reached <= above.accepted  # reaching d + 1 takes accepting d
        # Each step emits its accepted drafts and, unless its text ended at an accepted draft, one own token.
        accepted = sum(d.accepted for d in depths)
        assert result.new_tokens - result.steps <= accepted <= result.new_tokens - result.steps + len(PROMPTS)


def test_tokens_per_step_histogram_counts_the_bonus_and_sums_to_the_run(report):
    for result in report.results:
        if result.steps is None:
            assert result.accept_lengths == [] and result.acceptance_by_depth == []
            continue
        lengths = result.accept_lengths
        assert sum(steps for _, steps in lengths) == result.steps
        assert sum(tokens * steps for tokens, steps in lengths) == result.new_tokens
        assert [tokens for tokens, _ in lengths] == sorted(tokens for tokens, _ in lengths)
    ar = report.result("ar")
    assert ar.accept_lengths == [(1, 48)] and ar.acceptance_by_depth == []  # ar's one token is its own


def test_the_report_round_trips_through_its_json_with_its_version(report):
    text = report_json(report)
    assert json.loads(text)["report_version"] == REPORT_VERSION
    assert list(json.loads(text))[0] == "report_version"
    assert BenchReport.model_validate_json(text) == report


def test_a_current_report_without_its_step_shapes_is_refused(report):
    data = json.loads(report_json(report))
    del data["results"][1]["acceptance_by_depth"]
    with pytest.raises(ValidationError, match="per-depth acceptance"):
        BenchReport.model_validate(data)
    data["report_version"] = REPORT_VERSION + 1
    with pytest.raises(ValidationError, match="report_version"):
        BenchReport.model_validate(data)


@pytest.mark.parametrize("path", sorted((ROOT / "static" / "results").glob("*.json")), ids=lambda path: path.name)
def test_every_shipped_report_parses_under_the_declared_types(path):
    report = read_report(path)
    assert json.loads(path.read_text())["report_version"] == report.report_version
    assert report.result("ar").speedup_vs_ar == pytest.approx(1.0)
    if report.report_version == 1:  # benchmarked before per-depth acceptance was kept
        assert all(r.acceptance_by_depth is None and r.accept_lengths is None for r in report.results)


def test_a_report_without_a_version_reads_as_version_one():
    data = json.loads(sorted((ROOT / "static" / "results").glob("*.json"))[0].read_text())
    data.pop("report_version")
    for result in data["results"]:
        result.pop("acceptance_by_depth", None)
        result.pop("accept_lengths", None)
    assert BenchReport.model_validate(data).report_version == 1


def test_results_md_reads_per_category_and_per_prompt(report):
    text = markdown_table(report)
    assert "## speedup vs ar per category" in text and "## τ per category" in text
    assert "| policy | writing | coding | all |" in text
    assert "| ar | 1.00× | 1.00× | 1.00× |" in text
    assert "| hf-generate | — | — | — |" in text  # no steps, no τ
    assert "| question | category | ar | hf-generate | chain | talon |" in text
    assert text.count("\n| 2 | coding |") == 1


def parse_svg(path):
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg" and root.get("viewBox")
    return root


def marks(root, tag):
    return [node for node in root.iter(f"{SVG}{tag}") if node.get("data-policy") or node.get("data-n")]


def test_bench_plots_writes_charts_that_parse_and_carry_the_results(tiny_target, capsys, tmp_path):
    write_prompts(tmp_path / "q.jsonl", ["w3 w4 w5 w3 w4", "w7 w7 w7"])
    code, out, _ = run_cli(capsys, "bench", "--prompts", str(tmp_path / "q.jsonl"), "--policies", "ar,chain,talon",
                           "--max-new-tokens", "16", "--target", tiny_target, "--dtype", "float32",
                           "--out", str(tmp_path / "out"), "--plots", "--note", "a tiny random model")
    assert code == 0 and "4 charts" in out
    folder = tmp_path / "out"
    report = read_report(folder / "results.json")
    markdown = (folder / "results.md").read_text()
    assert report.note == "a tiny random model" and "Note: a tiny random model" in markdown
    # Read before the runs and after each of the two prompts' (every policy's run of it), outside the timed runs.
    assert len(report.memory_gb_s) == 3 and all(speed > 0 for speed in report.memory_gb_s)
    assert memory_reading(report.memory_gb_s) in markdown.splitlines()[0]
    assert json.loads((folder / "results.json").read_text())["report_version"] == REPORT_VERSION
    for name, title in CHARTS:
        assert f"![{title}]({name})" in markdown
        parse_svg(folder / name)

    bars = {bar.get("data-policy"): float(bar.get("data-value")) for bar in marks(parse_svg(folder / "speedup.svg"), "rect")}
    assert bars == {r.policy: pytest.approx(r.speedup_vs_ar, abs=0.005) for r in report.results}

    taus = marks(parse_svg(folder / "tau-by-category.svg"), "rect")
    talon = report.result("talon")
    assert {(bar.get("data-policy"), bar.get("data-category")) for bar in taus} == {
        (policy, "t") for policy in ("chain", "talon")}
    assert float(next(b for b in taus if b.get("data-policy") == "talon").get("data-value")) == pytest.approx(
        talon.by_category["t"].tau, abs=0.005)

    points = [p for p in marks(parse_svg(folder / "tau-vs-tree-size.svg"), "circle") if p.get("data-policy") == "talon"]
    assert sum(int(p.get("data-steps")) for p in points) == talon.steps

    costs = marks(parse_svg(folder / "cost-curve.svg"), "circle")  # the engine's table, assumed where unmeasured
    assert len(costs) == len(report.cost_curve.ns) * len(report.cost_curve.contexts)


def test_cost_curve_chart_draws_time_of_n_over_one_per_context(report, tmp_path):
    table = CostTable.linear(2.0, 10.0, ns=(1, 2, 4, 8), contexts=(128, 512))
    with_costs = report.model_copy(update={"cost_curve": CostCurve(
        source="synthetic", device="x", dtype="y", ns=list(table.ns), contexts=list(table.contexts),
        ms=table.target.ms[0], ratio=[[ms / row[0] for ms in row] for row in table.target.ms[0]])})
    write_plots(with_costs, tmp_path)
    points = marks(parse_svg(tmp_path / "cost-curve.svg"), "circle")
    assert len(points) == 8
    at_eight = [float(p.get("data-value")) for p in points if p.get("data-n") == "8"]
    assert at_eight == [pytest.approx((2 * 8 + 10) / 12, abs=0.005)] * 2


def test_bench_reads_the_cost_curve_the_engine_holds(engine64):
    curve = cost_curve(CostTable.linear(1.0, 3.0, ns=(1, 4), contexts=(64,)))
    assert curve.ratio == [[1.0, 7 / 4]] and curve.source == "synthetic"
    assert cost_curve(engine64.costs).source == engine64.costs.target.source


def test_ticks_are_round_and_cover_the_range():
    assert nice_ticks(0, 3.26) == [0, 1, 2, 3, 4]
    assert nice_ticks(0, 1.32) == [0, 0.5, 1, 1.5]
    assert nice_ticks(0, 60)[-1] >= 60


def test_worked_examples_in_docstrings_hold():
    import doctest

    import tools.bench
    import tools.plots
    import tools.report

    assert doctest.testmod(tools.bench).failed == 0
    assert doctest.testmod(tools.plots).failed == 0
    assert doctest.testmod(tools.report).failed == 0


def test_a_second_pass_drafts_from_the_first_through_the_suffix_memory():
    """`--passes 2` with memory on: each drafting policy's second pass copies its own first answers, so it
    accepts more per step; outputs stay identical to ar's, and ar runs once."""
    from engine.drafters.memory import MemoryBank
    from tiny_models import tiny_engine

    engine = tiny_engine(seed=3, dtype=torch.float64)
    engine.memory = MemoryBank(budget=4096, target="tiny-target")
    specs = [PolicySpec.parse(text) for text in ("chain", "talon")]
    report = run_bench(engine, PROMPTS, specs, max_new_tokens=24, drafter="suffix", progress=False, passes=2)
    by_label = {result.policy: result for result in report.results}
    assert list(by_label) == ["ar", "chain", "talon", "chain · pass 2", "talon · pass 2"]
    for name in ("chain", "talon"):
        first, second = by_label[name], by_label[f"{name} · pass 2"]
        assert first.identical_to_ar and second.identical_to_ar
        assert second.tau > first.tau, (name, first.tau, second.tau)


def test_results_md_carries_the_memory_note_beside_the_runs_own(report):
    said = report.model_copy(update={"note": "busy", "memory_note": "memory read at 66.0 GB/s …"})
    assert "Note: busy\nNote: memory read at 66.0 GB/s …\n" in markdown_table(said)
    assert "Note:" not in markdown_table(report.model_copy(update={"note": None, "memory_note": None}))


def test_a_run_whose_memory_read_at_another_speed_than_the_cost_tables_is_told_so_either_way():
    table = CostTable.assumed()
    assert memory_note(table, [60.0]) is None  # a table that recorded no floors says nothing
    table.meta["floors"] = {"target": {"read_gb_s": 40.0, "read_gb_s_best": 52.0}}
    inside = 40.0 * (1 + MEMORY_DRIFT)
    assert memory_note(table, [inside, 40.0]) is None and memory_note(table, [40.0 * (1 - MEMORY_DRIFT)]) is None
    apart = memory_note(table, [inside, 40.0 * (1 - MEMORY_DRIFT)])  # each within a quarter, 1.7× apart
    assert "the cost table's" not in apart and "moving 1.7× within the run" in apart
    for speeds in ([66.0, 41.0], [40.0, 24.0]):  # faster or slower, before or after
        note = memory_note(table, speeds)
        assert note and "the cost table's at 40.0" in note and "specscope profile" in note


def test_memory_that_moves_within_a_run_is_told_for_every_policy_whatever_the_table():
    table = CostTable.assumed()  # no speed recorded: only the swing can be said
    steady = [40.0, 40.0 * MEMORY_SWING * 0.99, 41.0]
    assert memory_note(table, steady, priced=False) is None and memory_note(table, steady) is None
    moving = [40.0, 40.0 * MEMORY_SWING * 1.01, 41.0]
    for priced in (True, False):
        note = memory_note(table, moving, priced)
        assert note.startswith("memory read at 40.0–60.6 GB/s during this run (3 readings): ")
        assert "moving 1.5× within the run" in note and "specscope profile" not in note
    table.meta["floors"] = {"target": {"read_gb_s": 60.0}}  # both: off the table's and moving
    both = memory_note(table, moving)
    assert "the cost table's at 60.0" in both and "specscope profile" in both and "moving 1.5×" in both
    assert "the cost table's" not in memory_note(table, moving, priced=False)  # no policy read the table


def test_the_memory_note_is_said_for_policies_that_price_trees_over_a_table_that_otherwise_holds(engine64):
    table = CostTable.assumed()
    saved = engine64.context
    engine64.context = dataclasses.replace(saved, costs=table)
    try:
        assert engine64.memory_note_for(["cast"], [66.0]) is None  # assumed costs: costs_note_for says so instead
        table.target.source, table.meta["forward"] = "measured", engine64.forward_name
        table.meta["floors"] = {"target": {"read_gb_s": 35.0}}
        assert engine64.costs_note_for(["cast"]) is None
        assert "the cost table's at 35.0" in engine64.memory_note_for(["ar", "cast"], [66.0, 64.0])
        assert engine64.memory_note_for(["ar", "eagle", "talon"], [66.0]) is None  # none reads the table
        assert engine64.memory_note_for(["cast"], [36.0, 34.0]) is None  # within a quarter
        moving = engine64.memory_note_for(["ar", "eagle"], [36.0, 60.0, 34.0])  # within a run: said for any policy
        assert "moving 1.8× within the run" in moving and "the cost table's" not in moving
    finally:
        engine64.context = saved
