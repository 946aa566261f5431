"""Who may call what, and how often: bearer tokens (constant-time, never logged) and rate limits.

One object serves both the FastAPI dependencies and the ASGI fast path, so the two paths enforce
exactly the same rules:
* admin endpoints need ``PRIMA_ADMIN_TOKEN`` (unset: admin is closed, never open);
* query and table endpoints need an analyst token (or the admin token) when
  ``PRIMA_ANALYST_TOKENS`` is set, and are open otherwise;
* every ``/v1`` call counts against a token bucket per token when ``PRIMA_RATE_LIMIT`` is set — per
  client address when the server has no analyst tokens (a new random bearer string per request
  must not escape the limit);
* failed authentications (REST and wire) are limited per client address whatever the settings:
  ``FAILED_AUTH_BURST`` at once, then ``FAILED_AUTH_RATE`` per second (429 / SQLSTATE 53300);
* ``/metrics`` needs ``PRIMA_METRICS_TOKEN`` or the admin token once any token is configured.
Limiter state is bounded (`MAX_BUCKETS`): full buckets are dropped first, then the oldest.
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


FAILED_AUTH_BURST = 10.0  # wrong tokens a client address may send at once …
FAILED_AUTH_RATE = 1.0  # … and then per second (a password guesser gets ~86,000 tries a day, not 50 M)
MAX_BUCKETS = 100_000  # limiter entries kept (each ~200 bytes): bounded whatever clients send


class Buckets:
    """Token buckets by key (`take`), with bounded state."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self._state: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str, what: str) -> None:
        """Take one token for ``key``, or raise 429 saying when to retry."""
        now = time.monotonic()
        with self._lock:
            tokens, last = self._state.pop(key, (self.burst, now))  # re-inserted last: dict order is age
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens < 1.0:
                self._state[key] = (tokens, now)
                wait = (1.0 - tokens) / self.rate
                raise Denied(429, f"{what}; retry in {max(1, round(wait))} s",
                             (("Retry-After", str(max(1, round(wait)))),))
            self._state[key] = (tokens - 1.0, now)
            if len(self._state) > MAX_BUCKETS:
                self._shrink(now)

    def exhausted(self, key: str) -> bool:
        """Whether ``key`` has no token left now (a peek: nothing is taken)."""
        with self._lock:
            state = self._state.get(key)
        return state is not None and state[0] + (time.monotonic() - state[1]) * self.rate < 1.0

    def _shrink(self, now: float) -> None:
        """Drop buckets that have refilled (forgetting them changes nothing), then the oldest."""
        full = [k for k, (t, last) in self._state.items() if t + (now - last) * self.rate >= self.burst]
        for k in full:
            del self._state[k]
        for k in list(self._state)[: max(0, len(self._state) - MAX_BUCKETS // 2)]:
            del self._state[k]

    def __len__(self) -> int:
        return len(self._state)


class Guard:
    def __init__(self, settings: Settings) -> None:
        self.admin_token = settings.admin_token
        self.analyst_tokens = settings.analyst_tokens
        self.metrics_token = settings.metrics_token
        self.rate = settings.rate_limit
        self.requests = Buckets(self.rate, max(10.0, 2.0 * self.rate))
        self.failures = Buckets(FAILED_AUTH_RATE, FAILED_AUTH_BURST)

    def admin(self, authorization: str | None, client: str) -> None:
        if not self.admin_token:
            raise Denied(403, "admin endpoints are disabled: the server has no PRIMA_ADMIN_TOKEN")
        self._not_locked_out(client)
        token = _bearer(authorization)
        if token is None:
            raise Denied(401, "missing bearer token", (("WWW-Authenticate", "Bearer"),))
        if not _matches(token, (self.admin_token,)):
            if not _matches(token, tuple(self.analyst_tokens)):  # a valid analyst token is not a guess
                self._failed(client)
            raise Denied(403, "invalid admin token")
        self._throttle("token:" + hashlib.sha256(token.encode()).hexdigest())

    def metrics(self, authorization: str | None, client: str) -> None:
        """`/metrics`: open only on a server with no token at all (everything is open there);
        otherwise the metrics token or the admin token (table names, budgets, build failures)."""
        if not (self.admin_token or self.analyst_tokens or self.metrics_token):
            return
        self._not_locked_out(client)
        token = _bearer(authorization)
        allowed = tuple(t for t in (self.metrics_token, self.admin_token) if t)
        if token is None:
            raise Denied(401, "missing bearer token: /metrics needs PRIMA_METRICS_TOKEN or the admin token",
                         (("WWW-Authenticate", "Bearer"),))
        if not allowed or not _matches(token, allowed):
            if not _matches(token, tuple(self.analyst_tokens)):
                self._failed(client)
            raise Denied(403, "invalid metrics token")

    def _not_locked_out(self, client: str) -> None:
        """Refuse at once a client address whose failed authentications used up its allowance."""
        if self.failures.exhausted(f"addr:{client}"):
            self._failed(client)

    def _failed(self, client: str) -> None:
        """Count one failed authentication of a client address (429 past its allowance)."""
        self.failures.take(f"addr:{client}", f"too many failed authentications from this address (at most "
                                             f"{FAILED_AUTH_RATE:g}/s after {FAILED_AUTH_BURST:g})")

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
            self._not_locked_out(client)
            if token is None:
                raise Denied(401, "missing bearer token (this server requires analyst tokens)",
                             (("WWW-Authenticate", "Bearer"),))
            allowed = self.analyst_tokens | ({self.admin_token} if self.admin_token else set())
            if not _matches(token, frozenset(allowed)):
                self._failed(client)
                raise Denied(403, "invalid token")
        self.throttle(token, client)

    def throttle(self, token: str | None, client: str) -> None:
        """Count one request of an already authenticated client (the wire listener checks the token
        once per connection and counts every statement it answers, as REST counts requests). Keyed
        on the token only where tokens are checked: otherwise any string would be a fresh bucket."""
        checked = token and (self.analyst_tokens or (self.admin_token and _matches(token, (self.admin_token,))))
        self._throttle("token:" + hashlib.sha256(token.encode()).hexdigest() if checked else f"addr:{client}")

    def _throttle(self, key: str) -> None:
        if self.rate > 0:
            self.requests.take(key, f"rate limit of {self.rate:g} requests/s exceeded")
