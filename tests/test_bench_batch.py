"""`specscope bench --batch`: prompts B at a time through engine/batch.py, against ar at the same batch; a list
of sizes adds the sweep and its chart; `--batch 1` is the bench as it was."""

import json
import xml.etree.ElementTree as ET

import pytest

from engine.errors import RequestError
from tools.bench import PolicySpec, Prompt, batch_sizes, run_bench
from tools.report import BATCH_FIELDS, BenchReport, read_report, report_json
from tools.report_markdown import markdown_table
from test_cli import run_cli, tiny_target, write_prompts  # noqa: F401  (tiny_target is a fixture)

SVG = "{http://www.w3.org/2000/svg}"
PROMPTS = [Prompt(1, "hello world", "writing"), Prompt(2, "abcabcabc", "coding"), Prompt(3, "the cat sat", "writing"),
           Prompt(4, "one two one two", "coding"), Prompt(5, "zz", "writing")]
SPECS = ["chain", "eagle", "talon", "cast"]


@pytest.fixture(scope="module")
def batched(engine64):
    return run_bench(engine64, PROMPTS, [PolicySpec.parse(text) for text in SPECS], max_new_tokens=16,
                     progress=False, batch=2)


def test_every_policy_at_batch_two_is_identical_to_ar_at_the_same_batch(batched):
    assert batched.batch == 2
    assert [r.policy for r in batched.results] == ["ar"] + SPECS
    for result in batched.results:
        assert result.identical_to_ar, result.policy
        assert len(result.per_prompt) == len(PROMPTS)


def test_a_batched_report_keeps_total_and_per_request_speeds(batched):
    ar = batched.result("ar")
    assert batched.interval is None  # no speedup has an interval to say how it was drawn
    for result in batched.results:
        assert result.tokens_per_s_per_request == pytest.approx(
            sum(row.tokens_per_s for row in result.per_prompt) / len(result.per_prompt))
        assert result.speedup_vs_ar == pytest.approx(result.tokens_per_s / ar.tokens_per_s)
        assert result.new_tokens == sum(row.new_tokens for row in result.per_prompt)
        assert result.speedup_interval is None  # the batch's requests share their time: no prompt has its own


def test_the_batched_output_is_the_output_one_at_a_time(engine64, batched):
    alone = run_bench(engine64, PROMPTS, [PolicySpec.parse("talon")], max_new_tokens=16, progress=False)
    talon = {row.question_id: row.new_tokens for row in batched.result("talon").per_prompt}
    assert talon == {row.question_id: row.new_tokens for row in alone.result("talon").per_prompt}


def test_a_batched_report_round_trips_and_says_its_batch(batched):
    text = report_json(batched)
    assert json.loads(text)["batch"] == 2
    assert BenchReport.model_validate_json(text).batch == 2
    markdown = markdown_table(batched)
    assert "· batch 2" in markdown and "tokens/s per request" in markdown


def test_a_batch_one_report_is_written_without_the_batch_fields(engine64):
    report = run_bench(engine64, PROMPTS[:2], [PolicySpec.parse("talon")], max_new_tokens=8, progress=False)
    data = json.loads(report_json(report))
    assert not set(BATCH_FIELDS) & set(data)
    assert all("tokens_per_s_per_request" not in result for result in data["results"])
    assert "batch" not in markdown_table(report) and "per request" not in markdown_table(report)


def test_batch_sizes_parse_a_list_and_refuse_nonsense():
    assert batch_sizes("1,2,4") == [1, 2, 4] and batch_sizes("4") == [4]
    for bad in ("0", "two", "", "1,-2"):
        with pytest.raises(RequestError):
            batch_sizes(bad)


def test_hugging_face_baselines_are_refused_at_batch_above_one(engine64):
    with pytest.raises(RequestError, match="one request at a time"):
        run_bench(engine64, PROMPTS[:2], [PolicySpec.parse("hf-generate")], max_new_tokens=8, progress=False, batch=2)


def test_bench_batch_list_writes_the_sweep_and_its_chart(tiny_target, capsys, tmp_path):
    write_prompts(tmp_path / "q.jsonl", ["w3 w4 w5 w3 w4", "w7 w7 w7", "w5 w6", "w2 w3 w2 w3"])
    code, out, _ = run_cli(capsys, "bench", "--prompts", str(tmp_path / "q.jsonl"), "--policies", "ar,chain,talon",
                           "--max-new-tokens", "12", "--target", tiny_target, "--dtype", "float32",
                           "--out", str(tmp_path / "out"), "--plots", "--batch", "1,2,4")
    assert code == 0 and "5 charts" in out
    folder = tmp_path / "out"
    report = read_report(folder / "results.json")
    assert report.batch == 1
    assert {(p.policy, p.batch) for p in report.batch_sweep} == {
        (policy, size) for policy in ("ar", "chain", "talon") for size in (1, 2, 4)}
    assert all(p.identical_to_ar for p in report.batch_sweep)
    assert read_report(folder / "batch-4" / "results.json").batch == 4
    markdown = (folder / "results.md").read_text()
    assert "Speedup vs ar against batch size" in markdown and "![Speedup vs ar against batch size]" in markdown
    chart = ET.parse(folder / "speedup-vs-batch.svg").getroot()
    points = {(c.get("data-policy"), int(c.get("data-batch"))): float(c.get("data-value"))
              for c in chart.iter(f"{SVG}circle") if c.get("data-batch")}
    assert points == {(p.policy, p.batch): pytest.approx(p.speedup_vs_ar, abs=0.005) for p in report.batch_sweep}


def test_every_size_of_a_sweep_drafts_from_a_fresh_suffix_memory(tiny_target, capsys, tmp_path, monkeypatch):
    """No size may draft from another size's answers to the same prompts (a later size would look faster)."""
    import tools.bench as bench

    banks = []
    original = bench.run_bench
    monkeypatch.setattr(bench, "run_bench", lambda *args, memory="engine", **kwargs: (
        banks.append(memory), original(*args, memory=memory, **kwargs))[1])
    write_prompts(tmp_path / "q.jsonl", ["w3 w4 w5 w3 w4", "w7 w7 w7"])
    code, _, _ = run_cli(capsys, "bench", "--prompts", str(tmp_path / "q.jsonl"), "--policies", "ar,talon",
                         "--max-new-tokens", "8", "--target", tiny_target, "--dtype", "float32",
                         "--out", str(tmp_path / "out"), "--batch", "1,2")
    assert code == 0 and len(banks) == 2
    assert all(bank != "engine" for bank in banks) and banks[0] is not banks[1]
