"""Planted 3-way interactions on a generated wide table: found, recovered, and are the bars honest?

A 10-column table (domains 2, 2, 2, 3, 4, 5, 6, 8, 10, 12) with two planted interactions no pair
shows (tests/test_cuboid_selection.py's `planted_rows`, plus a tenth column): column 2 is 1 with
probability 0.65 where columns 0 and 1 agree, 0.35 where they differ — the effect
P(c2 = 1 | c0 = 0, c1 = 0) − P(c2 = 1 | c0 = 0, c1 = 1) is 30 points; and column 5's low values
follow (c3 = 0) == (c4 < 2). Per build (the wide default, `cuboids` with shrunk pairs, COUNT with
the whole budget, 16 bootstrap replicates):

* how often each planted triple is picked (`privacy.strategies.cuboid_selection`);
* the planted effect read from the build's answers: its error, and the share of builds within ±2
  points (#56 acceptance 2: ≥ 80 % at ε = 1);
* coverage of the ci95 of random 3- and 4-column range COUNTs that contain a planted triple's columns,
  and of ones that do not, answered from a picked cuboid or the pair model;
* then Adult-15 (no planted structure): coverage and MAE of the model-filled 3- and 4-column answers
  (#56 acceptance 3).

Run:  .venv/bin/python bench/planted_interactions.py [--builds 20] [--rows 100000,1000000]
Results: bench/results/planted_interactions.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.synopses.wide import WideCube  # noqa: E402
from privacy.accounting.currencies import Budget  # noqa: E402
from privacy.mechanisms.sampler import RandomSource  # noqa: E402
from privacy.strategies.cuboids import CuboidsStrategy  # noqa: E402
from tests.test_cuboid_selection import cuboids_of, effect, planted_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHAPE = (2, 2, 2, 3, 4, 5, 6, 8, 10, 12)
PLANTED = ((0, 1, 2), (3, 4, 5))
Z95 = 1.959964


def rows(n: int, seed: int = 0) -> np.ndarray:
    """The test's planted table with a tenth column (12 values, independent)."""
    return planted_rows(n, seed, SHAPE)


def range_queries(rng: np.random.Generator, k: int, n: int, planted: bool) -> list[list]:
    """Random ranges on k columns: holding a planted triple's columns, or holding none of them whole."""
    out: list[list] = []
    while len(out) < n:
        if planted:
            base = list(PLANTED[rng.integers(len(PLANTED))])
            rest = [a for a in range(len(SHAPE)) if a not in base]
            axes = base + list(rng.choice(rest, size=k - 3, replace=False))
        else:
            axes = list(rng.choice(len(SHAPE), size=k, replace=False))
            if any(set(p) <= set(axes) for p in PLANTED):
                continue
        sel = [((0, m - 1),) for m in SHAPE]
        for a in axes:
            lo, hi = sorted(rng.integers(0, SHAPE[a], 2))
            if lo == 0 and hi == SHAPE[a] - 1:
                hi = max(lo, hi - 1)
            sel[a] = ((int(lo), int(hi)),)
        out.append(sel)
    return out


def truth(x: np.ndarray, sel: list) -> float:
    mask = np.ones(len(x), dtype=bool)
    for a, ((lo, hi),) in enumerate(sel):
        mask &= (x[:, a] >= lo) & (x[:, a] <= hi)
    return float(mask.sum())


def run(n: int, budget: float | Budget, builds: int, select: bool) -> dict[str, float]:
    x = rows(n)
    strategy = CuboidsStrategy(dimensions=len(SHAPE), select_rounds=None if select else 0)
    true = cuboids_of(x, SHAPE, strategy.inputs(SHAPE))
    planted_truth = effect(cuboids_of(x, SHAPE, [(0, 1, 2)])[(0, 1, 2)])
    rng = np.random.default_rng(7)
    queries = {(k, planted): range_queries(rng, k, 40, planted) for k in (3, 4) for planted in (True, False)}
    truths = {key: np.array([truth(x, q) for q in qs]) for key, qs in queries.items()}
    picked = {s: 0 for s in PLANTED}
    errors, covered = [], {key: 0 for key in queries}
    start = time.perf_counter()
    for b in range(builds):
        m = strategy.measure(true, 1.0, budget, RandomSource(seed=1000 + b), nonnegative=True)
        picks = [tuple(s) for s in m.details["cuboids"].get("selected", [])]
        for s in PLANTED:
            picked[s] += s in picks
        cube = WideCube("planted", str(b), SHAPE, releases={"count": m.noisy})
        full = [((0, k - 1),) for k in SHAPE]
        by = cube.grouped_totals("count", [((0, 0),), *full[1:]], (1, 2)).reshape(2, 2)
        errors.append(by[0, 1] / by[0].sum() - by[1, 1] / by[1].sum() - planted_truth)
        for key, qs in queries.items():
            for q, t in zip(qs, truths[key]):
                sd = np.sqrt(max(cube.variance("count", q), 0.0))
                covered[key] += abs(cube.total("count", q) - t) <= Z95 * sd
    seconds = (time.perf_counter() - start) / builds
    err = np.abs(np.array(errors)) * 100
    out = {
        "picked (0,1,2)": picked[PLANTED[0]] / builds,
        "picked (3,4,5)": picked[PLANTED[1]] / builds,
        "effect error median (points)": float(np.median(err)),
        "within ±2 points": float(np.mean(err <= 2)),
        "seconds per build": seconds,
    }
    for (k, planted), c in covered.items():
        out[f"coverage {k}-col {'with' if planted else 'without'} a planted triple"] = c / (
            builds * len(queries[(k, planted)])
        )
    return out


