"""End to end in a real browser: Debian chromium via Playwright against uvicorn serving the embedded model."""

from __future__ import annotations

import json
import re

import pytest

from browser_harness import ARTIFACTS, checked_page, served

pytestmark = pytest.mark.slow

PROMPT = "Count from one to ten in words, separated by commas."
MAX_NEW_TOKENS = 24


@pytest.fixture(scope="module")
def server_url():
    # float32: the page's "identical to ar" is judged where it holds exactly (bf16 flips near-ties). One run at a
    # time, as the line's test needs, whatever this machine's cache holds: a float32 cost table measured at batch
    # 4 (a bench's first load makes one) would make the server batch by default.
    with served(["--dtype", "float32", "--max-batch", "1"], "browser-server.log") as url:
        yield url


@pytest.fixture
def page(browser):
    with checked_page(browser, {"width": 1400, "height": 1000}) as page:
        yield page


# Predicates for wait_for_function are written as functions: a bare expression is polled with eval() in the
# page, which the server's Content-Security-Policy (no 'unsafe-eval') refuses.


def open_page(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("[data-testid=policy] option[value=talon]", state="attached")


def engine_output(policy: str) -> str:
    """What the engine itself generates for the request the page sends."""
    from engine.loading import load_engine
    from engine.options import EngineOptions
    from engine.request import GenerationRequest

    request = GenerationRequest(prompt=PROMPT, policy=policy, max_new_tokens=MAX_NEW_TOKENS, temperature=0.0, seed=0)
    return load_engine(EngineOptions(dtype="float32")).run(request, lambda event: None).text


def test_talon_run_grows_a_tree_and_shows_the_engines_output(page, server_url):
    open_page(page, server_url)
    page.fill("[data-testid=prompt]", PROMPT)
    page.select_option("[data-testid=policy]", "talon")
    page.fill("#max-new-tokens", str(MAX_NEW_TOKENS))
    page.click("[data-testid=run]")
    page.wait_for_selector("[data-testid=tree] [data-status]", timeout=120_000)
    page.wait_for_selector("[data-testid=output][data-finished=true]", timeout=300_000)
    statuses = set(page.eval_on_selector_all("[data-testid=tree] [data-status]",
                                             "nodes => nodes.map(n => n.dataset.status)"))
    assert statuses <= {"kept", "pruned", "accepted", "rejected", "recovered", "bonus"}
    assert statuses & {"recovered", "bonus"}, "a verified step shows the target's own token"
    assert page.locator("[data-testid=tree] [data-depth]").count() > 1
    shown = page.eval_on_selector("[data-testid=output]", "el => el.textContent")
    page.screenshot(path=str(ARTIFACTS / "browser-talon.png"), full_page=True)
    assert shown == engine_output("talon")
    assert "finished" in page.inner_text("[data-testid=status]")
    assert "policy=talon" in page.url and "prompt=" in page.url


def test_stop_cancels_a_live_run_within_a_step(page, server_url):
    open_page(page, server_url)
    page.fill("[data-testid=prompt]", "Write a long story about a lighthouse keeper.")
    page.fill("#max-new-tokens", "400")
    page.click("[data-testid=run]")
    page.wait_for_selector("[data-testid=tree] [data-status]", timeout=120_000)
    page.click("[data-testid=stop]")
    page.wait_for_selector("[data-testid=output][data-finished=true]", timeout=60_000)
    assert "(cancelled)" in page.inner_text("[data-testid=status]")
    assert page.is_enabled("[data-testid=run]")


def test_a_second_tab_waits_its_turn_and_is_told_its_place(browser, page, server_url):
    open_page(page, server_url)
    page.fill("[data-testid=prompt]", "Write a long story about a lighthouse keeper.")
    page.fill("#max-new-tokens", "400")
    page.click("[data-testid=run]")
    page.wait_for_selector("[data-testid=tree] [data-status]", timeout=120_000)
    second = browser.new_page()
    try:
        open_page(second, server_url)
        second.fill("#max-new-tokens", "4")
        second.click("[data-testid=run]")
        second.wait_for_function(
            "() => document.querySelector('[data-testid=status]').textContent.includes('place 1 in line')")
        page.click("[data-testid=stop]")
        second.wait_for_selector("[data-testid=output][data-finished=true]", timeout=120_000)
        assert "finished" in second.inner_text("[data-testid=status]")
    finally:
        second.close()


def test_compare_mode_runs_talon_and_eagle_after_ar_and_outputs_are_identical(page, server_url):
    open_page(page, server_url)
    page.fill("[data-testid=prompt]", PROMPT)
    page.fill("#max-new-tokens", str(MAX_NEW_TOKENS))
    page.click("[data-testid=compare-toggle]")
    panes = page.locator("[data-testid=pane-policy]")
    panes.nth(0).select_option("talon")
    panes.nth(1).select_option("eagle")
    page.click("[data-testid=compare-run]")
    page.locator("[data-testid=compare-table] tbody tr[data-policy=eagle]").wait_for(timeout=600_000)
    table = [row.split("\t") for row in page.inner_text("[data-testid=compare-table] tbody").splitlines()]
    page.screenshot(path=str(ARTIFACTS / "browser-compare.png"), full_page=True)
    assert [row[0] for row in table] == ["ar", "1: talon", "2: eagle"]
    # In bf16 this prompt meets a near-tie at its second token (logits 25.5 and 25.375, one bf16 step apart):
    # the table must say so in words, from the verify events' acceptance walk, never a bare "differs".
    assert table[0][-1] == "the baseline"
    for row in table[1:]:
        assert row[-1] == "identical" or re.fullmatch(
            r"same up to a (bf16|fp16|fp32) near-tie at token \d+ \(top-2 gap \d\.\d{3}\)", row[-1]), row
    assert page.locator("[data-testid=pane-tree] [data-status]").count() > 0
    # The live panes' per-depth acceptance and tokens per step, the baseline left out (it drafts nothing).
    drawn = {node.get_attribute("data-policy")
             for node in page.locator("#compare-shapes svg[data-testid=accept-length-histogram] rect[data-policy]").all()}
    assert drawn == {"talon", "eagle"}
    assert page.locator("#compare-shapes svg[data-testid=acceptance-by-depth] circle[data-policy=talon]").count() > 0


def test_replay_of_a_shipped_trace_steps_with_the_keyboard(page, server_url):
    open_page(page, f"{server_url}/?trace=lesson-1-deep-narrow")
    label = page.locator("#step-timeline .timeline-label")
    page.wait_for_function("() => document.querySelectorAll('.timeline-cell').length > 2")
    assert label.inner_text().startswith("step 1 ")
    page.keyboard.press("Shift+ArrowRight")
    page.wait_for_function("() => document.querySelector('#step-timeline .timeline-label').textContent.startsWith('step 2 ')")
    page.keyboard.press("End")
    page.keyboard.press("Home")
    page.keyboard.press("Shift+ArrowRight")
    for _ in range(20):  # one phase at a time: each press moves the URL's phase before the next is read
        before = page.evaluate("() => location.search")
        page.keyboard.press("ArrowRight")
        page.wait_for_function("(before) => location.search !== before", arg=before)
        if page.text_content("[data-testid=phase-name]") == "commit":
            break
    assert label.inner_text().startswith("step 2 ")
    assert page.locator("[data-testid=tree] [data-status=bonus], [data-testid=tree] [data-status=recovered]").count() == 1
    page.screenshot(path=str(ARTIFACTS / "browser-replay.png"), full_page=True)
    page.keyboard.press("Home")
    page.wait_for_function("() => document.querySelector('[data-testid=phase-name]').textContent === 'draft'")
    assert page.inner_text("#phase-detail") == "layer 1"
    page.keyboard.press(" ")
    page.wait_for_function("() => document.getElementById('phase-detail').textContent === 'layer 2'", timeout=10_000)
    page.keyboard.press(" ")
    assert label.inner_text().startswith("step 1 ")


def test_output_and_tokens_containing_html_are_shown_as_text_never_run(page, server_url):
    markup = '<script>window.__ran = 1</script><img src=x onerror="window.__ran = 2"><b>bold</b>'
    page.route("**/static/traces/markup.jsonl", lambda route: route.fulfill(
        status=200, content_type="application/x-ndjson", body=markup_trace(markup)))
    open_page(page, f"{server_url}/?trace=markup")
    page.wait_for_function("() => document.querySelectorAll('.timeline-cell').length === 1")
    page.keyboard.press("End")
    page.wait_for_selector("[data-testid=output][data-finished=true]")
    assert page.eval_on_selector("[data-testid=output]", "el => el.textContent") == markup
    assert page.locator("[data-testid=output] script, [data-testid=output] img, [data-testid=output] b").count() == 0
    assert page.locator("[data-testid=tree] script, [data-testid=tree] img").count() == 0
    assert page.evaluate("window.__ran") is None


def markup_trace(markup: str) -> str:
    header = {"schema_version": 1, "run_id": "markup", "policy": "chain"}
    candidate = {"parent": 0, "token": 1, "text": markup, "depth": 1, "q": 0.9, "score": 0.9, "source": "draft",
                 "kept": True, "expanded": False, "reason": "topk", "threshold": None, "node": 1, "detail": {}}
    events = [
        {**header, "type": "run_started", "prompt": markup, "prompt_tokens": 1, "params": {}, "drafter": "draft",
         "target": "t", "draft": None, "device": "cpu", "dtype": "float32", "seed": 0, "temperature": 0.0,
         "top_k": 0, "top_p": 1.0, "max_new_tokens": 2},
        {**header, "type": "draft_layer", "step": 0, "depth": 1, "candidates": [candidate]},
        {**header, "type": "tree", "step": 0, "pruned": [], "nodes": [
            {"node": 0, "parent": -1, "token": 0, "text": "<i>", "depth": 0, "q": 1, "score": 1, "source": "root"},
            {"node": 1, "parent": 0, "token": 1, "text": markup, "depth": 1, "q": 0.9, "score": 0.9, "source": "draft"}]},
        {**header, "type": "verify", "step": 0, "accepted_path": [0, 1],
         "nodes": [{"node": 1, "token": 1, "p": 0.9, "q": 0.9, "verdict": "accepted"}],
         "emitted": {"parent": 1, "token": 2, "text": "", "p": 1.0, "kind": "bonus"}},
        {**header, "type": "text", "step": 0, "tokens": [1, 2], "text": markup, "accepted": 1},
        {**header, "type": "step_metrics", "step": 0, "accepted": 1, "emitted": 2, "tree_size": 1, "depth": 1,
         "width": 1, "draft_forwards": 1, "draft_ms": 1, "verify_ms": 1, "other_ms": 0, "new_tokens": 2},
        {**header, "type": "run_finished", "text": markup, "tokens": [1, 2], "new_tokens": 2, "steps": 1, "tau": 2,
         "delta": 1, "c": None, "tokens_per_s": 1, "wall_s": 1, "draft_ms": 1, "verify_ms": 1, "other_ms": 0,
         "stop_reason": "max_new_tokens"},
    ]
    return "\n".join(json.dumps(event) for event in events) + "\n"


def test_at_1024_the_prompt_is_on_screen_and_run_brings_the_growing_tree_into_view(browser, server_url):
    viewport = {"width": 1024, "height": 768}
    with checked_page(browser, viewport) as small:
        open_page(small, server_url)
        prompt = small.locator("[data-testid=prompt]").bounding_box()
        assert prompt["y"] + prompt["height"] <= viewport["height"], "the prompt form comes before the empty tree"
        small.fill("#max-new-tokens", "8")
        small.click("[data-testid=run]")
        small.wait_for_selector("[data-testid=tree] [data-status]", timeout=120_000)
        small.wait_for_function("""() => { const box = document.querySelector('[data-testid=tree-viewport]').getBoundingClientRect();
                                          return box.top >= 0 && box.top < innerHeight / 2; }""", timeout=10_000)
        small.wait_for_selector("[data-testid=output][data-finished=true]", timeout=300_000)
        assert small.locator("[data-testid=time-split] .time-part").count() >= 3, "each step's draft, verify and other time"
