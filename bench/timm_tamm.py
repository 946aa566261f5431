"""TiMM/TaMM's prefix-sum workloads against Prima's measure axis.

Workload (the TiMM/TaMM paper, §4): prefix sums ``SUM(m) WHERE m <= x_j`` for every class edge x_j,
on PUMS income (1,000 rows, public bound [0, 500,000] — SmartNoise's metadata), Bank's positive
balances (rows with balance ≥ 0, public bound [0, 10^6]) and Adult capital-gain ([0, 99,999]),
with log2 classes (the product's default) and 16 linear classes. ε = 1, ``--trials`` builds.

Our text of the paper lost its inline formulas; the methods are reconstructed from its prose and
Table 1 with standard matrix-mechanism algebra (Li et al. VLDB J. 2015):

* vector form: x_i = rows in bucket i (the classes), weights w_i = the bucket's midpoint (the
  paper's bucket weight is lost from our text; the midpoint is the least biased choice we know
  for these buckets, so it favours the baselines), a truncation τ makes them w^τ_i = min(w_i, τ);
  W = diag(w^τ), L = lower-triangular ones (the prefix workload). A row changes x by 1 in one
  bucket, so W·x by w^τ_i there;
* **SQM** — ε/J per query, query j truncated at min(τ, x_j), Laplace of that sensitivity;
* **Identity** — x̂ = x + Lap(1/ε), answers L·W·x̂;
* **Workload** — L·W·x + Lap(Δ/ε) with Δ the largest column L1 norm of L·W;
* **TiMM** — a strategy A chosen for L, measuring A·(W x) with sensitivity ‖A‖₁·max w^τ, least
  squares for W x, answers L·(W x)^;
* **TaMM** — a strategy A chosen for the weighted workload L·W, measuring A·x (sensitivity ‖A‖₁),
  least squares for x, answers L·W·x̂.
  "Chosen": the paper uses ektelo's GreedyH; here the strategy is the best of identity and binary
  hierarchical trees with geometric level weights (ratios 0.25…4), by the analytic total squared
  error (2/ε²)·‖A‖₁²·‖Q A⁺‖_F² — a stand-in for GreedyH's optimisation over the same tree family.
* each **NoTrunc** (τ = the public bound) or **SVT** (τ by the sparse vector technique on counts
  below b_i = bound/2^i, threshold 95 % of a noisy row count; 10 % of ε), and each with and
  without **isotonic regression** (prefix sums of non-negative values are non-decreasing).

Prima: the measure axis (normalised class sums, identity strategy, all of ε; exact class sums, not
bucket edges), answered untruncated and with query-specific truncation (the product's code).

Run:     .venv/bin/python bench/timm_tamm.py [--trials 50]
Results: bench/results/timm_tamm.md
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from scipy.optimize import isotonic_regression  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_data import SHARED, adult_rows, publish  # noqa: E402
from engine.answers.classes import truncated_sum  # noqa: E402
from engine.builds import steps  # noqa: E402
from engine.synopses.cube import Cube  # noqa: E402
from privacy.clipping import measure_axis  # noqa: E402
from privacy.clipping.truncation import svt_first_below  # noqa: E402
from privacy.estimation.hierarchy import tree_matrix  # noqa: E402
from privacy.estimation.prefix import prefix_sums  # noqa: E402
from privacy.mechanisms.sampler import GridLaplace, RandomSource  # noqa: E402
from privacy.strategies import get_strategy  # noqa: E402

SVT_SHARE, KEEP = 0.1, 0.95


def datasets() -> dict[str, tuple[np.ndarray, float]]:
    with (SHARED / "PUMS.csv").open() as f:
        pums = np.array([float(r["income"]) for r in csv.DictReader(f)])
    with (SHARED / "bank-full.csv").open() as f:
        bank = np.array([float(r["balance"]) for r in csv.DictReader(f, delimiter=";")])
    gain = np.array([float(r[10]) for r in adult_rows()])
    return {
        "PUMS income": (pums, 500_000.0),
        "Bank positive balance": (bank[bank >= 0], 1_000_000.0),
        "Adult capital-gain": (gain, 99_999.0),
    }


def _laplace(scale: float, n: int, source: RandomSource) -> np.ndarray:
    return GridLaplace(scale, 1.0).release(np.zeros(n), source)


def strategies(k: int) -> list[np.ndarray]:
    """Identity and binary trees with geometric level weights (the GreedyH stand-in)."""
    out = [np.eye(k)]
    tree = tree_matrix(k, 2)
    sizes = tree.sum(axis=1)
    depth = np.round(np.log2(sizes.max() / sizes)).astype(int)  # 0 at the root
    for ratio in (0.25, 0.5, 1.0, 2.0, 4.0):
        out.append(tree * (ratio**depth)[:, None])
    return out


def best_strategy(query: np.ndarray, k: int) -> np.ndarray:
    def error(a: np.ndarray) -> float:
        return float(np.abs(a).sum(axis=0).max() ** 2 * np.sum((query @ np.linalg.pinv(a)) ** 2))

    return min(strategies(k), key=error)


def svt_tau(values: np.ndarray, bound: float, eps: float, source: RandomSource) -> float:
    """τ = the first b_i (ascending) whose count of values ≤ b_i exceeds 95 % of a noisy row count."""
    n_hat = len(values) + _laplace(2.0 / eps, 1, source)[0]  # half of the SVT share
    candidates = bound / 2.0 ** np.arange(20, -1, -1)
    counts = np.array([np.sum(values <= b) for b in candidates], dtype=float)
    i = svt_first_below(-counts, -KEEP * n_hat, eps / 2, source)  # first count above the threshold
    return float(candidates[min(i, len(candidates) - 1)])


def bucket_weights(classes: measure_axis.MeasureClasses, tau: float) -> np.ndarray:
    """w^τ: each bucket's midpoint, truncated at τ (module docstring)."""
    e = np.asarray(classes.edges)
    return np.minimum((e[:-1] + e[1:]) / 2, tau)


