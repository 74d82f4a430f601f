"""Takes the README's screenshots from the shipped traces: `python scripts/readme_screenshots.py`.

Starts the app in replay-only mode (no model), opens a talon trace part-way
through, then the multi-run trace side by side, and writes docs/img/*.png.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "img"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-gpu"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(url: str) -> None:
    for _ in range(120):
        try:
            urllib.request.urlopen(f"{url}/api/info", timeout=2)
            return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(url)


def main(single: str = "smollm2-talon", multi: str = "smollm2-compare-ar-talon-eagle", step: int = 6) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "app.serve", "--replay-only", "--port", str(port)], cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}/?trace={single}")
            page.wait_for_selector("[data-testid=step-timeline]", state="attached")
            page.wait_for_timeout(1000)
            for _ in range(step):
                page.keyboard.press("ArrowRight")
            page.wait_for_timeout(1500)
            page.screenshot(path=str(OUT / "talon-run.png"), full_page=True)
            page.goto(f"{url}/?trace={multi}")
            page.click("#trace-compare")
            page.wait_for_selector("[data-testid=compare-table] tr", state="attached")
            page.wait_for_timeout(1500)
            page.screenshot(path=str(OUT / "compare.png"), full_page=True)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"wrote {OUT / 'talon-run.png'} and {OUT / 'compare.png'}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
