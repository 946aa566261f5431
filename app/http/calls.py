"""How a route reaches the engine: the request's `Prima`, engine work off the event loop under the
request timeout, and the hot path's own JSON decoding and encoding."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from engine import deadline
from engine.errors import Unavailable
from engine.service import Prima


def prima(request: Request) -> Prima:
    return request.app.state.prima


async def off_loop(request: Request, fn: Any, *args: Any) -> Any:
    """Run engine work on a worker thread, bounded by PRIMA_REQUEST_TIMEOUT."""
    timeout = request.app.state.settings.request_timeout
    try:
        return await asyncio.wait_for(run_in_threadpool(deadline.call, timeout, fn, *args), timeout)
    except TimeoutError:
        raise Unavailable(
            f"the request took longer than {timeout:g} s; a cube build may still be running "
            "(it continues and is charged once): retry shortly"
        ) from None


def fast_json(payload: Any) -> Response:
    """orjson-encoded response for the hot query path (values are plain floats/str/None)."""
    return Response(orjson.dumps(payload), media_type="application/json")


def decode(model: type[BaseModel], raw: bytes) -> Any:
    try:
        return model.model_validate(orjson.loads(raw))
    except orjson.JSONDecodeError:
        raise RequestValidationError([{"type": "json_invalid", "loc": ["body"], "msg": "JSON decode error"}]) from None
    except ValidationError as exc:
        raise RequestValidationError(exc.errors(include_url=False, include_input=False)) from None
