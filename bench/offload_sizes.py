"""Where fit workers pay: three aggregates' pairwise fits on two threads vs two warm worker processes.

`privacy.parallel.processes` starts its workers only for fits of at least ``STARTING_SECONDS`` of CPU:
a worker costs ~0.5 s of CPU to start (numpy and scipy imports), and a fresh process's first
small build would wait for it. This prints, per cube size, the best of 3 times of one measure
phase (three aggregates of a Poisson cube, `PairwiseStrategy.measure`, a thread budget of 2, BLAS on
one thread) with the fits on the build's threads and on warm workers, each mode in its own process.

Run:     .venv/bin/python bench/offload_sizes.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPES = [(8, 10, 12), (10, 20, 30), (10, 12, 20, 25), (11, 12, 39, 52)]


def child(mode: str) -> dict[str, float]:
    """Seconds per cube size in this process, fits on threads ("threads") or warm workers."""
    sys.path.insert(0, str(REPO))
    import numpy as np
    import scipy.optimize  # noqa: F401  (its import out of the timed window, as on a server that has built before)
    from threadpoolctl import threadpool_limits

    from privacy.mechanisms.sampler import RandomSource
    from privacy.parallel import processes, threads
    from privacy.strategies.pairwise import PairwiseStrategy

    if mode == "workers":
        processes.warm(processes.STARTING_SECONDS)
        time.sleep(2.0)  # their imports done
    rng = np.random.default_rng(0)  # bench data, not noise
    out = {}
    for shape in SHAPES:
        trues = [rng.poisson(rng.gamma(0.5, 20, size=shape)).astype(float) for _ in range(3)]

        def one(x: np.ndarray) -> object:
            return PairwiseStrategy().measure(x, 1.0, 1.0, RandomSource(1), nonnegative=True)

        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            with threadpool_limits(1, "blas"), threads.allowed(2):
                threads.parallel_map(one, trues)
            best = min(best, time.perf_counter() - start)
        out[str(int(np.prod(shape)))] = best
    return out


def main() -> None:
    results = {}
    for mode in ("threads", "workers"):
        env = {**os.environ, "PRIMA_BUILD_PROCESSES": "0" if mode == "threads" else ""}
        done = subprocess.run(
            [sys.executable, __file__, "--child", mode], env=env, capture_output=True, text=True, check=True
        )
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{'cells':>9}  {'threads s':>9}  {'workers s':>9}  ratio")
    for cells in results["threads"]:
        a, b = results["threads"][cells], results["workers"][cells]
        print(f"{int(cells):>9,}  {a:9.3f}  {b:9.3f}  {b / a:5.2f}×")
    print("Reproduce: .venv/bin/python bench/offload_sizes.py")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        if sys.argv[2] == "threads":
            os.environ["PRIMA_BUILD_PROCESSES"] = "0"
        print(json.dumps(child(sys.argv[2])))
    else:
        main()
