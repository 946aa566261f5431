"""When does a privatized cube beat answering each query with its own Laplace noise?

Workloads: random ranges on all 4 dimensions, on 2 of 4 (others free), 1-D prefixes, and GROUP BY
breakdowns (one dimension grouped, a range on another; every bar counts as a value, and per-query
answering releases a whole breakdown as one query, disjoint groups in parallel).

For each dataset and workload, every cube strategy is built at total ε (split between COUNT and
SUM as the service does by default: `budget.DEFAULT_COUNT_SHARE` to COUNT, the rest to SUM) and
its SUM answers' mean absolute error (MAE) is
measured on random queries, with the share of answers whose 95% interval (value ± 1.96·stddev
from the strategy's own error model) covers the truth. Per-query answering spends ε/N on each of
N SUM queries (Laplace on the same clipped sums, drawn with the project's own sampler), or
SUM's share of ε/N when it keeps the cube's SUM/COUNT split. The crossover N is the smallest N at which the cube's
MAE is lower. Datasets: PRIMA's Normal (covariance 0.5, §6.1), uniform Random, the Normal
attributes with a heavy-tailed income-like measure, and Adult. Metadata is declared from public
domains, never read from the data.

`prima` here is its SCOPE prefix cube on the same fixed clipping as the other strategies (CLASP's
clipping is measured in bench/prima_experiments.py); its error bars leave out the fit error.

Reproduce:  .venv/bin/python bench/crossover.py            (~6 min on 2 cores)
            .venv/bin/python bench/crossover.py --quick    (fewer queries and repetitions)
Writes bench/results/crossover.md and bench/results/crossover.png.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from engine.synopses.cube import Cube  # noqa: E402
from privacy.accounting import split as budget  # noqa: E402
from privacy.estimation.prefix import prefix_sums  # noqa: E402
from privacy.mechanisms.sampler import GridLaplace, RandomSource  # noqa: E402
from privacy.strategies import STRATEGIES, get_strategy  # noqa: E402

# The strategies that release a dense cuboid (prefix sums over the whole cube): `cuboids` and
# `hdpview` release other synopses and are compared on their own benchmarks (wide_tables.py).
DENSE = sorted(s for s in STRATEGIES if get_strategy(s).synopsis == "dense")
from shared_data import adult_rows, prima_normal, random_range  # noqa: E402

EPSILON = 1.0
SUM_SHARE = 1.0 - budget.DEFAULT_COUNT_SHARE  # the service's default split between COUNT and one SUM
NS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
RESULTS = REPO / "bench" / "results"


@dataclass
class Dataset:
    name: str
    shape: tuple[int, ...]
    cells: np.ndarray  # flat cell index per row
    measure: np.ndarray  # clipped measure per row
    sensitivity: float  # max(|lo|, |hi|) of the declared bounds

    def sum_cuboid(self) -> np.ndarray:
        return np.bincount(self.cells, weights=self.measure, minlength=int(np.prod(self.shape))).reshape(self.shape)


def _synthetic(name: str, rows: int, seed: int) -> Dataset:
    """``normal``: PRIMA's Normal (covariance 0.5, measure in 1..30); ``random``: uniform attributes
    and measure; ``income``: PRIMA Normal attributes with an independent heavy-tailed measure."""
    shape = (30, 30, 30, 30)
    attrs, measure = prima_normal(rows, 4, 30, 30, seed)
    bounds = 30.0
    rng = np.random.default_rng(seed + 100)  # data generation, not noise
    if name == "random":
        attrs, measure = rng.integers(0, 30, (4, rows)), rng.uniform(0, 30, rows)
    elif name == "income":
        measure, bounds = np.clip(rng.lognormal(np.log(40_000), 0.9, rows), 0, 500_000), 500_000.0
    return Dataset(name, shape, np.ravel_multi_index(tuple(attrs), shape), measure, bounds)


def _adult() -> Dataset:
    """UCI Adult (data + test). Public domains: age 0–120 in 5-year bins, education-num 1–16,
    hours-per-week 0–99 in bins of 10, sex; measure capital-gain clipped to [0, 99,999] (the
    census top-code)."""
    rows = [(int(p[0]), int(p[4]), int(p[12]), p[9], float(p[10])) for p in adult_rows()]
    age, edu, hours, sex, gain = (np.array(c) for c in zip(*rows))
    shape = (25, 16, 10, 2)
    keep = (age <= 120) & (edu >= 1) & (edu <= 16) & (hours <= 99) & np.isin(sex, ["Female", "Male"])
    idx = (age[keep] // 5, edu[keep] - 1, hours[keep] // 10, (sex[keep] == "Male").astype(int))
    return Dataset("adult", shape, np.ravel_multi_index(idx, shape), np.clip(gain[keep], 0, 99_999), 99_999.0)


def workloads(shape: tuple[int, ...], count: int, rng: np.random.Generator) -> dict[str, list]:
    d = len(shape)
    full = [((0, n - 1),) for n in shape]
    out: dict[str, list] = {
        f"ranges on all {d}": [],
        f"ranges on 2 of {d}": [],
        "1-D prefix": [],
        "GROUP BY 1 dim, range on another": [],
    }
    for _ in range(count):
        out[f"ranges on all {d}"].append([random_range(rng, n) for n in shape])
        two = rng.choice(d, 2, replace=False)
        out[f"ranges on 2 of {d}"].append([random_range(rng, n) if i in two else full[i] for i, n in enumerate(shape)])
        axis = int(rng.integers(d))
        out["1-D prefix"].append([((0, int(rng.integers(n))),) if i == axis else full[i] for i, n in enumerate(shape)])
        group, ranged = (int(a) for a in rng.choice(d, 2, replace=False))
        selection = [random_range(rng, n) if i == ranged else full[i] for i, n in enumerate(shape)]
        out["GROUP BY 1 dim, range on another"].append((selection, group))  # a breakdown chart's bars
    return out


def answers(cube: Cube, queries: list, with_variance: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Every query's value (and its stated noise variance); a GROUP BY query (selection, axis)
    contributes one value per group."""
    out, var = [], []
    for q in queries:
        if isinstance(q, tuple):
            out.extend(cube.grouped_totals("s", q[0], [q[1]]).ravel())
            if with_variance:
                var.extend(cube.grouped_variances("s", q[0], [q[1]]).ravel())
        else:
            out.append(cube.total("s", q))
            if with_variance:
                var.append(cube.variance("s", q))
    return (np.array(out), np.array(var)) if with_variance else np.array(out)


