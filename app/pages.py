"""The page and the small JSON endpoints it reads (the request's and the policies' schemas, server description,
shipped traces). The page takes its rules from these: bounds, defaults, which policy is the default and how each
policy is presented are the engine's declarations, served, never copied into the page."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from app.deps import EngineDep, SettingsDep
from app.settings import ServerSettings
from engine.interface import Engine
from engine.policies import DEFAULT_POLICY, policy_schemas
from engine.request import request_schema

ROOT = Path(__file__).resolve().parent.parent
TRACES_DIR = ROOT / "static" / "traces"
RESULTS_DIR = ROOT / "static" / "results"
templates = Jinja2Templates(directory=ROOT / "templates")
router = APIRouter()


@router.get("/", response_class=HTMLResponse)
async def index(request: Request, engine: EngineDep, settings: SettingsDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "index.html", {"server": describe_engine(engine, settings)})


@router.get("/results", response_class=HTMLResponse)
async def results(request: Request) -> HTMLResponse:
    """`specscope bench` results drawn as charts: the shipped ones, or a results.json the user opens."""
    shipped = [{"name": path.stem, "url": f"/static/results/{path.name}"} for path in sorted(RESULTS_DIR.glob("*.json"))]
    return templates.TemplateResponse(request, "results.html", {"shipped": shipped})


@router.get("/api/policies")
async def policies() -> dict[str, Any]:
    """Each policy's parameters as JSON schema: defaults, bounds and descriptions for the form."""
    return policy_schemas()


@router.get("/api/request")
async def request() -> dict[str, Any]:
    """The request's JSON schema: each field's bounds, default and meaning for the form (and for links)."""
    return request_schema()


@router.get("/api/info")
async def info(engine: EngineDep, settings: SettingsDep) -> dict[str, Any]:
    return describe_engine(engine, settings)


@router.get("/api/traces")
async def traces() -> list[dict[str, Any]]:
    """Shipped recorded runs, for replay with no model: each with the policies it runs and its temperature.

    A trace is engine events as JSON lines, plain (NAME.jsonl) or gzip-compressed (NAME.jsonl.gz, which
    the page inflates itself): a draft tree's every candidate makes a talon step ~130 KB of text."""
    paths = sorted([*TRACES_DIR.glob("*.jsonl"), *TRACES_DIR.glob("*.jsonl.gz")], key=lambda path: path.name)
    return [describe_trace(path) for path in paths]


def trace_name(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".jsonl")


def describe_trace(path: Path) -> dict[str, Any]:
    """A trace's name and URL, and from its run_started events: policies in order, temperature(s), prompt."""
    starts = []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            if '"run_started"' in line:
                event = json.loads(line)
                if event.get("type") == "run_started":
                    starts.append(event)
    temperatures = sorted({event["temperature"] for event in starts})
    return {
        "name": trace_name(path),
        "url": f"/static/traces/{path.name}",
        "policies": [event["policy"] for event in starts],
        "policy": ", ".join(event["policy"] for event in starts),
        "temperature": temperatures[0] if len(temperatures) == 1 else temperatures,
        "prompt": starts[0]["prompt"] if starts else None,
    }


def describe_engine(engine: Engine | None, settings: ServerSettings) -> dict[str, Any]:
    if engine is None:
        # No model, so nothing measured: the engine's unmeasured default, for forms and links.
        return {"replay_only": True, "drafters": [], "default_policy": DEFAULT_POLICY}
    info = engine.describe()
    return {"replay_only": False, **info.model_dump(), "suffix_memory": describe_memory(settings, info.suffix_memory_tokens)}


MEMORY_NOTES = {
    "client": "the suffix drafter copies from this tab's own earlier runs too (each policy from its own); "
              "no other client's text appears in your drafts",
    "shared": "the suffix drafter copies from every client's earlier runs on this server (each policy from its "
              "own): text another client typed can appear in your drafts",
    "off": "the suffix drafter copies only from the current prompt and answer",
}


def describe_memory(settings: ServerSettings, budget: int) -> dict[str, Any]:
    """Whose earlier runs the drafts may copy from, as the operator set it (`--suffix-memory-scope`), and how
    many tokens each policy's memory keeps."""
    scope = settings.suffix_memory_scope if budget else "off"
    return {"scope": scope, "tokens_per_policy": budget, "note": MEMORY_NOTES[scope]}
