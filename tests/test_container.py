"""The container's tooling: what the Dockerfile's context holds, and the outside check scripts/container.sh runs.

Building and running the image itself takes minutes (scripts/container.sh, `make image`), so it is not a test here.
"""

from __future__ import annotations

import fnmatch
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import uvicorn

from app.main import create_app
from app.settings import ServerSettings
from tiny_models import tiny_engine

ROOT = Path(__file__).resolve().parent.parent
CHECK_SERVER = ROOT / "scripts" / "check_server.py"


def ignored(name: str) -> bool:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    return any(fnmatch.fnmatch(name, pattern) for pattern in patterns if pattern and not pattern.startswith("#"))


def test_docker_context_holds_every_package_and_leaves_out_local_state():
    include = re.search(r"include\s*=\s*\[([^\]]*)\]", (ROOT / "pyproject.toml").read_text()).group(1)
    packages = {pattern.rstrip("*") for pattern in re.findall(r'"([^"]+)"', include)}
    assert "engine" in packages
    for name in sorted(packages | {"static", "templates", "pyproject.toml", "Makefile", "README.md"}):
        assert (ROOT / name).exists(), name
        assert not ignored(name), f".dockerignore keeps {name} out of the image"
    for name in (".git", ".venv", "runs", "out", "test-artifacts", ".pytest_cache", "node_modules"):
        assert ignored(name), f".dockerignore lets {name} into the image"


def serve_in_thread(settings: ServerSettings, engine):
    """A real uvicorn on a free port, as the container runs it; yields the base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(settings, engine_factory=lambda _: engine), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()


@pytest.fixture
def live_server():
    yield from serve_in_thread(ServerSettings(), tiny_engine(seed=0))


@pytest.fixture
def replay_only_server():
    yield from serve_in_thread(ServerSettings(replay_only=True), None)


def check_server(url: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK_SERVER), url, "--wait", "10", "--max-new-tokens", "8"],
                          capture_output=True, text=True, timeout=120)


def test_check_server_passes_when_the_page_and_a_run_answer(live_server):
    result = check_server(live_server)
    assert result.returncode == 0, result.stderr
    assert "the page answers" in result.stdout
    assert "/ws: talon run, 8 tokens" in result.stdout


def test_check_server_fails_loudly_on_a_server_without_a_model(replay_only_server):
    result = check_server(replay_only_server)
    assert result.returncode == 1
    assert "no model loaded" in result.stderr


def test_check_server_fails_loudly_when_nothing_listens():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = subprocess.run([sys.executable, str(CHECK_SERVER), f"http://127.0.0.1:{port}", "--wait", "1"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "/api/info did not answer within 1 s" in result.stderr