def baselines(
    values: np.ndarray,
    classes: measure_axis.MeasureClasses,
    tau: float,
    eps: float,
    source: RandomSource,
    L: np.ndarray,
    strat_w: np.ndarray,
    strat_lw: np.ndarray,
) -> dict[str, np.ndarray]:
    k = classes.count
    idx = classes.classify(values)
    x = np.bincount(idx, minlength=k).astype(float)
    edges = np.asarray(classes.edges[1:])
    w = bucket_weights(classes, tau)
    J = k
    out = {}
    sqm = []
    for j in range(J):  # SQM: ε/J each, query j's sensitivity min(τ, x_j)
        s = min(tau, edges[j])  # 0 for the zero class: its sum is 0 whatever the data
        noise = _laplace(s * J / eps, 1, source)[0] if s > 0 else 0.0
        sqm.append(np.minimum(values[values <= edges[j]], tau).sum() + noise)
    out["SQM"] = np.array(sqm)
    out["Identity"] = L @ (w * (x + _laplace(1.0 / eps, k, source)))
    lw = L * w
    out["Workload"] = lw @ x + _laplace(np.abs(lw).sum(axis=0).max() / eps, J, source)
    a = strat_w  # TiMM: A for L, measuring A·(W x); a row moves W x by w_i in one coordinate
    sens = float(np.max(np.abs(a).sum(axis=0) * w))
    z = a @ (w * x) + _laplace(sens / eps, a.shape[0], source)
    out["TiMM"] = L @ (np.linalg.pinv(a) @ z)
    a = strat_lw  # TaMM: A for L·W, measuring A·x
    z = a @ x + _laplace(np.abs(a).sum(axis=0).max() / eps, a.shape[0], source)
    out["TaMM"] = lw @ (np.linalg.pinv(a) @ z)
    return out


