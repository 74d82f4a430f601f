"""Compare mode, the results page and the page's everyday use, in a real browser against a replay-only server.

No model is loaded: the shipped traces and results, and traces built here, are all the page needs.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from urllib.parse import urlsplit

import pytest

from browser_harness import ARTIFACTS, ROOT, checked_page, served
import shipped_traces
from engine.request import GenerationRequest
from tools.report import accept_lengths, acceptance_by_depth

pytestmark = pytest.mark.slow

COMPARE_TRACE = "lesson-4-compare"  # ar, chain, eagle, talon, cast on one prompt
SINGLE_TRACE = "lesson-1-deep-narrow"
SIZES = [(1440, 900), (1024, 768), (390, 844)]


@pytest.fixture(scope="module")
def replay_url():
    with served(["--replay-only"], "browser-replay-server.log") as url:
        yield url


@pytest.fixture
def page(browser):
    with checked_page(browser, {"width": 1440, "height": 900}) as page:
        yield page


def trace_steps(name: str) -> dict[str, list[int]]:
    """Per policy of a shipped trace: new_tokens after each step."""
    out: dict[str, list[int]] = {}
    for event in shipped_traces.events(name):
        if event["type"] == "step_metrics":
            out.setdefault(event["policy"], []).append(event["new_tokens"])
    return out


def compare_panes() -> list[str]:
    """The policies the recorded comparison shows in panes: every run but ar (the baseline), at most four."""
    policies = [run[0]["policy"] for run in shipped_traces.runs(COMPARE_TRACE)]
    return [policy for policy in policies if policy != "ar"][:4]


def leader_of(steps: dict[str, list[int]]) -> str:
    """The pane the shared player follows: the first with most steps."""
    panes = compare_panes()
    return max(panes, key=lambda policy: (len(steps[policy]), -panes.index(policy)))


def open_compare(page, url: str, query: str = "") -> None:
    page.goto(f"{url}/?trace={COMPARE_TRACE}&compare=1{query}")
    page.wait_for_selector("[data-testid=compare-pane][data-step='1'] [data-testid=pane-tree] [data-status]")


def pane_steps(page) -> dict[str, str]:
    return {pane.get_attribute("data-policy"): pane.get_attribute("data-step")
            for pane in page.locator("[data-testid=compare-pane]").all()}


# ---------------------------------------------------------------- lock-step

def test_compare_panes_open_at_step_one_and_step_together(page, replay_url):
    open_compare(page, replay_url)
    panes = compare_panes()
    assert pane_steps(page) == {policy: "1" for policy in panes}
    page.keyboard.press("Shift+ArrowRight")
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=compare-pane]')].every(p => p.dataset.step === '2')")
    page.click("#compare-next-step")
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=compare-pane]')].every(p => p.dataset.step === '3')")
    page.keyboard.press("Home")
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=compare-pane]')].every(p => p.dataset.step === '1')")
    # The shared slider moves every pane; past a pane's last step it stays on its last.
    steps = trace_steps(COMPARE_TRACE)
    leader = leader_of(steps)
    most = len(steps[leader])
    page.fill("#compare-step", str(most))
    page.wait_for_function(f"() => document.querySelector('[data-policy={leader}][data-testid=compare-pane]').dataset.step === '{most}'")
    assert pane_steps(page) == {policy: str(len(steps[policy])) for policy in panes}
    page.screenshot(path=str(ARTIFACTS / "browser-compare-lockstep.png"), full_page=True)


def test_align_by_tokens_shows_the_step_that_emitted_the_same_output_position(page, replay_url):
    open_compare(page, replay_url, "&align=tokens")
    assert page.is_checked("[data-testid=compare-align]")
    new_tokens = trace_steps(COMPARE_TRACE)
    leader = leader_of(new_tokens)
    moves = min(5, len(new_tokens[leader]) - 1)
    for _ in range(moves):
        page.keyboard.press("Shift+ArrowRight")
    page.wait_for_function(
        f"() => document.querySelector('[data-policy={leader}][data-testid=compare-pane]').dataset.step === '{moves + 1}'")
    # The leader (most steps) shows step moves + 1, which starts at output token new_tokens[leader][moves - 1];
    # every other pane shows its step that emits that token.
    first_token = new_tokens[leader][moves - 1]
    for policy in compare_panes():
        if policy == leader:
            continue
        totals = new_tokens[policy]
        step = next((i for i, total in enumerate(totals) if total > first_token), len(totals) - 1) + 1
        assert pane_steps(page)[policy] == str(step), policy


def test_depth_charts_of_every_pane_share_one_labelled_y_scale(page, replay_url):
    open_compare(page, replay_url)
    panes = compare_panes()
    charts = page.locator("[data-testid=pane-depth-chart]")
    assert charts.count() == len(panes)
    tops = {charts.nth(i).get_attribute("data-ymax") for i in range(len(panes))}
    depths = [event["depth"] for event in shipped_traces.events(COMPARE_TRACE)
              if event["type"] == "step_metrics" and event["policy"] in panes]
    assert len(tops) == 1 and int(tops.pop()) >= max(depths)
    labels = charts.nth(0).locator("text.axis-label").all_text_contents()
    assert "depth" in labels and "step" in labels
    for kind in ("pane-width-chart", "pane-size-chart"):
        assert len({page.locator(f"[data-testid={kind}]").nth(i).get_attribute("data-ymax") for i in range(len(panes))}) == 1
    steps = trace_steps(COMPARE_TRACE)
    assert page.locator("[data-testid=pane-silhouettes] .silhouette").count() == sum(len(steps[p]) for p in panes)


def test_compare_shows_each_panes_per_depth_acceptance_and_tokens_per_step_as_the_bench_counts_them(page, replay_url):
    """Counted from the recorded runs' step_metrics by static/js/model/stepshapes.js, as tools/report.py counts them."""
    open_compare(page, replay_url)
    panes = compare_panes()
    page.wait_for_selector("svg[data-testid=accept-length-histogram] rect[data-policy]")
    for policy in panes:
        steps = [e for e in shipped_traces.events(COMPARE_TRACE) if e["type"] == "step_metrics" and e["policy"] == policy]
        depths = acceptance_by_depth(Counter((e["depth"], e["accepted"]) for e in steps))
        dots = page.locator(f"#compare svg[data-testid=acceptance-by-depth] circle[data-policy='{policy}']").all()
        drawn = {int(d.get_attribute("data-depth")): (float(d.get_attribute("data-value")),
                                                      float(d.get_attribute("data-unconditional"))) for d in dots}
        assert drawn == {d.depth: (pytest.approx(d.conditional_rate, abs=0.0005), pytest.approx(d.rate, abs=0.0005))
                         for d in depths if d.conditional_rate is not None}, policy
        bars = page.locator(f"#compare svg[data-testid=accept-length-histogram] rect[data-policy='{policy}']").all()
        assert {int(b.get_attribute("data-tokens")): int(b.get_attribute("data-steps")) for b in bars} == dict(
            accept_lengths(Counter(e["emitted"] for e in steps))), policy
    # Plain decoding drafts nothing: no line or bar of its own.
    drawn_policies = {node.get_attribute("data-policy")
                      for node in page.locator("#compare-shapes [data-policy]").all()}
    assert drawn_policies == set(panes)
    assert "bonus" in page.inner_text("#compare-shapes figure:has([data-testid=accept-length-histogram])")
    # Counted once the runs have their steps: stepping the panes moves no count and redraws nothing.
    page.evaluate("window.shownHistogram = document.querySelector('#compare-shapes [data-testid=accept-length-histogram]')")
    page.keyboard.press("Shift+ArrowRight")
    page.wait_for_function("() => [...document.querySelectorAll('[data-testid=compare-pane]')].every(p => p.dataset.step === '2')")
    assert page.evaluate("window.shownHistogram === document.querySelector('#compare-shapes [data-testid=accept-length-histogram]')")


