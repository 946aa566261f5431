"""The wide strategy's 1-way share: how much of the budget the 1-way cuboids should get
once pairs are shrunk toward independence, on tables whose pairs are mostly independent (Adult)
or strongly dependent (Traffic).

Per table (examples/*.yaml, registered as an admin would), COUNT with all of ε, `cuboids` measured
as a build does (no bootstrap: answers only), RMSE of random range COUNTs on k = 1..4 columns
(bench/wide_tables.py's queries and truths) for: least squares with its shares (1-way ×2.5),
shrunk pairs with those shares, and shrunk pairs with the 1-way cuboids given each fraction in
``--shares`` (`cube.one_way_share`; `privacy.estimation.cuboid_fit.ONE_WAY_SHARE` is the default).

Run:  .venv/bin/python bench/one_way_share.py [--tables traffic,adult] [--shares 0.35,0.5,0.7]
Results: bench/results/one_way_share.md
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import wide_tables  # noqa: E402
from bench.shared_data import publish  # noqa: E402
from engine.builds import steps  # noqa: E402
from engine.synopses.wide import WideCube  # noqa: E402
from privacy.estimation import cuboid_fit as cuboid_lib  # noqa: E402
from privacy.mechanisms.sampler import RandomSource  # noqa: E402
from privacy.strategies.cuboids import CuboidsStrategy  # noqa: E402


def strategy(label: str) -> CuboidsStrategy:
    if label == "least squares":
        return CuboidsStrategy(bootstrap=0, estimator="least_squares")
    if label == "shrunk, 1-way ×2.5":
        s = CuboidsStrategy(bootstrap=0)
        s.shares = lambda shape, cuboids, shrunk=False: cuboid_lib.shares(shape, cuboids)  # type: ignore[method-assign]
        return s
    return CuboidsStrategy(bootstrap=0, one_way_share=float(label.split()[-1]))


def run(name: str, labels: list[str], epsilons: list[float], builds: int, n: int) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        prima, spec, cells, measure = wide_tables.load_table(name, Path(tmp) / "data")
        record = prima.record(spec.name)
        true = steps.true_cuboids(prima.db, record, steps.plan_build(record, 1.0))[steps.COUNT_KEY]
        prima.close()
    rng = np.random.default_rng(7)  # the workload, not noise
    work = {k: wide_tables.random_queries(rng, spec.shape, k, n) for k in (1, 2, 3, 4)}
    truth = {k: wide_tables.truths(cells, measure, q)[0] for k, q in work.items()}
    lines = []
    for eps in epsilons:
        for label in labels:
            sq: dict[int, list[float]] = {k: [] for k in work}
            for b in range(builds):
                m = strategy(label).measure(true, 1.0, eps, RandomSource(seed=50 + b), nonnegative=True)
                cube = WideCube(spec.name, str(b), spec.shape, releases={"count": m.noisy})
                for k, queries in work.items():
                    sq[k] += [(cube.total("count", q) - t) ** 2 for q, t in zip(queries, truth[k])]
            lines.append(
                f"| {name} | {eps:g} | {label} | "
                + " | ".join(f"{np.sqrt(np.mean(v)):,.0f}" for v in sq.values())
                + " |"
            )
            print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tables", default="traffic,adult")
    parser.add_argument("--shares", default="0.35,0.5,0.7")
    parser.add_argument("--eps", default="0.3,1,3")
    parser.add_argument("--builds", type=int, default=2)
    parser.add_argument("--queries", type=int, default=400)
    args = parser.parse_args()
    labels = ["least squares", "shrunk, 1-way ×2.5"] + [f"shrunk, 1-way share {s}" for s in args.shares.split(",")]
    command = (
        f".venv/bin/python bench/one_way_share.py --tables {args.tables} --shares {args.shares} --eps {args.eps} "
        f"--builds {args.builds} --queries {args.queries}"
    )
    lines = [
        "# The 1-way cuboids' share of the budget with shrunk pairs: RMSE of COUNT ranges on 1 / 2 / 3 / 4 columns",
        "",
        f"Reproduce: `{command}` ({args.builds} seeded builds, {args.queries} queries per k).",
        "",
        "| table | ε | pairs, shares | k = 1 | k = 2 | k = 3 | k = 4 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in args.tables.split(","):
        lines += run(name, labels, [float(e) for e in args.eps.split(",")], args.builds, args.queries)
    publish("one_way_share.md", lines + [""])


if __name__ == "__main__":
    main()
