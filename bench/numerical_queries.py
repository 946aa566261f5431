"""Measure axes on Qiu et al.'s numerical-query workloads, plus their cost (part C).

(A) Qiu et al. KDD'22 §6: Adult (adult.data + adult.test, 48,842 rows), cube age [1, 100] ×
education-num [1, 16], the 32,395 queries of the paper (age intervals of length 0–10 × one or two
consecutive education levels), SUM(capital-gain) and SUM(capital-loss) with the public bound 99,999;
Bank (bank-full.csv, 45,211 rows) age [18, 100] × housing × loan, SUM(balance) with public bounds
[−10^5, 10^6], queries = age intervals of length 0–10 × one housing × one loan value. The whole ε
goes to the one SUM (no COUNT), so methods compare on equal budget. Methods:

* ``today identity`` / ``today default`` — fixed clipping to the public bounds, Laplace of Δ =
  max(|lo|, |hi|), the identity strategy / the table's default (``pairwise``; on these signed or
  2-D cubes it measures marginals);
* ``global sbs`` — one global clip range chosen by PRIMA's SBS from a DP histogram (10 % of ε), then
  identity: the "one global truncation" baseline;
* ``axis`` / ``axis truncated`` — the measure axis (log2 classes, normalised release, identity
  strategy) answered untruncated / with query-specific truncation (the product's code path:
  `engine.answers.classes.truncated_sum`);
* ``axis default truncated`` — the same on the default strategy;
* ``oracle τ (not DP)`` — per query, the truncation point in hindsight that minimises the error of
  the axis release: headroom, reads the truth.
* ``oracle bounds (not DP)`` — today's identity with the data's own min/max as the bounds (Qiu's
  data-derived bounds): labelled, never a product option.

Reported per method: the paper's box statistics of |error| (max, quartiles, median) plus mean,
p95, coverage of the method's 95 % interval and its mean width. Queries: a uniform sample of
``--queries`` of the workload (all with ``--queries 0``), the same for every method and build.

(C) `--cost`: the plain COUNT and the untruncated SUM with and without an axis on the same table
(Adult age × education-num × sex × race, default strategy), RMSE over random ranges, and the time of
a 30^4 × 17-class build from 10^6 rows.

Run:  .venv/bin/python bench/numerical_queries.py [--builds 5] [--eps 0.25,0.5,1,2,4] [--queries 5000]
      .venv/bin/python bench/numerical_queries.py --cost
Results: bench/results/numerical_queries.md (+ .json)
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_data import SHARED, adult_rows, publish  # noqa: E402
from engine.answers.classes import truncated_sum  # noqa: E402
from engine.builds import steps  # noqa: E402
from engine.synopses.cube import Cube  # noqa: E402
from privacy.clipping import data_driven as dc  # noqa: E402
from privacy.clipping import measure_axis  # noqa: E402
from privacy.clipping.bounds import sum_sensitivity  # noqa: E402
from privacy.estimation.error import Z95_NORMAL as Z95  # noqa: E402
from privacy.estimation.prefix import prefix_sums  # noqa: E402
from privacy.mechanisms.sampler import RandomSource  # noqa: E402
from privacy.strategies import get_strategy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HIST_SHARE = 0.1  # of ε, for the global SBS histogram


class Table:
    """One workload: dimension cells per row, the measure, public bounds, queries as boxes."""

    def __init__(
        self,
        name: str,
        shape: tuple[int, ...],
        cells: np.ndarray,
        values: np.ndarray,
        lo: float,
        hi: float,
        queries: list[tuple],
    ) -> None:
        self.name, self.shape, self.cells, self.values, self.lo, self.hi = name, shape, cells, values, lo, hi
        self.queries = queries
        self.classes = measure_axis.classes_of("log2", lo, hi)

    def tensor(self, weights: np.ndarray, classes: np.ndarray | None = None) -> np.ndarray:
        shape = self.shape + ((self.classes.count,) if classes is not None else ())
        out = np.zeros(shape)
        index = tuple(self.cells.T) + ((classes,) if classes is not None else ())
        np.add.at(out, index, weights)
        return out

    def truths(self) -> np.ndarray:
        p = prefix_sums(self.tensor(np.clip(self.values, self.lo, self.hi)))
        return np.array([Cube("t", "x", {"v": p}, {}).total("v", q) for q in self.queries])


def _age_intervals(lo: int, hi: int) -> list[tuple[int, int]]:
    return [(a, a + length) for length in range(11) for a in range(lo, hi - length + 1)]


def adult(measure: str) -> Table:
    rows = adult_rows()
    column = {"capital-gain": 10, "capital-loss": 11}[measure]
    age = np.array([int(r[0]) for r in rows])
    edu = np.array([int(r[4]) for r in rows])
    keep = (age >= 1) & (age <= 100) & (edu >= 1) & (edu <= 16)
    cells = np.stack([age[keep] - 1, edu[keep] - 1], axis=1)
    values = np.array([float(r[column]) for r in rows])[keep]
    queries = [
        (((a - 1, b - 1),), ((e, e + w),)) for a, b in _age_intervals(1, 100) for w in (0, 1) for e in range(16 - w)
    ]
    return Table(f"Adult {measure}", (100, 16), cells, values, 0.0, 99_999.0, queries)


def bank() -> Table:
    with (SHARED / "bank-full.csv").open() as f:
        rows = list(csv.DictReader(f, delimiter=";"))
    age = np.array([int(r["age"]) for r in rows])
    keep = (age >= 18) & (age <= 100)
    housing = np.array([r["housing"] == "yes" for r in rows], dtype=int)
    loan = np.array([r["loan"] == "yes" for r in rows], dtype=int)
    cells = np.stack([age[keep] - 18, housing[keep], loan[keep]], axis=1)
    values = np.array([float(r["balance"]) for r in rows])[keep]
    queries = [
        (((a - 18, b - 18),), ((h, h),), ((l, l),)) for a, b in _age_intervals(18, 100) for h in (0, 1) for l in (0, 1)
    ]
    return Table("Bank balance", (83, 2, 2), cells, values, -100_000.0, 1_000_000.0, queries)


def _cube(noisy: np.ndarray, error: object) -> Cube:
    return Cube("t", "b", {"v": prefix_sums(noisy)}, {"v": error})


def _answers(cube: Cube, queries: list[tuple], axis: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    out, sds = np.empty(len(queries)), np.empty(len(queries))
    for i, q in enumerate(queries):
        sel = q if axis is None else q + (((0, axis - 1),),)
        out[i], sds[i] = cube.total("v", sel), math.sqrt(max(cube.variance("v", sel), 0.0))
    return out, sds


def run_build(
    t: Table,
    eps: float,
    seed: int,
    truths: np.ndarray,
    axis_true: np.ndarray,
    plain_true: np.ndarray,
    oracle_true: np.ndarray,
    oracle_bounds: tuple[float, float],
) -> dict:
    """Every method's (answers, interval lo, interval hi) for one build."""
    source = RandomSource(seed=seed)
    out: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    delta = sum_sensitivity(t.lo, t.hi)
    for name, strategy in (("today identity", "identity"), ("today default", "pairwise")):
        m = get_strategy(strategy).measure(plain_true, delta, eps, source, nonnegative=t.lo >= 0)
        v, sd = _answers(_cube(m.noisy, m.error), t.queries)
        out[name] = (v, v - Z95 * sd, v + Z95 * sd)
    # global SBS: PRIMA's histogram (10 % of ε) chooses one clip range, identity on the rest
    edges = dc.histogram_edges(t.lo, t.hi)
    counts = np.histogram(np.clip(t.values, t.lo, t.hi), bins=edges)[0].astype(float)
    noisy_hist = dc.histogram_mechanism(counts, HIST_SHARE * eps, source)
    choice = dc.choose_bounds(
        noisy_hist, t.lo, t.hi, (1 - HIST_SHARE) * eps, "sbs", edges=edges, epsilon_histogram=HIST_SHARE * eps
    )
    clipped = t.tensor(np.clip(t.values, choice.lo, choice.hi))
    m = get_strategy("identity").measure(clipped, sum_sensitivity(choice.lo, choice.hi), (1 - HIST_SHARE) * eps, source)
    v, sd = _answers(_cube(m.noisy, m.error), t.queries)
    out["global sbs"] = (v, v - Z95 * sd, v + Z95 * sd)
    # oracle bounds: the data's min/max as public bounds (not DP)
    m = get_strategy("identity").measure(oracle_true, sum_sensitivity(*oracle_bounds), eps, source)
    v, sd = _answers(_cube(m.noisy, m.error), t.queries)
    out["oracle bounds (not DP)"] = (v, v - Z95 * sd, v + Z95 * sd)
    # the measure axis
    for name, strategy in (("axis", "identity"), ("axis default", "pairwise")):
        m = steps.on_class_scale(
            get_strategy(strategy).measure(
                axis_true, measure_axis.CLASS_SUM_SENSITIVITY, eps, source, nonnegative=t.lo >= 0
            ),
            t.classes,
        )
        cube = _cube(m.noisy, m.error)
        k = t.classes.count
        if name == "axis":
            v, sd = _answers(cube, t.queries, k)
            out["axis"] = (v, v - Z95 * sd, v + Z95 * sd)
            out["oracle τ (not DP)"] = _oracle_tau(cube, t, truths)
        cuts = [truncated_sum(cube, "v", q + (((0, k - 1),),), t.classes) for q in t.queries]
        out[f"{name} truncated"] = (
            np.array([c.value for c in cuts]),
            np.array([c.ci95[0] for c in cuts]),
            np.array([c.ci95[1] for c in cuts]),
        )
    return out


