"""FastAPI dependencies that apply `app.guard.Guard` to each route group (SPEC §4)."""

from __future__ import annotations

from fastapi import HTTPException, Request

from app.guard import Denied, Guard


def _client(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def _apply(request: Request, check: str) -> None:
    guard: Guard = request.app.state.guard
    try:
        getattr(guard, check)(request.headers.get("authorization"), _client(request))
    except Denied as denied:
        raise HTTPException(denied.status, denied.detail, headers=dict(denied.headers) or None) from None


def require_admin(request: Request) -> None:
    _apply(request, "admin")


def require_analyst(request: Request) -> None:
    _apply(request, "analyst")


def require_metrics(request: Request) -> None:
    _apply(request, "metrics")
