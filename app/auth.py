"""FastAPI dependencies that apply `app.guard.Guard` to each route group."""

from __future__ import annotations

from fastapi import HTTPException, Request

from app.guard import Denied, Guard

FORWARDED_FOR = "x-prima-forwarded-for"  # set by a reader forwarding an admin request (app/workers.py)


def _client(request: Request) -> str:
    """The client address failed authentications are counted against. A request with no address
    came over the writer's Unix socket, forwarded by a reader, which names the original client (over
    TCP the header is ignored: a client could send it)."""
    if request.client:
        return request.client.host
    return request.headers.get(FORWARDED_FOR, "unknown")


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