def test_the_table_explains_each_policy_against_ar(page, replay_url):
    open_compare(page, replay_url)
    rows = page.locator("[data-testid=compare-table] tbody tr")
    assert [rows.nth(i).get_attribute("data-policy") for i in range(rows.count())] == ["ar", *compare_panes()]
    ar = page.locator("[data-testid=compare-table] tr[data-policy=ar]")
    assert ar.locator("[data-testid=speedup]").inner_text() == "1.00×"
    assert ar.locator("[data-testid=predicted-r]").inner_text() == "1.00×"
    events = shipped_traces.events(COMPARE_TRACE)
    talon = next(e for e in events if e["type"] == "run_finished" and e["policy"] == "talon")
    predicted = talon["tau"] / (1 + talon["c"] * talon["delta"])
    row = page.locator("[data-testid=compare-table] tr[data-policy=talon]")
    assert row.locator("[data-testid=predicted-r]").inner_text() == f"{predicted:.2f}×"
    assert row.locator("[data-testid=equality]").inner_text() == "identical"


def test_ar_reads_one_and_its_output_is_not_tinted_as_rejected(page, replay_url):
    page.goto(f"{replay_url}/?trace={COMPARE_TRACE}&run=0")
    page.wait_for_selector("[data-testid=tree] [data-role=root]")
    page.keyboard.press("End")
    page.wait_for_selector("[data-testid=output][data-finished=true]")
    assert "1.00×" in page.inner_text("[data-testid=metrics]")
    assert page.locator("[data-testid=output] .shade-0").count() == 0


