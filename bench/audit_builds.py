"""Milliseconds per build of the privacy audit's strategies on its 36-cell cube (`tests/test_privacy_audit.py`).

The audit runs thousands of such builds per strategy, so their call overhead is most of CI's longest
test file. One process, BLAS single-threaded as in the audit, warm-up builds first; compare commits by
running this at each, side by side.

Run:  .venv/bin/python bench/audit_builds.py [--builds 200] [--strategies pairwise,auto]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.test_privacy_audit import _base_table, _canary_estimate, _strategies  # noqa: E402


def ms_per_build(name: str, builds: int) -> float:
    strategy = dict(_strategies())[name]
    x = _base_table()
    if name == "auto":  # as the audit: both of auto's branches run
        x = np.floor(x / 4)
    for seed in range(20):
        _canary_estimate(strategy, x, seed)
    started = time.perf_counter()
    for seed in range(builds):
        _canary_estimate(strategy, x, 1000 + seed)
    return (time.perf_counter() - started) / builds * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--builds", type=int, default=200)
    parser.add_argument("--strategies", default="pairwise,auto,pairwise-workload,cuboids,prima")
    args = parser.parse_args()
    print("| strategy | ms per build |\n|---|---:|")
    with threadpool_limits(limits=1, user_api="blas"):
        for name in args.strategies.split(","):
            print(f"| {name} | {ms_per_build(name, args.builds):.1f} |")
    print(f"\nReproduce: .venv/bin/python bench/audit_builds.py --builds {args.builds} --strategies {args.strategies}")


if __name__ == "__main__":
    main()
