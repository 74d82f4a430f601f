"""The FastAPI app: the engine is loaded once in the lifespan; routes only validate and relay."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Callable

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from app.apidocs import router as apidocs_router
from app.batching import BatchDriver
from app.line import RunLine
from app.pages import router as pages_router
from app.security import AllowList, HostGuard, SecurityHeaders
from app.settings import ServerSettings
from app.ws import router as ws_router
from engine.interface import Engine

ROOT = Path(__file__).resolve().parent.parent
STATIC_DIR = ROOT / "static"

EngineFactory = Callable[[ServerSettings], Engine]


def load_configured_engine(settings: ServerSettings) -> Engine:
    from engine.loading import load_engine  # imported late: a replay-only server needs no model code

    return load_engine(settings.engine_options())


def max_batch_of(settings: ServerSettings, engine: Engine | None) -> int:
    """Runs decoded together: `max_batch` where set, else the engine's default (the cost table's), else 1."""
    if engine is None:
        return 1
    return settings.max_batch or getattr(engine, "default_max_batch", 1)


def create_app(settings: ServerSettings | None = None, engine_factory: EngineFactory = load_configured_engine) -> FastAPI:
    settings = settings or ServerSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.settings = settings
        app.state.engine = None if settings.replay_only else engine_factory(settings)
        max_batch = max_batch_of(settings, app.state.engine)
        app.state.line = RunLine(settings.max_waiting, settings.max_runs_per_client, holders=max_batch)
        app.state.connections = Counter()  # open sockets per client address
        app.state.stopping = threading.Event()  # set at shutdown: every run stops at its next step
        # One worker: the model serves one run (or one batch of runs) at a time, and torch state stays on one thread.
        app.state.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="specscope-engine")
        app.state.batching = (BatchDriver(app.state.engine, app.state.executor, max_batch)
                              if max_batch > 1 else None)
        try:
            yield
        finally:
            app.state.stopping.set()
            app.state.executor.shutdown(wait=True, cancel_futures=True)

    # The API docs are off unless asked for, and then served without FastAPI's CDN pages.
    app = FastAPI(title="specscope", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url="/openapi.json" if settings.api_docs else None)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.include_router(pages_router)
    app.include_router(ws_router)
    if settings.api_docs:
        app.include_router(apidocs_router)
    allowed = AllowList.build(settings.host, settings.allowed_hosts)
    app.add_middleware(HostGuard, allowed=allowed)
    app.add_middleware(SecurityHeaders, allowed=allowed)  # added last: outermost, so refusals carry the headers too
    return app