# ---------------------------------------------------------------- equality at a bf16 near-tie

def near_tie_trace() -> str:
    """ar and chain on one prompt in bf16: chain's bonus token at output position 2 (token 3) differs from ar's,
    where its walk records the target's top two at log p₁ − log p₂ = 0.125."""
    def started(run_id, policy, params):
        return {"schema_version": 2, "run_id": run_id, "policy": policy, "type": "run_started", "prompt": "p",
                "prompt_tokens": 3, "params": params, "drafter": "head", "target": "t", "draft": None, "device": "cpu",
                "dtype": "bfloat16", "seed": 0, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "max_new_tokens": 4}

    def odds(token, p):
        return {"token": token, "text": f"t{token}", "p": p, "q": None}

    def walk(node, top, drawn=None, child=None):
        checks = [] if child is None else [{"child": child[0], "token": child[1], "rule": "greedy", "p": top[0]["p"],
                                            "q": 0.5, "ratio": 1, "u": None, "accepted": True}]
        return {"node": node, "top": top, "checks": checks, "residual_top": None, "drawn": drawn}

    def metrics(header, step, accepted, emitted, size, depth, forwards, new_tokens):
        return {**header, "type": "step_metrics", "step": step, "accepted": accepted, "emitted": emitted,
                "tree_size": size, "depth": depth, "width": min(size, 1), "draft_forwards": forwards, "draft_ms": 1,
                "draft_forward_ms": 1, "verify_ms": 5, "other_ms": 0, "new_tokens": new_tokens}

    def root(token):
        return {"node": 0, "origin": 0, "parent": -1, "token": token, "text": f"t{token}", "depth": 0, "q": 1,
                "score": 1, "source": "root"}

    ar = {"schema_version": 2, "run_id": "ar", "policy": "ar"}
    events = [started("ar", "ar", {})]
    for step, token in enumerate([10, 11, 12, 13], 1):
        events += [
            {**ar, "type": "tree", "step": step, "nodes": [root(token - 1)], "pruned": []},
            {**ar, "type": "verify", "step": step, "nodes": [], "accepted_path": [0],
             "emitted": {"parent": 0, "token": token, "text": f"t{token}", "p": 0.5, "kind": "bonus"},
             "walk": [walk(0, [odds(token, 0.5), odds(99, 0.01)], drawn=token)]},
            {**ar, "type": "text", "step": step, "tokens": [token], "text": f"t{token}", "accepted": 0},
            metrics(ar, step, 0, 1, 0, 0, 0, step)]
    events.append({**ar, "type": "run_finished", "text": "", "tokens": [10, 11, 12, 13], "new_tokens": 4, "steps": 4,
                   "tau": 1.0, "delta": 0.0, "c": None, "tokens_per_s": 20.0, "wall_s": 0.2, "draft_ms": 0,
                   "draft_forward_ms": 0, "verify_ms": 20, "other_ms": 0, "stop_reason": "max_new_tokens"})
    chain = {"schema_version": 2, "run_id": "chain", "policy": "chain"}
    node = lambda i, parent, token, depth: {"node": i, "origin": i, "parent": parent, "token": token,  # noqa: E731
                                            "text": f"t{token}", "depth": depth, "q": 0.5, "score": 0.5 ** depth,
                                            "source": "head"}
    tie = 0.5 * math.exp(-0.125)
    events += [
        started("chain", "chain", {"gamma": 2}),
        {**chain, "type": "tree", "step": 1, "nodes": [root(9), node(1, 0, 10, 1), node(2, 1, 11, 2)], "pruned": []},
        {**chain, "type": "verify", "step": 1, "accepted_path": [0, 1, 2],
         "nodes": [{"node": 1, "token": 10, "p": 0.6, "q": 0.5, "verdict": "accepted"},
                   {"node": 2, "token": 11, "p": 0.6, "q": 0.5, "verdict": "accepted"}],
         "emitted": {"parent": 2, "token": 22, "text": "t22", "p": 0.5, "kind": "bonus"},
         "walk": [walk(0, [odds(10, 0.6), odds(98, 0.1)], child=(1, 10)),
                  walk(1, [odds(11, 0.6), odds(98, 0.1)], child=(2, 11)),
                  walk(2, [odds(22, 0.5), odds(12, tie)], drawn=22)]},
        {**chain, "type": "text", "step": 1, "tokens": [10, 11, 22], "text": "t10t11t22", "accepted": 2},
        metrics(chain, 1, 2, 3, 2, 2, 2, 3),
        {**chain, "type": "tree", "step": 2, "nodes": [root(22)], "pruned": []},
        {**chain, "type": "verify", "step": 2, "nodes": [], "accepted_path": [0],
         "emitted": {"parent": 0, "token": 23, "text": "t23", "p": 0.5, "kind": "bonus"},
         "walk": [walk(0, [odds(23, 0.5), odds(98, 0.1)], drawn=23)]},
        {**chain, "type": "text", "step": 2, "tokens": [23], "text": "t23", "accepted": 0},
        metrics(chain, 2, 0, 1, 0, 0, 0, 4),
        {**chain, "type": "run_finished", "text": "", "tokens": [10, 11, 22, 23], "new_tokens": 4, "steps": 2,
         "tau": 2.0, "delta": 1.0, "c": 0.05, "tokens_per_s": 30.0, "wall_s": 0.13, "draft_ms": 2,
         "draft_forward_ms": 2, "verify_ms": 10, "other_ms": 0, "stop_reason": "max_new_tokens"},
    ]
    return "\n".join(json.dumps(event) for event in events) + "\n"