def run(datasets: list[Dataset], queries: int, reps: int) -> list[dict]:
    rows = []
    for number, ds in enumerate(datasets):
        truth_cube = Cube(ds.name, "truth", {"s": prefix_sums(ds.sum_cuboid())}, {})
        loads = workloads(ds.shape, queries, np.random.default_rng(7))
        truths = {w: answers(truth_cube, qs) for w, qs in loads.items()}
        maes: dict[tuple[str, str], list[float]] = {}
        covered: dict[tuple[str, str], list[float]] = {}
        seconds: dict[str, list[float]] = {}
        for strategy in DENSE:
            for rep in range(reps):
                t = time.perf_counter()
                # Seeded, so a rerun reproduces the table; the same noise for every strategy on a dataset
                # (a paired comparison), fresh noise per dataset (a linear strategy's error does not
                # depend on the data, so equal seeds would repeat its figures across datasets).
                source = RandomSource(seed=1_000 * (number + 1) + rep)
                m = get_strategy(strategy).measure(
                    ds.sum_cuboid(), ds.sensitivity, EPSILON * SUM_SHARE, source, nonnegative=True
                )  # measures are clipped to [0, hi]
                seconds.setdefault(strategy, []).append(time.perf_counter() - t)
                prefix = prefix_sums(m.noisy) if m.prefix is None else m.prefix
                cube = Cube(ds.name, strategy, {"s": prefix}, {"s": m.error})
                for w, qs in loads.items():
                    values, variances = answers(cube, qs, with_variance=True)
                    err = values - truths[w]
                    maes.setdefault((strategy, w), []).append(float(np.mean(np.abs(err))))
                    covered.setdefault((strategy, w), []).append(
                        float(np.mean(np.abs(err) <= 1.96 * np.sqrt(variances)))
                    )
            print(f"{ds.name}: {strategy} built in {np.mean(seconds[strategy]):.2f} s", flush=True)
        for w, truth in truths.items():
            per_query = {n: _per_query_mae(truth, ds.sensitivity, EPSILON / n) for n in NS}
            same_split = {n: _per_query_mae(truth, ds.sensitivity, EPSILON * SUM_SHARE / n) for n in NS}
            for strategy in DENSE:
                mae = float(np.mean(maes[(strategy, w)]))
                crossover = next((n for n in NS if per_query[n] > mae), None)
                crossover_split = next((n for n in NS if same_split[n] > mae), None)
                rows.append(
                    {
                        "dataset": ds.name,
                        "workload": w,
                        "strategy": strategy,
                        "mae": mae,
                        "rel": mae / max(float(np.mean(np.abs(truth))), 1e-9),
                        "crossover": crossover,
                        "crossover_split": crossover_split,
                        "gain_1000": per_query[1000] / mae,
                        "per_query": per_query,
                        "coverage": float(np.mean(covered[(strategy, w)])),
                        "seconds": float(np.mean(seconds[strategy])),
                    }
                )
    return rows