def adult_coverage(budget: float | Budget, builds: int) -> dict[str, float]:
    """Adult-15 (bench/zcdp.py's table, no planted structure): coverage and MAE of model-filled 3- and
    4-column range COUNTs (answers no measured cuboid holds, the picks included) over ``builds``."""
    import tempfile

    from bench import zcdp
    from bench.wide_tables import random_queries

    with tempfile.TemporaryDirectory() as tmp:
        spec, _, cells = zcdp.load(15, Path(tmp) / "data")
    shape = tuple(spec.shape)
    strategy = CuboidsStrategy(dimensions=len(shape), select_rounds=None)
    true = cuboids_of(cells, shape, strategy.inputs(shape))
    rng = np.random.default_rng(11)
    queries = {k: random_queries(rng, shape, k, 200) for k in (3, 4)}
    truths = {k: zcdp.truths(cells, shape, q) for k, q in queries.items()}
    hits = {k: 0 for k in queries}
    seen = {k: 0 for k in queries}
    errors: dict[int, list[float]] = {k: [] for k in queries}
    for b in range(builds):
        m = strategy.measure(true, 1.0, budget, RandomSource(seed=2000 + b), nonnegative=True)
        cube = WideCube("adult", str(b), shape, releases={"count": m.noisy})
        for k, qs in queries.items():
            for q, t in zip(qs, truths[k]):
                if not any("model" in n for n in cube.error_notes(q)):
                    continue  # inside a picked triple: an exact least-squares bar
                value, sd = cube.total("count", q), np.sqrt(max(cube.variance("count", q), 0.0))
                seen[k] += 1
                hits[k] += abs(value - t) <= Z95 * sd
                errors[k].append(abs(value - t))
    out: dict[str, float] = {}
    for k in queries:
        out[f"coverage {k}-col model answers"] = hits[k] / max(seen[k], 1)
        out[f"model answers {k}-col"] = seen[k] / builds
        out[f"MAE {k}-col model answers"] = float(np.mean(errors[k]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", type=int, default=20)
    parser.add_argument("--rows", default="100000,1000000")
    args = parser.parse_args()
    budgets: list[tuple[str, float | Budget]] = [("ε = 1", 1.0), ("ρ = 0.015", Budget(0.015, "rho"))]
    results = []
    for n in (int(r) for r in args.rows.split(",")):
        for label, budget in budgets:
            for select in (False, True):
                row = run(n, budget, args.builds, select)
                name = f"{n:,} rows, {label}, {'default (triples picked)' if select else 'select_rounds: 0'}"
                print(name, {k: round(v, 3) for k, v in row.items()}, flush=True)
                results.append((name, row))
    adult = [(label, adult_coverage(budget, args.builds)) for label, budget in budgets]
    for label, row in adult:
        print("Adult-15", label, {k: round(v, 3) for k, v in row.items()}, flush=True)
    keys = list(results[0][1])
    lines = [
        "# Planted 3-way interactions: picked, recovered, covered",
        "",
        f"`.venv/bin/python bench/planted_interactions.py --builds {args.builds} --rows {args.rows}` "
        f"({args.builds} seeded builds per row, COUNT with the whole budget; the planted effect is 30 points).",
        "",
        "| build | " + " | ".join(keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    lines += ["| " + name + " | " + " | ".join(f"{row[k]:.3g}" for k in keys) + " |" for name, row in results]
    adult_keys = list(adult[0][1])
    lines += [
        "",
        f"Adult-15 (bench/zcdp.py's table, no planted structure), the default build, {args.builds} builds, 200 random "
        "ranges per k: model-filled answers only (those inside a picked triple have exact bars); "
        "'model answers k-col' is how many of the 200 per build the model fills.",
        "",
        "| budget | " + " | ".join(adult_keys) + " |",
        "|---|" + "---|" * len(adult_keys),
    ]
    lines += ["| " + label + " | " + " | ".join(f"{row[k]:.3g}" for k in adult_keys) + " |" for label, row in adult]
    text = "\n".join(lines) + "\n"
    (ROOT / "bench" / "results" / "planted_interactions.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