def test_the_table_says_same_up_to_a_bf16_near_tie_with_the_recorded_gap(page, replay_url):
    page.route("**/static/traces/near-tie.jsonl", lambda route: route.fulfill(
        status=200, content_type="application/x-ndjson", body=near_tie_trace()))
    page.goto(f"{replay_url}/?trace=near-tie&compare=1")
    row = page.locator("[data-testid=compare-table] tr[data-policy=chain]")
    row.wait_for()
    assert row.locator("[data-testid=equality]").inner_text() == "same up to a bf16 near-tie at token 3 (top-2 gap 0.125)"
    assert row.locator("[data-testid=predicted-r]").inner_text() == f"{2 / (1 + 0.05 * 1):.2f}×"
    assert row.locator("[data-testid=speedup]").inner_text() == "1.50×"
    assert "not" not in row.locator("[data-testid=equality]").inner_text()


# ---------------------------------------------------------------- a page that never confuses

def test_replay_only_disables_the_run_buttons_and_a_click_leaves_the_recorded_panes(page, replay_url):
    open_compare(page, replay_url)
    for hook in ("run", "compare-run"):
        button = page.locator(f"[data-testid={hook}]")
        assert button.is_disabled()
        assert "no model" in button.get_attribute("title")
    trees = page.locator("[data-testid=pane-tree] [data-status]").count()
    page.click("[data-testid=compare-run]", force=True)
    page.evaluate("document.querySelector('[data-testid=compare-run]').click()")
    page.wait_for_timeout(300)
    assert page.locator("[data-testid=pane-tree] [data-status]").count() == trees
    assert page.locator("[data-testid=compare-table] tbody tr").count() == 1 + len(compare_panes())
    assert "waiting" not in page.inner_text("#compare")


