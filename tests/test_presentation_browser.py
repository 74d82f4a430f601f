"""Presentation mode read from the back of a room (Debian chromium via Playwright, replay-only server): at
1920×1080, over every shipped lesson and every phase kind, no visible text under 24 px, no clipped panel and
no text of a theory drawing cut by its edge or overlapping another; compare mode the same; at 1024×768 the
form comes first and choosing a run brings the tree into view."""

from __future__ import annotations

import pytest

import shipped_traces
from browser_harness import ARTIFACTS, checked_page, served

pytestmark = pytest.mark.slow

PROJECTOR = {"width": 1920, "height": 1080}
SMALL = {"width": 1024, "height": 768}
SMALLEST_TEXT_PX = 24  # README: presentation mode draws every text at least this size at 1920×1080
PHASE_KINDS = {"draft", "verify", "accept", "commit"}  # rerank only where a policy reranks


@pytest.fixture(scope="module")
def server_url():
    with served(["--replay-only"], "presentation-server.log") as url:
        yield url


@pytest.fixture
def projector(browser):
    with checked_page(browser, PROJECTOR) as page:
        yield page


def settle(page) -> None:
    page.wait_for_function("() => document.body.dataset.draw === 'drawn'"
                           " && document.querySelector('[data-testid=tree-viewport]').dataset.camera === 'still'")


def press(page, key: str) -> None:
    page.keyboard.press(key)
    settle(page)


# What the page shows, measured in the page. A text element is one with a text node of its own that is
# drawn (checkVisibility) and lies on screen or inside a scrolling panel; its size on screen is its computed
# font size, times the drawing's scale for SVG text (a theory drawing's viewBox, the tree's camera).
MEASURE = """(root) => {
  const scope = document.querySelector(root);
  const texts = [];
  for (const element of scope.querySelectorAll('*')) {
    const own = [...element.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    if (!own || !element.checkVisibility({ checkOpacity: true, checkVisibilityCSS: true })) continue;
    const box = element.getBoundingClientRect();
    if (!box.width || !box.height) continue;
    let px = parseFloat(getComputedStyle(element).fontSize);
    if (element instanceof SVGElement) {
      const m = element.getScreenCTM();
      px *= Math.hypot(m.a, m.b);
    }
    texts.push({ text: element.textContent.trim().slice(0, 40), px: Math.round(px * 10) / 10,
                 where: (element.closest('[id]') || {}).id || element.tagName });
  }
  // Clipped: a box that hides what overflows it (the tree's camera pans by design and is left out).
  const clipped = [];
  for (const panel of scope.querySelectorAll('.caption, .theory, .panel, .pane, .tree-scroll, .table-scroll, .compare-table')) {
    if (!panel.checkVisibility()) continue;
    const style = getComputedStyle(panel);
    const hides = (o) => o === 'hidden' || o === 'clip';
    if ((hides(style.overflowY) && panel.scrollHeight > panel.clientHeight + 1)
        || (hides(style.overflowX) && panel.scrollWidth > panel.clientWidth + 1)) {
      clipped.push({ panel: panel.id || panel.className, scroll: [panel.scrollWidth, panel.scrollHeight],
                     client: [panel.clientWidth, panel.clientHeight] });
    }
  }
  // A theory drawing's texts: inside the drawing, and not on top of one another.
  const cut = [];
  const overlaps = [];
  for (const svg of scope.querySelectorAll('.theory svg')) {
    if (!svg.checkVisibility()) continue;
    const frame = svg.getBoundingClientRect();
    const boxes = [...svg.querySelectorAll('text')].filter((t) => t.textContent.trim())
      .map((t) => ({ text: t.textContent.trim(), box: t.getBoundingClientRect() }));
    for (const { text, box } of boxes) {
      if (box.left < frame.left - 1 || box.right > frame.right + 1 || box.top < frame.top - 1 || box.bottom > frame.bottom + 1) {
        cut.push({ text, box: [box.left, box.right], frame: [frame.left, frame.right] });
      }
    }
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        const a = boxes[i].box, b = boxes[j].box;
        const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        const smaller = Math.min(a.width * a.height, b.width * b.height);
        if (w > 0 && h > 0 && w * h > 0.25 * smaller) overlaps.push([boxes[i].text, boxes[j].text]);
      }
    }
  }
  return { texts, clipped, cut, overlaps };
}"""


def assert_projector_ready(page, where: str, root: str = "#single") -> None:
    measured = page.evaluate(MEASURE, root)
    small = [t for t in measured["texts"] if t["px"] < SMALLEST_TEXT_PX]
    assert measured["texts"], f"{where}: no text measured"
    assert not small, f"{where}: text under {SMALLEST_TEXT_PX} px: {small[:8]}"
    assert not measured["clipped"], f"{where}: clipped panels: {measured['clipped']}"
    assert not measured["cut"], f"{where}: drawing text cut by its edge: {measured['cut'][:5]}"
    assert not measured["overlaps"], f"{where}: drawing texts overlap: {measured['overlaps'][:5]}"


def phase_name(page) -> str:
    return page.inner_text("[data-testid=phase-name]").strip()


