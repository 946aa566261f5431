"""Progress of long measurements, for build status displays (no privacy meaning).

A build runs for seconds to minutes inside one strategy call (log-linear fits, bootstrap refits);
without a signal from inside, the status sat at "measure 50 %" for almost all of it. Strategies
call `report` with how far they are; the service installs a listener for the duration of a build
(`listening`). The listener is per thread, so concurrent builds of different tables do not mix.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

Listener = Callable[[float, str], None]  # (fraction of this measurement done, what is running)
_local = threading.local()


@contextlib.contextmanager
def listening(listener: Listener) -> Iterator[None]:
    previous = current()
    _local.listener = listener
    try:
        yield
    finally:
        _local.listener = previous


def current() -> Listener | None:
    """This thread's listener (for handing to worker threads, `privacy.parallel.threads.parallel_map`)."""
    return getattr(_local, "listener", None)


def report(fraction: float, step: str) -> None:
    """Tell the current listener (if any) that ``fraction`` of the current measurement is done."""
    listener = current()
    if listener is not None:
        listener(min(max(fraction, 0.0), 1.0), step)


@contextlib.contextmanager
def part(start: float, end: float, label: str = "") -> Iterator[None]:
    """Map the reports inside the block to [start, end] of the enclosing measurement, their step
    names prefixed with ``label``."""
    outer = current()
    if outer is None:
        yield
        return
    with listening(lambda f, step: outer(start + (end - start) * f, f"{label}: {step}" if label else step)):
        report(0.0, "started")
        yield