def test_an_unknown_trace_lists_the_shipped_ones(page, replay_url):
    page.goto(f"{replay_url}/?trace=no-such-trace")
    page.wait_for_function("() => document.querySelector('[data-testid=status]').textContent.includes('no-such-trace')")
    status = page.inner_text("[data-testid=status]")
    assert 'There is no trace named "no-such-trace"' in status
    for name in shipped_traces.names():
        assert name in status


def test_unknown_policies_and_out_of_range_values_from_a_link_are_named_and_replaced(page, replay_url):
    page.goto(f"{replay_url}/?policy=warp&temperature=9&max_new_tokens=0&p.mu=3")
    page.wait_for_function("() => document.querySelector('[data-testid=status]').textContent.includes('warp')")
    status = page.inner_text("[data-testid=status]")
    assert 'unknown policy "warp" (using talon' in status
    assert "temperature 9 is outside 0–5" in status and "max_new_tokens 0 is outside 1–8192" in status
    assert "mu 3 is outside 0–1" in status
    assert page.input_value("[data-testid=policy]") == "talon"
    assert page.input_value("#temperature") == "0"
    assert page.input_value("#max-new-tokens") == str(GenerationRequest.model_fields["max_new_tokens"].default)
    assert page.input_value("[data-param=mu]") == "0.03"


def test_the_policy_picker_says_what_each_policy_does(page, replay_url):
    from engine.policies import POLICIES

    page.goto(replay_url)
    page.wait_for_selector("[data-testid=policy] option[value=cast]", state="attached")
    page.select_option("[data-testid=policy]", "cast")
    assert page.inner_text("[data-testid=policy-description]") == POLICIES["cast"].description
    assert "least marginal tokens" in page.inner_text("#params")


def test_a_share_link_with_9000_cjk_characters_round_trips(browser, page, replay_url):
    prompt = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(9000))
    page.goto(replay_url)
    page.wait_for_selector("[data-testid=policy] option[value=talon]", state="attached")
    page.fill("[data-testid=prompt]", prompt)
    page.select_option("[data-testid=policy]", "eagle")
    page.fill("[data-param=depth]", "5")
    page.click("#share")
    page.wait_for_function("() => location.hash.startsWith('#setup=')")
    link = page.evaluate("location.href")
    assert len(urlsplit(link).query) <= 1500, "the part a server sees stays short"
    other = browser.new_page()
    try:
        response = other.goto(link)
        assert response.status == 200
        other.wait_for_function("() => document.querySelector('[data-testid=prompt]').value.length === 9000")
        assert other.input_value("[data-testid=prompt]") == prompt
        assert other.input_value("[data-testid=policy]") == "eagle"
        assert other.input_value("[data-param=depth]") == "5"
    finally:
        other.close()


def test_a_link_restores_compare_mode_with_its_panes(page, replay_url):
    page.goto(f"{replay_url}/?compare=chain:gamma=3,eagle:depth=4&align=tokens")
    page.wait_for_selector("#compare:not([hidden]) [data-testid=compare-pane][data-policy=eagle]")
    panes = page.locator("[data-testid=compare-pane]")
    assert [panes.nth(i).get_attribute("data-policy") for i in range(panes.count())] == ["chain", "eagle"]
    assert panes.nth(0).locator("[data-param=gamma]").input_value() == "3"
    assert panes.nth(1).locator("[data-param=depth]").input_value() == "4"
    assert page.is_checked("[data-testid=compare-align]")
    page.wait_for_function("() => location.search.includes('compare=chain')")
    assert "align=tokens" in page.evaluate("location.search")


def test_a_recorded_comparison_link_reopens_compare_mode(page, replay_url):
    open_compare(page, replay_url)
    page.keyboard.press("Shift+ArrowRight")
    page.wait_for_function("() => location.search.includes('step=2')")
    link = page.evaluate("location.href")
    assert "compare=1" in link and f"trace={COMPARE_TRACE}" in link
    page.goto(link)
    page.wait_for_selector("[data-testid=compare-pane][data-step='2'] [data-testid=pane-tree] [data-status]")


# ---------------------------------------------------------------- the results page

