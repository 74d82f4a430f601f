"""Takes the README's screenshots from the shipped traces and results: `python scripts/readme_screenshots.py`.

Starts the app in replay-only mode (no model) and writes docs/img/talon-run.png (lesson 1 part-way
through), compare.png (lesson 4's policies side by side) and results.png (the results page on the shipped
results). `--sizes DIR` also writes every page at 1440×900, 1024×768 and a 390×844 phone into DIR, the
views to open and read before a page is called done.
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "img"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-gpu"]
SIZES = {"1440x900": (1440, 900), "1024x768": (1024, 768), "phone": (390, 844)}
SINGLE, COMPARE = "lesson-1-deep-narrow", "lesson-4-compare"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(url: str) -> None:
    for _ in range(240):
        try:
            urllib.request.urlopen(f"{url}/api/info", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(url)


def show_run(page: Page, url: str, phases: int) -> None:
    page.goto(f"{url}/?trace={SINGLE}")
    page.wait_for_selector("[data-testid=phase-name]")
    page.wait_for_timeout(500)
    for _ in range(phases):
        page.keyboard.press("ArrowRight")
    page.wait_for_timeout(800)


def show_compare(page: Page, url: str) -> None:
    page.goto(f"{url}/?trace={COMPARE}&compare=1")
    page.wait_for_selector("[data-testid=compare-table] tr[data-policy]")
    page.keyboard.press("Shift+ArrowRight")
    page.wait_for_timeout(800)


def show_results(page: Page, url: str) -> None:
    page.goto(f"{url}/results")
    page.wait_for_selector("[data-testid=results-chart] [data-policy]")
    page.wait_for_timeout(500)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=Path, default=None, help="also write each page at three sizes into this folder")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--replay-only", "--port", str(port)], cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            show_run(page, url, phases=14)
            page.screenshot(path=str(OUT / "talon-run.png"))
            show_compare(page, url)
            page.screenshot(path=str(OUT / "compare.png"), full_page=True)
            show_results(page, url)
            page.screenshot(path=str(OUT / "results.png"), full_page=True)
            print(f"wrote talon-run.png, compare.png and results.png in {OUT}")
            if args.sizes:
                args.sizes.mkdir(parents=True, exist_ok=True)
                for name, (width, height) in SIZES.items():
                    page.set_viewport_size({"width": width, "height": height})
                    for view, show in (("run", lambda: show_run(page, url, 14)), ("compare", lambda: show_compare(page, url)),
                                       ("results", lambda: show_results(page, url))):
                        show()
                        page.screenshot(path=str(args.sizes / f"{view}-{name}.png"), full_page=True)
                print(f"wrote {3 * len(SIZES)} screenshots in {args.sizes}")
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
