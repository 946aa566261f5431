"""A build's measure phase on one thread, on threads, and on worker processes.

The 10⁶-row `sales` table of bench/scale.py, dense `auto` build (three `pairwise` aggregates: 3 fits
and 24 bootstrap refits at 144,000 cells), each build in a fresh child process with:

* ``1 thread``   — PRIMA_BUILD_THREADS=1;
* ``2 threads``  — PRIMA_BUILD_THREADS=2, PRIMA_BUILD_PROCESSES=0 (the fits on the build's threads);
* ``2 processes`` — PRIMA_BUILD_THREADS=2, the default: fits in `privacy.parallel.processes` workers,
  started before the measured build as `prima serve` starts them.

Settings alternate round by round so this VM's drift lands on all three; medians are printed.

    .venv/bin/python bench/measure_parallel.py [--rows 1e6] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETTINGS = {
    "1 thread": {"PRIMA_BUILD_THREADS": "1"},
    "2 threads": {"PRIMA_BUILD_THREADS": "2", "PRIMA_BUILD_PROCESSES": "0"},
    "2 processes": {"PRIMA_BUILD_THREADS": "2"},
}


def child(rows: int) -> None:
    import tempfile
    import time

    sys.path.insert(0, str(REPO))
    sys.path.insert(0, str(REPO / "bench"))
    import scale

    from engine.service import Prima
    from storage.schema import TableSpec

    with tempfile.TemporaryDirectory(dir=scale.DATA) as work:
        prima = Prima(Path(work) / "data", seed=1)
        prima.warm_build_workers()
        spec = TableSpec.model_validate(scale.spec_for("dense", scale.sales_file(rows)))
        prima.register(spec)
        cpu, start = time.process_time(), time.perf_counter()
        prima.build(spec.name)
        wall = time.perf_counter() - start
        phases = prima.last_build_seconds[spec.name]
        print(json.dumps({"build": wall, "measure": phases["measure"], "cpu_here": time.process_time() - cpu}))
        prima.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1e6")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    rows = int(float(args.rows))
    if args.child:
        child(rows)
        return
    runs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    for _ in range(args.rounds):
        for name, env in SETTINGS.items():
            base = {k: v for k, v in os.environ.items() if k not in ("PRIMA_BUILD_THREADS", "PRIMA_BUILD_PROCESSES")}
            done = subprocess.run(
                [sys.executable, __file__, "--child", "--rows", str(rows)],
                cwd=REPO,
                check=True,
                capture_output=True,
                text=True,
                env={**base, "OPENBLAS_NUM_THREADS": "1", **env},
            )
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    one = statistics.median(r["measure"] for r in runs["1 thread"])
    print(
        f"{rows:,} rows, dense auto build of bench/scale.py's sales table; medians of {args.rounds} alternated rounds"
    )
    print("| setting | build s | measure s | measure vs 1 thread |")
    print("|---|---:|---:|---:|")
    for name, rs in runs.items():
        measure = statistics.median(r["measure"] for r in rs)
        print(f"| {name} | {statistics.median(r['build'] for r in rs):.2f} | {measure:.2f} | {one / measure:.2f}× |")
    print(f"\nReproduce: .venv/bin/python bench/measure_parallel.py --rows {args.rows} --rounds {args.rounds}")


if __name__ == "__main__":
    main()
