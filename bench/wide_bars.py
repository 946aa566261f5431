"""Error bars of a wide table's answers: coverage, width and error per column count.

Adult-15 (bench/zcdp.py's table: examples/adult.yaml's 14 dimensions + hours_per_week/10), COUNT
with all of the budget, the wide default `cuboids` as a build measures it (16 bootstrap replicates),
at ρ = 0.015 and pure ε = 1, with each pair estimator (``shrunk``, the default, and
``least_squares``). Per k = 1..4 columns (random ranges, bench/wide_tables.py's generator) and for
GROUP BY one column under ranges on two others (a model answer per group), and for GROUP BY one
column under a range on one other (a shrunk pair's answer per group, groups holding ≥ 50 rows — a
dashboard's commonest breakdown): MAE, how often value ± 1.96·stddev covers the truth, and the
mean stated stddev. 1-column bars are exact; a shrunk pair's 2-column bar and every 3+-column model
bar are estimates (`privacy.estimation.error.ShrunkPairError`, `engine.synopses.wide`). The shrunk rows are also read
with each pair's bar at the fitted prior τ̂² instead of τ²'s upper limit (the bars before session
23), and at ρ = 0.003, the COUNT's share of a service build at ρ = 0.015. The model-filled classes
are read again with the ci95 an answer states (the hull of that bar and the measured pairs' bounds,
`engine.answers.model_bounds`), and on the answers of ≥ 100 rows a chart shows: coverage and the
share flagged as noise of either. Last, SUM(hours_per_week) built through the service's plan, on
the pair GROUP BYs.

Run:  .venv/bin/python bench/wide_bars.py [--builds 4] [--queries 300]
Results: bench/results/wide_bars.md
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_data import publish  # noqa: E402
from bench.zcdp import HOURS, RHO_AIM, Workload, load, load_sum  # noqa: E402
from engine.answers import model_bounds  # noqa: E402
from engine.builds import steps  # noqa: E402
from engine.synopses.wide import WideCube  # noqa: E402
from privacy.accounting.currencies import Budget  # noqa: E402
from privacy.mechanisms.sampler import RandomSource  # noqa: E402
from privacy.strategies.cuboids import CuboidsStrategy  # noqa: E402
from storage import sources  # noqa: E402
from storage.catalog import TableRecord  # noqa: E402
from storage.schema import TableSpec  # noqa: E402

Z = 1.959964
Z_BOUNDS = 2.241403  # each bound term at 97.5 % (`privacy.estimation.error.z975`, many cells), as answers put them
MIN_GROUP = 50  # pair GROUP BY: groups holding at least this many rows


def grouped_queries(rng: np.random.Generator, shape: tuple[int, ...], n: int) -> list[tuple[int, list]]:
    """GROUP BY one column under a range on two others (three columns: a model answer)."""
    out = []
    for _ in range(n):
        axes = rng.choice(len(shape), 3, replace=False)
        sel = [((0, m - 1),) for m in shape]
        for a in axes[1:]:
            lo = int(rng.integers(0, shape[a]))
            sel[a] = ((lo, int(rng.integers(lo, shape[a]))),)
        out.append((int(axes[0]), sel))
    return out


def pair_groups(rng: np.random.Generator, shape: tuple[int, ...], n: int) -> list[tuple[int, list]]:
    """GROUP BY one column under a range on one other (two columns: a measured pair)."""
    out = []
    for _ in range(n):
        group, ranged = (int(a) for a in rng.choice(len(shape), 2, replace=False))
        sel = [((0, m - 1),) for m in shape]
        lo = int(rng.integers(0, shape[ranged]))
        sel[ranged] = ((lo, int(rng.integers(lo, shape[ranged]))),)
        out.append((group, sel))
    return out


def group_truth(cells: np.ndarray, shape: tuple[int, ...], axis: int, sel: list) -> np.ndarray:
    mask = selected(cells, shape, sel)
    return np.bincount(cells[mask, axis], minlength=shape[axis]).astype(float)


FITTED = "shrunk, bars at τ̂²"  # the same shrunk build with each pair's bar at the fitted prior


def bar_variants(release: object, estimator: str) -> list[tuple[str, dict]]:
    """The ways one build's bars are read: a shrunk build at τ²'s upper limit (its own) and at τ̂²
    (every limit 1, the bars before session 23); a least-squares build as it is."""
    own = dict(release.uppers)  # type: ignore[attr-defined]
    return [(estimator, own)] + ([(FITTED, dict.fromkeys(own, 1.0))] if estimator == "shrunk" else [])


def run(
    true: dict,
    cells: np.ndarray,
    work: Workload,
    groups: list,
    pairs: list,
    budget: float | Budget,
    estimator: str,
    builds: int,
) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Per bar variant (`bar_variants`): MAE / coverage / mean stddev per query class."""
    shape = work.shape
    rows: dict[str, dict[str, list[tuple[float, bool, float]]]] = {}
    for b in range(builds):
        m = CuboidsStrategy(estimator=estimator).measure(
            true, 1.0, budget, RandomSource(seed=900 + b), nonnegative=True
        )
        for name, uppers in bar_variants(m.noisy, estimator):
            m.noisy.uppers = uppers
            score_build(
                WideCube("adult15", str(b), shape, releases={"count": m.noisy}),
                cells,
                work,
                groups,
                pairs,
                rows.setdefault(name, {}),
            )
    return {name: {k: _summary(k, v) for k, v in by_class.items()} for name, by_class in rows.items()}


