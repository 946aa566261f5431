"""Independent pieces of one measurement on several cores, with the same results.

A build's measure phase is a loop of independent fits (one per aggregate, and inside the
log-linear model one per bootstrap replicate) over numpy arrays large enough that numpy releases
the GIL, so threads use every core without copying the cube into other processes. Two rules keep
this safe:

* **No random draw inside a parallel piece.** Noise is drawn before the pieces start, in the
  order a sequential run would draw it (or from child sources made in that order, `children`), so
  a seeded build releases the same values whatever the thread count.
* **One thread budget, shared.** The service grants a build ``allowed(n)``: n tokens. A piece runs
  only while it holds a token; a thread that maps hands its token back while it waits for its
  pieces, so nested maps draw on the same n. 3 aggregates with 8 bootstrap refits each on 2 tokens
  keep both cores busy until the last refit (splitting the budget per piece left one core idle
  while the third aggregate ran alone: the 10⁷-row dense build's measure phase took 0.95 s of
  1.23 s of CPU on 2 threads).

BLAS stays single-threaded inside (`engine.builds.steps.measure`): these threads are the parallelism.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from privacy.mechanisms.sampler import RandomSource
from privacy.parallel import progress

T = TypeVar("T")
R = TypeVar("R")
_local = threading.local()


def default_threads() -> int:
    """``PRIMA_BUILD_THREADS`` or the machine's cores."""
    raw = os.environ.get("PRIMA_BUILD_THREADS", "")
    return max(1, int(raw)) if raw.strip().isdigit() else max(1, os.cpu_count() or 1)


class _Budget:
    """n tokens; a thread holds at most one while it computes."""

    def __init__(self, n: int) -> None:
        self.size = max(1, n)
        self.tokens = threading.Semaphore(self.size - 1)  # the granting thread holds the first


@contextlib.contextmanager
def _using(budget: _Budget) -> Iterator[None]:
    """Let this thread's measurement (and the maps inside it) draw on ``budget``."""
    previous = getattr(_local, "budget", None)
    _local.budget = budget
    try:
        yield
    finally:
        _local.budget = previous


def allowed(n: int) -> contextlib.AbstractContextManager[None]:
    """Let the measurement on this thread use up to ``n`` threads (this one included)."""
    return _using(_Budget(n))


def available() -> int:
    """The size of this thread's budget (1 outside `allowed`)."""
    budget = getattr(_local, "budget", None)
    return 1 if budget is None else budget.size


@contextlib.contextmanager
def _holding(budget: _Budget) -> Iterator[None]:
    """Run a piece on a token of ``budget``."""
    budget.tokens.acquire()
    try:
        with _using(budget):
            yield
    finally:
        budget.tokens.release()


def children(source: RandomSource, n: int) -> list[RandomSource]:
    """``n`` independent sources drawn from ``source`` in order (seeded: seeded children, so a run is
    repeatable; production: each child reads the OS CSPRNG itself)."""
    if not source.seeded:
        return [RandomSource() for _ in range(n)]
    return [RandomSource(int(w)) for w in source.words(n)]


def parallel_map(
    work: Callable[[T], R], items: Sequence[T], label: Callable[[int], str] | None = None, queued: bool = False
) -> list[R]:
    """[work(item) for item in items] on the budget's tokens (`available`), results in order.

    Progress reports from inside the pieces reach this thread's listener as the mean of the pieces'
    fractions, named by ``label(i)``. While the pieces run this thread gives its token back.

    ``queued``: a thread per item from the start, each waiting for a token, so these items take
    tokens before pieces that their own maps start later. A build's aggregates are mapped so: their
    fits are its longest pieces, and with a thread per token the third aggregate started only when
    the first had finished its bootstrap refits, and the last one's fit ran alone on one core (the
    10⁶-row dense build's measure phase: 0.84 → 0.74 s, medians of 5 alternated). Not for nested
    maps: queued there too, the Bank example's 16 refits per aggregate ran slower (3.3–3.5 → 3.7–4.1 s)."""
    budget, n = getattr(_local, "budget", None), len(items)
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

        with progress.listening(report):
            out = work(items[i])
        report(1.0, "done")
        return out

    if budget is None or budget.size <= 1 or n <= 1:
        return [run(i) for i in range(n)]

    def held(i: int) -> R:
        with _holding(budget):
            return run(i)

    budget.tokens.release()  # this thread only waits now
    try:
        with ThreadPoolExecutor(
            max_workers=n if queued else min(budget.size, n), thread_name_prefix="prima-measure"
        ) as pool:
            return list(pool.map(held, range(n)))
    finally:
        budget.tokens.acquire()
