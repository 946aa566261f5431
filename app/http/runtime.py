"""Process-wide settings a serving app holds for its life: one BLAS thread, rarer full GC passes."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Iterator

from threadpoolctl import threadpool_limits

# A full pass after this many young (generation-1) passes, not CPython's 10: see below.
FULL_COLLECTION_EVERY = 100


class _WhileAnyApp:
    """A process-wide setting held while at least one app runs in the process (tests run several):
    the first app to start applies it, the last to stop gives the process its own back."""

    _lock = threading.Lock()

    def __init__(self, apply: Callable[[], Callable[[], None]]) -> None:
        self._apply = apply  # applies the setting, returns how to restore the process's own
        self._users = 0
        self._restore: Callable[[], None] | None = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._lock:
            if self._users == 0:
                self._restore = self._apply()
            self._users += 1
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0 and self._restore is not None:
                    self._restore()


def _one_blas_thread() -> Callable[[], None]:
    return threadpool_limits(limits=1, user_api="blas").restore_original_limits


def _rarer_full_passes() -> Callable[[], None]:
    own = gc.get_threshold()
    gc.set_threshold(own[0], own[1], FULL_COLLECTION_EVERY)
    return lambda: gc.set_threshold(*own)


_BLAS = _WhileAnyApp(_one_blas_thread)
_COLLECTOR = _WhileAnyApp(_rarer_full_passes)


def one_blas_thread() -> contextlib.AbstractContextManager[None]:
    """BLAS on one thread in the serving process, for the app's life.

    Answers run on the server's threads, and a GROUP BY's totals are BLAS products (`tensordot`)
    of small arrays. With OpenBLAS's own threads on top, each call woke a second thread that spun
    for work: one `prima serve` on 2 cores burnt 1.96 cores for 36 distinct 2,700-group answers/s
    where one thread per call gave 35/s on 1.0 core, and two serving workers reached 24/s instead
    of 64/s (bench/workers.py; the same lesson as the builds', `engine.builds.steps.measure`)."""
    return _BLAS.held()


@contextlib.contextmanager
def rarer_full_collections() -> Iterator[None]:
    """The garbage collector's full passes ten times rarer than CPython's default, for the app's life.

    Start-up objects (the app, its OpenAPI models, sqlglot's tables, numpy) live as long as the
    process: they are frozen out of every pass. The query caches (plans, bound conditions, answers:
    bounded, tens of thousands of entries) are not, and under a stream of new queries the default
    rule ran a full pass — ~50 ms over those caches, on the event loop — every ~0.6 s: 8 % of the
    server's CPU and its p99 (bench/distinct_queries.py). Counting in young passes keeps full
    passes proportional to allocation, so cyclic garbage that grew old (an evicted parse tree) is
    still reclaimed at a bounded lag however fast it is made.
    """
    with _COLLECTOR.held():
        gc.freeze()
        yield
