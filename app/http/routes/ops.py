"""Operations: the console page, `/healthz`, `/metrics`, and the writer's internal build route."""

from __future__ import annotations

import secrets
from pathlib import Path

import orjson
from fastapi import APIRouter, Depends, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, JSONResponse

from app import workers
from app.auth import require_metrics
from app.http.calls import prima
from app.http.fastpath import HEALTHY
from app.http.schemas import errors

STATIC = Path(__file__).resolve().parents[2] / "static"

router = APIRouter()


@router.get("/", include_in_schema=False)
def console() -> FileResponse:
    return FileResponse(STATIC / "index.html")


@router.get(
    "/metrics",
    tags=["ops"],
    response_class=Response,
    dependencies=[Depends(require_metrics)],
    responses=errors(401, 403, 429),
)
def metrics(request: Request) -> Response:
    """Prometheus metrics: PRIMA_METRICS_TOKEN or the admin token once any token is set."""
    return Response(request.app.state.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/healthz", tags=["ops"])
async def healthz() -> Response:
    return Response(HEALTHY, media_type="application/json")


@router.get("/health", include_in_schema=False)
async def health() -> Response:
    """The name load balancers and uptime checks also try first."""
    return Response(HEALTHY, media_type="application/json")


def internal_router(secret: str) -> APIRouter:
    """The route a reader's builds go through (app/workers.py): only with the supervisor's secret,
    which only its workers hold; included only on a writer started by the supervisor."""
    internal = APIRouter(include_in_schema=False)

    @internal.post("/internal/build")
    async def internal_build(request: Request) -> JSONResponse:
        if not secrets.compare_digest(request.headers.get(workers.INTERNAL_HEADER, ""), secret):
            return JSONResponse({"detail": "not found"}, status_code=404)
        body = orjson.loads(await request.body())
        status, built = await run_in_threadpool(prima(request).build, str(body["table"]), bool(body.get("force")))
        return JSONResponse({"status": status, "built": built})

    return internal
