"""Lecture mode in a real browser (Debian chromium via Playwright) against a replay-only server: the
shipped lessons step phase by phase, the accepted path stays in view, labels are readable from the
back of a room, the theory panels carry the engine's own numbers, export and links work."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from engine.tree import position_ids, tree_attention_allowed

import shipped_traces
from browser_harness import ARTIFACTS, checked_page, served, watched_page

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
PHASE_NAMES = {"draft", "rerank", "verify", "accept", "commit"}
SCREEN = {"width": 1440, "height": 900}
PROJECTOR = {"width": 1920, "height": 1080}
# The lessons docs/lecture.md walks through; every shipped trace is one (test_every_shipped_trace_is_a_tested_lesson).
LESSONS = shipped_traces.names()


@pytest.fixture(scope="module")
def server_url():
    with served(["--replay-only"], "lecture-server.log") as url:
        yield url


def new_page(browser, viewport):
    return watched_page(browser, viewport, accept_downloads=True)


@pytest.fixture
def screen(browser):
    with checked_page(browser, SCREEN, accept_downloads=True) as page:
        yield page


@pytest.fixture
def projector(browser):
    with checked_page(browser, PROJECTOR, accept_downloads=True) as page:
        yield page


# ---------------------------------------------------------------- helpers

def read_runs(name: str) -> list[list[dict]]:
    return shipped_traces.runs(name)


def open_lesson(page, url: str, query: str) -> None:
    page.goto(f"{url}/?{query}")
    page.wait_for_function("() => document.querySelector('[data-testid=phase-name]').textContent.length > 0")
    settle(page)


def settle(page) -> None:
    """Waits for the draw after a key and for the camera to stop gliding."""
    # Predicates are functions: a bare expression is evaluated with eval(), which the page's CSP refuses.
    page.wait_for_function("() => document.body.dataset.draw === 'drawn'"
                           " && document.querySelector('[data-testid=tree-viewport]').dataset.camera === 'still'")


def phase_state(page) -> dict:
    return page.evaluate("""() => ({
        name: document.querySelector('[data-testid=phase-name]').textContent,
        step: document.getElementById('phase-step').textContent,
        detail: document.getElementById('phase-detail').textContent,
        caption: document.querySelector('[data-testid=caption]').innerText,
    })""")


def press(page, key: str) -> None:
    page.keyboard.press(key)
    settle(page)


def outside_tree_box(page, selector: str) -> list[str]:
    """Nodes matching `selector` whose box is not wholly inside the visible tree box."""
    return page.evaluate("""(selector) => {
        const box = document.querySelector('[data-testid=tree-viewport]').getBoundingClientRect();
        return [...document.querySelectorAll(`[data-testid=tree] ${selector}`)].filter((node) => {
            const r = node.getBoundingClientRect();
            return r.left < box.left - 0.5 || r.top < box.top - 0.5 || r.right > box.right + 0.5 || r.bottom > box.bottom + 0.5;
        }).map((node) => node.getAttribute('aria-label'));
    }""", selector)


def smallest_label_px(page) -> float:
    """The smallest on-screen size of a tree label inside the visible box (font size × camera zoom)."""
    return page.evaluate("""() => {
        const viewport = document.querySelector('[data-testid=tree-viewport]');
        const box = viewport.getBoundingClientRect();
        const zoom = Number(viewport.dataset.zoom);
        const labels = [...viewport.querySelectorAll('svg.tree text')].filter((t) => {
            const r = t.getBoundingClientRect();
            return r.width > 0 && r.right > box.left && r.left < box.right && r.bottom > box.top && r.top < box.bottom
                && getComputedStyle(t).display !== 'none';
        });
        if (!labels.length) return null;
        return Math.min(...labels.map((t) => parseFloat(getComputedStyle(t).fontSize) * zoom));
    }""")


def caption_px(page) -> float:
    return page.evaluate("parseFloat(getComputedStyle(document.getElementById('caption-text')).fontSize)")


def hardest_steps(runs: list[list[dict]], count: int) -> list[int]:
    """1-based indices of the steps of the first run whose accepted path is longest (the hardest to keep
    in view), and the first step."""
    verifies = [e for e in runs[0] if e["type"] == "verify"]
    longest = sorted(range(len(verifies)), key=lambda i: -len(verifies[i]["accepted_path"]))[:count - 1]
    return [i + 1 for i in sorted({0, *longest})]


# ---------------------------------------------------------------- the lessons

def test_every_shipped_trace_is_a_tested_lesson():
    assert LESSONS, "ship the lesson traces in static/traces/"
    for name in LESSONS:
        runs = read_runs(name)
        assert all(run[0]["type"] == "run_started" and run[-1]["type"] == "run_finished" for run in runs), name


@pytest.mark.parametrize("lesson", LESSONS)
@pytest.mark.parametrize("mode", ["screen", "projector"])
def test_stepping_by_phase_changes_the_caption_and_the_phase_name(browser, server_url, lesson, mode):
    screen = new_page(browser, SCREEN if mode == "screen" else PROJECTOR)
    try:
        step_through_phases(screen, server_url, lesson, presenting=mode == "projector")
    finally:
        screen.close()
    assert not screen.errors, screen.errors


def step_through_phases(screen, server_url: str, lesson: str, presenting: bool) -> None:
    open_lesson(screen, server_url, f"trace={lesson}" + ("&present=1" if presenting else ""))
    seen = [phase_state(screen)]
    # Through the first step's phases and into the second step.
    while not seen[-1]["step"].startswith("step 2 ") and len(seen) < 80:
        press(screen, "ArrowRight")
        seen.append(phase_state(screen))
    press(screen, "ArrowRight")
    seen.append(phase_state(screen))
    names = [s["name"] for s in seen]
    assert set(names) <= PHASE_NAMES, names
    assert {"verify", "accept", "commit"} <= set(names), names
    for before, after in zip(seen, seen[1:]):
        if after == before:
            continue  # only at the very end of a short run
        assert after["caption"] != before["caption"], (before, after)
        assert (after["name"], after["detail"], after["step"]) != (before["name"], before["detail"], before["step"])
    press(screen, "ArrowLeft")
    assert phase_state(screen) == seen[-2]
    if presenting:
        assert screen.locator(".stage-phase").inner_text().startswith("step "), "the phase shows on the projector too"
    else:
        # Buttons do what the keys do, and say which keys in their tooltips.
        screen.click("[data-testid=phase-prev]")
        settle(screen)
        assert phase_state(screen) == seen[-3]
        screen.click("[data-testid=phase-next]")
        settle(screen)
        assert phase_state(screen) == seen[-2]
        assert "→" in screen.get_attribute("[data-testid=phase-next]", "title")
        assert "Space" in screen.get_attribute("[data-testid=play]", "title")
    # Shift+arrows move whole steps; Home and End the run.
    step = phase_state(screen)["step"]
    press(screen, "Shift+ArrowRight")
    assert phase_state(screen)["step"] != step
    press(screen, "End")
    last = phase_state(screen)
    count = last["step"].split(" of ")[1]
    assert last["name"] == "commit" and last["step"] == f"step {count} of {count}"
    assert screen.get_attribute("[data-testid=output]", "data-finished") == "true"
    press(screen, "Home")
    assert phase_state(screen) == seen[0]


@pytest.mark.parametrize("lesson", LESSONS)
@pytest.mark.parametrize("mode", ["screen", "projector"])
def test_after_verify_the_accepted_path_is_in_view_and_labels_are_readable(browser, server_url, lesson, mode):
    page = new_page(browser, SCREEN if mode == "screen" else PROJECTOR)
    least = 14 if mode == "screen" else 24
    present = "&present=1" if mode == "projector" else ""
    try:
        for step in hardest_steps(read_runs(lesson), 4):
            for phase in ("verify", "accept-1", "commit"):
                open_lesson(page, server_url, f"trace={lesson}&step={step}&phase={phase}{present}")
                state = phase_state(page)
                assert state["step"].startswith(f"step {step} ")
                if phase != "verify":
                    assert page.locator("[data-testid=tree] [data-status=accepted], [data-testid=tree] [data-role=root]").count() >= 1
                    assert outside_tree_box(page, "[data-status=accepted]") == [], (lesson, step, phase)
                    assert outside_tree_box(page, "[data-role=root]") == [], "the root stays in view"
                assert smallest_label_px(page) >= least - 1e-6, (lesson, step, phase)
                assert caption_px(page) >= least
            press(page, "End")
            assert outside_tree_box(page, "[data-status=accepted]") == []
            assert outside_tree_box(page, "[data-status=recovered], [data-status=bonus]") == []
        if mode == "projector":
            assert page.locator("#prompt").is_hidden(), "presentation mode hides the form"
            page.screenshot(path=str(ARTIFACTS / f"lecture-{lesson}-projector.png"))
        else:
            page.screenshot(path=str(ARTIFACTS / f"lecture-{lesson}-screen.png"))
    finally:
        page.close()
    assert not page.errors, page.errors


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_mask_panel_equals_engine_tree_attention(screen, server_url, lesson):
    runs = read_runs(lesson)
    events = runs[0]
    prompt_tokens = events[0]["prompt_tokens"]
    tree_events = [e for e in events if e["type"] == "tree"]
    step_index = next((i for i, e in enumerate(e for e in events if e["type"] == "verify") if e["nodes"]), 0)
    open_lesson(screen, server_url, f"trace={lesson}&step={step_index + 1}&phase=verify&view=mask")
    emitted_before = sum(e["emitted"] for e in events if e["type"] == "step_metrics" and e["step"] < step_index + 1)
    verify_events = [e for e in events if e["type"] == "verify"]
    step_number = verify_events[step_index]["step"]
    tree = next((e for e in tree_events if e["step"] == step_number), None)
    parent = [n["parent"] for n in tree["nodes"]] if tree else [-1]
    depth = [n["depth"] for n in tree["nodes"]] if tree else [0]
    prefix = prompt_tokens - 1 + emitted_before
    assert_mask_matches(screen, parent, depth, prefix)


def assert_mask_matches(page, parent: list[int], depth: list[int], prefix: int) -> None:
    allowed = tree_attention_allowed(parent, prefix).int().tolist()
    cells = page.eval_on_selector_all("[data-testid=mask-panel] rect.cell",
                                      "cells => cells.map(c => [+c.dataset.row, +c.dataset.col, +c.dataset.allowed])")
    assert cells, "the mask panel draws cells"
    rows = {row for row, _, _ in cells}
    assert rows == set(range(len(parent)))
    tree_columns = {col for _, col, _ in cells if col >= prefix}
    assert tree_columns == set(range(prefix, prefix + len(parent))), "every tree column is drawn"
    for row, col, value in cells:
        assert value == allowed[row][col], (row, col)
    positions = page.eval_on_selector_all("[data-testid=mask-panel] [data-position]", "els => els.map(e => +e.dataset.position)")
    assert positions == position_ids(depth, prefix).tolist()


# ---------------------------------------------------------------- a hand-checkable sampled step

def sampled_trace() -> str:
    """One chain-of-two plus a sibling step at temperature 0.8 (schema 2), small enough to check by hand.

    Tree: root r(0) -> u(1) -> v(3), root -> z(2); prompt of 4 tokens, so the prefix is 3.
    The walk accepts u (u 0.3 < min(1, 0.5/0.4)), rejects v (0.9 ≥ 0.1/0.6) and draws w from the residual.
    """
    header = {"schema_version": 2, "run_id": "hand", "policy": "eagle"}
    def cand(parent, token, text, depth, q, score, node):
        return {"parent": parent, "token": token, "text": text, "depth": depth, "q": q, "score": score, "source": "head",
                "kept": True, "expanded": True, "reason": "topk", "threshold": None, "node": node, "detail": {}}
    odds = lambda token, text, p, q: {"token": token, "text": text, "p": p, "q": q}  # noqa: E731
    events = [
        {**header, "type": "run_started", "prompt": "hand", "prompt_tokens": 4, "params": {"depth": 2, "top_k": 2, "total": 3},
         "drafter": "head", "target": "t", "draft": None, "device": "cpu", "dtype": "float32", "seed": 0,
         "temperature": 0.8, "top_k": 0, "top_p": 1.0, "max_new_tokens": 2},
        {**header, "type": "draft_layer", "step": 1, "depth": 1, "threshold": 0.3, "anchor": None,
         "candidates": [cand(0, 11, "u", 1, 0.4, 0.4, 1), cand(0, 12, "z", 1, 0.3, 0.3, 2)]},
        {**header, "type": "draft_layer", "step": 1, "depth": 2, "threshold": None, "anchor": None,
         "candidates": [cand(1, 13, "v", 2, 0.6, 0.24, 3)]},
        {**header, "type": "tree", "step": 1, "pruned": [], "nodes": [
            {"node": 0, "origin": 0, "parent": -1, "token": 10, "text": "r", "depth": 0, "q": 1, "score": 1, "source": "root"},
            {"node": 1, "origin": 1, "parent": 0, "token": 11, "text": "u", "depth": 1, "q": 0.4, "score": 0.4, "source": "head"},
            {"node": 2, "origin": 2, "parent": 0, "token": 12, "text": "z", "depth": 1, "q": 0.3, "score": 0.3, "source": "head"},
            {"node": 3, "origin": 3, "parent": 1, "token": 13, "text": "v", "depth": 2, "q": 0.6, "score": 0.24, "source": "head"}]},
        {**header, "type": "verify", "step": 1, "accepted_path": [0, 1],
         "nodes": [{"node": 1, "token": 11, "p": 0.5, "q": 0.4, "verdict": "accepted"},
                   {"node": 2, "token": 12, "p": None, "q": 0.3, "verdict": "unreached"},
                   {"node": 3, "token": 13, "p": 0.1, "q": 0.6, "verdict": "rejected"}],
         "emitted": {"parent": 1, "token": 14, "text": "w", "p": 0.3, "kind": "recovered"},
         "walk": [
             {"node": 0, "top": [odds(11, "u", 0.5, 0.4), odds(12, "z", 0.2, 0.3)],
              "checks": [{"child": 1, "token": 11, "rule": "sampled", "p": 0.5, "q": 0.4, "ratio": 1.0, "u": 0.3, "accepted": True}],
              "residual_top": None, "drawn": None},
             {"node": 1, "top": [odds(14, "w", 0.3, 0.1), odds(13, "v", 0.1, 0.6), odds(15, "y", 0.25, 0.2)],
              "checks": [{"child": 3, "token": 13, "rule": "sampled", "p": 0.1, "q": 0.6, "ratio": 0.1 / 0.6, "u": 0.9,
                          "accepted": False}],
              "residual_top": [odds(14, "w", 0.5, None), odds(15, "y", 0.125, None)], "drawn": 14}]},
        {**header, "type": "text", "step": 1, "tokens": [11, 14], "text": "uw", "accepted": 1},
        {**header, "type": "step_metrics", "step": 1, "accepted": 1, "emitted": 2, "tree_size": 3, "depth": 2, "width": 2,
         "draft_forwards": 2, "draft_ms": 1, "draft_forward_ms": 1, "verify_ms": 2, "other_ms": 0, "new_tokens": 2},
        {**header, "type": "run_finished", "text": "uw", "tokens": [11, 14], "new_tokens": 2, "steps": 1, "tau": 2,
         "delta": 2, "c": 0.1, "tokens_per_s": 10, "wall_s": 0.2, "draft_ms": 1, "draft_forward_ms": 1, "verify_ms": 2,
         "other_ms": 0, "stop_reason": "max_new_tokens"},
    ]
    return "\n".join(json.dumps(event) for event in events) + "\n"


def route_hand_trace(page) -> None:
    page.route("**/static/traces/hand.jsonl", lambda route: route.fulfill(
        status=200, content_type="application/x-ndjson", body=sampled_trace()))


def test_the_mask_of_a_hand_checkable_tree_equals_engine_tree(screen, server_url):
    route_hand_trace(screen)
    open_lesson(screen, server_url, "trace=hand&step=1&phase=verify&view=mask")
    assert_mask_matches(screen, [-1, 0, 0, 1], [0, 1, 1, 2], prefix=3)
    # By hand: v (row 3) sees the prefix, r, u and itself; not z.
    row = screen.eval_on_selector_all("[data-testid=mask-panel] rect.cell[data-row='3']",
                                      "cells => cells.map(c => c.dataset.allowed).join('')")
    assert row == "111" + "1101"
    # Hovering a node lights its ancestors' cells in its row.
    screen.hover("[data-testid=tree] [data-node=n3]")
    lit = screen.eval_on_selector_all("[data-testid=mask-panel] rect.cell.lit", "cells => cells.map(c => +c.dataset.col)")
    assert sorted(lit) == [0, 1, 2, 3, 4, 6]


def test_the_sampling_panel_shows_the_engines_p_q_u_and_residual_draw(screen, server_url):
    route_hand_trace(screen)
    verify = next(json.loads(line) for line in sampled_trace().splitlines() if '"verify"' in line)
    open_lesson(screen, server_url, "trace=hand&step=1&phase=accept-2&view=sampling")
    panel = screen.locator("[data-testid=sampling-panel]")
    assert panel.is_visible()
    walk = verify["walk"][1]
    bars = screen.eval_on_selector_all("[data-testid=sampling-panel] svg.bars:not(.residual) .bar-row",
                                       "rows => rows.map(r => [+r.dataset.token, +r.dataset.p, +r.dataset.q])")
    assert bars == [[t["token"], t["p"], t["q"]] for t in walk["top"]]
    checks = screen.eval_on_selector_all("[data-testid=sampling-panel] tr[data-u]",
                                         "rows => rows.map(r => [+r.dataset.child, +r.dataset.u, +r.dataset.ratio, r.className])")
    assert checks == [[c["child"], c["u"], c["ratio"], "rejected"] for c in walk["checks"]]
    residual = screen.eval_on_selector_all("[data-testid=sampling-panel] svg.bars.residual .bar-row",
                                           "rows => rows.map(r => [+r.dataset.token, +r.dataset.p])")
    assert residual == [[t["token"], t["p"]] for t in walk["residual_top"]]
    assert screen.get_attribute("[data-testid=drawn-token]", "data-token") == str(walk["drawn"])
    caption = screen.inner_text("[data-testid=caption]")
    assert "u = 0.9 ≥ 0.17" in caption and "residual" in caption
    press(screen, "ArrowLeft")
    first = screen.eval_on_selector_all("[data-testid=sampling-panel] tr[data-u]", "rows => rows.map(r => +r.dataset.u)")
    assert first == [0.3]


def sampled_lessons() -> list[str]:
    return [name for name in LESSONS if any(run[0]["temperature"] > 0 for run in read_runs(name))]


@pytest.mark.parametrize("lesson", sampled_lessons())
def test_the_sampling_panel_of_a_sampled_lesson_shows_the_residual_draw_its_events_report(screen, server_url, lesson):
    events = read_runs(lesson)[0]
    assert events[0]["temperature"] > 0
    verifies = [e for e in events if e["type"] == "verify"]
    # The first step whose walk rejected a sampled child and drew from the residual.
    index, verify = next((i, v) for i, v in enumerate(verifies)
                         if v["walk"] and any(w["residual_top"] and any(c["rule"] == "sampled" for c in w["checks"])
                                              for w in v["walk"]))
    walked = next(k for k, w in enumerate(verify["walk"]) if w["residual_top"]) + 1
    walk = verify["walk"][walked - 1]
    open_lesson(screen, server_url, f"trace={lesson}&step={index + 1}&phase=accept-{walked}&view=sampling")
    bars = screen.eval_on_selector_all("[data-testid=sampling-panel] svg.bars:not(.residual) .bar-row",
                                       "rows => rows.map(r => [+r.dataset.token, +r.dataset.p, r.dataset.q === '' ? null : +r.dataset.q])")
    assert bars == [[t["token"], t["p"], t["q"]] for t in walk["top"]]
    checks = screen.eval_on_selector_all("[data-testid=sampling-panel] tr[data-u]",
                                         "rows => rows.map(r => [+r.dataset.child, +r.dataset.u, +r.dataset.ratio])")
    assert checks == [[c["child"], c["u"], c["ratio"]] for c in walk["checks"]]
    residual = screen.eval_on_selector_all("[data-testid=sampling-panel] svg.bars.residual .bar-row",
                                           "rows => rows.map(r => [+r.dataset.token, +r.dataset.p])")
    assert residual == [[t["token"], t["p"]] for t in walk["residual_top"]]
    assert screen.get_attribute("[data-testid=drawn-token]", "data-token") == str(walk["drawn"]) == str(verify["emitted"]["token"])
    assert "residual" in screen.inner_text("[data-testid=caption]")
    screen.screenshot(path=str(ARTIFACTS / f"lecture-{lesson}-sampling.png"), full_page=True)


# ---------------------------------------------------------------- export, links, presentation, keys

def test_export_writes_an_svg_with_the_tree_nodes_a_png_and_the_trace(screen, server_url):
    lesson = LESSONS[0]
    open_lesson(screen, server_url, f"trace={lesson}&step=1&phase=commit")
    drawn = set(screen.eval_on_selector_all("[data-testid=tree] [data-node]", "els => els.map(e => e.dataset.node)"))
    with screen.expect_download() as info:
        screen.click("[data-testid=export-svg]")
    svg = Path(info.value.path()).read_text(encoding="utf-8")
    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    exported = {el.get("data-node") for el in root.iter() if el.get("data-node")}
    assert exported == drawn
    assert screen.inner_text("#caption-text")[:40] in svg
    with screen.expect_download() as info:
        screen.click("[data-testid=export-png]")
    assert Path(info.value.path()).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with screen.expect_download() as info:
        screen.click("[data-testid=export-trace]")
    lines = Path(info.value.path()).read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == read_runs(lesson)[0]


def test_a_link_with_step_and_phase_reopens_there_and_share_keeps_the_trace(browser, screen, server_url):
    lesson = LESSONS[0]
    open_lesson(screen, server_url, f"trace={lesson}&step=2&phase=accept-1")
    state = phase_state(screen)
    assert state["name"] == "accept" and state["step"].startswith("step 2 ")
    press(screen, "ArrowRight")
    moved = phase_state(screen)
    link = screen.url
    assert f"trace={lesson}" in link and "step=2" in link
    screen.click("#share")
    assert f"trace={lesson}" in screen.url
    other = new_page(browser, SCREEN)
    try:
        other.goto(link)
        other.wait_for_function("() => document.querySelector('[data-testid=phase-name]').textContent.length > 0")
        settle(other)
        assert phase_state(other) == moved
    finally:
        other.close()


def test_presentation_mode_fills_the_screen_and_escape_leaves(projector, server_url):
    open_lesson(projector, server_url, f"trace={LESSONS[0]}&step=1&phase=verify")
    assert projector.locator("#prompt").is_visible()
    press(projector, "p")
    assert "present=1" in projector.url
    assert projector.locator("#prompt").is_hidden() and projector.locator("[data-testid=phase-next]").is_hidden()
    box = projector.locator("[data-testid=tree-viewport]").bounding_box()
    assert box["width"] > 0.9 * PROJECTOR["width"] and box["height"] > 0.45 * PROJECTOR["height"]
    assert projector.locator("[data-testid=caption]").is_visible()
    assert projector.locator("#theory").is_visible()
    assert caption_px(projector) >= 24 and smallest_label_px(projector) >= 24
    press(projector, "ArrowRight")
    assert phase_state(projector)["name"] == "accept", "the keys still play the lesson"
    press(projector, "Escape")
    assert projector.locator("#prompt").is_visible()
    assert "present=1" not in projector.url
    projector.click("[data-testid=presentation-toggle]")
    settle(projector)
    assert projector.locator("#prompt").is_hidden()


def test_after_choosing_a_trace_the_keys_act_on_the_player(screen, server_url):
    screen.goto(server_url)
    screen.wait_for_selector("[data-testid=trace] option[data-name]", state="attached")
    label = screen.eval_on_selector(f"[data-testid=trace] option[data-name='{LESSONS[-1]}']", "o => o.textContent")
    assert "T " in label, "the list says each trace's temperature"
    screen.select_option("[data-testid=trace]", label=label)
    screen.wait_for_function("() => document.querySelector('[data-testid=phase-name]').textContent.length > 0")
    chosen = screen.eval_on_selector("[data-testid=trace]", "s => s.value")
    before = phase_state(screen)
    press(screen, "ArrowRight")
    press(screen, "ArrowRight")
    assert phase_state(screen) != before
    assert screen.eval_on_selector("[data-testid=trace]", "s => s.value") == chosen, "the arrows did not change the trace"


def test_the_tree_is_one_tab_stop_and_arrow_keys_move_between_nodes(screen, server_url):
    route_hand_trace(screen)
    open_lesson(screen, server_url, "trace=hand&step=1&phase=commit")
    assert screen.locator("[data-testid=tree] [tabindex]").count() == 0, "nodes are not tab stops one by one"
    screen.focus("[data-testid=tree-viewport]")
    active = lambda: screen.get_attribute("[data-testid=tree-viewport]", "aria-activedescendant")  # noqa: E731
    assert active() == "tree-node-n0"
    screen.keyboard.press("ArrowRight")
    assert active() == "tree-node-n1", "right: the first child (the accepted one)"
    screen.keyboard.press("ArrowRight")
    first_grandchild = active()
    screen.keyboard.press("ArrowLeft")
    assert active() == "tree-node-n1"
    screen.keyboard.press("ArrowDown")
    assert active() != "tree-node-n1", "down: the next sibling"
    assert first_grandchild in {"tree-node-emitted", "tree-node-n3"}
    assert phase_state(screen)["name"] == "commit", "arrows inside the tree do not move the player"
    screen.keyboard.press("Shift+Tab")
    press(screen, "ArrowLeft")
    assert phase_state(screen)["name"] == "accept"


def test_verdicts_differ_by_mark_and_line_as_well_as_colour(screen, server_url):
    route_hand_trace(screen)
    open_lesson(screen, server_url, "trace=hand&step=1&phase=commit")
    marks = dict(screen.eval_on_selector_all(
        "[data-testid=tree] [data-status]",
        "els => els.map(e => [e.dataset.status, e.querySelector('text').textContent[0]])"))
    assert marks["accepted"] == "✓" and marks["rejected"] == "✗" and marks["recovered"] == "↺"
    dash = screen.eval_on_selector("[data-testid=tree] [data-status=rejected] rect", "r => getComputedStyle(r).strokeDasharray")
    assert dash not in ("none", ""), "rejected is dashed"
    assert screen.locator("[data-testid=tree] [data-status=recovered] rect.inner").count() == 1, "recovered is double"


def test_text_contrast_is_at_least_4_5_to_1(screen, server_url):
    open_lesson(screen, server_url, f"trace={LESSONS[0]}&step=1&phase=commit")
    worst = screen.evaluate("""() => {
        const rgb = (s) => (s.match(/[\\d.]+/g) || []).slice(0, 4).map(Number);
        const lum = ([r, g, b]) => [r, g, b].map((v) => v / 255).map((c) => c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4)
            .reduce((s, c, i) => s + c * [0.2126, 0.7152, 0.0722][i], 0);
        const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((m, n) => n - m); return (x + 0.05) / (y + 0.05); };
        const background = (el) => {
            for (let node = el; node; node = node.parentElement) {
                if (node instanceof SVGGElement && node.classList.contains('node')) return rgb(getComputedStyle(node.querySelector('rect')).fill);
                const c = rgb(getComputedStyle(node).backgroundColor);
                if (c.length === 3 || c[3] > 0) return c.slice(0, 3);
            }
            return [255, 255, 255];
        };
        const texts = [...document.querySelectorAll('#single p, #single span, #single b, #single h3, #single td, #single th, #single button, #single text, .controls label, .controls h2, .controls dd')]
            .filter((e) => e.getClientRects().length && e.textContent.trim() && !e.closest('[hidden]') && !e.disabled && !e.closest('button:disabled'));
        let worst = { ratio: 99 };
        for (const e of texts) {
            const style = getComputedStyle(e);
            const color = rgb(e instanceof SVGElement ? style.fill : style.color);
            const r = ratio(color, background(e)) * 1;
            if (r < worst.ratio) worst = { ratio: r, text: e.textContent.slice(0, 40), cls: e.getAttribute('class') };
        }
        return worst;
    }""")
    assert worst["ratio"] >= 4.5, worst
