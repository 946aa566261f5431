"""Who may call what, and how often: bearer tokens (constant-time, never logged) and rate limits.

One object serves both the FastAPI dependencies and the ASGI fast path, so the two paths enforce
exactly the same rules:
* admin endpoints need ``PRIMA_ADMIN_TOKEN`` (unset: admin is closed, never open);
* query and table endpoints need an analyst token (or the admin token) when
  ``PRIMA_ANALYST_TOKENS`` is set, and are open otherwise;
* every ``/v1`` call counts against a token bucket per token (per client address without one)
  when ``PRIMA_RATE_LIMIT`` is set.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from dataclasses import dataclass

from app.config import Settings


@dataclass(frozen=True)
class Denied(Exception):
    status: int
    detail: str
    headers: tuple[tuple[str, str], ...] = ()


def _bearer(authorization: str | None) -> str | None:
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def _matches(token: str, allowed: frozenset[str] | tuple[str, ...]) -> bool:
    # Compare digests so the time taken depends on neither the token nor which one matched.
    digest = hashlib.sha256(token.encode()).digest()
    found = False
    for candidate in allowed:
        found |= hmac.compare_digest(digest, hashlib.sha256(candidate.encode()).digest())
    return found


class Guard:
    def __init__(self, settings: Settings) -> None:
        self.admin_token = settings.admin_token
        self.analyst_tokens = settings.analyst_tokens
        self.rate = settings.rate_limit
        self.burst = max(10.0, 2.0 * self.rate)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def admin(self, authorization: str | None, client: str) -> None:
        if not self.admin_token:
            raise Denied(403, "admin endpoints are disabled: the server has no PRIMA_ADMIN_TOKEN")
        token = _bearer(authorization)
        if token is None:
            raise Denied(401, "missing bearer token", (("WWW-Authenticate", "Bearer"),))
        if not _matches(token, (self.admin_token,)):
            raise Denied(403, "invalid admin token")
        self._throttle("token:" + hashlib.sha256(token.encode()).hexdigest())

    def analyst_token_ok(self, authorization: str | None) -> bool:
        """Whether `analyst` would accept the token — without counting the request (rate limits
        are applied once, by whichever path answers)."""
        token = _bearer(authorization)
        if not self.analyst_tokens:
            return True
        allowed = self.analyst_tokens | ({self.admin_token} if self.admin_token else set())
        return token is not None and _matches(token, frozenset(allowed))

    def analyst(self, authorization: str | None, client: str) -> None:
        token = _bearer(authorization)
        if self.analyst_tokens:
            if token is None:
                raise Denied(401, "missing bearer token (this server requires analyst tokens)",
                             (("WWW-Authenticate", "Bearer"),))
            allowed = self.analyst_tokens | ({self.admin_token} if self.admin_token else set())
            if not _matches(token, frozenset(allowed)):
                raise Denied(403, "invalid token")
        self.throttle(token, client)

    def throttle(self, token: str | None, client: str) -> None:
        """Count one request of an already authenticated client (the wire listener checks the token
        once per connection and counts every statement it answers, as REST counts requests)."""
        self._throttle("token:" + hashlib.sha256(token.encode()).hexdigest() if token else f"addr:{client}")

    def _throttle(self, key: str) -> None:
        if self.rate <= 0:
            return
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                wait = (1.0 - tokens) / self.rate
                raise Denied(429, f"rate limit of {self.rate:g} requests/s exceeded",
                             (("Retry-After", str(max(1, round(wait)))),))
            self._buckets[key] = (tokens - 1.0, now)
