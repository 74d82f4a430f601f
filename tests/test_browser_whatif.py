"""What-if in a real browser: a live server on the tiny engine re-runs one step of the run on screen under
another policy or parameters, beside the original, without touching the run; a replay-only server says it needs
the model."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from browser_harness import ARTIFACTS, ROOT, checked_page, free_port, served, wait_until_up

pytestmark = pytest.mark.slow

PROMPT = "the cat sat on the mat"
# The tiny random draft is nearly uniform: past talon's forced layer every candidate is close to the layer's best,
# so at the default μ any layer fills the budget. Four tokens leave step 1 room for three layers, and μ = 0.9 is
# where the gate bites (tests/test_whatif.py measures the same on the engine).
MAX_NEW_TOKENS = 4
RAISED_MU = "0.9"
NODE_ATTRIBUTES = "nodes => nodes.map(n => [...n.attributes].map(a => a.name).sort().join(' '))"


@pytest.fixture(scope="module")
def tiny_server():
    """`python tests/server_harness.py PORT`: the tiny float32 engine behind the server's own uvicorn setup."""
    port, log_name = free_port(), "whatif-server.log"
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / log_name, "w") as log:
        process = subprocess.Popen([sys.executable, str(ROOT / "tests" / "server_harness.py"), str(port)], cwd=ROOT,
                                   stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until_up(url, process, log_name, 120)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=30)


@pytest.fixture
def page(browser):
    with checked_page(browser, {"width": 1440, "height": 900}) as page:
        yield page


def run_talon(page, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("[data-testid=policy] option[value=talon]", state="attached")
    page.fill("[data-testid=prompt]", PROMPT)
    page.select_option("[data-testid=policy]", "talon")
    page.fill("#max-new-tokens", str(MAX_NEW_TOKENS))
    page.click("[data-testid=run]")
    page.wait_for_selector("[data-testid=output][data-finished=true]", timeout=60_000)


def main_view(page) -> dict:
    """What the run's own view shows at its last phase: every node of the tree, the output, the timeline, the status."""
    page.keyboard.press("End")
    page.wait_for_function("() => document.body.dataset.draw === 'drawn'")
    return {
        "step": page.inner_text("#phase-step"),
        "nodes": page.eval_on_selector_all("[data-testid=tree] .node", "nodes => nodes.map(n => "
                                           "[n.dataset.node, n.dataset.status ?? n.dataset.role, n.textContent])"),
        "output": page.eval_on_selector("[data-testid=output]", "el => el.textContent"),
        "timeline": page.locator("#step-timeline .timeline-cell").count(),
        "status": page.inner_text("[data-testid=status]"),
    }


def apply_what_if(page, title_has: str) -> dict[str, tuple[str, str]]:
    """Applies the what-if form; returns the comparison table as {row key: (the run, what if)}."""
    page.click("[data-testid=what-if-apply]")
    page.wait_for_function(
        "(title) => document.getElementById('what-if-status').classList.contains('done') && "
        "document.getElementById('what-if-title').textContent.includes(title)", arg=title_has, timeout=60_000)
    rows = page.eval_on_selector_all("[data-testid=what-if-table] tbody tr", "rows => rows.map(r => [r.dataset.key, "
                                     "r.querySelector('[data-side=original]').dataset.value, "
                                     "r.querySelector('[data-side=what-if]').dataset.value])")
    return {key: (original, what_if) for key, original, what_if in rows}


def verified_nodes(page, tree: str) -> int:
    return page.locator(f"[data-testid={tree}] [data-status=accepted], [data-testid={tree}] [data-status=rejected], "
                        f"[data-testid={tree}] [data-status=kept]").count()


def test_raising_talons_mu_at_step_1_regates_it_with_fewer_kept_nodes_and_the_run_is_unchanged(page, tiny_server):
    run_talon(page, tiny_server)
    before = main_view(page)
    assert before["timeline"] >= 2, "the run has later steps to leave unchanged"
    page.keyboard.press("Home")
    page.click("[data-testid=what-if-open]")
    assert page.input_value("[data-testid=what-if-policy]") == "talon"
    assert page.input_value("#what-if-params [data-param=mu]") == "0.03"

    same = apply_what_if(page, "as the run")  # greedy, the run's own parameters: the step as it was
    assert all(original == what_if for original, what_if in same.values()), same
    assert verified_nodes(page, "what-if-tree") == verified_nodes(page, "what-if-original-tree")

    page.fill("#what-if-params [data-param=mu]", RAISED_MU)
    raised = apply_what_if(page, f"mu {RAISED_MU}")
    kept_before, kept_after = (int(value) for value in raised["kept"])
    assert kept_after < kept_before, raised
    assert verified_nodes(page, "what-if-tree") == kept_after < verified_nodes(page, "what-if-original-tree")
    assert "below the bar" in page.inner_text("#what-if-why")
    assert page.locator("[data-testid=what-if-tree] [data-status=bonus], "
                        "[data-testid=what-if-tree] [data-status=recovered]").count() == 1
    # Drawn by the main tree's code: the same attributes on every node, a root first.
    what_if_attributes = set(page.eval_on_selector_all("[data-testid=what-if-tree] .node", NODE_ATTRIBUTES))
    main_attributes = set(page.eval_on_selector_all("[data-testid=tree] .node", NODE_ATTRIBUTES))
    assert what_if_attributes == main_attributes, (what_if_attributes, main_attributes)
    assert "step 1" in page.inner_text("#what-if-title")
    assert page.get_attribute("[data-testid=what-if-tree] .node", "data-role") == "root"
    page.screenshot(path=str(ARTIFACTS / "browser-what-if.png"), full_page=True)

    assert main_view(page) == before


def test_a_bad_parameter_is_named_and_marked_in_the_what_if_form(page, tiny_server):
    run_talon(page, tiny_server)
    page.click("[data-testid=what-if-open]")
    page.eval_on_selector("#what-if-params [data-param=budget]", "input => { input.removeAttribute('max'); }")
    page.fill("#what-if-params [data-param=budget]", "100000")
    page.click("[data-testid=what-if-apply]")
    page.wait_for_function("() => document.getElementById('what-if-status').classList.contains('error')")
    assert "params.budget" in page.inner_text("[data-testid=what-if-status]")
    assert "invalid" in page.get_attribute("#what-if-params [data-param=budget]", "class")


def test_on_a_replay_only_server_the_what_if_control_says_it_needs_the_model(browser):
    with served(["--replay-only"], "whatif-replay-server.log") as url, \
            checked_page(browser, {"width": 1024, "height": 768}) as page:
        page.goto(f"{url}/?trace=lesson-1-deep-narrow")
        page.wait_for_function("() => document.querySelectorAll('.timeline-cell').length > 2")
        assert "needs the model" in page.get_attribute("[data-testid=what-if-open]", "title")
        page.click("[data-testid=what-if-open]")
        assert page.is_disabled("[data-testid=what-if-apply]")
        assert "What-if needs the model" in page.inner_text("[data-testid=what-if]")
        page.screenshot(path=str(ARTIFACTS / "browser-what-if-replay-only.png"))
