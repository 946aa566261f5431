"""HTTP API (SPEC §4): a thin translation of requests into `engine.service.Prima` calls."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gc
import importlib.util
import logging
import os
import secrets
import threading
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterator

import orjson
from fastapi import Body, Depends, FastAPI, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from threadpoolctl import threadpool_limits

from app import formats, workers
from app.auth import require_admin, require_analyst, require_metrics
from app.config import Settings
from app.fastpath import HEALTHY, FrontDoor
from app.guard import Guard
from app.metrics import Metrics
from engine import deadline
from engine.errors import PrimaError, Unavailable
from engine.service import Prima
from storage.schema import TableSpec

log = logging.getLogger("prima.app")

MAX_BATCH = 10_000
STATIC = Path(__file__).parent / "static"
# Swagger UI and ReDoc files as the fastapi-offline package ships them (we use its files only).
DOCS_ASSETS = Path(importlib.util.find_spec("fastapi_offline").origin).parent / "static"


class ErrorDetail(BaseModel):
    """Every error body (SPEC §4); validation errors (422) carry a list of {type, loc, msg}."""

    detail: str | list[dict[str, Any]] = Field(examples=["unknown column 'wage' at line 1, column 12"])


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {400: "query outside the SQL surface", 401: "missing bearer token", 403: "wrong or insufficient token",
            404: "unknown table", 409: "budget or state conflict", 413: "over a limit", 422: "invalid request",
            429: "rate limit exceeded", 503: "timed out (work it started continues)"}
    return {c: {"model": ErrorDetail, "description": text[c]} for c in codes}


def _ok(example: Any, code: int = 200, text: str = "OK") -> dict[int | str, dict[str, Any]]:
    return {code: {"description": text, "content": {"application/json": {"example": example}}}}


BUDGET_EXAMPLE = {"currency": "epsilon", "total": 1.0, "spent": 1.0, "remaining": 0.0, "epsilon_total": 1.0,
                  "epsilon_spent": 1.0, "epsilon_remaining": 0.0, "rho_spent": 0.0123}
CUBE_EXAMPLE = {"status": "ready", "strategy": "pairwise", "epsilon": 1.0, "built_at": "2026-11-22T00:56:00+00:00",
                "build_id": "6830c1df4d634047b01441950629abe9",
                "aggregates": {"COUNT(*)": {"epsilon": 0.2, "sensitivity": 1.0, "noise_scale": 5.0}},
                "clipping": {"salary": {"strategy": "fixed", "lo": 0.0, "hi": 250000.0}}}
LEDGER_EXAMPLE = {"entries": [{"id": 1, "at": "2026-11-22T00:56:00Z", "epsilon": 0.2, "status": "done",
                               "purpose": "cube measurement (pairwise): COUNT(*)", "build_id": "6830c1df"}]}
TABLE_EXAMPLE = {"name": "people", "dimensions": [{"name": "age", "type": "int", "lo": 18, "hi": 90, "bin": 1}],
                 "measures": [{"name": "salary", "lo": 0.0, "hi": 250000.0, "clipping": "fixed"}], "cells": 17520,
                 "cube": {"status": "none"}, "budget": BUDGET_EXAMPLE}
ANSWER_EXAMPLE = {
    "columns": ["education", "n"], "rows": [["hs", 24316.6], ["bsc", 21096.7]],
    "stddev": [[None, 109.4], [None, 109.4]], "ci95": [[None, [24102.2, 24531.1]], [None, [20882.3, 21311.1]]],
    "group_columns": ["education"], "notes": [], "table": "people",
    "cube": {"strategy": "pairwise", "epsilon": 1.0, "built_at": "2026-11-22T00:56:00+00:00"},
}


class _StrictBody(BaseModel):
    """A request body that refuses unknown fields (422): `{"epsilon": 0.1}` on a build once answered
    201 and spent the whole budget with the defaults, the field silently ignored (issue #29)."""

    model_config = ConfigDict(extra="forbid")


class QueryRequest(_StrictBody):
    sql: str = Field(max_length=20_000, examples=["SELECT SUM(salary) FROM people WHERE age BETWEEN 30 AND 40"])
    clamp: bool = Field(default=True, description="clamp values and intervals into their possible range (COUNT ≥ 0, "
                        "AVG within the measure's bounds); false: the raw, unbiased values that add up across groups")
    truncate: bool = Field(default=True, description="truncate SUMs of a measure with a class axis to the classes "
                           "that hold significant mass in the query's region (asymmetric interval); false: the "
                           "unbiased, additive answer")


class BatchRequest(_StrictBody):
    queries: list[str] = Field(max_length=MAX_BATCH, examples=[[
        "SELECT COUNT(*) FROM people WHERE age < 30", "SELECT region, SUM(salary) FROM people GROUP BY region"]])


class BudgetRequest(_StrictBody):
    """The new total, in the currency the table's id space is budgeted in (issue #34)."""

    epsilon: float | None = Field(default=None, gt=0, le=100, examples=[2.0])
    rho: float | None = Field(default=None, gt=0, le=100)


class BuildRequest(_StrictBody):
    force: bool = Field(default=False, description="rebuild even if a cube exists or the last build failed; spends again")
    background: bool = Field(default=False, description="answer 202 at once and build on a worker; poll the status URL")


class AppendRequest(_StrictBody):
    """Which closed periods of a growing table to measure (issue #32): by default every closed one."""

    period: str | None = Field(default=None, max_length=32, description="exactly this period (it must be the next "
                               "one), written as the period dimension's labels, e.g. '2025-01-03' or '2025-01'")
    through: dt.date | None = Field(default=None, description="the closed periods ending on or before this date")
    limit: int | None = Field(default=None, ge=1, description="at most this many periods (1: the next one)")
    remeasure: bool = Field(default=False, description="measure the measured `period` again from its rows as they are "
                            "now (late or corrected rows): charged again; flat releases only")


# A full pass after this many young (generation-1) passes, not CPython's 10: see below.
FULL_COLLECTION_EVERY = 100


class _WhileAnyApp:
    """A process-wide setting held while at least one app runs in the process (tests run several):
    the first app to start applies it, the last to stop gives the process its own back."""

    _lock = threading.Lock()

    def __init__(self, apply: Callable[[], Callable[[], None]]) -> None:
        self._apply = apply  # applies the setting, returns how to restore the process's own
        self._users = 0
        self._restore: Callable[[], None] | None = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                self._restore = self._apply()
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0 and self._restore is not None:
                    self._restore()


def _one_blas_thread() -> Callable[[], None]:
    return threadpool_limits(limits=1, user_api="blas").restore_original_limits


def _rarer_full_passes() -> Callable[[], None]:
    own = gc.get_threshold()
    gc.set_threshold(own[0], own[1], FULL_COLLECTION_EVERY)
    return lambda: gc.set_threshold(*own)


_BLAS = _WhileAnyApp(_one_blas_thread)
_COLLECTOR = _WhileAnyApp(_rarer_full_passes)


def one_blas_thread() -> contextlib.AbstractContextManager[None]:
    """BLAS on one thread in the serving process, for the app's life.

    Answers run on the server's threads, and a GROUP BY's totals are BLAS products (`tensordot`)
    of small arrays. With OpenBLAS's own threads on top, each call woke a second thread that spun
    for work: one `prima serve` on 2 cores burnt 1.96 cores for 36 distinct 2,700-group answers/s
    where one thread per call gave 35/s on 1.0 core, and two serving workers reached 24/s instead
    of 64/s (bench/workers.py; the same lesson as the builds', `engine.builds.steps.measure`, issue #16)."""
    return _BLAS.held()


@contextlib.contextmanager
def rarer_full_collections() -> Iterator[None]:
    """The garbage collector's full passes ten times rarer than CPython's default, for the app's life.

    Start-up objects (the app, its OpenAPI models, sqlglot's tables, numpy) live as long as the
    process: they are frozen out of every pass. The query caches (plans, bound conditions, answers:
    bounded, tens of thousands of entries) are not, and under a stream of new queries the default
    rule ran a full pass — ~50 ms over those caches, on the event loop — every ~0.6 s: 8 % of the
    server's CPU and its p99 (bench/distinct_queries.py). Counting in young passes keeps full
    passes proportional to allocation, so cyclic garbage that grew old (an evicted parse tree) is
    still reclaimed at a bounded lag however fast it is made.
    """
    with _COLLECTOR.held():
        gc.freeze()
        yield


async def _scheduled_appends(prima: Prima, every: float) -> None:
    """The writer's timer for growing tables that declare ``"schedule": true`` (issue #32): every
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
            settings.data_dir, import_dir=settings.resolved_import_dir, max_cube_bytes=settings.max_cube_bytes,
            role=workers.role(), build_via=_builder(settings) if workers.role() == "reader" else None,
        )
        app.state.prima.warm_build_workers()
        if settings.demo and app.state.prima.ensure_demo():
            log.info("created the demo table 'people'")
        wire = None
        if settings.pg_port:
            from app.wire import server as pg_wire  # only when asked for: the listener is optional

            wire = await pg_wire.start(app.state.prima, app.state.guard, settings.pg_host, settings.pg_port,
                                       app.state.metrics, settings.pg_tls_cert, settings.pg_tls_key,
                                       settings.pg_auth_timeout, reuse_port=workers.role() != "single",
                                       timeout=settings.request_timeout)
        timer = (asyncio.create_task(_scheduled_appends(app.state.prima, settings.append_every))
                 if settings.append_every > 0 and workers.role() != "reader" else None)
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
        return get_swagger_ui_html(openapi_url="/openapi.json", title="Prima API",
                                   swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-assets/swagger-ui.css",
                                   swagger_favicon_url="/docs-assets/favicon.png")

    @app.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url="/openapi.json", title="Prima API",
                              redoc_js_url="/docs-assets/redoc.standalone.js", redoc_favicon_url="/docs-assets/favicon.png",
                              with_google_fonts=False)
    # Serving workers share one set of buckets (a client gets one allowance, not one per worker).
    app.state.guard = Guard(settings, shared=settings.data_dir / "limits" if workers.role() != "single" else None)
    app.state.metrics = Metrics(lambda: getattr(app.state, "prima", None))
    app.front_door = dict(cached_query=lambda sql: _cached_query(app, sql), new_query=lambda sql: _new_query(app, sql),
                          generation=lambda: _generation(app),
                          guard=app.state.guard, max_body_bytes=settings.max_body_bytes, metrics=app.state.metrics)
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
            stack = workers.ForwardAdmin(stack, workers.writer_socket(settings.data_dir),
                                         workers.forward_timeout(settings.request_timeout))
        return FrontDoor(stack, **self.front_door)


def _builder(settings: Settings) -> Any:
    return workers.remote_builder(workers.writer_socket(settings.data_dir), os.environ.get(workers.TOKEN_ENV, ""),
                                  workers.forward_timeout(settings.request_timeout))


def _generation(app: FastAPI) -> int:
    prima = getattr(app.state, "prima", None)
    return -1 if prima is None else prima.current_generation()


def _cached_query(app: FastAPI, sql: str) -> bytes | None:
    prima = getattr(app.state, "prima", None)
    return None if prima is None else prima.cached_query_json(sql)


def _new_query(app: FastAPI, sql: str) -> bytes | None:
    prima = getattr(app.state, "prima", None)
    return None if prima is None else prima.new_query_json(sql)


def _fast_json(payload: Any) -> Response:
    """orjson-encoded response for the hot query path (values are plain floats/str/None)."""
    return Response(orjson.dumps(payload), media_type="application/json")


def _json_body(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI description of a JSON body for endpoints that decode it themselves."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


def _decode(model: type[BaseModel], raw: bytes) -> Any:
    try:
        return model.model_validate(orjson.loads(raw))
    except orjson.JSONDecodeError:
        raise RequestValidationError([{"type": "json_invalid", "loc": ["body"], "msg": "JSON decode error"}]) from None
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False, include_input=False)) from None


def _prima(request: Request) -> Prima:
    return request.app.state.prima


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(PrimaError)
    async def prima_error(_: Request, exc: PrimaError) -> JSONResponse:
        retry = getattr(exc, "retry_after", None)
        headers = {"Retry-After": str(retry)} if retry else None
        return JSONResponse({"detail": exc.detail, **getattr(exc, "extra", {})}, status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        # Only type/loc/msg: echoing the input back can fail (Infinity is not JSON) and adds nothing.
        errors = [{k: e[k] for k in ("type", "loc", "msg") if k in e} for e in exc.errors()]
        return JSONResponse({"detail": errors}, status_code=422)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Only the exception type is logged: messages from lower layers could quote data.
        log.error("unexpected %s on %s %s", type(exc).__name__, request.method, request.url.path)
        return JSONResponse({"detail": "internal error"}, status_code=500)


def _add_routes(app: FastAPI) -> None:
    admin = [Depends(require_admin)]
    analyst = [Depends(require_analyst)]
    timeout = app.state.settings.request_timeout

    async def off_loop(fn: Any, *args: Any) -> Any:
        """Run engine work on a worker thread, bounded by PRIMA_REQUEST_TIMEOUT."""
        try:
            return await asyncio.wait_for(run_in_threadpool(deadline.call, timeout, fn, *args), timeout)
        except asyncio.TimeoutError:
            raise Unavailable(
                f"the request took longer than {timeout:g} s; a cube build may still be running "
                "(it continues and is charged once): retry shortly"
            ) from None

    internal = os.environ.get(workers.TOKEN_ENV)
    if internal and workers.role() == "writer":
        @app.post("/internal/build", include_in_schema=False)
        async def internal_build(request: Request) -> JSONResponse:
            """A reader's build (app/workers.py): only with the supervisor's secret, which only its
            workers hold; the route exists only on a writer started by the supervisor."""
            if not secrets.compare_digest(request.headers.get(workers.INTERNAL_HEADER, ""), internal):
                return JSONResponse({"detail": "not found"}, status_code=404)
            body = orjson.loads(await request.body())
            status, built = await run_in_threadpool(_prima(request).build, str(body["table"]), bool(body.get("force")))
            return JSONResponse({"status": status, "built": built})

    @app.get("/", include_in_schema=False)
    def console() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/metrics", tags=["ops"], response_class=Response, dependencies=[Depends(require_metrics)],
             responses=_errors(401, 403, 429))
    def metrics(request: Request) -> Response:
        """Prometheus metrics: PRIMA_METRICS_TOKEN or the admin token once any token is set."""
        return Response(request.app.state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> Response:
        return Response(HEALTHY, media_type="application/json")

    @app.post("/v1/query", tags=["query"], dependencies=analyst, openapi_extra=_json_body(QueryRequest),
              responses={200: {"description": "the answer", "content": {"application/json": {"example": ANSWER_EXAMPLE}, "text/csv": {}, "application/vnd.apache.arrow.stream": {}}}, **_errors(400, 401, 403, 404, 409, 413, 422, 429, 503)})
    async def query(request: Request) -> Any:
        # The body is decoded with orjson and checked by the same pydantic model, without
        # FastAPI's generic body machinery: this is the hot path (bench/perf.py).
        body = _decode(QueryRequest, await request.body())
        sql = body.sql
        # Repeated dashboard queries are answered from memory on the event loop (microseconds);
        # a first parse or a cube build runs on a worker thread so the loop never blocks.
        prima = _prima(request)
        result = prima.cached_query(sql) if body.clamp and body.truncate else None
        if result is None:
            result = await off_loop(prima.query, sql, body.clamp, body.truncate)
        kind = formats.wanted(request.headers.get("accept"))
        if kind == formats.CSV:
            return Response(formats.to_csv(result), media_type="text/csv; charset=utf-8", headers=formats.headers(result))
        if kind == formats.ARROW:
            return Response(formats.to_arrow(result), media_type=formats.ARROW, headers=formats.headers(result))
        return _fast_json(result)

    @app.post("/v1/query/batch", tags=["query"], dependencies=analyst,
              responses={**_ok({"results": [ANSWER_EXAMPLE, {"error": {"status": 400, "detail": "syntax error"}}]}),
                         **_errors(401, 403, 413, 422, 429, 503)})
    async def query_batch(body: BatchRequest, request: Request) -> Any:
        return _fast_json({"results": await off_loop(_prima(request).query_batch, body.queries)})

    @app.get("/v1/tables", tags=["tables"], dependencies=analyst,
             responses={**_ok({"tables": [TABLE_EXAMPLE]}), **_errors(401, 403, 429)})
    def tables(request: Request) -> Any:
        prima = _prima(request)
        return {"tables": [prima.table_info(n) for n in prima.table_names()]}

    @app.get("/v1/tables/{table}", tags=["tables"], dependencies=analyst,
             responses={**_ok(TABLE_EXAMPLE), **_errors(401, 403, 404, 429)})
    def table(table: str, request: Request) -> Any:
        return _prima(request).table_info(table)

    @app.get("/v1/tables/{table}/budget", tags=["tables"], dependencies=analyst,
             responses={**_ok(BUDGET_EXAMPLE), **_errors(401, 403, 404, 429)})
    def budget(table: str, request: Request) -> Any:
        return _prima(request).budget(table)

    @app.post("/v1/admin/tables", tags=["admin"], dependencies=admin, status_code=201,
              responses={**_ok(TABLE_EXAMPLE, 201, "registered"), **_errors(401, 403, 409, 413, 422, 429)})
    def register(spec: TableSpec, request: Request, response: Response,
                 dry_run: bool = Query(False, description="validate and preview the cost only: nothing is loaded, "
                                                          "stored or spent"),
                 force: bool = Query(False, description="register even if no row falls inside every declared "
                                                        "domain (rows arrive later)"),
                 new_population: bool = Query(False, description="acknowledge (logged) that a source already "
                                              "registered in another id space holds another population")) -> Any:
        if dry_run:
            response.status_code = 200
        return _prima(request).register(spec, dry_run=dry_run, force=force, new_population=new_population)

    @app.delete("/v1/admin/tables/{table}", tags=["admin"], dependencies=admin,
                responses={**_ok({"name": "staff", "retired": True, "epsilon_spent": 1.0,
                                  "note": "the ledger keeps this table's entries; registering the name again starts "
                                          "from what was spent"}), **_errors(401, 403, 404, 409, 429)})
    def retire(table: str, request: Request) -> Any:
        """Retire a table: the cube and the loaded copy go, the ledger stays."""
        return _prima(request).retire(table)

    @app.put("/v1/admin/tables/{table}/budget", tags=["admin"], dependencies=admin,
             responses={**_ok(BUDGET_EXAMPLE), **_errors(401, 403, 404, 409, 422, 429)})
    def set_budget(table: str, body: BudgetRequest, request: Request) -> Any:
        return _prima(request).set_budget(table, body.epsilon, body.rho)

    @app.post("/v1/admin/tables/{table}/cube", tags=["admin"], dependencies=admin,
              responses={**_ok(CUBE_EXAMPLE, 200, "the existing cube"), **_ok(CUBE_EXAMPLE, 201, "built now"),
                         **_ok({"status": "building", "phase": "measure", "fraction": 0.5,
                                "status_url": "/v1/admin/tables/people/cube"}, 202, "building in the background"),
                         **_errors(401, 403, 404, 409, 422, 429)})
    def build(table: str, request: Request, response: Response, body: BuildRequest | None = Body(default=None)) -> Any:
        prima, force = _prima(request), bool(body and body.force)
        if body is not None and body.background:
            status = prima.build_in_background(table, force=force)
            if status["status"] == "building":
                response.status_code = 202
                return {**status, "status_url": f"/v1/admin/tables/{table}/cube"}
            return status
        status, built = prima.build(table, force=force)
        response.status_code = 201 if built else 200
        return status

    @app.post("/v1/admin/tables/{table}/append", tags=["admin"], dependencies=admin,
              responses={**_ok({"table": "events", "appended": ["2025-01-03"], "growth": {"measured": 3, "next": "2025-01-04"}}),
                         **_errors(401, 403, 404, 409, 422, 429)})
    def append(table: str, request: Request, body: AppendRequest | None = Body(default=None)) -> Any:
        """Measure a growing table's next closed period(s), each charged once before its rows are read."""
        body = body or AppendRequest()
        return _prima(request).append(table, through=body.through, period=body.period, limit=body.limit,
                                      remeasure=body.remeasure)

    @app.get("/v1/admin/tables/{table}/cube", tags=["admin"], dependencies=admin,
             responses={**_ok(CUBE_EXAMPLE), **_errors(401, 403, 404, 429)})
    def cube_status(table: str, request: Request) -> Any:
        return _prima(request).cube_status(table)

    @app.get("/v1/admin/tables/{table}/ledger", tags=["admin"], dependencies=admin,
             responses={**_ok(LEDGER_EXAMPLE), **_errors(401, 403, 404, 429)})
    def ledger(table: str, request: Request) -> Any:
        """A table's entries — of a live table, or of a retired one (its ledger stays)."""
        return {"entries": _prima(request).ledger_entries(table)}

    @app.get("/v1/admin/spaces", tags=["admin"], dependencies=admin,
             responses={**_ok({"spaces": [{"id_space": "persons", "epsilon_total": 1.0, "epsilon_spent": 0.4,
                                           "tables": ["visits"], "sources": ["source:file:3fa1…"]}]}),
                        **_errors(401, 403, 429)})
    def spaces(request: Request) -> Any:
        """Every id space: its total, what it spent, its live tables and the sources registered in it."""
        return {"spaces": _prima(request).spaces()}

    @app.get("/v1/admin/spaces/{space:path}/ledger", tags=["admin"], dependencies=admin,
             responses={**_ok(LEDGER_EXAMPLE), **_errors(401, 403, 404, 429)})
    def space_ledger(space: str, request: Request) -> Any:
        """Every entry charged to one id space, retired tables' included."""
        return {"entries": _prima(request).space_ledger(space)}
