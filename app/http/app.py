"""The HTTP app: its lifespan (the service, the wire listener, the append timer), docs pages, error
handlers and routers (`app.http.routes`). A thin translation of requests into `engine.service.Prima` calls."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import traceback
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from app import workers
from app.config import Settings
from app.guard import Guard
from app.http.fastpath import FrontDoor
from app.http.routes import admin, ops, query, tables
from app.http.runtime import one_blas_thread, rarer_full_collections
from app.metrics import Metrics
from engine.errors import PrimaError
from engine.service import Prima
from storage.database import StateUnavailable

log = logging.getLogger("prima.app")

STATIC = Path(__file__).resolve().parents[1] / "static"
# Swagger UI and ReDoc files as the fastapi-offline package ships them (we use its files only).
DOCS_ASSETS = Path(importlib.util.find_spec("fastapi_offline").origin).parent / "static"


async def _scheduled_appends(prima: Prima, every: float) -> None:
    """The writer's timer for growing tables that declare ``"schedule": true``: every
    ``every`` seconds, their closed periods are appended on a worker thread (the event loop serves on)."""
    while True:
        await asyncio.sleep(every)
        try:
            done = await asyncio.to_thread(prima.scheduled_appends)
        except Exception as exc:  # the type only: the timer must survive, and messages may come from below
            log.error("scheduled appends failed: %s", type(exc).__name__)
            continue
        for name, periods in done.items():
            log.info("scheduled append of %s: %d period(s)", name, len(periods))


def create_app(settings: Settings | None = None, service: Prima | None = None) -> FastAPI:
    """The FastAPI app; opens the data dir on start-up unless a ``service`` is handed in."""
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = service is None
        if settings.import_dir is None:  # the default import dir lives in the data dir: create it
            settings.resolved_import_dir.mkdir(parents=True, exist_ok=True)
        app.state.prima = service or Prima(
            settings.data_dir,
            import_dir=settings.resolved_import_dir,
            max_cube_bytes=settings.max_cube_bytes,
            role=workers.role(),
            build_via=_builder(settings) if workers.role() == "reader" else None,
            state=settings.state_url,
            cube_dir=settings.cube_dir,
        )
        if settings.demo and app.state.prima.ensure_demo():
            log.info("created the demo table 'people'")
        wire = None
        if settings.pg_port:
            from app.wire import server as pg_wire  # only when asked for: the listener is optional

            wire = await pg_wire.start(
                app.state.prima,
                app.state.guard,
                settings.pg_host,
                settings.pg_port,
                app.state.metrics,
                settings.pg_tls_cert,
                settings.pg_tls_key,
                settings.pg_auth_timeout,
                reuse_port=workers.role() != "single",
                timeout=settings.request_timeout,
            )
        timer = (
            asyncio.create_task(_scheduled_appends(app.state.prima, settings.append_every))
            if settings.append_every > 0 and workers.role() != "reader"
            else None
        )
        with rarer_full_collections(), one_blas_thread():
            yield
        if timer is not None:
            timer.cancel()
        if wire is not None:
            wire.close()
        if owned:
            app.state.prima.close()

    app = _PrimaApp(
        title="Prima",
        description="Differentially private SQL over privatized prefix-sum cubes.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None,  # served below from local assets: /docs must work without internet
        redoc_url=None,
        # FastAPI's OpenTelemetry bridge looks up the global providers on every request (~4 % of a
        # query's server time); Prima reports through /metrics and its JSON logs (docs/operations.md).
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.settings = settings
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    app.mount("/docs-assets", StaticFiles(directory=DOCS_ASSETS), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="Prima API",
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="/docs-assets/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url="/openapi.json",
            title="Prima API",
            redoc_js_url="/docs-assets/redoc.standalone.js",
            redoc_favicon_url="/docs-assets/favicon.png",
            with_google_fonts=False,
        )

    # Serving workers share one set of buckets (a client gets one allowance, not one per worker).
    # Servers of one shared state share them in PostgreSQL (the state opens with the app's lifespan).
    app.state.guard = Guard(
        settings,
        shared=settings.data_dir / "limits" if workers.role() != "single" else None,
        state=(lambda: app.state.prima.db.state) if settings.state_url else None,
    )
    app.state.metrics = Metrics(lambda: getattr(app.state, "prima", None))
    app.front_door = dict(
        cached_query=lambda sql: _cached_query(app, sql),
        new_query=lambda sql: _new_query(app, sql),
        generation=lambda: _generation(app),
        guard=app.state.guard,
        max_body_bytes=settings.max_body_bytes,
        metrics=app.state.metrics,
    )
    _add_error_handlers(app)
    _add_routes(app)
    return app


class _PrimaApp(FastAPI):
    """FastAPI with `FrontDoor` outside its whole middleware stack, not inside it as
    ``add_middleware`` would put it: a query answered from memory then skips three middleware
    layers and their wrapped ``send`` (~10 % of a new query's server time, bench/distinct_queries.py).
    Everything the front door does not answer goes through the full stack, error handlers included."""

    front_door: dict[str, Any] = {}

    def build_middleware_stack(self) -> Any:
        stack = super().build_middleware_stack()
        if workers.role() == "reader":  # admin requests are the writer's (app/workers.py)
            settings = self.state.settings
            stack = workers.ForwardAdmin(
                stack, workers.writer_socket(settings.data_dir), workers.forward_timeout(settings.request_timeout)
            )
        return FrontDoor(stack, **self.front_door)


def _builder(settings: Settings) -> Any:
    return workers.remote_builder(
        workers.writer_socket(settings.data_dir),
        os.environ.get(workers.TOKEN_ENV, ""),
        workers.forward_timeout(settings.request_timeout),
    )


def _generation(app: FastAPI) -> int:
    prima = getattr(app.state, "prima", None)
    return -1 if prima is None else prima.current_generation()


def _cached_query(app: FastAPI, sql: str) -> bytes | None:
    prima = getattr(app.state, "prima", None)
    return None if prima is None else prima.cached_query_json(sql)


def _new_query(app: FastAPI, sql: str) -> bytes | None:
    prima = getattr(app.state, "prima", None)
    return None if prima is None else prima.new_query_json(sql)


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(PrimaError)
    async def prima_error(_: Request, exc: PrimaError) -> JSONResponse:
        retry = getattr(exc, "retry_after", None)
        headers = {"Retry-After": str(retry)} if retry else None
        return JSONResponse(
            {"detail": exc.detail, **getattr(exc, "extra", {})}, status_code=exc.status, headers=headers
        )

    @app.exception_handler(StateUnavailable)
    async def state_unavailable(_: Request, exc: StateUnavailable) -> JSONResponse:
        log.error("shared state unreachable")
        return JSONResponse({"detail": str(exc)}, status_code=503, headers={"Retry-After": "5"})

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        # Only type/loc/msg: echoing the input back can fail (Infinity is not JSON) and adds nothing.
        errors = [{k: e[k] for k in ("type", "loc", "msg") if k in e} for e in exc.errors()]
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Only the exception type and where it was raised (file, line, function of the innermost frames)
        # are logged: messages from lower layers could quote data, code locations cannot.
        log.error("unexpected %s on %s %s at %s", type(exc).__name__, request.method, request.url.path, _where(exc))
        return JSONResponse({"detail": "internal error"}, status_code=500)


def _where(exc: BaseException, frames: int = 8) -> str:
    """The innermost ``frames`` of the traceback as ``file:line function``, innermost first."""
    stack = traceback.extract_tb(exc.__traceback__)[-frames:]
    return " < ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(stack))


def _add_routes(app: FastAPI) -> None:
    """The routers, in the order `/docs` lists them, and the internal build route on a supervised writer."""
    internal = os.environ.get(workers.TOKEN_ENV)
    if internal and workers.role() == "writer":
        app.include_router(ops.internal_router(internal))
    for router in (ops.router, query.router, tables.router, admin.router):
        app.include_router(router)
