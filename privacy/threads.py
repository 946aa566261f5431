"""Independent pieces of one measurement on several cores (issue #36), with the same results.

A build's measure phase is a loop of independent fits (one per aggregate, and inside the
log-linear model one per bootstrap replicate) over numpy arrays large enough that numpy releases
the GIL, so threads use every core without copying the cube into other processes. Two rules keep
this safe:

* **No random draw inside a parallel piece.** Noise is drawn before the pieces start, in the
  order a sequential run would draw it (or from child sources made in that order, `children`), so
  a seeded build releases the same values whatever the thread count.
* **One thread budget.** The service grants a build ``allowed(n)`` threads; a parallel map splits
  them among its pieces, and a piece that maps again gets its share, never more: 3 aggregates on
  2 threads run 2 at a time with one thread each, one aggregate gets both for its replicates.

BLAS stays single-threaded inside (`engine.build.measure`): these threads are the parallelism.
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Sequence, TypeVar

from privacy import progress
from privacy.sampler import RandomSource

T = TypeVar("T")
R = TypeVar("R")
_local = threading.local()


def default_threads() -> int:
    """``PRIMA_BUILD_THREADS`` or the machine's cores."""
    raw = os.environ.get("PRIMA_BUILD_THREADS", "")
    return max(1, int(raw)) if raw.strip().isdigit() else max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def allowed(n: int) -> Iterator[None]:
    """Let the measurement on this thread use up to ``n`` threads."""
    previous = getattr(_local, "threads", 1)
    _local.threads = max(1, n)
    try:
        yield
    finally:
        _local.threads = previous


def available() -> int:
    return getattr(_local, "threads", 1)


def children(source: RandomSource, n: int) -> list[RandomSource]:
    """``n`` independent sources drawn from ``source`` in order (seeded: seeded children, so a run is
    repeatable; production: each child reads the OS CSPRNG itself)."""
    if not source.seeded:
        return [RandomSource() for _ in range(n)]
    return [RandomSource(int(w)) for w in source.words(n)]


def parallel_map(work: Callable[[T], R], items: Sequence[T], label: Callable[[int], str] | None = None) -> list[R]:
    """[work(item) for item in items] on up to `available` threads, results in order.

    Progress reports from inside the pieces reach this thread's listener as the mean of the pieces'
    fractions, named by ``label(i)``; each piece runs with its share of the thread budget."""
    budget, n = available(), len(items)
    workers = min(budget, n)
    listener = progress.current()
    done = [0.0] * n
    lock = threading.Lock()

    def run(i: int) -> R:
        def report(fraction: float, step: str) -> None:
            with lock:
                done[i] = fraction
                total = sum(done) / n
            if listener is not None:
                listener(total, f"{label(i)}: {step}" if label else step)
        with allowed(max(1, budget // workers)), progress.listening(report):
            out = work(items[i])
        report(1.0, "done")
        return out

    if workers <= 1:
        return [run(i) for i in range(n)]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="prima-measure") as pool:
        return list(pool.map(run, range(n)))
