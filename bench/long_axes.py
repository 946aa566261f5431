"""Strategies on cubes with long axes (days of a year, fine numeric bins), where trees can pay off.

bench/crossover.py uses 30-value axes, where `hierarchical` chooses identity on every axis. Here:
a 366-day × 24-hour table, the same with 8 regions, and a 1,000-value numeric axis × 10 classes,
each with 10⁵ rows and a SUM of a measure clipped to [0, 30] at the service's default SUM share
of ε = 1. Same workloads, MAE, interval coverage and per-query comparison as crossover.py (its
`run`), for every strategy.

Reproduce:  .venv/bin/python bench/long_axes.py      (~2 min on 2 cores)
Writes bench/results/long_axes.md.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from crossover import EPSILON, SUM_SHARE, Dataset, run  # noqa: E402

from privacy.estimation import hierarchy  # noqa: E402

ROWS = 100_000


def _daily(with_region: bool, seed: int) -> Dataset:
    """Seasonal days, a daily cycle of hours, optionally 8 regions of unequal size (synthetic)."""
    rng = np.random.default_rng(seed)  # data generation, not noise
    day = np.mod(rng.normal(200, 70, ROWS), 366).astype(int)
    cycle = np.exp(-0.5 * ((np.arange(24) - 14) / 4.0) ** 2) + 0.05
    hour = rng.choice(24, ROWS, p=cycle / cycle.sum())
    measure = np.clip(rng.gamma(2.0, 5.0, ROWS), 0, 30)
    if not with_region:
        return Dataset("days × hours", (366, 24), np.ravel_multi_index((day, hour), (366, 24)), measure, 30.0)
    region = rng.choice(8, ROWS, p=np.arange(1, 9) / 36)
    shape = (366, 24, 8)
    return Dataset("days × hours × regions", shape, np.ravel_multi_index((day, hour, region), shape), measure, 30.0)


def _fine(seed: int) -> Dataset:
    """A 1,000-bin numeric attribute (log-normal) × 10 classes."""
    rng = np.random.default_rng(seed)
    value = np.clip(rng.lognormal(5.5, 0.6, ROWS), 0, 999).astype(int)
    cls = rng.integers(0, 10, ROWS)
    return Dataset(
        "1,000 bins × 10 classes",
        (1000, 10),
        np.ravel_multi_index((value, cls), (1000, 10)),
        np.clip(rng.gamma(2.0, 5.0, ROWS), 0, 30),
        30.0,
    )


def main() -> None:
    datasets = [_daily(False, 1), _daily(True, 2), _fine(3)]
    rows = run(datasets, queries=300, reps=3)
    ident = {(r["dataset"], r["workload"]): r["mae"] for r in rows if r["strategy"] == "identity"}
    lines = [
        "# Strategies on cubes with long axes",
        "",
        f"ε = {EPSILON} per table, SUM gets {SUM_SHARE:.0%}; 10⁵ rows; 300 random queries per workload, 3 builds. "
        f"`hierarchical` chose branching {[hierarchy.choose_branching(n) for n in (366, 24, 8)]} for axes of "
        f"366, 24, 8 values and {[hierarchy.choose_branching(n) for n in (1000, 10)]} for 1,000 and 10 (None: "
        f"identity). Machine: {platform.machine()}, Python {platform.python_version()}. "
        "Reproduce: `.venv/bin/python bench/long_axes.py`.",
        "",
        "| dataset | workload | strategy | MAE | MAE / identity | crossover N | 95% interval coverage | build s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['workload']} | {r['strategy']} | {r['mae']:,.0f} | "
            f"{r['mae'] / ident[(r['dataset'], r['workload'])]:.2f} | "
            f"{r['crossover'] if r['crossover'] else '> 1000'} | {r['coverage']:.3f} | {r['seconds']:.1f} |"
        )
    (REPO / "bench" / "results" / "long_axes.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
