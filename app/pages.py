"""The page and the small JSON endpoints it reads (policy forms, server description, shipped traces)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from app.deps import EngineDep
from engine.interface import Engine
from engine.policies import policy_schemas

ROOT = Path(__file__).resolve().parent.parent
TRACES_DIR = ROOT / "static" / "traces"
templates = Jinja2Templates(directory=ROOT / "templates")
router = APIRouter()


@router.get("/", response_class=HTMLResponse)
async def index(request: Request, engine: EngineDep) -> HTMLResponse:
    return templates.TemplateResponse(request, "index.html", {"server": describe_engine(engine)})


@router.get("/api/policies")
async def policies() -> dict[str, Any]:
    """Each policy's parameters as JSON schema: defaults, bounds and descriptions for the form."""
    return policy_schemas()


@router.get("/api/info")
async def info(engine: EngineDep) -> dict[str, Any]:
    return describe_engine(engine)


@router.get("/api/traces")
async def traces() -> list[dict[str, str]]:
    """Shipped recorded runs, for replay with no model."""
    return [{"name": path.stem, "url": f"/static/traces/{path.name}"} for path in sorted(TRACES_DIR.glob("*.jsonl"))]


def describe_engine(engine: Engine | None) -> dict[str, Any]:
    if engine is None:
        return {"replay_only": True, "drafters": []}
    return {"replay_only": False, **engine.describe().model_dump()}
