"""What the browser tests share: a `specscope serve` subprocess on a free port, Debian's chromium through
Playwright, and pages that fail their test on a script error or a Content-Security-Policy refusal."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-background-networking", "--disable-component-update", "--disable-gpu"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def served(args: list[str], log_name: str, timeout_s: float = 240) -> Iterator[str]:
    """`python -m app.serve ARGS` on a free port, its output in test-artifacts/LOG_NAME; yields the base URL."""
    port = free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / log_name, "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "app.serve", "--port", str(port), *args], cwd=ROOT,
                                   stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until_up(url, process, log_name, timeout_s)
            yield url
        finally:
            process.terminate()
            process.wait(timeout=30)


def wait_until_up(url: str, process: subprocess.Popen, log_name: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}; see test-artifacts/{log_name}")
        try:
            urllib.request.urlopen(f"{url}/api/info", timeout=2)
            return
        except OSError:
            time.sleep(0.3)
    raise TimeoutError(f"server did not come up; see test-artifacts/{log_name}")


@contextmanager
def chromium() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def checked_page(browser, viewport: dict[str, int], **options) -> Iterator:
    """A watched page that, once its test is done, closes and fails the test if it saw an error."""
    page = watched_page(browser, viewport, **options)
    yield page
    page.close()
    assert not page.errors, page.errors


def watched_page(browser, viewport: dict[str, int], **options):
    """A new page whose `errors` collects script errors and Content-Security-Policy refusals: the server's
    CSP refuses inline script, inline style and eval, so a page that needs any of them is broken."""
    page = browser.new_page(viewport=viewport, **options)
    page.errors = []
    page.on("pageerror", lambda error: page.errors.append(str(error)))
    page.on("console", lambda message: page.errors.append(message.text)
            if "Content Security Policy" in message.text else None)
    return page