def prima(
    values: np.ndarray, classes: measure_axis.MeasureClasses, eps: float, source: RandomSource
) -> dict[str, np.ndarray]:
    k, w = measure_axis.normalised_weights(values, classes)
    true = np.zeros((1, classes.count))
    np.add.at(true, (np.zeros(len(values), dtype=int), k), w)
    m = steps.on_class_scale(get_strategy("identity").measure(true, 1.0, eps, source, nonnegative=True), classes)
    cube = Cube("t", "b", {"v": prefix_sums(m.noisy)}, {"v": m.error})
    plain, cut = [], []
    for j in range(classes.count):
        sel = (((0, 0),), ((0, j),))
        plain.append(cube.total("v", sel))
        cut.append(truncated_sum(cube, "v", sel, classes).value)
    return {"Prima axis": np.array(plain), "Prima axis truncated": np.array(cut)}


def run(trials: int, eps: float) -> dict:
    results: dict = {}
    for (name, (values, bound)), kind in itertools.product(datasets().items(), ("log2", "linear")):
        values = np.clip(values, 0, bound)
        classes = measure_axis.classes_of(kind, 0.0, bound, classes=16 if kind == "linear" else None)
        edges = np.asarray(classes.edges[1:])
        truth = np.array([values[values <= e].sum() for e in edges])
        k = classes.count
        L = np.tril(np.ones((k, k)))
        errors: dict[str, list[np.ndarray]] = {}
        for t in range(trials):
            source = RandomSource(seed=100 + t)
            for trunc in ("NoTrunc", "SVT"):
                if trunc == "SVT":
                    tau, budget = svt_tau(values, bound, SVT_SHARE * eps, source), (1 - SVT_SHARE) * eps
                else:
                    tau, budget = bound, eps
                w = bucket_weights(classes, tau)
                strat_w, strat_lw = best_strategy(L, k), best_strategy(L * w, k)
                for method, answers in baselines(values, classes, tau, budget, source, L, strat_w, strat_lw).items():
                    errors.setdefault(f"{method} {trunc}", []).append(answers - truth)
                    iso = isotonic_regression(answers).x
                    errors.setdefault(f"{method} {trunc} + isotonic", []).append(iso - truth)
            for method, answers in prima(values, classes, eps, source).items():
                errors.setdefault(method, []).append(answers - truth)
        mae = {m: float(np.mean(np.abs(np.concatenate(e)))) for m, e in errors.items()}
        rel = {
            m: float(np.mean(np.abs(np.concatenate(e)) / np.maximum(np.tile(truth, len(e)), 1.0)))
            for m, e in errors.items()
        }
        results[f"{name}, {kind} ({k} classes)"] = {"mae": mae, "relative": rel}
        print(name, kind, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--eps", type=float, default=1.0)
    args = parser.parse_args()
    results = run(args.trials, args.eps)
    lines = [
        "# TiMM/TaMM's prefix sums vs Prima's measure axis",
        "",
        f"`.venv/bin/python bench/timm_tamm.py --trials {args.trials} --eps {args.eps}` — mean |error| (MAE) and "
        "mean relative error (|error| / max(truth, 1)) of the prefix sums SUM(m) WHERE m <= x_j over every class "
        "edge, over all trials. `best baseline`: the paper's method (any truncation, with or without isotonic "
        "regression) with the lowest MAE.",
        "",
    ]
    for table, r in results.items():
        mae, rel = r["mae"], r["relative"]
        baseline = min((m for m in mae if not m.startswith("Prima")), key=mae.get)
        lines += [
            f"## {table}",
            "",
            f"Best baseline: **{baseline}** (MAE {mae[baseline]:,.0f}); Prima axis truncated / "
            f"best = **{mae['Prima axis truncated'] / mae[baseline]:.3f}**, untruncated / best = "
            f"{mae['Prima axis'] / mae[baseline]:.3f}.",
            "",
            "| method | MAE | relative error | MAE / best baseline |",
            "|---|---|---|---|",
        ]
        for m in sorted(mae, key=mae.get):
            lines.append(f"| {m} | {mae[m]:,.0f} | {rel[m]:.3g} | {mae[m] / mae[baseline]:.3f} |")
        lines.append("")
    publish("timm_tamm.md", lines)


if __name__ == "__main__":
    main()
