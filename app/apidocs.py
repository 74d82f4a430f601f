"""`--api-docs`: /openapi.json and a /docs page rendered here from it, with no script and no CDN.

FastAPI's own docs pages fetch Swagger UI and ReDoc from a CDN; this server
loads nothing from the network and its pages carry no inline script, so the
page is plain HTML built on the server from the same OpenAPI document.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

router = APIRouter()

METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
STYLE = """
body { font: 16px/1.5 system-ui, sans-serif; max-width: 56rem; margin: 0 auto; padding: 1rem 1.25rem 3rem; color: #1d2330; }
h1 { font-size: 1.6rem; margin-bottom: .25rem; }
h2 { font-size: 1.1rem; margin: 2rem 0 .25rem; padding-top: 1rem; border-top: 1px solid #d9dde5; }
h3 { font-size: .95rem; margin: .75rem 0 .25rem; color: #4a5263; }
code, pre { font: 14px/1.4 ui-monospace, monospace; }
h2 code { font-size: 1.05rem; font-weight: 600; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f4f6f9; padding: .5rem .75rem; border-radius: 4px; }
.description { white-space: pre-wrap; }
"""


@router.get("/docs", response_class=HTMLResponse, include_in_schema=False)
async def docs(request: Request) -> HTMLResponse:
    return HTMLResponse(render(request.app.openapi()))


@router.get("/docs.css", include_in_schema=False)
async def docs_style() -> Response:
    return Response(STYLE, media_type="text/css")


def render(spec: dict[str, Any]) -> str:
    info = spec.get("info", {})
    sections = [_operation(path, method, operation)
                for path, item in spec.get("paths", {}).items()
                for method, operation in item.items() if method in METHODS]
    return (f"<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<link rel=\"stylesheet\" href=\"/docs.css\">"
            f"<title>{escape(info.get('title', 'API'))} API</title></head><body>"
            f"<h1>{escape(info.get('title', 'API'))} {escape(str(info.get('version', '')))}</h1>"
            f"<p>The HTTP endpoints, from <a href=\"/openapi.json\">/openapi.json</a>. The WebSocket "
            f"protocol at <code>/ws</code> is described in docs/websocket.md.</p>"
            f"{''.join(sections)}{_schemas(spec)}</body></html>")


def _operation(path: str, method: str, operation: dict[str, Any]) -> str:
    parameters = "".join(
        f"<li><code>{escape(p['name'])}</code> ({escape(p.get('in', ''))}"
        f"{', required' if p.get('required') else ''}): {escape(_type(p.get('schema', {})))}</li>"
        for p in operation.get("parameters", []))
    responses = "".join(
        f"<li>{escape(str(status))}: {escape(response.get('description', ''))}"
        f"{_content(response.get('content', {}))}</li>"
        for status, response in operation.get("responses", {}).items())
    description = operation.get("description") or ""
    description = f'<p class="description">{escape(description)}</p>' if description else ""
    return (f"<section><h2><code>{method.upper()} {escape(path)}</code></h2>"
            f"<p>{escape(operation.get('summary', ''))}</p>"
            f"{description}"
            f"{f'<h3>Parameters</h3><ul>{parameters}</ul>' if parameters else ''}"
            f"<h3>Responses</h3><ul>{responses}</ul></section>")


def _content(content: dict[str, Any]) -> str:
    return "".join(f" <code>{escape(kind)}</code> {escape(_type(body.get('schema', {})))}"
                   for kind, body in content.items())


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    return str(schema.get("type", schema.get("title", "any")))


def _schemas(spec: dict[str, Any]) -> str:
    schemas = spec.get("components", {}).get("schemas", {})
    if not schemas:
        return ""
    items = "".join(f"<h3 id=\"{escape(name)}\">{escape(name)}</h3><pre>{escape(json.dumps(schema, indent=2))}</pre>"
                    for name, schema in schemas.items())
    return f"<section><h2>Schemas</h2>{items}</section>"