def _oracle_tau(cube: Cube, t: Table, truths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query, the best cut of the top classes in hindsight (reads the truth: not DP)."""
    k = t.classes.count
    neg = t.classes.negative
    best = np.empty(len(t.queries))
    for i, (q, truth) in enumerate(zip(t.queries, truths)):
        per = np.asarray(cube.grouped_totals("v", q + (((0, k - 1),),), (len(q),)))
        pos, negs = per[~neg], per[neg]
        pos_opts = np.concatenate([[0.0], np.cumsum(pos)])  # keep the lowest j positive classes
        neg_opts = np.concatenate([[0.0], np.cumsum(negs[::-1])])  # keep the |v|-smallest negative ones
        grid = pos_opts[:, None] + neg_opts[None, :]
        best[i] = grid.flat[np.argmin(np.abs(grid - truth))]
    return best, np.full(len(best), np.nan), np.full(len(best), np.nan)


def stats(errors: np.ndarray, lo: np.ndarray, hi: np.ndarray, truths: np.ndarray) -> dict:
    a = np.abs(errors)
    q1, med, q3, p95 = np.quantile(a, [0.25, 0.5, 0.75, 0.95])
    out = {
        "max": float(a.max()),
        "q3": float(q3),
        "median": float(med),
        "q1": float(q1),
        "mean": float(a.mean()),
        "p95": float(p95),
    }
    if not np.isnan(lo).all():
        out["coverage"] = float(np.mean((truths >= lo) & (truths <= hi)))
        out["width"] = float(np.mean(hi - lo))
    return out


def part_a(args: argparse.Namespace) -> dict:
    results: dict = {}
    rng = np.random.default_rng(5)  # the query sample, not noise
    for t in (adult("capital-gain"), adult("capital-loss"), bank()):
        if args.queries and args.queries < len(t.queries):
            t.queries = [t.queries[i] for i in sorted(rng.choice(len(t.queries), args.queries, replace=False))]
        truths = t.truths()
        k, w = measure_axis.normalised_weights(np.clip(t.values, t.lo, t.hi), t.classes)
        axis_true, plain_true = t.tensor(w, k), t.tensor(np.clip(t.values, t.lo, t.hi))
        oracle_bounds = (float(t.values.min()), float(t.values.max()))
        oracle_true = t.tensor(np.clip(t.values, *oracle_bounds))
        for eps in args.eps:
            start = time.perf_counter()
            per: dict[str, list] = {}
            for b in range(args.builds):
                for name, (v, lo, hi) in run_build(
                    t, eps, 1000 * b + 7, truths, axis_true, plain_true, oracle_true, oracle_bounds
                ).items():
                    per.setdefault(name, []).append((v - truths, lo, hi))
            results.setdefault(t.name, {})[str(eps)] = {
                name: stats(
                    np.concatenate([e for e, _, _ in runs]),
                    np.concatenate([l for _, l, _ in runs]),
                    np.concatenate([h for _, _, h in runs]),
                    np.tile(truths, len(runs)),
                )
                for name, runs in per.items()
            }
            print(f"{t.name} ε={eps}: {time.perf_counter() - start:.1f} s", flush=True)
    return results


def report_a(results: dict, cmd: str, queries: int) -> list[str]:
    lines = [
        "# Measure axes on Qiu et al.'s workloads",
        "",
        f"`{cmd}` — |error| of SUM range queries ({queries or 'all'} queries per table, the same for every "
        "method), over all builds; the whole ε on the SUM. `ratio` columns: median and mean relative to "
        "today's fixed clipping (identity) on the same queries. Intervals: 95 % (noise only; truncated: "
        "asymmetric, with the dropped-mass bound). Oracle rows read the data (not DP).",
        "",
    ]
    for table, per_eps in results.items():
        lines += [f"## {table}", ""]
        for eps, methods in per_eps.items():
            base = methods["today identity"]
            lines += [
                f"### ε = {eps}",
                "",
                "| method | max | q3 | median | q1 | mean | p95 | median ratio | mean ratio | coverage | width |",
                "|---|---|---|---|---|---|---|---|---|---|---|",
            ]
            for name, s in methods.items():
                cov = f"{s['coverage']:.3f}" if "coverage" in s else "—"
                width = f"{s['width']:,.0f}" if "width" in s else "—"
                lines.append(
                    f"| {name} | {s['max']:,.0f} | {s['q3']:,.0f} | {s['median']:,.0f} | {s['q1']:,.0f} | "
                    f"{s['mean']:,.0f} | {s['p95']:,.0f} | {s['median'] / base['median']:.3f} | "
                    f"{s['mean'] / base['mean']:.3f} | {cov} | {width} |"
                )
            lines.append("")
    return lines


def part_c(builds: int) -> list[str]:
    """Cost on today's workloads: COUNT and untruncated SUM with and without an axis (default
    strategy, Adult age × education-num × sex × race, capital-gain), and a 30^4 × 17 build's time."""
    rows = adult_rows()
    sexes, races = sorted({r[9] for r in rows}), sorted({r[8] for r in rows})
    cells = np.array([[min(int(r[0]), 90) - 17, int(r[4]) - 1, sexes.index(r[9]), races.index(r[8])] for r in rows])
    keep = cells[:, 0] >= 0
    cells, values = cells[keep], np.array([float(r[10]) for r in rows])[keep]
    shape = (74, 16, 2, 5)
    t = Table("Adult-4", shape, cells, values, 0.0, 99_999.0, [])
    rng = np.random.default_rng(3)
    queries = [
        tuple(((int(a), int(b)),) for a, b in (sorted(rng.integers(0, n, 2)) for n in shape)) for _ in range(500)
    ]
    count_true = t.tensor(np.ones(len(values)))
    k, w = measure_axis.normalised_weights(np.clip(values, 0, 99_999), t.classes)
    axis_true, plain_true = t.tensor(w, k), t.tensor(np.clip(values, 0, 99_999))
    c_truth = np.array([Cube("t", "x", {"v": prefix_sums(count_true)}, {}).total("v", q) for q in queries])
    s_truth = np.array([Cube("t", "x", {"v": prefix_sums(plain_true)}, {}).total("v", q) for q in queries])
    err: dict[str, list[float]] = {}
    strategy = get_strategy("pairwise")
    for b in range(builds):
        source = RandomSource(seed=50 + b)
        for label, weights in (("without axis", (0.2, 0.8)), ("with axis", (0.2, 0.8))):  # same COUNT/SUM split
            c = strategy.measure(count_true, 1.0, weights[0], source, nonnegative=True)
            cv, _ = _answers(_cube(c.noisy, c.error), queries)
            err.setdefault(f"COUNT {label}", []).append(float(np.sqrt(np.mean((cv - c_truth) ** 2))))
            if label == "without axis":
                m = strategy.measure(plain_true, 99_999.0, weights[1], source, nonnegative=True)
                sv, _ = _answers(_cube(m.noisy, m.error), queries)
            else:
                m = steps.on_class_scale(
                    strategy.measure(axis_true, 1.0, weights[1], source, nonnegative=True), t.classes
                )
                sv, _ = _answers(_cube(m.noisy, m.error), queries, t.classes.count)
            err.setdefault(f"SUM {label}", []).append(float(np.sqrt(np.mean((sv - s_truth) ** 2))))
    rmse = {k2: float(np.mean(v)) for k2, v in err.items()}
    builds_s = {
        label: service_build(axis)
        for label, axis in (("without axis", None), ("with axis", {"kind": "log2", "classes": 15}))
    }
    return [
        "## Part C: cost on today's workloads",
        "",
        f"Adult age × education-num × sex × race (74 × 16 × 2 × 5), default strategy (pairwise), COUNT ε = 0.2, "
        f"SUM(capital-gain) ε = 0.8, 500 random range queries, RMSE over {builds} builds:",
        "",
        "| aggregate | without axis | with axis | ratio |",
        "|---|---|---|---|",
        f"| COUNT | {rmse['COUNT without axis']:,.1f} | {rmse['COUNT with axis']:,.1f} | "
        f"{rmse['COUNT with axis'] / rmse['COUNT without axis']:.3f} |",
        f"| SUM untruncated | {rmse['SUM without axis']:,.0f} | {rmse['SUM with axis']:,.0f} | "
        f"{rmse['SUM with axis'] / rmse['SUM without axis']:.3f} |",
        "",
        "A 30^4 build from 10^6 rows through the service (DuckDB table, default strategy, COUNT + SUM(m), "
        "m in [0, 30]): "
        + ", ".join(
            f"{k} {v['seconds']:.1f} s ({v['strategy']}, SUM cuboid {v['sum_shape']})" for k, v in builds_s.items()
        )
        + ".",
        "",
    ]


