"""HTTP API (SPEC §4): a thin translation of requests into `engine.service.Prima` calls."""

from __future__ import annotations

import contextlib
import logging
from typing import Any, AsyncIterator

import orjson
from fastapi import Body, Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from app.auth import require_admin
from app.config import Settings
from engine.errors import PrimaError
from engine.service import Prima
from storage.schema import TableSpec

log = logging.getLogger("prima.app")

MAX_BATCH = 10_000


class QueryRequest(BaseModel):
    sql: str = Field(max_length=20_000, examples=["SELECT SUM(salary) FROM people WHERE age BETWEEN 30 AND 40"])


class BatchRequest(BaseModel):
    queries: list[str] = Field(max_length=MAX_BATCH)


class BudgetRequest(BaseModel):
    epsilon: float = Field(gt=0, le=100)


class BuildRequest(BaseModel):
    force: bool = Field(default=False, description="rebuild even if a cube exists or the last build failed; spends again")


def create_app(settings: Settings | None = None, service: Prima | None = None) -> FastAPI:
    """The FastAPI app; opens the data dir on start-up unless a ``service`` is handed in."""
    settings = settings or Settings()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = service is None
        app.state.prima = service or Prima(settings.data_dir, import_dir=settings.import_dir)
        if settings.demo and app.state.prima.ensure_demo():
            log.info("created the demo table 'people'")
        yield
        if owned:
            app.state.prima.close()

    app = FastAPI(
        title="Prima",
        description="Differentially private SQL over privatized prefix-sum cubes.",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.add_middleware(_JsonBodyByDefault)
    _add_error_handlers(app)
    _add_routes(app)
    return app


class _JsonBodyByDefault:
    """Treat POST/PUT bodies as JSON when the client sent no or a form content type.

    ``curl -d '{...}'`` labels its body application/x-www-form-urlencoded; every Prima body is
    JSON, so the README's one-line curl calls work without ``-H 'Content-Type: ...'``.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT"):
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
            given = dict(scope["headers"]).get(b"content-type", b"")
            if not given or given.startswith(b"application/x-www-form-urlencoded"):
                scope = {**scope, "headers": headers + [(b"content-type", b"application/json")]}
        await self.app(scope, receive, send)


def _fast_json(payload: Any) -> Response:
    """orjson-encoded response for the hot query path (values are plain floats/str/None)."""
    return Response(orjson.dumps(payload), media_type="application/json")


def _prima(request: Request) -> Prima:
    return request.app.state.prima


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(PrimaError)
    async def prima_error(_: Request, exc: PrimaError) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Only the exception type is logged: messages from lower layers could quote data.
        log.error("unexpected %s on %s %s", type(exc).__name__, request.method, request.url.path)
        return JSONResponse({"detail": "internal error"}, status_code=500)


def _add_routes(app: FastAPI) -> None:
    admin = [Depends(require_admin)]

    @app.get("/healthz", tags=["ops"])
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/query", tags=["query"])
    def query(body: QueryRequest, request: Request) -> Any:
        return _fast_json(_prima(request).query(body.sql))

    @app.post("/v1/query/batch", tags=["query"])
    def query_batch(body: BatchRequest, request: Request) -> Any:
        return _fast_json({"results": _prima(request).query_batch(body.queries)})

    @app.get("/v1/tables", tags=["tables"])
    def tables(request: Request) -> Any:
        prima = _prima(request)
        return {"tables": [prima.table_info(n) for n in prima.table_names()]}

    @app.get("/v1/tables/{table}", tags=["tables"])
    def table(table: str, request: Request) -> Any:
        return _prima(request).table_info(table)

    @app.get("/v1/tables/{table}/budget", tags=["tables"])
    def budget(table: str, request: Request) -> Any:
        return _prima(request).budget(table)

    @app.post("/v1/admin/tables", tags=["admin"], dependencies=admin, status_code=201)
    def register(spec: TableSpec, request: Request) -> Any:
        return _prima(request).register(spec)

    @app.put("/v1/admin/tables/{table}/budget", tags=["admin"], dependencies=admin)
    def set_budget(table: str, body: BudgetRequest, request: Request) -> Any:
        return _prima(request).set_budget(table, body.epsilon)

    @app.post("/v1/admin/tables/{table}/cube", tags=["admin"], dependencies=admin)
    def build(table: str, request: Request, response: Response, body: BuildRequest | None = Body(default=None)) -> Any:
        status, built = _prima(request).build(table, force=bool(body and body.force))
        response.status_code = 201 if built else 200
        return status

    @app.get("/v1/admin/tables/{table}/cube", tags=["admin"], dependencies=admin)
    def cube_status(table: str, request: Request) -> Any:
        prima = _prima(request)
        prima.table_info(table)  # 404 for an unknown table
        return prima.cube_status(table)

    @app.get("/v1/admin/tables/{table}/ledger", tags=["admin"], dependencies=admin)
    def ledger(table: str, request: Request) -> Any:
        return {"entries": _prima(request).ledger_entries(table)}