def _summary(label: str, found: list[tuple]) -> tuple[float, ...]:
    """Means of a class's columns; for a charted class (`charted`) the median of its first column
    (the relative error) and the means of the others."""
    r = np.array(found, dtype=float)
    head = np.median(r[:, 0]) if label.startswith("charted") else r[:, 0].mean()
    return (float(head), *(float(x) for x in r[:, 1:].mean(axis=0)))


def score_build(
    cube: WideCube,
    cells: np.ndarray,
    work: Workload,
    groups: list,
    pairs: list,
    rows: dict[str, list[tuple[float, bool, float]]],
) -> None:
    """Each answer's |error|, whether ±1.96·stddev covers it, and its stddev, by query class; for the
    model-filled classes (k = 3, 4, GROUP BY under two ranges) also whether the ci95 an answer
    states covers it, and that interval's width, under "<class> ci95" (`stated_ci95`); the ranges of
    ≥ `CHARTED` rows and the GROUP BY groups a chart shows under "charted …" (`charted`)."""
    shape = work.shape
    for k, queries in work.queries.items():
        for q, t in zip(queries, work.truth[k]):
            value, sd = cube.total("count", q), math.sqrt(cube.variance("count", q))
            rows.setdefault(f"k{k}", []).append((abs(value - t), abs(value - t) <= Z * sd, sd))
            if k >= 3:
                (lo,), (hi,) = stated_ci95(cube, q, (), np.array([value]), np.array([sd]))
                rows.setdefault(f"k{k} ci95", []).append((0.0, lo <= t <= hi, hi - lo))
                if t >= CHARTED:
                    rows.setdefault(f"charted k{k}", []).append(charted_row(value, sd, lo, hi, t))
    for axis, sel in groups:
        values, variances = cube.grouped_totals("count", sel, (axis,)), cube.grouped_variances("count", sel, (axis,))
        sds = np.sqrt(variances)
        truths = group_truth(cells, shape, axis, sel)
        for v, sd, t in zip(values, sds, truths):
            rows.setdefault("group_by", []).append((abs(v - t), abs(v - t) <= Z * sd, sd))
        for t, a, b in zip(truths, *stated_ci95(cube, sel, (axis,), values, sds)):
            rows.setdefault("group_by ci95", []).append((0.0, bool(a <= t <= b), float(b - a)))
    for axis, sel in pairs:
        values, variances = cube.grouped_totals("count", sel, (axis,)), cube.grouped_variances("count", sel, (axis,))
        for v, var, t in zip(values, variances, group_truth(cells, shape, axis, sel)):
            if t >= MIN_GROUP:
                rows.setdefault("pair_group_by", []).append(
                    (abs(v - t), abs(v - t) <= Z * math.sqrt(var), math.sqrt(var))
                )
    charted(cube, cells, work, rows)


CHARTED = 100  # rows: the answers a chart shows
_DRAW = np.random.default_rng(3)  # which columns, not noise
TRIPLES = [tuple(sorted(map(int, _DRAW.choice(15, 3, replace=False)))) for _ in range(15)]  # of Adult-15's