def _per_query_mae(truth: np.ndarray, sensitivity: float, epsilon: float) -> float:
    """MAE of per-query answering when each SUM gets ``epsilon``: ε/N (all of each query's budget
    on its SUM: the baseline's best case), or SUM's share of ε/N (the same SUM/COUNT split as the cube, as an
    engine that also answers COUNT and AVG per query would spend it)."""
    noisy = GridLaplace(sensitivity, epsilon).release(truth, RandomSource(seed=len(truth) + int(epsilon * 1e6)))
    return float(np.mean(np.abs(noisy - truth)))


def render(rows: list[dict], quick: bool, queries: int, reps: int) -> str:
    ident = {(r["dataset"], r["workload"]): r["mae"] for r in rows if r["strategy"] == "identity"}
    lines = [
        f"# Cube strategies vs per-query Laplace ({'quick' if quick else 'full'} run)",
        "",
        f"ε = {EPSILON} per table; cubes give SUM {SUM_SHARE:.0%} of it (COUNT gets the rest), per-query "
        f"answering gives each of N SUMs ε/N. {queries} random queries per workload, {reps} builds per "
        f"strategy. Machine: {platform.machine()}, Python {platform.python_version()}. "
        f"Reproduce: `.venv/bin/python bench/crossover.py{' --quick' if quick else ''}`.",
        "",
        "Crossover N: the smallest N at which the cube's MAE is below per-query answering's, with each "
        f"SUM at ε/N (the baseline's best case) and, in brackets, at {SUM_SHARE:.0%} of ε/N (the cube's own SUM/COUNT split).",
        "",
        "| dataset | workload | strategy | MAE | MAE / identity | relative error | crossover N | per-query MAE at N=1000 / cube MAE | 95% interval coverage | build s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        best, split = (f"{c}" if c is not None else "> 1000" for c in (r["crossover"], r["crossover_split"]))
        cross = f"{best} ({split})"
        lines.append(
            f"| {r['dataset']} | {r['workload']} | {r['strategy']} | {r['mae']:,.0f} | "
            f"{r['mae'] / ident[(r['dataset'], r['workload'])]:.2f} | {r['rel']:.3f} | {cross} | {r['gain_1000']:.1f}× | "
            f"{r['coverage']:.3f} | {r['seconds']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(r["dataset"], r["workload"]) for r in rows})
    cols = 3
    fig, axes = plt.subplots(
        (len(panels) + cols - 1) // cols, cols, figsize=(5 * cols, 3.6 * ((len(panels) + cols - 1) // cols))
    )
    for ax, (ds, w) in zip(np.ravel(axes), panels):
        sel = [r for r in rows if (r["dataset"], r["workload"]) == (ds, w)]
        pq = sel[0]["per_query"]
        ax.loglog(list(pq), list(pq.values()), "k--", label="per-query Laplace, ε/N each")
        for r in sel:
            ax.axhline(r["mae"], label=f"cube: {r['strategy']}", color=f"C{DENSE.index(r['strategy'])}")
        ax.set_title(f"{ds}: {w}", fontsize=9)
        ax.set_xlabel("number of queries N")
        ax.set_ylabel("MAE of SUM")
        ax.legend(fontsize=7)
    for ax in np.ravel(axes)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    queries, reps = (100, 1) if args.quick else (300, 3)
    datasets = [
        _synthetic("normal", 100_000, 1),
        _synthetic("random", 100_000, 2),
        _synthetic("income", 100_000, 3),
        _adult(),
    ]
    rows = run(datasets, queries, reps)
    RESULTS.mkdir(parents=True, exist_ok=True)
    text = render(rows, args.quick, queries, reps)
    (RESULTS / "crossover.md").write_text(text)
    plot(rows, RESULTS / "crossover.png")
    print(text)


if __name__ == "__main__":
    main()
