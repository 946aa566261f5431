"""The analyst's view of tables: what is registered, its public schema and its budget."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from app.auth import require_analyst
from app.http.calls import prima
from app.http.schemas import BUDGET_EXAMPLE, TABLE_EXAMPLE, errors, ok

router = APIRouter(tags=["tables"], dependencies=[Depends(require_analyst)])


@router.get("/v1/tables", responses={**ok({"tables": [TABLE_EXAMPLE]}), **errors(401, 403, 429)})
def tables(request: Request) -> Any:
    service = prima(request)
    return {"tables": [service.table_info(n) for n in service.table_names()]}


@router.get("/v1/tables/{table}", responses={**ok(TABLE_EXAMPLE), **errors(401, 403, 404, 429)})
def table(table: str, request: Request) -> Any:
    return prima(request).table_info(table)


@router.get("/v1/tables/{table}/budget", responses={**ok(BUDGET_EXAMPLE), **errors(401, 403, 404, 429)})
def budget(table: str, request: Request) -> Any:
    return prima(request).budget(table)