def charted(cube: WideCube, cells: np.ndarray, work: Workload, rows: dict[str, list]) -> None:
    """The groups of ≥ `CHARTED` rows of 3-column GROUP BYs over 15 random triples (model-filled)
    and of every pair's GROUP BY (shrunk cells), as `charted_row`s (random 3- and 4-column ranges:
    `score_build`)."""
    whole = [((0, n - 1),) for n in work.shape]
    found = [("charted GROUP BY 2 columns", axes) for axes in itertools.combinations(range(len(work.shape)), 2)]
    found += [("charted GROUP BY 3 columns", axes) for axes in TRIPLES]
    for label, axes in found:
        truth = np.zeros([work.shape[a] for a in axes])
        np.add.at(truth, tuple(cells[:, a] for a in axes), 1)
        truth = truth.ravel()
        v = np.ravel(cube.grouped_totals("count", whole, axes))
        sd = np.sqrt(np.ravel(cube.grouped_variances("count", whole, axes)))
        lo, hi = stated_ci95(cube, whole, axes, v, sd)
        for i in np.flatnonzero(truth >= CHARTED):
            rows.setdefault(label, []).append(charted_row(v[i], sd[i], lo[i], hi[i], truth[i]))


def charted_row(value: float, sd: float, lo: float, hi: float, truth: float) -> tuple:
    """(relative error, covered by value ± 1.96·stddev, by the stated ci95, flagged as noise by the
    one, by the other: half-width over half the value)."""
    err, half = abs(value - truth), max(value - lo, hi - value)
    return err / truth, err <= Z * sd, lo <= truth <= hi, Z * sd > abs(value) / 2, half > abs(value) / 2


def stated_ci95(cube: WideCube, sel: Any, groups: tuple, values: np.ndarray, sds: np.ndarray) -> tuple:
    """Per group (flat), the ci95 a COUNT answer states: for a model-filled one the hull of value ±
    1.96·stddev and the measured pairs' bounds (`engine.answers.model_bounds`, each term at z97.5 as
    the answer path puts it), else value ± 1.96·stddev."""
    hull = model_bounds.interval(cube, "count", sel, groups, values, sds, Z, Z_BOUNDS)
    lo, hi = (values - Z * sds, values + Z * sds) if hull is None else hull
    return np.ravel(lo), np.ravel(hi)


def sum_pair_rows(pairs: list, builds: int) -> list[str]:
    """SUM(hours_per_week) through the service's own plan (COUNT 20 %, SUM 70 %, COUNT(m) 10 %) at
    ρ = 0.015 and ε = 1: pair GROUP BY groups (≥ `MIN_GROUP` rows), bars at τ²'s upper limit and at τ̂²."""
    with tempfile.TemporaryDirectory() as tmp:
        raw, true, cells, hours = load_sum(15, Path(tmp) / "data")
    key, lines = sources.sum_key(HOURS["name"]), []
    for currency, amount, label in (("rho", RHO_AIM, "ρ = 0.015"), ("epsilon", 1.0, "ε = 1")):
        spec = TableSpec.model_validate(
            {k: v for k, v in raw.items() if k not in ("epsilon", "rho")} | {currency: amount}
        )
        plan = steps.plan_build(TableRecord(spec, "", amount, currency), amount)
        rows: dict[str, list[tuple[float, bool, float]]] = {"shrunk": [], FITTED: []}
        for b in range(builds):
            release = steps.measure(true, plan, steps.table_strategy(spec), RandomSource(seed=900 + b))[key].noisy
            for name, uppers in bar_variants(release, "shrunk"):
                release.uppers = uppers
                cube = WideCube("adult15", name, spec.shape, releases={key: release})
                for axis, sel in pairs:
                    values, variances = (
                        cube.grouped_totals(key, sel, (axis,)),
                        cube.grouped_variances(key, sel, (axis,)),
                    )
                    mask = selected(cells, spec.shape, sel)
                    t = np.bincount(cells[mask, axis], weights=hours[mask], minlength=spec.shape[axis])
                    n = np.bincount(cells[mask, axis], minlength=spec.shape[axis])
                    rows[name] += [
                        (abs(v - tt), abs(v - tt) <= Z * math.sqrt(var), math.sqrt(var))
                        for v, var, tt, nn in zip(values, variances, t, n)
                        if nn >= MIN_GROUP
                    ]
        for name, found in rows.items():
            r = np.array(found)
            lines.append(f"| {label} | {name} | {r[:, 0].mean():,.0f} / {r[:, 1].mean():.3f} / {r[:, 2].mean():,.0f} |")
            print(lines[-1], flush=True)
    return lines


