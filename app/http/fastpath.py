"""The outermost ASGI layer: body limits, JSON by default, ``/healthz``, the cached-query fast path.

It wraps FastAPI's whole middleware stack (app/http/app.py, `_PrimaApp`), so what it answers skips
those layers; what it does not answer, or fails on, goes through them.

* Request bodies larger than ``PRIMA_MAX_BODY_BYTES`` get 413 before anything reads them whole.
* ``curl -d '{...}'`` labels its body application/x-www-form-urlencoded; every Prima body is JSON,
  so POST/PUT bodies without a content type or with the form one are passed on as JSON. That keeps
  the README's one-line curl calls working without ``-H 'Content-Type: ...'``.
* ``GET /healthz`` is answered here: the bare cost of the HTTP server (the latency floor).
* ``POST /v1/query`` whose answer is already in memory (plan cached, cube loaded: the common case
  for dashboards that repeat their tiles; a repeated body is recognised before it is even parsed)
  is answered here, after the same `Guard` checks as the
  FastAPI route, without FastAPI's routing and body machinery, which otherwise costs more than the
  answer itself (bench/perf.py). Anything else — a miss, a malformed body, any error — falls
  through to the FastAPI app with the body replayed, so responses are identical on both paths.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import orjson

from app import formats
from app.guard import Denied, Guard
from app.metrics import Metrics
from app.workers import INDEX_ENV, role

Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]
_JSON = (b"content-type", b"application/json")


# GET /healthz, answered here (the FastAPI route only documents it); a serving worker of `prima serve
# --workers N` also says which one it is (app/workers.py), so a check can reach every worker.
HEALTHY = (
    b'{"status":"ok"}'
    if INDEX_ENV not in os.environ
    else b'{"status":"ok","worker":%d,"role":"%s","pid":%d}'
    % (int(os.environ[INDEX_ENV]), role().encode(), os.getpid())
)
MEMO_ENTRIES = 4096  # remembered request bodies (bounded: at most 4096 × (4 KB + the answer))
MEMO_BODY_BYTES = 4096


class BodyTooLarge(Exception):
    pass


class FrontDoor:
    def __init__(
        self,
        app: Any,
        cached_query: Callable[[str], bytes | None],
        generation: Callable[[], int],
        guard: Guard,
        max_body_bytes: int,
        metrics: Metrics,
        new_query: Callable[[str], bytes | None] | None = None,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.cached_query = cached_query
        self.new_query = new_query  # plans short new SQL inline when its cube is in memory
        self.generation = generation
        # Request body → (cube generation, encoded answer): a dashboard repeating a tile sends the
        # same bytes, so a repeat skips JSON parsing and the plan lookup. Only touched on the event
        # loop; valid while no cube was built or loaded since (the generation check).
        self._answers: dict[bytes, tuple[int, bytes]] = {}
        self.guard = guard
        self.max_body = max_body_bytes

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == "/healthz" and scope["method"] == "GET":
            await _respond(send, 200, HEALTHY)
            return
        start = time.perf_counter()
        if scope["method"] not in ("POST", "PUT"):
            await self.app(scope, receive, self.metrics.wrap(scope, send))
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.max_body:
            await self._too_large(scope, send)
            return
        given = headers.get(b"content-type", b"")
        if not given or given.startswith(b"application/x-www-form-urlencoded"):
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k != b"content-type"] + [_JSON]}
        try:
            body = await _read_body(receive, self.max_body)
        except BodyTooLarge:
            await self._too_large(scope, send)
            return
        if scope["path"] == "/v1/query":
            status = await self._fast_query(scope, headers, body, send)
            if status:  # answered here: record it without wrapping send (the hot path)
                self.metrics.observe("/v1/query", status, time.perf_counter() - start)
                return
        await self.app(scope, _replay(body, receive), self.metrics.wrap(scope, send))

    async def _too_large(self, scope: dict[str, Any], send: Send) -> None:
        await _respond(
            self.metrics.wrap(scope, send), 413, _detail(f"request body over the {self.max_body}-byte limit")
        )

    async def _fast_query(self, scope: dict[str, Any], headers: dict[bytes, bytes], body: bytes, send: Send) -> int:
        """The status sent if this path answered, else 0 (fall through to the FastAPI route)."""
        if formats.wanted(headers.get(b"accept", b"").decode("latin-1")):
            return 0  # CSV / Arrow: the FastAPI route renders those
        # Look up first (memory only, nothing is sent), then apply the guard only when this path
        # answers: on a fall-through the FastAPI route applies it, so a request is counted once.
        generation = self.generation()
        remembered = self._answers.get(body)
        if remembered is not None and remembered[0] == generation:
            result: bytes | None = remembered[1]
        else:
            try:
                result = self._look_up(headers, body)
            except Exception:  # noqa: BLE001 — the app's own error handling (type-only logs, a JSON 500) is behind the fall-through
                return 0
            if result is None:
                return 0
            if len(body) <= MEMO_BODY_BYTES:
                if len(self._answers) >= MEMO_ENTRIES:
                    self._answers.clear()
                self._answers[body] = (generation, result)
        try:
            auth = headers.get(b"authorization")
            self.guard.analyst(auth.decode("latin-1") if auth else None, (scope.get("client") or ("unknown",))[0])
        except Denied as denied:
            await _respond(send, denied.status, _detail(denied.detail), denied.headers)
            return denied.status
        await _respond(send, 200, result)
        return 200

    def _look_up(self, headers: dict[bytes, bytes], body: bytes) -> bytes | None:
        """The encoded answer if it is in memory or can be planned here, else None."""
        sql = _sql_of(body)
        result = None if sql is None else self.cached_query(sql)
        if result is None and sql is not None and self.new_query is not None:
            # A never-seen query: plan it here (≈0.1 ms, CPU only) rather than pay the route and a
            # thread hop — but only for a caller whose token is valid, so anonymous requests cannot
            # spend parse time on the event loop.
            auth = headers.get(b"authorization")
            if self.guard.analyst_token_ok(auth.decode("latin-1") if auth else None):
                result = self.new_query(sql)
        return result


def _sql_of(body: bytes) -> str | None:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or len(data) != 1 or not isinstance(data.get("sql"), str):
        return None
    return data["sql"]


def _detail(text: str) -> bytes:
    return orjson.dumps({"detail": text})


async def _respond(send: Send, status: int, payload: bytes, extra: tuple[tuple[str, str], ...] = ()) -> None:
    headers = [_JSON, (b"content-length", str(len(payload)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def _read_body(receive: Receive, limit: int) -> bytes:
    """Read the whole body once (at most ``limit`` bytes)."""
    message = await receive()
    if message["type"] == "http.request" and not message.get("more_body"):  # the usual single message
        body = message.get("body", b"")
        if len(body) > limit:
            raise BodyTooLarge()
        return body
    chunks, size = [], 0
    while message["type"] == "http.request":
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge()
        chunks.append(chunk)
        if not message.get("more_body"):
            break
        message = await receive()
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands the already-read body to the app once, then defers to the server."""
    replayed = False

    async def replay() -> dict[str, Any]:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
