"""CPU-heavy post-processing on worker processes, so a build's fits use every core.

`privacy.parallel.threads` runs a build's independent pieces on threads, and numpy releases the GIL inside
each array operation. That is enough for a few big operations, not for the log-linear fits: one
evaluation of their loss is ~100 numpy calls on arrays of 10²–10⁵ cells with Python in between, and
two threads handing the GIL back and forth at every call ran a 10⁶-row dense build's measure phase
only 1.03–1.15× faster than one thread; two worker processes, 1.54–1.70× (`bench/measure_parallel.py`).
The fits are pure functions of released (noisy) values and public shapes, so they can run in other
processes: what crosses the process boundary is noisy marginals, simulated noise and the fitted
cube, never a raw row or a true aggregate — a worker sees nothing the released cube does not hold.

Rules that keep builds the same:

* `offload(fn, *args)` is ``fn(*args)``, in a worker when the pool is on and this build may run
  pieces side by side, in this thread otherwise. A worker runs the same numpy code on the same
  inputs with BLAS on one thread (`tests/test_parallel_measure.py` compares seeded builds).
* The calling thread holds its `privacy.parallel.threads` token while it waits, so no more fits run at once
  than the build's thread budget allows.
* Workers start only for builds whose fits take at least `STARTING_SECONDS` of CPU (each strategy
  estimates its own from the public shape: `MeasurementStrategy.fit_seconds`); smaller fits run on
  the build's threads unless the workers are already running. Their start (~0.5 s of imports
  each) outweighs what they save on small fits — three aggregates of a 6,000-cell cube fitted in
  0.13 s on two threads and 0.07 s on warm workers, and a fresh process would wait ~0.5 s for them
  (`bench/offload_sizes.py`); a CLI append of a small table used to start two for nothing.
* A worker that dies (killed, out of memory) is dropped and the call runs again in this thread;
  no random draw happens inside an offloaded function, so a retry changes nothing.

Workers are ``python -m privacy.parallel.fit_worker`` subprocesses (not `multiprocessing`, whose
spawn/forkserver start re-imports the parent's main module — the server's CLI, a user's script —
in every worker, and whose fork start copies a threaded server). They start once per process, on
`warm` (a build calls it as it starts reading rows) or on the first offload,
and importing numpy and scipy takes them ~0.5 s, overlapping whatever the service does meanwhile.
``PRIMA_BUILD_PROCESSES=0`` turns them off; they are off anyway with one build thread.
"""

from __future__ import annotations

import atexit
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from privacy.parallel import threads

R = TypeVar("R")
# The CPU seconds of fits worth starting the workers for (as much as starting the two costs); smaller
# fits use them only when they are running. Three aggregates' pairwise fits on two threads vs two warm
# workers (`bench/offload_sizes.py`): 960 cells 0.11 vs 0.06 s, 6,000 0.13 vs 0.07 s, 60,000 0.34 vs
# 0.20 s, 267,696 0.61 vs 0.35 s.
STARTING_SECONDS = 1.0
_ROOT = str(Path(__file__).resolve().parents[1])  # the directory holding the `privacy` package


def enabled() -> bool:
    """Whether fits go to worker processes: more than one build thread, and not ``PRIMA_BUILD_PROCESSES=0``."""
    return os.environ.get("PRIMA_BUILD_PROCESSES", "").strip() != "0" and threads.default_threads() > 1


class WorkerDied(Exception):
    pass


class _Worker:
    def __init__(self) -> None:
        path = os.environ.get("PYTHONPATH", "")
        env = {**os.environ, "PYTHONPATH": _ROOT + (os.pathsep + path if path else "")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "privacy.parallel.fit_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=_ROOT,
        )
        self.inbox: BinaryIO = self.process.stdin  # type: ignore[assignment]
        self.outbox: BinaryIO = self.process.stdout  # type: ignore[assignment]

    def call(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> tuple[bool, Any]:
        """(True, fn(*args)) or (False, the exception it raised), computed in the worker."""
        try:
            pickle.dump((fn.__module__, fn.__name__, args), self.inbox, protocol=pickle.HIGHEST_PROTOCOL)
            self.inbox.flush()
            return pickle.load(self.outbox)
        except (EOFError, OSError, pickle.UnpicklingError) as error:
            raise WorkerDied(str(error)) from error

    def close(self) -> None:
        try:
            self.inbox.close()  # the worker exits at the end of its input
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()


class _Pool:
    """Up to `threads.default_threads` workers; a caller takes an idle one or starts one."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self.everyone: list[_Worker] = []  # started and not dropped, idle or busy
        self.lock = threading.Lock()

    @property
    def started(self) -> int:
        return len(self.everyone)

    def _start(self) -> _Worker:
        worker = _Worker()
        self.everyone.append(worker)
        return worker

    def take(self) -> _Worker:
        with self.lock:
            if self.idle.empty() and self.started < self.size:
                return self._start()
        return self.idle.get()

    def give_back(self, worker: _Worker) -> None:
        self.idle.put(worker)

    def drop(self, worker: _Worker) -> None:
        worker.close()
        with self.lock:
            self.everyone.remove(worker)

    def warm(self) -> None:
        with self.lock:
            while self.started < self.size:
                self.idle.put(self._start())

    def close(self) -> None:
        while not self.idle.empty():
            self.idle.get().close()


_pool_lock = threading.Lock()
_pool: _Pool | None = None


def _get() -> _Pool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = _Pool(threads.default_threads())
        return _pool


def warm(seconds: float) -> None:
    """Start the workers now, in the background (their imports overlap the caller's work), if a
    build's fits of about ``seconds`` of CPU are worth them (`STARTING_SECONDS`)."""
    if enabled() and seconds >= STARTING_SECONDS:
        _get().warm()


def running() -> bool:
    """Whether workers have been started in this process (and not all dropped)."""
    return _pool is not None and _pool.started > 0


def worker_pids() -> list[int]:
    """The live workers' process ids (benchmarks count their memory with the server's)."""
    pool = _pool
    if pool is None:
        return []
    with pool.lock:
        return [w.process.pid for w in pool.everyone if w.process.poll() is None]


def offload(fn: Callable[..., R], *args: Any, seconds: float) -> R:
    """``fn(*args)`` in a worker process when the pool is on, this build runs pieces side by side
    (`privacy.parallel.threads.available` > 1) and the workers run or the fit (about ``seconds`` of
    CPU) is worth starting them (`STARTING_SECONDS`), else here. ``fn`` must be a module-level
    function and its arguments picklable and public (released values, simulated noise, shapes)."""
    if threads.available() <= 1 or not enabled() or (seconds < STARTING_SECONDS and not running()):
        return fn(*args)
    pool = _get()
    worker = pool.take()
    try:
        ok, value = worker.call(fn, args)
    except WorkerDied:
        pool.drop(worker)
        return fn(*args)
    except BaseException:  # interrupted mid-call: the worker's reply would be read by the next caller
        pool.drop(worker)
        raise
    pool.give_back(worker)
    if not ok:
        raise value
    return value


@atexit.register
def _shutdown() -> None:
    if _pool is not None:
        _pool.close()
