"""Admin routes: register and retire tables, set budgets, build and append, read the ledger."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Query, Request, Response

from app.auth import require_admin
from app.http.calls import prima
from app.http.schemas import (
    BUDGET_EXAMPLE,
    CUBE_EXAMPLE,
    LEDGER_EXAMPLE,
    TABLE_EXAMPLE,
    AppendRequest,
    BudgetRequest,
    BuildRequest,
    errors,
    ok,
)
from storage.schema import TableSpec

router = APIRouter(tags=["admin"], dependencies=[Depends(require_admin)])


@router.post(
    "/v1/admin/tables",
    status_code=201,
    responses={**ok(TABLE_EXAMPLE, 201, "registered"), **errors(401, 403, 409, 413, 422, 429)},
)
def register(
    spec: TableSpec,
    request: Request,
    response: Response,
    dry_run: bool = Query(False, description="validate and preview the cost only: nothing is loaded, stored or spent"),
    force: bool = Query(
        False, description="register even if no row falls inside every declared domain (rows arrive later)"
    ),
    new_population: bool = Query(
        False,
        description="acknowledge (logged) that a source already "
        "registered in another id space holds another population",
    ),
) -> Any:
    if dry_run:
        response.status_code = 200
    return prima(request).register(spec, dry_run=dry_run, force=force, new_population=new_population)


@router.delete(
    "/v1/admin/tables/{table}",
    responses={
        **ok(
            {
                "name": "staff",
                "retired": True,
                "epsilon_spent": 1.0,
                "note": "the ledger keeps this table's entries; registering the name again starts from what was spent",
            }
        ),
        **errors(401, 403, 404, 409, 429),
    },
)
def retire(table: str, request: Request) -> Any:
    """Retire a table: the cube and the loaded copy go, the ledger stays."""
    return prima(request).retire(table)


@router.put("/v1/admin/tables/{table}/budget", responses={**ok(BUDGET_EXAMPLE), **errors(401, 403, 404, 409, 422, 429)})
def set_budget(table: str, body: BudgetRequest, request: Request) -> Any:
    return prima(request).set_budget(table, body.epsilon, body.rho, body.delta)


@router.post(
    "/v1/admin/tables/{table}/cube",
    responses={
        **ok(CUBE_EXAMPLE, 200, "the existing cube"),
        **ok(CUBE_EXAMPLE, 201, "built now"),
        **ok(
            {"status": "building", "phase": "measure", "fraction": 0.5, "status_url": "/v1/admin/tables/people/cube"},
            202,
            "building in the background",
        ),
        **errors(401, 403, 404, 409, 422, 429),
    },
)
def build(table: str, request: Request, response: Response, body: BuildRequest | None = Body(default=None)) -> Any:
    service, force = prima(request), bool(body and body.force)
    if body is not None and body.background:
        status = service.build_in_background(table, force=force)
        if status["status"] == "building":
            response.status_code = 202
            return {**status, "status_url": f"/v1/admin/tables/{table}/cube"}
        return status
    status, built = service.build(table, force=force)
    response.status_code = 201 if built else 200
    return status


@router.post(
    "/v1/admin/tables/{table}/append",
    responses={
        **ok({"table": "events", "appended": ["2025-01-03"], "growth": {"measured": 3, "next": "2025-01-04"}}),
        **errors(401, 403, 404, 409, 422, 429),
    },
)
def append(table: str, request: Request, body: AppendRequest | None = Body(default=None)) -> Any:
    """Measure a growing table's next closed period(s), each charged once before its rows are read."""
    body = body or AppendRequest()
    return prima(request).append(
        table, through=body.through, period=body.period, limit=body.limit, remeasure=body.remeasure
    )


@router.get("/v1/admin/tables/{table}/cube", responses={**ok(CUBE_EXAMPLE), **errors(401, 403, 404, 429)})
def cube_status(table: str, request: Request) -> Any:
    return prima(request).cube_status(table)


@router.get("/v1/admin/tables/{table}/ledger", responses={**ok(LEDGER_EXAMPLE), **errors(401, 403, 404, 429)})
def ledger(table: str, request: Request) -> Any:
    """A table's entries — of a live table, or of a retired one (its ledger stays)."""
    return {"entries": prima(request).ledger_entries(table)}


@router.get(
    "/v1/admin/spaces",
    responses={
        **ok(
            {
                "spaces": [
                    {
                        "id_space": "persons",
                        "epsilon_total": 1.0,
                        "epsilon_spent": 0.4,
                        "tables": ["visits"],
                        "sources": ["source:file:3fa1…"],
                    }
                ]
            }
        ),
        **errors(401, 403, 429),
    },
)
def spaces(request: Request) -> Any:
    """Every id space: its total, what it spent, its live tables and the sources registered in it."""
    return {"spaces": prima(request).spaces()}


@router.get("/v1/admin/spaces/{space:path}/ledger", responses={**ok(LEDGER_EXAMPLE), **errors(401, 403, 404, 429)})
def space_ledger(space: str, request: Request) -> Any:
    """Every entry charged to one id space, retired tables' included."""
    return {"entries": prima(request).space_ledger(space)}