def test_results_page_draws_its_charts_from_shipped_results(page, replay_url):
    shipped = sorted((ROOT / "static" / "results").glob("*.json"))
    assert shipped, "a results.json ships under static/results/"
    report = json.loads(shipped[0].read_text())
    page.goto(f"{replay_url}/results")
    page.wait_for_selector("[data-testid=results-chart] [data-policy]")
    charts = page.locator("svg[data-testid=results-chart]")
    assert charts.count() == 4
    kinds = [charts.nth(i).get_attribute("data-chart") for i in range(4)]
    assert kinds == ["speedup", "tau-by-category", "tau-vs-tree-size", "cost-curve"]
    bars = page.locator("svg[data-chart=speedup] rect[data-policy]")
    assert [bars.nth(i).get_attribute("data-policy") for i in range(bars.count())] == [r["policy"] for r in report["results"]]
    assert page.locator("[data-testid=results-table] tbody tr").count() == len(report["results"])


@pytest.fixture(scope="module")
def fresh_report():
    """A current bench report from a tiny random model: every field the page draws, per-depth acceptance included."""
    import torch

    from tools.bench import PolicySpec, Prompt, run_bench
    from tiny_models import tiny_engine

    engine = tiny_engine(dtype=torch.float64)
    prompts = [Prompt(1, "hello world", "writing"), Prompt(2, "abcabc", "coding")]
    return run_bench(engine, prompts, [PolicySpec.parse(t) for t in ("chain", "talon:mu=0.2")], 12, progress=False)


def open_report(page, replay_url, report, path) -> None:
    from tools.report import report_json

    path.write_text(report_json(report))
    page.goto(f"{replay_url}/results")
    page.wait_for_selector("[data-testid=results-chart] [data-policy]")
    page.set_input_files("[data-testid=results-upload]", str(path))
    page.wait_for_function(f"() => document.querySelector('[data-testid=results-status]').textContent.includes('{path.name}')")


def test_results_page_draws_a_results_json_the_user_opens(page, replay_url, tmp_path, fresh_report):
    from tools.report import report_json

    path = tmp_path / "results.json"
    path.write_text(report_json(fresh_report))
    page.goto(f"{replay_url}/results")
    page.wait_for_selector("[data-testid=results-chart] [data-policy]")
    page.set_input_files("[data-testid=results-upload]", str(path))
    page.wait_for_function("() => document.querySelector('[data-testid=results-status]').textContent.includes('results.json')")
    bars = page.locator("svg[data-chart=speedup] rect[data-policy]")
    assert [bars.nth(i).get_attribute("data-policy") for i in range(bars.count())] == ["ar", "chain", "talon:mu=0.2"]
    categories = {b.get_attribute("data-category") for b in page.locator("svg[data-chart=tau-by-category] rect").all()
                  if b.get_attribute("data-category")}
    assert categories == {"writing", "coding"}
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"nope": 1}')
    page.set_input_files("[data-testid=results-upload]", str(wrong))
    page.wait_for_function("() => document.querySelector('[data-testid=results-status]').classList.contains('error')")
    assert "results" in page.inner_text("[data-testid=results-status]")


@pytest.fixture
def downloading_page(browser):
    with checked_page(browser, {"width": 1440, "height": 900}, accept_downloads=True) as page:
        yield page


