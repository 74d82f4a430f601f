"""Several clients at once against one after another, on a real server: what `--max-batch` buys.

    python scripts/clients_bench.py [--clients 4] [--policy talon] [--max-new-tokens 64] [--rounds 2]

Starts `specscope serve --max-batch N` on a free local port (the embedded model), then, in each round, runs
the same N MT-bench-style prompts twice over the WebSocket: one client after another, then N clients at once
(each its own connection). Prints each round's wall times, their ratio, and whether every client's tokens
equal that prompt's run alone; the rounds interleave, so machine noise falls on both sides. Needs the
`websockets` package (uvicorn[standard] brings it). Run it on a quiet machine: its ratio is the claim.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request

from websockets.sync.client import connect

PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a refrigerator keeps food cold, step by step.",
    "Give me five tips for learning a new language as an adult.",
    "What are the main differences between a list and a tuple in Python?",
    "Describe the water cycle to a ten-year-old.",
    "Plan a three-day trip to Rome for someone who loves history.",
    "Why is the sky blue? Answer in one paragraph.",
    "Write a haiku about autumn and explain its imagery.",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(base: str, seconds: float = 600) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{base}/api/info", timeout=5).read()
            return
        except OSError:
            time.sleep(1)
    raise SystemExit(f"the server at {base} did not answer within {seconds:.0f} s")


def run_one(url: str, prompt: str, policy: str, max_new_tokens: int, out: list, index: int) -> None:
    """One client's run: its tokens and whether any of its steps shared a forward."""
    message = {"type": "run", "prompt": prompt, "policy": policy, "max_new_tokens": max_new_tokens, "temperature": 0}
    shared = 1
    with connect(url, open_timeout=30, max_size=None) as ws:
        ws.send(json.dumps(message))
        while True:
            event = json.loads(ws.recv(timeout=600))
            if event["type"] == "step_metrics":
                shared = max(shared, event.get("shared", 1))
            if event["type"] in ("run_finished", "error"):
                break
    if event["type"] == "error":
        raise SystemExit(f"client {index}: {event}")
    out[index] = (event["tokens"], shared)


def one_after_another(url: str, prompts: list[str], policy: str, n: int) -> tuple[float, list]:
    out: list = [None] * len(prompts)
    began = time.perf_counter()
    for i, prompt in enumerate(prompts):
        run_one(url, prompt, policy, n, out, i)
    return time.perf_counter() - began, out


def at_once(url: str, prompts: list[str], policy: str, n: int) -> tuple[float, list]:
    out: list = [None] * len(prompts)
    threads = [threading.Thread(target=run_one, args=(url, p, policy, n, out, i)) for i, p in enumerate(prompts)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - began, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--policy", default="talon")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    port = free_port()
    base, url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/ws"
    # Suffix memory off: otherwise each run would draft from the same prompt's earlier answers, and whichever
    # side ran second would be flattered.
    env = {**os.environ, "SPECSCOPE_SUFFIX_MEMORY_SCOPE": "off"}
    server = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--port", str(port),
                               "--max-batch", str(args.clients)], stdout=subprocess.DEVNULL, env=env)
    try:
        wait_for(base)
        prompts = PROMPTS[:args.clients]
        run_one(url, prompts[0], args.policy, 8, [None], 0)  # warm-up: the kernel, the head, the caches
        ratios = []
        for r in range(args.rounds):
            alone_s, alone = one_after_another(url, prompts, args.policy, args.max_new_tokens)
            together_s, together = at_once(url, prompts, args.policy, args.max_new_tokens)
            equal = all(a[0] == t[0] for a, t in zip(alone, together))
            shared = max(t[1] for t in together)
            ratios.append(together_s / alone_s)
            print(f"round {r + 1}: one after another {alone_s:.2f} s, {args.clients} at once {together_s:.2f} s "
                  f"→ {together_s / alone_s:.2f}× the time; most requests in one forward: {shared}; "
                  f"every output equal to its run alone: {'yes' if equal else 'NO'}")
        print(f"{args.clients} clients running {args.policy} at once took {min(ratios):.2f}–{max(ratios):.2f}× "
              f"the time of the same runs one after another")
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