def service_build(axis: dict | None) -> dict:
    """Seconds of a real build: 10^6 generated rows, 4 dimensions of 30, the measure with or without a
    17-class axis (log2, classes=15 doubling classes + the bottom and zero classes)."""
    import tempfile

    from bench.shared_data import gen_rows_sql, gen_spec
    from engine.service import Prima
    from storage.schema import TableSpec

    with tempfile.TemporaryDirectory() as folder:
        prima = Prima(Path(folder) / "data")
        prima.db.run(f"CREATE TABLE gen AS {gen_rows_sql(4)} FROM range(?)", [1_000_000])
        spec = gen_spec({"duckdb_table": "gen"}, 4, "auto")
        if axis is not None:
            spec["measures"][0]["axis"] = axis
        prima.register(TableSpec.model_validate(spec))
        start = time.perf_counter()
        prima.build("gen")
        seconds = time.perf_counter() - start
        status = prima.cube_status("gen")
        prima.close()
    shape = "30^4" + (f" × {len(status['clipping']['m']['axis']['edges']) - 1}" if axis else "")
    return {"seconds": seconds, "strategy": status["strategy"], "sum_shape": shape}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", type=int, default=5)
    parser.add_argument("--eps", type=lambda s: [float(x) for x in s.split(",")], default=[0.25, 0.5, 1.0, 2.0, 4.0])
    parser.add_argument("--queries", type=int, default=5000, help="queries sampled per table (0: all)")
    parser.add_argument("--cost", action="store_true", help="part C only")
    parser.add_argument("--z", type=float, default=None, help="truncation test threshold (default: the product's)")
    args = parser.parse_args()
    if args.cost:
        lines = part_c(args.builds)
        publish(
            "numerical_queries_cost.md",
            [
                "# Measure axes: cost",
                "",
                f"`.venv/bin/python bench/numerical_queries.py --cost --builds {args.builds}`",
                "",
            ]
            + lines,
        )
        return
    cmd = (
        f".venv/bin/python bench/numerical_queries.py --builds {args.builds} --eps "
        f"{','.join(str(e) for e in args.eps)} --queries {args.queries}"
    )
    if args.z is not None:
        measure_axis.TRUNCATION_Z = args.z
        cmd += f" --z {args.z}"
    results = part_a(args)
    (ROOT / "bench" / "results" / "numerical_queries.json").write_text(json.dumps(results, indent=1))
    publish("numerical_queries.md", report_a(results, cmd, args.queries))


if __name__ == "__main__":
    main()