def selected(cells: np.ndarray, shape: tuple[int, ...], sel: list) -> np.ndarray:
    mask = np.ones(len(cells), dtype=bool)
    for a, ((lo, hi),) in enumerate(sel):
        if lo > 0 or hi < shape[a] - 1:
            mask &= (cells[:, a] >= lo) & (cells[:, a] <= hi)
    return mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", type=int, default=4)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        spec, true, cells = load(15, Path(tmp) / "data")
    work = Workload(spec.shape, cells, args.queries)
    groups = grouped_queries(np.random.default_rng(11), spec.shape, 40)
    pairs = pair_groups(np.random.default_rng(5), spec.shape, args.queries)
    command = f".venv/bin/python bench/wide_bars.py --builds {args.builds} --queries {args.queries}"
    lines = [
        "# Wide-table error bars on Adult-15: MAE / coverage of ±1.96·stddev / mean stddev",
        "",
        f"COUNT, all of the budget, {args.builds} seeded builds, {args.queries} random ranges per k, 40 GROUP BYs "
        f"(one column under ranges on two others), {args.queries} pair GROUP BYs (one column under a range on "
        f"one other; groups ≥ {MIN_GROUP} rows). Reproduce: `" + command + "`.",
        "",
        "| budget | pairs | k = 1 | k = 2 | k = 3 | k = 4 | GROUP BY (model) | pair GROUP BY |",
        "|---|---|---|---|---|---|---|---|",
    ]
    hull_lines: list[str] = []
    chart_lines: list[str] = []
    for label, budget in (
        ("ρ = 0.015", Budget(RHO_AIM, "rho")),
        ("ρ = 0.003", Budget(RHO_AIM / 5, "rho")),
        ("ε = 1", 1.0),
    ):
        for estimator in ("shrunk", "least_squares") if label != "ρ = 0.003" else ("shrunk",):
            for name, res in run(true, cells, work, groups, pairs, budget, estimator, args.builds).items():
                cols = [
                    f"{res[k][0]:.1f} / {res[k][1]:.3f} / {res[k][2]:.1f}"
                    for k in ("k1", "k2", "k3", "k4", "group_by", "pair_group_by")
                ]
                lines.append(f"| {label} | {name} | " + " | ".join(cols) + " |")
                print(lines[-1], flush=True)
                hull = [f"{res[k][1]:.3f} / {res[k][2]:.0f}" for k in ("k3 ci95", "k4 ci95", "group_by ci95")]
                hull_lines.append(f"| {label} | {name} | " + " | ".join(hull) + " |")
                print(hull_lines[-1], flush=True)
                for k in ("charted k3", "charted k4", "charted GROUP BY 3 columns", "charted GROUP BY 2 columns"):
                    e, bar, ci, bar_flag, ci_flag = res[k]
                    chart_lines.append(
                        f"| {label} | {name} | {k[8:]} | {e:.1%} | {bar:.3f} / {bar_flag:.0%} | {ci:.3f} / {ci_flag:.0%} |"
                    )
                    print(chart_lines[-1], flush=True)
    lines += [
        "",
        "The same builds' model-filled answers with the ci95 an answer states (since the measured pairs'",
        "bounds joined it: the hull of value ± 1.96·stddev and those bounds): coverage / mean width.",
        "",
        "| budget | pairs | k = 3 | k = 4 | GROUP BY (model) |",
        "|---|---|---|---|---|",
    ] + hull_lines
    lines += [
        "",
        f"Answers of ≥ {CHARTED} rows (what a chart shows): model-filled random 3- and 4-column ranges and",
        "groups of 3-column GROUP BYs over 15 random triples; the groups of every pair's GROUP BY (shrunk",
        "cells). Median relative error; coverage / share flagged as noise (half-width over half the value)",
        "of value ± 1.96·stddev and of the stated ci95.",
        "",
        "| budget | pairs | answers | median relative error | ± 1.96·stddev | ci95 |",
        "|---|---|---|---|---|---|",
    ] + chart_lines
    lines += [
        "",
        f"SUM(hours_per_week) through the service's plan, pair GROUP BY groups (≥ {MIN_GROUP} rows), same "
        "queries and builds: MAE / coverage / mean stddev.",
        "",
        "| budget | pairs | pair GROUP BY |",
        "|---|---|---|",
    ] + sum_pair_rows(pairs, args.builds)
    publish("wide_bars.md", lines + [""])


if __name__ == "__main__":
    main()
