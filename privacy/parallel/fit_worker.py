"""A worker process of `privacy.parallel.processes`: reads calls from stdin, writes their results to stdout.

Each call is one pickle, ``(module, function name, args)``; each reply one pickle, ``(True, result)``
or ``(False, exception)``. The worker imports only what the calls name, runs BLAS on one thread (the
pool is the parallelism) and ignores SIGINT (the parent owns the terminal's Ctrl-C). It exits when
its stdin closes: the parent ended, however it ended.

    python -m privacy.parallel.fit_worker
"""

from __future__ import annotations

import importlib
import os
import pickle
import signal
import sys
from typing import BinaryIO

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before numpy loads

# What the offloaded fits live in (`privacy.parallel.processes.offload` callers), imported while the
# worker starts, beside the service's own work: imported on the first call instead, the strategies
# cost that call ~33 ms, on a 10⁶-row dense build's critical path twice (one per worker).
READY = (
    "numpy",
    "scipy.optimize",
    "privacy.estimation.loglinear",
    "privacy.strategies.pairwise",
    "privacy.strategies.cuboids",
)


def serve(inbox: BinaryIO, outbox: BinaryIO) -> None:
    """Answer calls until ``inbox`` ends."""
    for module in READY:
        importlib.import_module(module)  # ready before the first call
    while True:
        try:
            module, name, args = pickle.load(inbox)
        except EOFError:
            return
        try:
            reply = (True, getattr(importlib.import_module(module), name)(*args))
        except Exception as error:  # noqa: BLE001 — handed back to the caller, which raises it
            reply = (False, error)
        pickle.dump(reply, outbox, protocol=pickle.HIGHEST_PROTOCOL)
        outbox.flush()


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    inbox, outbox = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing but replies on the reply channel
    serve(inbox, outbox)


if __name__ == "__main__":
    main()
