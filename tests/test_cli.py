"""`specscope generate` and `specscope bench` end to end on a tiny model saved to disk."""

import json

import pytest

from cli.main import main
from engine.errors import RequestError
from engine.events import read_trace
from tiny_models import tiny_llama
from tools.bench import PolicySpec, read_prompts, run_bench
from tools.report import read_report
from tools.report_markdown import markdown_table
from test_engine_behaviour import word_tokenizer

WORDS = ["<unk>", "<eos>"] + [f"w{i}" for i in range(2, 260)]


@pytest.fixture(scope="module")
def tiny_target(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-target")
    tiny_llama(seed=2, vocab_size=len(WORDS)).save_pretrained(folder)
    word_tokenizer(WORDS).save_pretrained(folder)
    return str(folder)


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_generate_json_reports_the_summary_and_the_comparison(tiny_target, capsys):
    code, out, _ = run_cli(capsys, "generate", "w5 w6 w7 w5 w6", "--target", tiny_target, "--dtype", "float32",
                           "--policy", "talon", "--compare", "ar", "--max-new-tokens", "24", "--json")
    assert code == 0
    summary = json.loads(out)
    for key in ("text", "new_tokens", "steps", "tau", "delta", "tokens_per_s", "wall_s", "policy", "params"):
        assert key in summary
    assert summary["policy"] == "talon" and summary["params"]["mu"] == 0.03
    assert summary["new_tokens"] == 24
    compare = summary["compare"]
    assert compare["policy"] == "ar" and compare["identical"] is True
    assert compare["speedup"] == pytest.approx(summary["tokens_per_s"] / compare["tokens_per_s"])


def test_generate_prints_text_and_a_speedup_line_and_writes_a_trace(tiny_target, capsys, tmp_path):
    trace = tmp_path / "run.jsonl"
    code, out, _ = run_cli(capsys, "generate", "w9 w8", "--target", tiny_target, "--dtype", "float32",
                           "--policy", "eagle", "--param", "depth=3", "--compare", "ar", "--max-new-tokens", "12",
                           "--trace", str(trace))
    assert code == 0
    assert "speedup eagle vs ar:" in out and "identical output" in out
    events = read_trace(str(trace))
    assert events[0].type == "run_started" and events[0].params["depth"] == 3
    assert events[-1].type == "run_finished"


@pytest.mark.parametrize("argv, message", [
    (["generate", " ", "--policy", "talon"], "prompt is empty"),
    (["generate", "w5", "--param", "mu=7"], "mu"),
    (["generate", "w5", "--param", "bogus=1"], "unknown parameter"),
    (["generate", "w5", "--policy", "nope"], "unknown policy"),
    (["generate", "w5", "--max-new-tokens", "0"], "max_new_tokens"),
    (["generate", "w5", "--max-new-tokens", "5000"], "context"),
])
def test_bad_input_gets_a_clear_error_and_exit_code_2(tiny_target, capsys, argv, message):
    code, _, err = run_cli(capsys, *argv, "--target", tiny_target, "--dtype", "float32")
    assert code == 2
    assert message in err and "Traceback" not in err


def test_policy_specs_carry_parameters_after_colons():
    spec = PolicySpec.parse("talon:mu=0.05:budget=40")
    assert (spec.policy, spec.params) == ("talon", {"mu": "0.05", "budget": "40"})
    with pytest.raises(RequestError):
        PolicySpec.parse("talon:mu")


def write_prompts(path, prompts):
    path.write_text("".join(json.dumps({"question_id": i, "category": "t", "turns": [p, "next"]}) + "\n"
                            for i, p in enumerate(prompts)))


def test_bench_compares_every_policy_with_ar_on_the_same_prompts(engine64, tmp_path):
    write_prompts(tmp_path / "q.jsonl", ["hello world", "abcabcabc", "the cat sat"])
    prompts = read_prompts(tmp_path / "q.jsonl", limit=2)
    assert [p.text for p in prompts] == ["hello world", "abcabcabc"]
    specs = [PolicySpec.parse(text) for text in ("chain", "talon", "talon:mu=0.2")]
    report = run_bench(engine64, prompts, specs, max_new_tokens=16, progress=False)
    labels = [r.policy for r in report.results]
    assert labels == ["ar", "chain", "talon", "talon:mu=0.2"]
    for result in report.results:
        assert result.identical_to_ar is True and result.divergences == []
        assert result.new_tokens == 32
        assert result.speedup_vs_ar > 0
    assert report.results[0].tau == 1.0 and report.results[0].delta == 0.0
    assert report.results[3].params["mu"] == 0.2


def test_bench_runs_hugging_face_baselines_beside_the_policies(engine64, tmp_path):
    write_prompts(tmp_path / "q.jsonl", ["hello world", "abcabcabc"])
    specs = [PolicySpec.parse(text) for text in ("hf-generate", "hf-prompt-lookup", "talon")]
    report = run_bench(engine64, read_prompts(tmp_path / "q.jsonl"), specs, max_new_tokens=16, progress=False)
    for name in ("hf-generate", "hf-prompt-lookup"):
        assert report.result(name).identical_to_ar is True and report.result(name).new_tokens == 32
        assert report.result(name).tau is None and report.result(name).tokens_per_s > 0
    assert "| hf-generate | — | — | — |" in markdown_table(report)
    with pytest.raises(RequestError, match="no parameters"):
        PolicySpec.parse("hf-generate:x=1")


def test_bench_prompts_take_one_category_in_turn(tmp_path):
    rows = [("a", "x1"), ("a", "x2"), ("a", "x3"), ("b", "y1"), ("c", "z1"), ("c", "z2")]
    (tmp_path / "q.jsonl").write_text("".join(json.dumps({"question_id": i, "category": c, "turns": [t]}) + "\n"
                                              for i, (c, t) in enumerate(rows)))
    assert [p.text for p in read_prompts(tmp_path / "q.jsonl")] == ["x1", "y1", "z1", "x2", "z2", "x3"]
    assert [p.text for p in read_prompts(tmp_path / "q.jsonl", limit=3)] == ["x1", "y1", "z1"]


def test_bench_cli_writes_markdown_and_json(tiny_target, capsys, tmp_path):
    write_prompts(tmp_path / "q.jsonl", ["w3 w4 w5 w3 w4", "w7 w7 w7"])
    code, out, _ = run_cli(capsys, "bench", "--prompts", str(tmp_path / "q.jsonl"), "--policies", "ar,chain,talon",
                           "--max-new-tokens", "16", "--target", tiny_target, "--dtype", "float32",
                           "--out", str(tmp_path / "out"))
    assert code == 0
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(report) >= {"target", "draft", "device", "dtype", "prompts", "max_new_tokens", "temperature",
                           "results"}
    assert [r.identical_to_ar for r in read_report(tmp_path / "out" / "results.json").results] == [True, True, True]
    assert "| talon |" in (tmp_path / "out" / "results.md").read_text() and "| talon |" in out


def test_default_bench_prompts_are_the_held_out_split_across_task_kinds():
    from tools.bench import held_out_prompts
    from tools.training.selfdistill import is_held_out

    prompts = held_out_prompts()
    assert len(prompts) >= 100
    assert all(is_held_out(prompt.question_id, 0.05) for prompt in prompts)
    assert len({prompt.text for prompt in prompts}) == len(prompts)
    assert len({prompt.category for prompt in prompts}) > 1 and all(prompt.category for prompt in prompts)