def test_results_page_shows_per_depth_acceptance_the_histogram_and_the_time_split_of_a_current_report(
        downloading_page, replay_url, tmp_path, fresh_report):
    page = downloading_page
    open_report(page, replay_url, fresh_report, tmp_path / "fresh.json")
    assert "Report version 2" in page.inner_text("[data-testid=results-version]")
    talon = fresh_report.result("talon:mu=0.2")
    dots = page.locator("svg[data-testid=acceptance-by-depth] circle[data-policy='talon:mu=0.2']")
    drawn = {int(dot.get_attribute("data-depth")): float(dot.get_attribute("data-value")) for dot in dots.all()}
    assert drawn == {d.depth: pytest.approx(d.conditional_rate, abs=0.0005) for d in talon.acceptance_by_depth
                     if d.conditional_rate is not None}
    bars = page.locator("svg[data-testid=accept-length-histogram] rect[data-policy='talon:mu=0.2']").all()
    assert {int(b.get_attribute("data-tokens")): int(b.get_attribute("data-steps")) for b in bars} == dict(
        talon.accept_lengths)
    assert "bonus" in page.inner_text("figure:has([data-testid=accept-length-histogram])")
    parts = page.locator("svg[data-testid=results-time-split] rect[data-policy='talon:mu=0.2']").all()
    assert [p.get_attribute("data-part") for p in parts] == ["draft", "verify", "other"]
    assert sum(float(p.get_attribute("data-value")) for p in parts) == pytest.approx(1.0, abs=0.002)
    heads = page.locator("[data-testid=results-categories] thead th").all_inner_texts()
    assert [h.split("\n")[-1] for h in heads[1:]] == ["n = 1", "n = 1", "n = 2"]

    with page.expect_download() as csv_download:
        page.click("[data-testid=results-export-csv]")
    lines = open(csv_download.value.path(), encoding="utf-8").read().splitlines()
    assert csv_download.value.suggested_filename == "fresh.csv" and lines[0] == "policy,scope,key,metric,value"
    assert f"talon:mu=0.2,tokens_per_step,{talon.accept_lengths[0][0]},steps,{talon.accept_lengths[0][1]}" in lines
    with page.expect_download() as svg_download:
        page.click("[data-testid=chart-export-svg][data-chart=acceptance-by-depth]")
    exported = open(svg_download.value.path(), encoding="utf-8").read()
    assert svg_download.value.suggested_filename == "fresh-acceptance-by-depth.svg"
    assert exported.startswith("<svg") and "Acceptance by depth" in exported and "data-depth" in exported
    with page.expect_download() as png_download:
        page.click("[data-testid=chart-export-png][data-chart=accept-length-histogram]")
    assert open(png_download.value.path(), "rb").read(8) == b"\x89PNG\r\n\x1a\n"


def test_results_page_says_the_memorys_readings_why_they_matter_and_each_speedups_interval(page, replay_url, tmp_path,
                                                                                        fresh_report):
    from tools.report import SpeedupInterval
    from tools.report_markdown import memory_reading

    results = [r.model_copy(update={"speedup_interval": (1.14, 1.92)}) if r.policy == "chain" else r
               for r in fresh_report.results]
    said = fresh_report.model_copy(update={"memory_gb_s": [32.6, 47.7, 29.9, 43.6], "results": results,
                                           "interval": SpeedupInterval(level=0.95, draws=2000),
                                           "memory_note": "memory read at 29.9–47.7 GB/s during this run …"})
    open_report(page, replay_url, said, tmp_path / "moving.json")
    assert page.inner_text("#results-meta").endswith(memory_reading(said.memory_gb_s))
    note = page.locator("[data-testid=results-memory-note]")
    assert note.is_visible() and note.inner_text() == f"Note: {said.memory_note}"
    chain = page.locator("[data-testid=results-table] tr[data-policy=chain] td").nth(5)
    assert chain.inner_text().endswith("× (1.14–1.92)")  # the speedup's interval beside it
    assert page.locator("[data-testid=speedup-interval]").count() == 1  # only where the report drew one
    assert "drawn again with replacement (2000 draws)" in page.inner_text("#results-interval-hint")
    assert "whiskers: where 95% of the speedups fall" in page.inner_text("figure:has(svg[data-chart=speedup])")
    whisker = page.locator("svg[data-chart=speedup] line.interval")
    assert whisker.count() == 1 and whisker.get_attribute("data-policy") == "chain"
    assert (whisker.get_attribute("data-low"), whisker.get_attribute("data-high")) == ("1.14", "1.92")
    open_report(page, replay_url, fresh_report, tmp_path / "steady.json")  # no readings, no note, no intervals
    assert "memory" not in page.inner_text("#results-meta") and not note.is_visible()
    assert page.locator("[data-testid=speedup-interval]").count() == 0 and not page.is_visible("#results-interval-hint")


def test_results_page_says_when_a_report_predates_per_depth_acceptance(page, replay_url):
    page.goto(f"{replay_url}/results")
    page.wait_for_selector("[data-testid=results-chart] [data-policy]")
    assert "predates" not in page.inner_text("[data-testid=results-status]")
    assert "before the bench kept per-depth acceptance" in page.inner_text("[data-testid=results-version]")
    for testid in ("acceptance-by-depth", "accept-length-histogram"):
        assert "predates" in page.text_content(f"svg[data-testid={testid}] .note")
    assert page.locator("svg[data-testid=results-time-split] rect[data-part]").count() > 0


