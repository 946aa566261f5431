"""`POST /v1/query` and `/v1/query/batch`: SQL in, answers out (JSON, CSV or Arrow)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from app import formats
from app.auth import require_analyst
from app.http.calls import decode, fast_json, off_loop, prima
from app.http.schemas import ANSWER_EXAMPLE, BatchRequest, QueryRequest, errors, json_body, ok
from engine.answer import Answer

router = APIRouter(tags=["query"], dependencies=[Depends(require_analyst)])


@router.post(
    "/v1/query",
    openapi_extra=json_body(QueryRequest),
    responses={
        200: {
            "description": "the answer",
            "content": {
                "application/json": {"example": ANSWER_EXAMPLE},
                "text/csv": {},
                "application/vnd.apache.arrow.stream": {},
            },
        },
        **errors(400, 401, 403, 404, 409, 413, 422, 429, 503),
    },
)
async def query(request: Request) -> Any:
    # The body is decoded with orjson and checked by the same pydantic model, without
    # FastAPI's generic body machinery: this is the hot path (bench/perf.py).
    body = decode(QueryRequest, await request.body())
    sql = body.sql
    # Repeated dashboard queries are answered from memory on the event loop (microseconds);
    # a first parse or a cube build runs on a worker thread so the loop never blocks.
    service = prima(request)
    options = body.options
    result = service.cached_query(sql) if options.default else None
    if result is None:
        result = await off_loop(request, service.query, sql, options)
    kind = formats.wanted(request.headers.get("accept"))
    if kind == formats.CSV:
        return Response(formats.to_csv(result), media_type="text/csv; charset=utf-8", headers=formats.headers(result))
    if kind == formats.ARROW:
        return Response(formats.to_arrow(result), media_type=formats.ARROW, headers=formats.headers(result))
    return Response(result.to_json(), media_type="application/json")


@router.post(
    "/v1/query/batch",
    responses={
        **ok({"results": [ANSWER_EXAMPLE, {"error": {"status": 400, "detail": "syntax error"}}]}),
        **errors(401, 403, 413, 422, 429, 503),
    },
)
async def query_batch(body: BatchRequest, request: Request) -> Any:
    results = await off_loop(request, prima(request).query_batch, body.queries)
    return fast_json({"results": [r.as_dict() if isinstance(r, Answer) else r for r in results]})
