"""The outermost ASGI layer: JSON bodies by default, the cached-query fast path, ``/healthz``.

* ``curl -d '{...}'`` labels its body application/x-www-form-urlencoded; every Prima body is JSON,
  so POST/PUT bodies without a content type or with the form one are passed on as JSON. That keeps
  the README's one-line curl calls working without ``-H 'Content-Type: ...'``.
* ``POST /v1/query`` whose answer is already in memory (plan cached, cube loaded: the common case
  for dashboards that repeat their tiles) is answered here without FastAPI's routing and body
  machinery, which otherwise costs more than the answer itself (bench/perf.py). Everything else —
  a miss, a malformed body, any error — falls through to the FastAPI app with the body replayed,
  so behaviour and error responses are identical on both paths.
"""

from __future__ import annotations

from typing import Any, Callable

import orjson

Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]
_JSON = (b"content-type", b"application/json")


class FrontDoor:
    def __init__(self, app: Any, cached_query: Callable[[str], dict[str, Any] | None]) -> None:
        self.app = app
        self.cached_query = cached_query

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == "/healthz" and scope["method"] == "GET":
            await _respond(send, b'{"status":"ok"}')  # the HTTP floor: nothing but the server
            return
        if scope["method"] not in ("POST", "PUT"):
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == b"content-type"), b"")
        if not given or given.startswith(b"application/x-www-form-urlencoded"):
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
            scope = {**scope, "headers": headers + [_JSON]}
        if scope["path"] != "/v1/query":
            await self.app(scope, receive, send)
            return
        body, receive = await _buffer(receive)
        result = self._try_cached(body)
        if result is None:
            await self.app(scope, receive, send)
            return
        await _respond(send, orjson.dumps(result))

    def _try_cached(self, body: bytes) -> dict[str, Any] | None:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        sql = data.get("sql") if isinstance(data, dict) else None
        if not isinstance(sql, str) or len(data) != 1:
            return None
        return self.cached_query(sql)


async def _respond(send: Send, payload: bytes) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [_JSON, (b"content-length", str(len(payload)).encode())]})
    await send({"type": "http.response.body", "body": payload})


async def _buffer(receive: Receive) -> tuple[bytes, Receive]:
    """Read the whole body once and return a ``receive`` that replays it downstream."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> dict[str, Any]:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay
