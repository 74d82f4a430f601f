"""Check a running specscope server from outside: the page, /api/info, and one short run over the WebSocket.

    python scripts/check_server.py http://127.0.0.1:8000 [--wait 300]

Exits non-zero with the reason on the first thing that is wrong. scripts/container.sh runs it against the container;
it works against any deployment. Needs the `websockets` package (uvicorn[standard] brings it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from websockets.sync.client import connect

PROMPT = "Count from one to ten."


class CheckFailed(Exception):
    pass


def fetch(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def wait_for_info(base: str, wait_s: float) -> dict:
    """The server answers /api/info once the model is loaded; until then the connection is refused."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return json.loads(fetch(f"{base}/api/info", timeout=5))
        except (urllib.error.URLError, ConnectionError, TimeoutError) as err:
            if time.monotonic() > deadline:
                raise CheckFailed(f"/api/info did not answer within {wait_s:.0f} s: {err}") from err
            time.sleep(1)


def check_page(base: str) -> None:
    page = fetch(f"{base}/")
    for marker in ("<title>specscope", 'data-testid="prompt"', 'data-testid="run"'):
        if marker not in page:
            raise CheckFailed(f"the page at {base}/ lacks {marker!r}")


def run_once(base: str, max_new_tokens: int) -> dict:
    """One greedy talon run; returns run_finished after checking the stream adds up to it."""
    parts = urlsplit(base)
    url = f"{'wss' if parts.scheme == 'https' else 'ws'}://{parts.netloc}/ws"
    message = {"type": "run", "prompt": PROMPT, "policy": "talon", "temperature": 0, "seed": 0,
               "max_new_tokens": max_new_tokens}
    deltas: list[str] = []
    kinds: set[str] = set()
    with connect(url, open_timeout=10) as socket:
        socket.send(json.dumps(message))
        while True:
            event = json.loads(socket.recv(timeout=120))
            kinds.add(event["type"])
            if event["type"] == "error":
                raise CheckFailed(f"the run failed: {event['message']} (field {event.get('field')})")
            if event["type"] == "text":
                deltas.append(event["text"])
            if event["type"] == "run_finished":
                break
    missing = {"run_started", "draft_layer", "tree", "verify", "text", "step_metrics"} - kinds
    if missing:
        raise CheckFailed(f"the run sent no {', '.join(sorted(missing))} events")
    if event["new_tokens"] < 1 or not event["text"].strip():
        raise CheckFailed(f"the run emitted nothing: {event}")
    if "".join(deltas) != event["text"]:
        raise CheckFailed("the text events do not add up to run_finished.text")
    return event


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the server's address, e.g. http://127.0.0.1:8000")
    parser.add_argument("--wait", type=float, default=300, help="seconds to wait for /api/info (default 300)")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args(argv)
    base = args.base.rstrip("/")
    try:
        info = wait_for_info(base, args.wait)
        if info.get("replay_only"):
            raise CheckFailed("the server has no model loaded (replay only)")
        print(f"/api/info: {json.dumps(info)}")
        check_page(base)
        print(f"{base}/: the page answers")
        finished = run_once(base, args.max_new_tokens)
    except (CheckFailed, urllib.error.URLError, OSError) as err:
        print(f"check_server: {err}", file=sys.stderr)
        return 1
    print(f"/ws: talon run, {finished['new_tokens']} tokens in {finished['steps']} steps, "
          f"τ={finished['tau']:.2f}: {finished['text']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
