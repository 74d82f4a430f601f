"""The traces shipped in static/traces/ for replay with no model: plain (NAME.jsonl) or gzip-compressed
(NAME.jsonl.gz) JSON lines of engine events. Tests read them through here, whichever way they are stored."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

TRACES = Path(__file__).resolve().parent.parent / "static" / "traces"


def paths() -> list[Path]:
    return sorted([*TRACES.glob("*.jsonl"), *TRACES.glob("*.jsonl.gz")], key=lambda path: path.name)


def names() -> list[str]:
    return [name_of(path) for path in paths()]


def name_of(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".jsonl")


def path_of(name: str) -> Path:
    for path in paths():
        if name_of(path) == name:
            return path
    raise FileNotFoundError(f"no shipped trace named {name!r}; shipped: {', '.join(names())}")


def lines(name: str) -> list[str]:
    path = path_of(name)
    text = gzip.decompress(path.read_bytes()).decode("utf-8") if path.suffix == ".gz" else path.read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line.strip()]


def events(name: str) -> list[dict]:
    return [json.loads(line) for line in lines(name)]


def runs(name: str) -> list[list[dict]]:
    """The trace's events grouped by run, in order of first appearance."""
    grouped: dict[str, list[dict]] = {}
    for event in events(name):
        grouped.setdefault(event["run_id"], []).append(event)
    return list(grouped.values())
