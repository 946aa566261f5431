"""Admin bearer-token check (SPEC §4): constant-time compare, token never logged or echoed."""

from __future__ import annotations

import hmac

from fastapi import HTTPException, Request


def require_admin(request: Request) -> None:
    expected: str | None = request.app.state.settings.admin_token
    if not expected:
        # Unset token means the admin API is closed, never open.
        raise HTTPException(403, "admin endpoints are disabled: the server has no PRIMA_ADMIN_TOKEN")
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    if not hmac.compare_digest(token.strip().encode(), expected.encode()):
        raise HTTPException(403, "invalid admin token")