def step_number(page) -> int:
    return int(page.inner_text("#phase-step").split()[1])


def phases_of_first_steps(page, steps: int = 2):
    """Yields at every phase of the first `steps` steps (the second has numbers so far for the formulas)."""
    while True:
        yield phase_name(page)
        if page.is_disabled("[data-testid=phase-next]"):
            return
        press(page, "ArrowRight")
        if step_number(page) > steps:
            return


@pytest.mark.parametrize("lesson", shipped_traces.names())
def test_every_text_of_every_phase_is_projector_size_and_no_panel_clips(projector, server_url, lesson):
    for run_index, events in enumerate(shipped_traces.runs(lesson)):
        drafts = events[0]["policy"] != "ar"  # plain decoding drafts nothing: its steps start at verify
        projector.goto(f"{server_url}/?trace={lesson}&run={run_index}&present=1")
        projector.wait_for_function("() => document.querySelector('[data-testid=phase-name]').textContent.length > 0")
        settle(projector)
        seen = set()
        for name in phases_of_first_steps(projector):
            seen.add(name)
            assert_projector_ready(projector, f"{lesson} run {run_index} {name} ({projector.inner_text('#phase-step')})")
        assert seen >= (PHASE_KINDS if drafts else PHASE_KINDS - {"draft"}), f"{lesson} run {run_index}: phases seen {seen}"
        press(projector, "End")
        for key, view in (("2", "mask"), ("3", "kv"), ("4", "sampling"), ("5", "formulas")):
            press(projector, key)
            assert projector.is_visible(f"#theory [data-panel={view}]"), f"key {key} shows the {view} panel"
            assert_projector_ready(projector, f"{lesson} run {run_index} end, {view} panel")
    projector.screenshot(path=str(ARTIFACTS / f"presentation-{lesson}.png"))


def test_the_theory_tabs_are_on_screen_in_presentation_mode_and_keys_switch_them(projector, server_url):
    lesson = shipped_traces.names()[0]
    projector.goto(f"{server_url}/?trace={lesson}&present=1")
    projector.wait_for_function("() => document.querySelector('[data-testid=phase-name]').textContent.length > 0")
    settle(projector)
    tabs = projector.locator("#theory [role=tab]")
    assert tabs.count() == 5 and all(tabs.nth(i).is_visible() for i in range(5))
    press(projector, "5")
    assert projector.get_attribute("#theory [data-view=formulas]", "aria-selected") == "true"
    press(projector, "t")
    assert projector.get_attribute("#theory [data-view=auto]", "aria-selected") == "true"
    assert "view=" not in projector.url  # auto is the default and is left out of the link
    keys = projector.evaluate("() => document.querySelector('.key-list').textContent")
    assert "theory panel" in keys


def test_compare_mode_in_presentation_shows_projector_text_and_the_table(projector, server_url):
    comparison = next(name for name in shipped_traces.names() if len(shipped_traces.runs(name)) >= 4)
    projector.goto(f"{server_url}/?trace={comparison}&compare=1&present=1")
    projector.wait_for_selector("[data-testid=compare-table] tbody tr")
    projector.wait_for_timeout(600)
    assert projector.locator("[data-testid=compare-pane]").count() >= 3
    table = projector.locator("[data-testid=compare-table]").bounding_box()
    assert table["y"] + min(table["height"], 200) <= PROJECTOR["height"], "the comparison table is on screen"
    assert_projector_ready(projector, "compare mode", root="#compare")
    projector.screenshot(path=str(ARTIFACTS / "presentation-compare.png"))


def test_at_1024_the_form_comes_first_and_a_chosen_run_brings_the_tree_into_view(browser, server_url):
    with checked_page(browser, SMALL) as page:
        page.goto(server_url)
        page.wait_for_selector("[data-testid=trace] option[data-name]", state="attached")
        prompt = page.locator("[data-testid=prompt]").bounding_box()
        assert prompt["y"] + prompt["height"] <= SMALL["height"], "the prompt is on screen without scrolling"
        name = shipped_traces.names()[0]
        page.select_option("[data-testid=trace]", page.get_attribute(f"[data-testid=trace] option[data-name='{name}']", "value"))
        page.wait_for_function("() => document.querySelector('[data-testid=phase-name]').textContent.length > 0")
        page.wait_for_function("""() => { const box = document.querySelector('[data-testid=tree-viewport]').getBoundingClientRect();
                                          return box.top >= 0 && box.top < innerHeight / 2; }""", timeout=5000)


def test_the_pages_numbers_say_when_costs_are_assumed_or_the_default_was_not_measured(browser, server_url):
    info = {"replay_only": True, "drafters": [], "costs": "assumed",
            "costs_note": "costs are assumed, not measured on this machine",
            "default_policy_note": "talon: not measured on this device (run `specscope bench --record-default`)"}
    with checked_page(browser, {"width": 1440, "height": 900}) as page:
        page.route("**/api/info", lambda route: route.fulfill(json=info))
        page.goto(server_url)
        notes = page.locator("[data-testid=engine-notes]")
        notes.wait_for(state="visible")
        assert "costs are assumed" in notes.inner_text() and "not measured on this device" in notes.inner_text()
