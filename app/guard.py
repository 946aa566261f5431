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
  ``FAILED_AUTH_BURST`` at once, then ``FAILED_AUTH_RATE`` per second (429 / SQLSTATE 53300); a
  wrong token sent while locked out runs the bucket into debt (down to ``-FAILED_AUTH_BURST``), so
  a guesser that keeps hammering stays locked out instead of getting a try each time a token
  trickles in;
* ``/metrics`` needs ``PRIMA_METRICS_TOKEN`` or the admin token once any token is configured.
Limiter state is bounded (`MAX_BUCKETS`): full buckets are dropped first, then the oldest.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

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
_LOCKED_OUT = (
    f"too many failed authentications from this address (at most {FAILED_AUTH_RATE:g}/s after "
    f"{FAILED_AUTH_BURST:g}; wrong tokens sent meanwhile extend the wait)"
)
MAX_BUCKETS = 100_000  # limiter entries kept (each ~200 bytes): bounded whatever clients send
PEEK_SECONDS = 0.25  # a shared bucket's peek is read again after this long (`StateBuckets.level`)


class Buckets:
    """Token buckets by key (`take`), with bounded state. ``debt``: how far below zero refused
    takes drive a bucket (0: a refused take costs nothing)."""

    def __init__(self, rate: float, burst: float, debt: float = 0.0) -> None:
        self.rate, self.burst, self.debt = rate, burst, debt
        self._state: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, key: str, what: str) -> None:
        """Take one token for ``key``, or raise 429 saying when to retry."""
        now = time.monotonic()
        with self._lock:
            # popped and re-inserted last: dict order is age
            tokens = self._refilled(*self._state.pop(key, (self.burst, now)), now)
            self._state[key] = (self._after(tokens), now)
            if tokens < 1.0:
                raise self._denied(tokens, what)
            if len(self._state) > MAX_BUCKETS:
                self._shrink(now)

    def check(self, key: str, what: str) -> None:
        """Raise the 429 `take` would, without taking anything (a peek)."""
        tokens = self.level(key)
        if tokens < 1.0:
            raise self._denied(tokens, what)

    def level(self, key: str) -> float:
        """The tokens ``key`` holds now."""
        with self._lock:
            state = self._state.get(key)
        return self.burst if state is None else self._refilled(*state, time.monotonic())

    def _after(self, tokens: float) -> float:
        """A bucket's tokens after one take: one fewer, or when refused one further into debt (down
        to ``-debt``; never below where it is)."""
        if tokens >= 1.0:
            return tokens - 1.0
        return min(tokens, max(-self.debt, tokens - 1.0)) if self.debt else tokens

    def _refilled(self, tokens: float, last: float, now: float) -> float:
        """A bucket's tokens now; full when written before ``now``'s clock began (a shared bucket
        written before the machine restarted: the monotonic clock restarts with it)."""
        return self.burst if last > now else min(self.burst, tokens + (now - last) * self.rate)

    def _denied(self, tokens: float, what: str) -> Denied:
        """The 429 for a bucket holding ``tokens`` (< 1), saying when one will be there."""
        wait = max(1, round((1.0 - tokens) / self.rate))
        return Denied(429, f"{what}; retry in {wait} s", (("Retry-After", str(wait)),))

    def _shrink(self, now: float) -> None:
        """Drop buckets that have refilled (forgetting them changes nothing), then the oldest."""
        full = [k for k, (t, last) in self._state.items() if t + (now - last) * self.rate >= self.burst]
        for k in full:
            del self._state[k]
        for k in list(self._state)[: max(0, len(self._state) - MAX_BUCKETS // 2)]:
            del self._state[k]

    def __len__(self) -> int:
        return len(self._state)


SLOTS = 1 << 16  # a shared table's buckets (32 bytes each: 2 MB); a key probes PROBES of them
PROBES = 8
_SLOT = struct.Struct("<Qdd")  # key digest, tokens, last refill (CLOCK_MONOTONIC: one clock per machine)


def _digest(key: str) -> int:
    """A key's slot owner in a shared table: 8 bytes of its SHA-256 (0 marks an empty slot)."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little") or 1


class SharedBuckets(Buckets):
    """`Buckets` that every serving worker of one data dir shares: a memory-mapped file of fixed
    slots, read and written under an exclusive ``flock``. With ``--workers 3`` each process kept its
    own buckets, so a client got three allowances (60 requests in 4.4 s answered where one bucket
    allows ~27). A key takes its first matching or refilled slot among `PROBES`; when all are busy
    with other keys it shares the first (stricter, never looser)."""

    def __init__(self, rate: float, burst: float, path: Path, debt: float = 0.0) -> None:
        super().__init__(rate, burst, debt)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        if os.fstat(self._fd).st_size < SLOTS * _SLOT.size:
            os.ftruncate(self._fd, SLOTS * _SLOT.size)
        self._map = mmap.mmap(self._fd, SLOTS * _SLOT.size)

    def take(self, key: str, what: str) -> None:
        digest, now = _digest(key), time.monotonic()
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                at, tokens = self._slot(digest, now)
                _SLOT.pack_into(self._map, at, digest, self._after(tokens), now)
                if tokens < 1.0:
                    raise self._denied(tokens, what)
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def level(self, key: str) -> float:
        with self._lock:
            fcntl.flock(self._fd, fcntl.LOCK_SH)
            try:
                return self._slot(_digest(key), time.monotonic())[1]
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _slot(self, digest: int, now: float) -> tuple[int, float]:
        """(offset, tokens now) of the key's bucket: its own slot, else a refilled one, else the first."""
        first = digest % SLOTS
        free = None
        for k in range(PROBES):
            at = ((first + k) % SLOTS) * _SLOT.size
            owner, tokens, last = _SLOT.unpack_from(self._map, at)
            refilled = self._refilled(tokens, last, now) if owner else self.burst
            if owner == digest:
                return at, refilled
            if free is None and refilled >= self.burst:
                free = at
        at = free if free is not None else first * _SLOT.size
        _, tokens, last = _SLOT.unpack_from(self._map, at)
        return at, self.burst if free is not None else self._refilled(tokens, last, now)

    def __len__(self) -> int:
        return sum(1 for k in range(SLOTS) if _SLOT.unpack_from(self._map, k * _SLOT.size)[0])


class TokenStore(Protocol):
    """Buckets kept where every server reads them (`storage.shared_state.SharedState`)."""

    def take_token(self, kind: str, key: str, rate: float, burst: float, debt: float) -> float: ...

    def token_level(self, kind: str, key: str, rate: float, burst: float) -> float: ...


class StateBuckets(Buckets):
    """`Buckets` that every server of a shared state shares: one row per key in PostgreSQL, taken
    in one transaction on PostgreSQL's clock, so three servers behind a load balancer give a
    client one allowance, not three. ``store`` is called per take (the state opens after the app)."""

    def __init__(
        self, rate: float, burst: float, kind: str, store: Callable[[], TokenStore], debt: float = 0.0
    ) -> None:
        super().__init__(rate, burst, debt)
        self.kind, self._store = kind, store
        self._peeks: dict[str, tuple[float, float]] = {}  # key → (level, monotonic time read)

    def take(self, key: str, what: str) -> None:
        tokens = self._store().take_token(self.kind, key, self.rate, self.burst, self.debt)
        with self._lock:
            self._peeks.pop(key, None)
        if tokens < 1.0:
            raise self._denied(tokens, what)

    def level(self, key: str) -> float:
        """A peek (the lockout check before every authenticated request), read from PostgreSQL at
        most every `PEEK_SECONDS` per key: a lockout begun on another server holds here within that
        time, and a request does not pay a round trip for a check that almost always passes."""
        now = time.monotonic()
        with self._lock:
            peeked = self._peeks.get(key)
        if peeked is not None and now - peeked[1] < PEEK_SECONDS:
            return peeked[0]
        level = self._store().token_level(self.kind, key, self.rate, self.burst)
        with self._lock:
            if len(self._peeks) >= MAX_BUCKETS:
                self._peeks.clear()
            self._peeks[key] = (level, now)
        return level


class Guard:
    def __init__(
        self, settings: Settings, shared: Path | None = None, state: Callable[[], TokenStore] | None = None
    ) -> None:
        """``shared``: a folder where every serving worker of one data dir keeps the rate-limit and
        failed-authentication buckets (`SharedBuckets`); ``state``: the shared state many servers
        keep them in (`StateBuckets`); neither: this process's own."""
        self.admin_token = settings.admin_token
        self.analyst_tokens = settings.analyst_tokens
        self.metrics_token = settings.metrics_token
        self.rate = settings.rate_limit
        burst = max(10.0, 2.0 * self.rate)
        self.requests: Buckets
        self.failures: Buckets
        if state is not None:
            self.requests = StateBuckets(self.rate, burst, "requests", state)
            self.failures = StateBuckets(FAILED_AUTH_RATE, FAILED_AUTH_BURST, "failed-auth", state, FAILED_AUTH_BURST)
            return
        self.requests = (
            SharedBuckets(self.rate, burst, shared / "requests.buckets")
            if shared and self.rate > 0
            else Buckets(self.rate, burst)
        )
        self.failures = (
            SharedBuckets(FAILED_AUTH_RATE, FAILED_AUTH_BURST, shared / "failed-auth.buckets", FAILED_AUTH_BURST)
            if shared
            else Buckets(FAILED_AUTH_RATE, FAILED_AUTH_BURST, FAILED_AUTH_BURST)
        )

    def admin(self, authorization: str | None, client: str) -> None:
        if not self.admin_token:
            raise Denied(403, "admin endpoints are disabled: the server has no PRIMA_ADMIN_TOKEN")
        self._not_locked_out(client, authorization)
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
        self._not_locked_out(client, authorization)
        token = _bearer(authorization)
        allowed = tuple(t for t in (self.metrics_token, self.admin_token) if t)
        if token is None:
            raise Denied(
                401,
                "missing bearer token: /metrics needs PRIMA_METRICS_TOKEN or the admin token",
                (("WWW-Authenticate", "Bearer"),),
            )
        if not allowed or not _matches(token, allowed):
            if not _matches(token, tuple(self.analyst_tokens)):
                self._failed(client)
            raise Denied(403, "invalid metrics token")

    def _not_locked_out(self, client: str, authorization: str | None) -> None:
        """Refuse at once a client address whose failed authentications used up its allowance. A
        wrong token sent meanwhile counts (into the bucket's debt); a token the server knows, or
        none, only peeks, so it does not prolong the lockout."""
        try:
            self.failures.check(f"addr:{client}", _LOCKED_OUT)
        except Denied:
            token = _bearer(authorization)
            known = tuple(t for t in (self.admin_token, self.metrics_token, *self.analyst_tokens) if t)
            if token is not None and not _matches(token, known):
                self._failed(client)
            raise

    def _failed(self, client: str) -> None:
        """Count one failed authentication of a client address (429 past its allowance)."""
        self.failures.take(f"addr:{client}", _LOCKED_OUT)

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
            self._not_locked_out(client, authorization)
            if token is None:
                raise Denied(
                    401, "missing bearer token (this server requires analyst tokens)", (("WWW-Authenticate", "Bearer"),)
                )
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
