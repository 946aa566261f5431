"""A request's deadline, seen by the engine's long loops on the thread that answers it.

A Python thread cannot be stopped from outside: when a request timed out (503 after
PRIMA_REQUEST_TIMEOUT) its thread computed on for minutes — 199 PERCENTILE_CONTs over 8,064 groups.
The face that runs engine work on a thread sets the deadline there (`bounded`); the loops that can run
long call `check` between steps and stop with the same 503 the client was given."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from engine.errors import Unavailable

_local = threading.local()


@contextlib.contextmanager
def bounded(seconds: float | None) -> Iterator[None]:
    """Work on this thread inside the block stops at `check` once ``seconds`` have passed."""
    previous = getattr(_local, "at", None)
    _local.at = None if seconds is None or seconds <= 0 else time.monotonic() + seconds
    try:
        yield
    finally:
        _local.at = previous


def call(seconds: float | None, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` under `bounded` (for a thread pool's submit)."""
    with bounded(seconds):
        return fn(*args)


def check() -> None:
    at = getattr(_local, "at", None)
    if at is not None and time.monotonic() > at:
        raise Unavailable(
            "the request ran past its time limit (PRIMA_REQUEST_TIMEOUT) and was stopped; ask for "
            "fewer groups or aggregates at once",
            retry_after=1,
        )