# ---------------------------------------------------------------- every size

def overlapping_controls(page) -> list[str]:
    """Pairs of visible controls whose boxes overlap (neither inside the other)."""
    return page.evaluate("""() => {
      const shown = [...document.querySelectorAll('button, select, input, textarea, a, summary')].filter((el) => {
        const r = el.getBoundingClientRect();
        return r.width > 0 && r.height > 0 && getComputedStyle(el).visibility !== 'hidden' && !el.closest('[hidden]');
      });
      const out = [];
      for (let i = 0; i < shown.length; i++) for (let j = i + 1; j < shown.length; j++) {
        const a = shown[i], b = shown[j];
        if (a.contains(b) || b.contains(a)) continue;
        const p = a.getBoundingClientRect(), q = b.getBoundingClientRect();
        const w = Math.min(p.right, q.right) - Math.max(p.left, q.left);
        const h = Math.min(p.bottom, q.bottom) - Math.max(p.top, q.top);
        if (w > 1 && h > 1) out.push(`${a.id || a.textContent.trim() || a.tagName} × ${b.id || b.textContent.trim() || b.tagName}`);
      }
      return out;
    }""")


@pytest.mark.parametrize("width, height", SIZES)
def test_no_horizontal_overflow_and_no_overlapping_controls(browser, replay_url, width, height):
    page = browser.new_page(viewport={"width": width, "height": height})
    try:
        for path, ready in ((f"/?trace={SINGLE_TRACE}", "[data-testid=tree] [data-status]"),
                            (f"/?trace={COMPARE_TRACE}&compare=1", "[data-testid=pane-tree] [data-status]"),
                            ("/results", "[data-testid=results-chart] [data-policy]")):
            page.goto(f"{replay_url}{path}")
            page.wait_for_selector(ready)
            page.wait_for_timeout(300)
            overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
            assert overflow <= 0, f"{path} at {width}×{height} overflows by {overflow}px"
            assert overlapping_controls(page) == [], f"{path} at {width}×{height}"
            name = path.strip("/?").replace("&", "-").replace("=", "-") or "index"
            page.screenshot(path=str(ARTIFACTS / f"browser-{name}-{width}.png"), full_page=True)
    finally:
        page.close()


def pane_boxes(page) -> list[dict]:
    """The first two panes' boxes, read in one moment: the page may still be scrolling them into view."""
    return page.evaluate("""() => [...document.querySelectorAll('[data-testid=compare-pane]')].slice(0, 2).map((pane) => {
      const r = pane.getBoundingClientRect();
      return { x: r.x, y: r.y, width: r.width, height: r.height };
    })""")


def test_panes_sit_side_by_side_from_1024_px_and_stack_under_a_sticky_player_on_a_phone(browser, replay_url):
    wide = browser.new_page(viewport={"width": 1024, "height": 768})
    phone = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        for page in (wide, phone):
            open_compare(page, replay_url)
        first, second = pane_boxes(wide)
        assert abs(first["y"] - second["y"]) < 2 and second["x"] > first["x"] + first["width"] - 1
        first, second = pane_boxes(phone)
        assert second["y"] >= first["y"] + first["height"]
        phone.locator("[data-testid=compare-pane]").nth(1).scroll_into_view_if_needed()
        phone.evaluate("window.scrollBy(0, 200)")
        box = phone.locator("[data-testid=compare-player]").bounding_box()
        assert 0 <= box["y"] <= 1, "the player stays at the top while the panes scroll"
    finally:
        wide.close()
        phone.close()


def test_on_a_phone_the_tree_comes_before_the_forms_advanced_fields(browser, replay_url):
    page = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        page.goto(f"{replay_url}/?trace={SINGLE_TRACE}")
        page.wait_for_selector("[data-testid=tree] [data-status]")
        tree = page.locator("[data-testid=tree-viewport]").bounding_box()
        for advanced in ("#params", "#temperature", "#seed", "#max-new-tokens"):
            assert tree["y"] + tree["height"] <= page.locator(advanced).bounding_box()["y"], advanced
    finally:
        page.close()
