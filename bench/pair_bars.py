"""Where a wide table's bootstrap is centred, and what its 2-column bars hold.

Adult-15 (bench/zcdp.py's table), COUNT with the whole budget, the wide default `cuboids`
(`shrunk` pairs, 16 bootstrap replicates), at pure ε = 1 and ρ = 0.015, with the simulations centred
at each of ``--centres`` (`privacy.strategies.cuboids.BOOTSTRAP_CENTRE`: 0 is the shrunk estimate,
1 least squares). Per centre: every pair's full 2-column GROUP BY — how often value ± 1.96·stddev
holds the truth on the cells of ≥ 100 rows (the bars a chart shows) and on all cells, their mean
stddev, the MAE (the same at every centre: only the bars move), the 1-column GROUP BYs' coverage
and stddev, and the pairs whose big cells are covered least.

Run:  .venv/bin/python bench/pair_bars.py [--builds 2] [--centres 0,0.3,0.5,1]
Results: bench/results/pair_bars.md
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_data import publish  # noqa: E402
from bench.zcdp import load  # noqa: E402
from engine.synopses.wide import WideCube  # noqa: E402
from privacy.accounting.currencies import Budget  # noqa: E402
from privacy.mechanisms.sampler import RandomSource  # noqa: E402
from privacy.strategies import cuboids  # noqa: E402

Z = 1.959964
BIG = 100  # rows: the cells a chart shows
BUDGETS: list[tuple[str, float | Budget]] = [("ε = 1", 1.0), ("ρ = 0.015", Budget(0.015, "rho"))]


Rows = list[tuple[bool, float, float, float]]  # per cell: (held, stddev, |error|, truth)


def score(
    cube: WideCube, cells: np.ndarray, shape: tuple[int, ...], out: dict[str, Rows], pairs: dict[tuple[int, ...], Rows]
) -> None:
    """Every 1- and 2-column GROUP BY of one build: its cells' rows by class in ``out``, and each
    pair's cells of ≥ `BIG` rows in ``pairs``."""
    full = [((0, n - 1),) for n in shape]
    for axes in [(a,) for a in range(len(shape))] + list(itertools.combinations(range(len(shape)), 2)):
        values = np.asarray(cube.grouped_totals("count", full, axes), dtype=float)
        sds = np.sqrt(np.asarray(cube.grouped_variances("count", full, axes), dtype=float))
        truth = np.zeros([shape[a] for a in axes])
        np.add.at(truth, tuple(cells[:, a] for a in axes), 1)
        held = np.abs(values - truth) <= Z * sds
        rows = list(zip(held.ravel(), sds.ravel(), np.abs(values - truth).ravel(), truth.ravel()))
        if len(axes) == 1:
            out.setdefault("1-column", []).extend(rows)
            continue
        big = [r for r in rows if r[3] >= BIG]
        out.setdefault("2-column, all cells", []).extend(rows)
        out.setdefault("2-column, ≥ 100 rows", []).extend(big)
        pairs.setdefault(axes, []).extend(big)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--builds", type=int, default=2)
    parser.add_argument("--centres", default="0,0.3,0.5,1")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        spec, true, cells = load(15, Path(d))
    shape, names = tuple(spec.shape), [x.name for x in spec.dimensions]
    lines = [
        "# Bootstrap centre of a wide table's shrunk pairs: 2-column bars on Adult-15",
        "",
        f"`.venv/bin/python bench/pair_bars.py --builds {args.builds} --centres {args.centres}` "
        "(coverage of value ± 1.96·stddev / mean stddev; MAE on the ≥ 100-row cells)",
        "",
        "| budget | centre | 2-column, ≥ 100 rows | 2-column, all cells | 1-column | MAE ≥ 100 rows | worst pairs (≥ 100 rows) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, budget in BUDGETS:
        for centre in (float(c) for c in args.centres.split(",")):
            cuboids.BOOTSTRAP_CENTRE = centre
            found: dict[str, Rows] = {}
            by_pair: dict[tuple[int, ...], Rows] = {}
            for b in range(args.builds):
                m = cuboids.CuboidsStrategy().measure(true, 1.0, budget, RandomSource(seed=900 + b), nonnegative=True)
                score(WideCube("adult15", str(b), shape, releases={"count": m.noisy}), cells, shape, found, by_pair)

            def cov(key: str) -> str:
                r = np.array(found[key], dtype=float)
                return f"{r[:, 0].mean():.3f} / {r[:, 1].mean():.1f}"

            held = {axes: float(np.mean([r[0] for r in rows])) for axes, rows in by_pair.items() if rows}
            worst = ", ".join(
                f"{names[a]} × {names[b]} {held[a, b]:.2f}" for a, b in sorted(held, key=lambda p: held[p])[:3]
            )
            big = np.array(found["2-column, ≥ 100 rows"], dtype=float)
            lines.append(
                f"| {label} | {centre:g} | {cov('2-column, ≥ 100 rows')} | {cov('2-column, all cells')} | "
                f"{cov('1-column')} | {big[:, 2].mean():.1f} | {worst} |"
            )
            print(lines[-1], flush=True)  # (the whole report is printed at the end too)
    publish("pair_bars.md", lines + [""])


if __name__ == "__main__":
    main()
