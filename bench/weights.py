"""How should a build split ε between COUNT and SUM for a dashboard that shows SUM and AVG?

AVG = SUM/COUNT from the cube, so its error mixes both releases; SUM alone wants all of ε. For
SUM shares s ∈ {0.3 … 0.9} (COUNT gets 1 − s, the `"weights"` a table may set), the default
strategy builds both cuboids and we measure, on random 4-D boxes and ranges on 2 of 4 dimensions,
the median relative error of SUM and of AVG (queries holding ≥ 50 rows, so that AVG is defined
well enough to chart). The score is the mean of the two medians; the service's default split is
the one with the best score over the datasets (equal weights unless another is clearly better).

Under zCDP (``--rho R``) the same question has another answer in principle: a Gaussian
release's noise sd goes as 1/√share where Laplace's goes as 1/share, so moving budget between the
two releases changes their errors less, and the split is measured again at that ρ.

Reproduce:  .venv/bin/python bench/weights.py [--rho 0.015]     (~3 min on 2 cores)
Writes bench/results/weights.md (pure ε = 1) or bench/results/weights_rho.md (--rho).
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from crossover import Dataset, _adult, _synthetic  # noqa: E402
from shared_data import random_range  # noqa: E402

from engine.synopses.cube import Cube  # noqa: E402
from privacy.accounting.currencies import Budget  # noqa: E402
from privacy.estimation.prefix import prefix_sums  # noqa: E402
from privacy.mechanisms.sampler import RandomSource  # noqa: E402
from privacy.strategies import DENSE_STRATEGY, get_strategy  # noqa: E402

EPSILON = 1.0
SUM_SHARES = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
MIN_ROWS = 50


def _queries(shape: tuple[int, ...], count: int, rng: np.random.Generator) -> list:
    d = len(shape)
    out = []
    for _ in range(count):
        out.append([random_range(rng, n) for n in shape])
        two = rng.choice(d, 2, replace=False)
        out.append([random_range(rng, n) if i in two else ((0, n - 1),) for i, n in enumerate(shape)])
    return out


def _build(strategy: str, cuboid: np.ndarray, sensitivity: float, epsilon: float | Budget, seed: int) -> Cube:
    s = get_strategy(strategy)
    m = s.measure(cuboid, sensitivity, epsilon, RandomSource(seed=seed), nonnegative=True)
    return Cube("t", strategy, {"v": prefix_sums(m.noisy) if m.prefix is None else m.prefix}, {})


def run(ds: Dataset, reps: int, budget: Budget) -> dict[float, tuple[float, float]]:
    counts = np.bincount(ds.cells, minlength=int(np.prod(ds.shape))).reshape(ds.shape).astype(np.float64)
    sums = ds.sum_cuboid()
    truth_c, truth_s = Cube("t", "c", {"v": prefix_sums(counts)}, {}), Cube("t", "s", {"v": prefix_sums(sums)}, {})
    queries = [q for q in _queries(ds.shape, 300, np.random.default_rng(11)) if truth_c.total("v", q) >= MIN_ROWS]
    true_c = np.array([truth_c.total("v", q) for q in queries])
    true_s = np.array([truth_s.total("v", q) for q in queries])
    out = {}
    for share in SUM_SHARES:
        sum_err, avg_err = [], []
        for rep in range(reps):
            cube_c = _build(DENSE_STRATEGY, counts, 1.0, budget * (1 - share), 100 + rep)
            cube_s = _build(DENSE_STRATEGY, sums, ds.sensitivity, budget * share, 200 + rep)
            c = np.array([cube_c.total("v", q) for q in queries])
            s = np.array([cube_s.total("v", q) for q in queries])
            sum_err.append(np.abs(s - true_s) / np.abs(true_s).clip(1e-9))
            avg = np.divide(s, c, out=np.full_like(s, np.nan), where=c > 0)
            avg_err.append(np.abs(avg - true_s / true_c) / np.abs(true_s / true_c).clip(1e-9))
        out[share] = (float(np.median(sum_err)), float(np.nanmedian(avg_err)))
        print(
            f"{ds.name}: SUM share {share}: median rel. error SUM {out[share][0]:.4f}, AVG {out[share][1]:.4f}",
            flush=True,
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rho", type=float, default=None, help="measure under ρ-zCDP (discrete Gaussian)")
    args = parser.parse_args()
    budget = Budget(EPSILON) if args.rho is None else Budget(args.rho, "rho")
    stated = f"ε = {EPSILON}" if args.rho is None else f"ρ = {args.rho} (discrete Gaussian)"
    command = "bench/weights.py" + ("" if args.rho is None else f" --rho {args.rho}")
    datasets = [_synthetic("normal", 100_000, 1), _synthetic("income", 100_000, 3), _adult()]
    results = {ds.name: run(ds, reps=2, budget=budget) for ds in datasets}
    currency = "ε" if args.rho is None else "ρ"
    lines = [
        f"# COUNT/SUM split of {currency} for SUM-and-AVG dashboards",
        "",
        f"Strategy `{DENSE_STRATEGY}`, {stated}; random 4-D boxes and ranges on 2 of 4 dimensions holding "
        f"≥ {MIN_ROWS} rows; 2 builds per split. Median relative error of SUM / AVG, and their mean (score, lower "
        f"is better). Machine: {platform.machine()}, Python {platform.python_version()}. "
        f"Reproduce: `.venv/bin/python {command}`.",
        "",
        "| dataset | " + " | ".join(f"SUM share {s}" for s in SUM_SHARES) + " |",
        "|---|" + "---|" * len(SUM_SHARES),
    ]
    for name, res in results.items():
        cells = [f"{a:.4f} / {b:.4f} ({(a + b) / 2:.4f})" for a, b in (res[s] for s in SUM_SHARES)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    scores = {
        s: np.mean([(res[s][0] + res[s][1]) / 2 / ((res[0.5][0] + res[0.5][1]) / 2) for res in results.values()])
        for s in SUM_SHARES
    }
    lines += [
        "",
        "Score relative to the equal split, averaged over the datasets: "
        + ", ".join(f"{s}: {v:.3f}" for s, v in scores.items()),
        "",
    ]
    name = "weights.md" if args.rho is None else "weights_rho.md"
    (REPO / "bench" / "results" / name).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
