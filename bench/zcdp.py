"""ε and ρ at equal tight ρ: Prima's wide and dense tables under pure ε and under zCDP,
against MST and AIM (Private-PGM's reference mechanisms) on Adult-5 and Adult-15.

Tables (UCI Adult, adult.data, 32,561 rows, domains from public knowledge — examples/adult.yaml):
  * Adult-15: the 14 dimensions of examples/adult.yaml plus hours_per_week/10 — 15 columns, 120
    1-/2-way cuboids (`cuboids`, the wide default);
  * Adult-5: age/5 × education_num × hours/10 × sex × race, a dense cube (`auto`: pairwise or marginals).
Queries: COUNT only, all of the budget on it; random ranges on k = 1..4 columns (uniform ranges
over each chosen column's cells, 600 per k) and every 1-column GROUP BY (each group an answer);
MAE against the truth over the rows the table holds, mean of `--builds` seeded builds.

COUNT and SUM (`--only-count-sum`, or after the COUNT rows unless `--no-count-sum`): Adult's measure
hours_per_week declared, Prima building both aggregates as the service splits its budget, MST/AIM
answering both from one model (`count_sum_rows`).

Budgets, compared at equal *tight* ρ (privacy/accounting/zcdp.py): ρ = 0.015 ((1, 10⁻⁹)-DP, AIM's and MST's
setting) and ρ_ε=1, the tight ρ of Prima's pure ε = 1 build of the same table (what its ledger
records). Prima's shares: ``--shares`` compares the workload shares (privacy/estimation/cuboid_fit.py) with the
old cells^(1/3) rule.

MST and AIM: github.com/ryan112358/private-pgm (package `mbi` and its mechanisms/, not on PyPI:
a bench-only comparison, nothing of it is committed). With a checkout at $PGM_SRC and a venv with
its requirements — `pip install jax==0.4.35 jaxlib==0.4.35 chex==0.1.87 optax==0.2.4 attrs pandas
networkx scipy matplotlib` (newer chex fails inside mbi's jitted code; measured with private-pgm at
4d2b3c5, August 2025) — and $PGM_CACHE to keep the fitted models (AIM: 5–10 min a fit on 15 columns):
    PGM_SRC=/tmp/pgm-src PGM_PYTHON=/tmp/pgm-venv/bin/python .venv/bin/python bench/zcdp.py
Their answers are read from the fitted graphical model's marginals (exact for the model: no
sampling error added). Without PGM_PYTHON the Prima rows alone are produced.

Run:  .venv/bin/python bench/zcdp.py [--builds 3] [--queries 600]
Results: bench/results/zcdp.md (and .json)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import yaml  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_data import SHARED  # noqa: E402
from bench.wide_tables import random_queries, register_rows  # noqa: E402
from engine.builds import steps  # noqa: E402
from engine.service import Prima  # noqa: E402
from engine.synopses.wide import WideCube  # noqa: E402
from privacy.accounting.currencies import Budget  # noqa: E402
from privacy.estimation import cuboid_fit as cuboid_lib  # noqa: E402
from privacy.mechanisms.sampler import RandomSource  # noqa: E402
from privacy.strategies import get_strategy  # noqa: E402
from privacy.strategies.cuboids import CuboidsStrategy  # noqa: E402
from privacy.strategies.dense_auto import DenseAutoStrategy  # noqa: E402
from privacy.strategies.pairwise import PairwiseStrategy  # noqa: E402
from storage import sources  # noqa: E402
from storage.schema import TableSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
RHO_AIM = 0.015  # (1, 1e-9)-DP by CKS's conversion: 0.01497


def adult_spec(columns: int) -> dict:
    """Adult-15 (examples/adult.yaml + hours/10) or Adult-5 (the dense bench's five columns)."""
    raw = json.loads(json.dumps(yaml.safe_load((ROOT / "examples" / "adult.yaml").read_text()), default=str))
    raw["source"]["csv"] = str(SHARED / "adult.data")
    hours = {"name": "hours_per_week", "type": "int", "lo": 0, "hi": 168, "bin": 10}
    if columns == 15:
        raw["dimensions"] = raw["dimensions"] + [hours]
    else:
        by_name = {d["name"]: d for d in raw["dimensions"]}
        raw["dimensions"] = [by_name["age"], by_name["education_num"], hours, by_name["sex"], by_name["race"]]
    raw["measures"] = []
    raw["name"] = f"adult{columns}"
    raw["cube"] = {"strategy": "cuboids" if columns == 15 else "auto"}
    return raw


def load(columns: int, data_dir: Path) -> tuple[TableSpec, object, np.ndarray]:
    """The registered spec, the true COUNT aggregate the table's strategy reads, and per-row cells."""
    prima, spec, cells, _ = register_rows(adult_spec(columns), data_dir)
    true = true_aggregates(prima, spec)[steps.COUNT_KEY]
    prima.close()
    return spec, true, cells


def true_aggregates(prima: Prima, spec: TableSpec) -> dict:
    """Every aggregate's true cuboids as the table's strategy reads them (never released)."""
    record = prima.record(spec.name)
    return steps.true_cuboids(prima.db, record, steps.plan_build(record, 1.0))


def truths(cells: np.ndarray, shape: tuple[int, ...], queries: list[list]) -> np.ndarray:
    out = np.empty(len(queries))
    for q, sel in enumerate(queries):
        mask = np.ones(len(cells), dtype=bool)
        for a, ((lo, hi),) in enumerate(sel):
            if lo > 0 or hi < shape[a] - 1:
                mask &= (cells[:, a] >= lo) & (cells[:, a] <= hi)
        out[q] = mask.sum()
    return out


def group_truths(cells: np.ndarray, shape: tuple[int, ...]) -> list[np.ndarray]:
    return [np.bincount(cells[:, a], minlength=shape[a]).astype(float) for a in range(len(shape))]


class Workload:
    """The queries and their true answers (public workload; truths read rows, the bench's side only)."""

    def __init__(self, shape: tuple[int, ...], cells: np.ndarray, n: int) -> None:
        rng = np.random.default_rng(7)
        self.shape = shape
        self.queries = {k: random_queries(rng, shape, k, n) for k in (1, 2, 3, 4) if k <= len(shape)}
        self.truth = {k: truths(cells, shape, q) for k, q in self.queries.items()}
        self.groups = group_truths(cells, shape)

    def score(self, total, grouped) -> dict[str, float]:
        """MAE per k, and of one-column GROUP BY groups (``total(sel)``, ``grouped(axis)``)."""
        out = {
            f"k{k}": float(np.mean(np.abs(np.array([total(q) for q in qs]) - self.truth[k])))
            for k, qs in self.queries.items()
        }
        errs = np.concatenate([np.asarray(grouped(a)) - t for a, t in enumerate(self.groups)])
        out["group_by_1"] = float(np.mean(np.abs(errs)))
        return out


def prima_wide(
    spec: TableSpec,
    true: dict,
    budget: float | Budget,
    seed: int,
    power: float | None = None,
    estimator: str = "shrunk",
    one_way_share: float | None = None,
    select_rounds: int | None = None,
) -> tuple[WideCube, float]:
    # the service's default picks triples (`select_rounds` None: one per dimension); 0: 1-/2-way only
    strategy = CuboidsStrategy(
        bootstrap=0,
        dimensions=len(spec.shape),
        estimator=estimator,
        one_way_share=one_way_share,
        select_rounds=select_rounds,
    )
    if power is not None:  # the old rule, for comparison: shares ∝ cells^power
        strategy.shares = lambda shape, cuboids, shrunk=False: cuboid_lib.shares(shape, cuboids, power, 1.0)  # type: ignore[method-assign]
    rho = strategy.part_rho(budget, spec.shape, 1.0, nonnegative=True)  # the ledger's: releases and draws
    true = {s: true[s] for s in strategy.inputs(spec.shape)}  # (what this strategy reads of the table's)
    m = strategy.measure(true, 1.0, budget, RandomSource(seed=seed), nonnegative=True)  # a COUNT, as builds do
    return WideCube(spec.name, str(seed), spec.shape, releases={steps.COUNT_KEY: m.noisy}), rho


def wide_scores(cube: WideCube, work: Workload) -> dict[str, float]:
    full = [((0, n - 1),) for n in work.shape]
    return work.score(
        lambda q: cube.total(steps.COUNT_KEY, q), lambda a: cube.grouped_totals(steps.COUNT_KEY, full, (a,))
    )


def prima_dense(
    spec: TableSpec,
    true: np.ndarray,
    budget: float | Budget,
    seed: int,
    name: str = "auto",
    select_rounds: int | None = None,
) -> tuple[object, float]:
    # the service's default: `auto`, whose pairwise candidate picks triples (None: one round per dimension)
    strategy = (
        DenseAutoStrategy(PairwiseStrategy(select_rounds=select_rounds)) if name == "auto" else get_strategy(name)
    )
    shape = tuple(true.shape)
    rho = strategy.part_rho(budget, shape, 1.0, nonnegative=True)  # the ledger's: releases and draws
    m = strategy.measure(true, 1.0, budget, RandomSource(seed=seed), nonnegative=True)
    return m.noisy, rho


def dense_scores(noisy: np.ndarray, work: Workload) -> dict[str, float]:
    def total(sel: list) -> float:
        return float(noisy[tuple(slice(lo, hi + 1) for ((lo, hi),) in sel)].sum())

    def grouped(a: int) -> np.ndarray:
        return noisy.sum(axis=tuple(i for i in range(noisy.ndim) if i != a))

    return work.score(total, grouped)


def mean_rows(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}


def pgm_runs(
    cells: np.ndarray,
    work: Workload,
    mechanisms: list[str],
    rhos: list[float],
    builds: int,
    aim_iters: int,
    extra: dict | None = None,
    tag: str = "",
) -> dict[str, dict]:
    """MST/AIM answers of ``work``'s queries from bench/zcdp_pgm.py in $PGM_PYTHON, per mechanism@ρ
    and run (empty without it); ``extra``: a COUNT+SUM run's model domain and measure (`count_sum_rows`)."""
    python, src = os.environ.get("PGM_PYTHON"), os.environ.get("PGM_SRC")
    if not (python and src and mechanisms):
        return {}
    # $PGM_CACHE keeps the fitted models (AIM on 15 columns: ~12 min a fit) for a re-run of the answers
    cache = Path(os.environ.get("PGM_CACHE") or tempfile.mkdtemp(prefix="zcdp-pgm-"))
    cache.mkdir(parents=True, exist_ok=True)
    data, result = cache / f"in{len(work.shape)}{tag}.npz", cache / f"out{len(work.shape)}{tag}.json"
    arrays = {f"q{k}": np.array([[r[0] for r in sel] for sel in qs]) for k, qs in work.queries.items()}
    np.savez(
        data,
        cells=cells,
        shape=np.array(work.shape),
        rhos=np.array(rhos),
        builds=builds,
        mechanisms=",".join(mechanisms),
        aim_iters=aim_iters,
        **arrays,
        **(extra or {}),
    )
    subprocess.run(
        [python, str(ROOT / "bench" / "zcdp_pgm.py"), str(data), str(result)],
        check=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
    )
    return json.loads(result.read_text())


def pgm_scores(
    cells: np.ndarray, work: Workload, mechanisms: list[str], rhos: list[float], builds: int, aim_iters: int
) -> dict[str, dict[str, float]]:
    """MST/AIM's MAE on the COUNT workload (`pgm_runs`), mean over runs."""
    out = {}
    for name, runs in pgm_runs(cells, work, mechanisms, rhos, builds, aim_iters).items():
        rows = []
        for run in runs.values():
            row = {f"k{k}": float(np.mean(np.abs(np.array(run[f"k{k}"]) - work.truth[k]))) for k in work.queries}
            errs = np.concatenate([np.array(g) - t for g, t in zip(run["groups"], work.groups)])
            row["group_by_1"] = float(np.mean(np.abs(errs)))
            row["seconds"] = float(run["seconds"])
            rows.append(row)
        out[name] = mean_rows(rows)
    return out


# COUNT and SUM from one budget ("random range COUNT/SUM"): the measure of
# examples/adult.yaml, hours_per_week in [0, 168] (a week's hours: public). Prima builds as the service
# does — COUNT and SUM(hours) sharing the budget (COUNT 20 %, SUM 80 %) — while MST/AIM answer both
# from one model fitted at the same ρ, whose domain holds hours exactly (0..168) in place of the
# hours/10 dimension, so a SUM is exact for the model (Σ count × hours) and a COUNT over hours/10
# ranges adds up the model's hours in those bins. (A dimension and a measure cannot share a name, so
# the bench's copy of adult.data repeats hours_per_week as a last column, "hours", the measure.)
HOURS = {"name": "hours", "lo": 0, "hi": 168}
HOURS_AXIS = {15: 14, 5: 2}  # where hours/10 sits among adult_spec's dimensions


def load_sum(columns: int, data_dir: Path) -> tuple[dict, dict, np.ndarray, np.ndarray]:
    """adult_spec with the hours measure: the raw spec, every aggregate's truth (COUNT, SUM), per-row
    cells and clipped hours (the bench's truth side reads rows; the service only its aggregates)."""
    raw = adult_spec(columns) | {"measures": [dict(HOURS)]}
    copy = data_dir.parent / "adult_hours.csv"
    with open(SHARED / "adult.data") as src, open(copy, "w") as dst:
        for line in src:
            fields = line.rstrip("\n").split(",")
            if len(fields) == 15:  # the file's last line is empty
                dst.write(line.rstrip("\n") + "," + fields[12] + "\n")
    raw["source"] = raw["source"] | {"csv": str(copy), "columns": raw["source"]["columns"] + [HOURS["name"]]}
    prima, spec, cells, hours = register_rows(raw, data_dir)
    true = true_aggregates(prima, spec)
    prima.close()
    return raw, true, cells, hours


def service_build(
    raw: dict, true: dict, amount: float, currency: str, seed: int, cube: dict | None = None
) -> tuple[dict, float]:
    """One build through the service's plan (its COUNT/SUM split) with the budget declared in
    ``currency`` (and ``cube`` options over the table's); each aggregate's answers as a function of a
    query, and the build's tight ρ."""
    from storage.catalog import TableRecord

    raw = raw | {"cube": {**raw.get("cube", {}), **(cube or {})}}
    spec = TableSpec.model_validate({k: v for k, v in raw.items() if k not in ("epsilon", "rho")} | {currency: amount})
    plan = steps.plan_build(TableRecord(spec, "", amount, currency), amount)
    strategy = steps.table_strategy(spec)
    ms = steps.measure(true, plan, strategy, RandomSource(seed=seed))
    rho = sum(c.zcdp for c in plan.charges(strategy))
    keys = {"count": steps.COUNT_KEY, "sum": sources.sum_key(HOURS["name"])}
    if strategy.synopsis == "cuboids":
        cube = WideCube(spec.name, str(seed), spec.shape, releases={k: ms[k].noisy for k in keys.values()})
        return {name: (lambda q, k=k: cube.total(k, q)) for name, k in keys.items()}, rho
    return {
        name: (lambda q, a=np.asarray(ms[k].noisy): float(a[tuple(slice(lo, hi + 1) for ((lo, hi),) in q)].sum()))
        for name, k in keys.items()
    }, rho


def sum_truths(cells: np.ndarray, hours: np.ndarray, queries: list[list]) -> np.ndarray:
    out = np.empty(len(queries))
    for q, sel in enumerate(queries):
        mask = np.ones(len(cells), dtype=bool)
        for a, ((lo, hi),) in enumerate(sel):
            mask &= (cells[:, a] >= lo) & (cells[:, a] <= hi)
        out[q] = hours[mask].sum()
    return out


def count_sum_rows(columns: int, args: argparse.Namespace) -> dict:
    """MAE of range COUNTs and SUM(hours) on k = 1..4 columns: Prima at pure ε = 1 and at ρ = 0.015 and
    its own ε = 1 build's ρ, then MST/AIM at ρ = 0.015 on the same queries (with $PGM_PYTHON)."""
    with tempfile.TemporaryDirectory() as tmp:
        raw, true, cells, hours = load_sum(columns, Path(tmp) / "data")
    spec = TableSpec.model_validate(raw)
    work = Workload(spec.shape, cells, args.queries)
    sums = {k: sum_truths(cells, hours, q) for k, q in work.queries.items()}
    out: dict[str, dict] = {}

    def score(answer: dict) -> dict[str, float]:
        row = {}
        for k, qs in work.queries.items():
            row[f"k{k}"] = float(np.mean(np.abs([answer["count"](q) for q in qs] - work.truth[k])))
            row[f"sum_k{k}"] = float(np.mean(np.abs([answer["sum"](q) for q in qs] - sums[k])))
        return row

    def prima_row(label: str, amount: float, currency: str, cube: dict | None = None) -> float:
        rows, rho = [], 0.0
        start = time.perf_counter()
        for b in range(args.builds):
            answer, rho = service_build(raw, true, amount, currency, 700 + b, cube)
            rows.append(score(answer))
        out[label] = mean_rows(rows) | {"rho": rho, "seconds": (time.perf_counter() - start) / args.builds}
        print(
            f"Adult-{columns} COUNT+SUM {label}: " + ", ".join(f"{k} {v:.1f}" for k, v in out[label].items()),
            flush=True,
        )
        return rho

    rho_eps1 = prima_row("Prima ε=1", 1.0, "epsilon")
    prima_row("Prima ρ=0.015", RHO_AIM, "rho")
    prima_row(f"Prima ρ={rho_eps1:.4g} (= ε=1's)", rho_eps1, "rho")
    if columns > 6:  # a wide table without picked triples (before #56), side by side
        prima_row("Prima ε=1, select_rounds 0", 1.0, "epsilon", {"select_rounds": 0})
        prima_row("Prima ρ=0.015, select_rounds 0", RHO_AIM, "rho", {"select_rounds": 0})
    axis = HOURS_AXIS[columns]
    exact = cells.copy()
    exact[:, axis] = hours.astype(np.int64)  # the model's domain: hours exactly
    bins = np.full(HOURS["hi"] + 1, -1)
    bins[exact[:, axis]] = cells[:, axis]
    missing = bins < 0  # hours no row has: their bin by the same offset as the ones seen
    offset = int(np.median(cells[:, axis] - exact[:, axis] // 10))
    bins[missing] = np.arange(HOURS["hi"] + 1)[missing] // 10 + offset
    extra = {
        "domain": np.array([HOURS["hi"] + 1 if a == axis else n for a, n in enumerate(spec.shape)]),
        "sum_attr": axis,
        "sum_cells": bins,
        "sum_values": np.arange(HOURS["hi"] + 1, dtype=float),
    }
    for name, row in pgm_runs(
        exact,
        work,
        [m for m in args.pgm_sum.split(",") if m],
        [RHO_AIM],
        args.pgm_builds,
        args.aim_iters_wide if columns > 6 else args.aim_iters,
        extra,
        "sum",
    ).items():
        mech, rho = name.split("@")
        runs = list(row.values())
        out[f"{mech.upper()} ρ={float(rho):.4g}"] = mean_rows(
            [
                {
                    f"{p}k{k}": float(np.mean(np.abs(np.array(run[f"{p}k{k}"]) - truth[k])))
                    for k in work.queries
                    for p, truth in (("", work.truth), ("sum_", sums))
                }
                | {"seconds": run["seconds"]}
                for run in runs
            ]
        ) | {"rho": float(rho)}
    saved = RESULTS / "zcdp.json"
    old = json.loads(saved.read_text()).get(f"Adult-{columns} COUNT+SUM", {}) if saved.exists() else {}
    return {label: row for label, row in old.items() if label.startswith(("MST", "AIM"))} | out


def run_table(columns: int, args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        spec, true, cells = load(columns, Path(tmp) / "data")
    work = Workload(spec.shape, cells, args.queries)
    wide = columns > 6
    build, score = (prima_wide, wide_scores) if wide else (prima_dense, dense_scores)
    out: dict[str, dict] = {"rows": {"count": int(len(cells)), "shape": list(spec.shape)}}

    def prima_row(label: str, budget: float | Budget, **kw: object) -> float:
        rows, rho = [], 0.0
        start = time.perf_counter()
        for b in range(args.builds):
            synopsis, rho = build(spec, true, budget, 500 + b, **kw)  # type: ignore[arg-type]
            rows.append(score(synopsis, work))  # type: ignore[arg-type]
        out[label] = mean_rows(rows) | {"rho": rho, "seconds": (time.perf_counter() - start) / args.builds}
        print(f"Adult-{columns} {label}: " + ", ".join(f"{k} {v:.1f}" for k, v in out[label].items()), flush=True)
        return rho

    rho_eps1 = prima_row("Prima ε=1", 1.0)
    prima_row("Prima ρ=0.015", Budget(RHO_AIM, "rho"))
    prima_row(f"Prima ρ={rho_eps1:.4g} (= ε=1's)", Budget(rho_eps1, "rho"))
    if not wide:  # without picked triples (before #56 reached dense tables)
        prima_row("Prima ε=1, select_rounds 0 (pairs only)", 1.0, select_rounds=0)
        prima_row("Prima ρ=0.015, select_rounds 0 (pairs only)", Budget(RHO_AIM, "rho"), select_rounds=0)
    if wide:  # without picked triples (before #56), the 1-way share an admin may choose, least squares, …
        prima_row("Prima ε=1, select_rounds 0 (1-/2-way only, before #56)", 1.0, select_rounds=0)
        prima_row("Prima ρ=0.015, select_rounds 0 (1-/2-way only, before #56)", Budget(RHO_AIM, "rho"), select_rounds=0)
        prima_row("Prima ε=1, one_way_share 0.7", 1.0, one_way_share=0.7)
        prima_row("Prima ρ=0.015, one_way_share 0.7", Budget(RHO_AIM, "rho"), one_way_share=0.7)
        prima_row("Prima ε=1, least squares", 1.0, estimator="least_squares")
        prima_row("Prima ρ=0.015, least squares", Budget(RHO_AIM, "rho"), estimator="least_squares")
        prima_row(
            "Prima ε=1, least squares, shares ∝ cells^(1/3) (before #34)", 1.0, power=1 / 3, estimator="least_squares"
        )
    mechanisms = [m for m in args.pgm.split(",") if m]
    named = {"aim": RHO_AIM, "eps1": rho_eps1}
    scores: dict[str, dict[str, float]] = {}
    for mechanism in mechanisms:  # AIM on 15 columns takes ~12 min a fit: --aim-rhos can leave one out
        rhos = [named[r] for r in (args.aim_rhos if mechanism == "aim" else args.pgm_rhos).split(",")]
        scores |= pgm_scores(
            cells, work, [mechanism], rhos, args.pgm_builds, args.aim_iters if not wide else args.aim_iters_wide
        )
    # MST/AIM rows not re-run this time (AIM: ~10 min a fit on 15 columns; same queries, same truths) are kept
    saved = RESULTS / "zcdp.json"
    old = json.loads(saved.read_text()).get(f"Adult-{columns}", {}) if saved.exists() else {}
    out |= {label: row for label, row in old.items() if label.startswith(("MST", "AIM"))}
    for name, row in scores.items():
        mech, rho = name.split("@")
        label = f"{mech.upper()} ρ={float(rho):.4g}"
        out[label] = row | {"rho": float(rho)}
        print(f"Adult-{columns} {label}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()), flush=True)
    return out


def report(results: dict, args: argparse.Namespace) -> str:
    lines = [
        "# ε and ρ at equal tight ρ: Prima (Laplace under ε, discrete Gaussian under ρ) vs MST and AIM",
        "",
        'Tables without "COUNT+SUM": COUNT only, all of the budget on it; MAE of random range COUNTs on k '
        "columns and of every 1-column GROUP BY group, averaged over seeded Prima builds and MST/AIM runs (counts per table "
        "below). ρ: the tight zCDP of the whole release (Prima ε = 1: what its ledger records). MST/AIM "
        "answer from their fitted model's marginals. MST/AIM rows not re-run by the command shown are "
        "kept from earlier runs (same queries, same truths; their commits: docs/benchmarks.md).",
        "",
    ]
    for table, res in results.items():
        lines += [f"Reproduce {table}: `{res.get('command', command(args))}` (commit {res.get('commit', '?')}).", ""]
        if table.endswith("COUNT+SUM"):
            lines += count_sum_table(table, res)
            continue
        ks = [k for k in ("k1", "k2", "k3", "k4") if k in res["Prima ε=1"]]
        lines += [
            f"## {table} ({res['rows']['count']:,} rows, shape {tuple(res['rows']['shape'])})",
            "",
            "| system | ρ | " + " | ".join(f"MAE {k[1]} col" for k in ks) + " | MAE 1-col GROUP BY | s/build |",
            "|---|---|" + "---|" * (len(ks) + 2),
        ]
        for label, row in res.items():
            if label in ("rows", "command", "commit"):
                continue
            lines.append(
                f"| {label} | {row['rho']:.4g} | "
                + " | ".join(f"{row[k]:.1f}" for k in ks)
                + f" | {row['group_by_1']:.1f} | {row.get('seconds', float('nan')):.1f} |"
            )
        lines.append("")
    return "\n".join(lines)


def count_sum_table(table: str, res: dict) -> list[str]:
    """The COUNT+SUM rows (`count_sum_rows`): MAE of COUNT and of SUM(hours) per k, one budget."""
    ks = [k for k in ("k1", "k2", "k3", "k4") if k in res["Prima ε=1"]]
    lines = [
        f"## {table}: COUNT and SUM(hours_per_week) from one budget",
        "",
        "Prima: the service's plan (COUNT 20 %, SUM 80 % of the budget). MST/AIM: one model at the same ρ "
        "answers both, hours held exactly (0..168) in place of hours/10.",
        "",
        "| system | ρ | "
        + " | ".join(f"COUNT {k[1]} col" for k in ks)
        + " | "
        + " | ".join(f"SUM {k[1]} col" for k in ks)
        + " | s/build |",
        "|---|---|" + "---|" * (2 * len(ks) + 1),
    ]
    for label, row in res.items():
        if label in ("command", "commit"):
            continue
        lines.append(
            f"| {label} | {row['rho']:.4g} | "
            + " | ".join(f"{row[k]:.1f}" for k in ks)
            + " | "
            + " | ".join(f"{row['sum_' + k]:.0f}" for k in ks)
            + f" | {row.get('seconds', float('nan')):.1f} |"
        )
    return lines + [""]


def command(args: argparse.Namespace) -> str:
    pgm = "PGM_SRC=/tmp/pgm-src PGM_PYTHON=/tmp/pgm-venv/bin/python " if args.pgm else ""
    return (
        f"{pgm}.venv/bin/python bench/zcdp.py --builds {args.builds} --queries {args.queries} --pgm '{args.pgm}' "
        f"--pgm-builds {args.pgm_builds} --pgm-rhos {args.pgm_rhos} --aim-rhos {args.aim_rhos} --aim-iters {args.aim_iters} "
        f"--aim-iters-wide {args.aim_iters_wide} --tables {args.tables} --pgm-sum '{args.pgm_sum}'"
        + (" --only-count-sum" if args.only_count_sum else "")
        + (" --no-count-sum" if args.no_count_sum else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=600)
    parser.add_argument("--pgm", default="mst,aim", help="comma list of mst, aim (needs PGM_PYTHON and PGM_SRC)")
    parser.add_argument("--pgm-builds", type=int, default=1)
    parser.add_argument("--aim-iters", type=int, default=1000, help="AIM's mirror-descent iterations per round")
    parser.add_argument("--aim-iters-wide", type=int, default=1000)
    parser.add_argument("--tables", default="5,15")
    parser.add_argument("--pgm-rhos", default="aim,eps1", help="MST/AIM at ρ = 0.015 (aim) and/or Prima ε=1's ρ (eps1)")
    parser.add_argument("--aim-rhos", default="aim,eps1", help="the same for AIM alone")
    parser.add_argument("--pgm-sum", default="mst,aim", help="MST/AIM for the COUNT+SUM rows (ρ = 0.015)")
    parser.add_argument("--no-count-sum", action="store_true", help="COUNT-only rows alone")
    parser.add_argument("--only-count-sum", action="store_true", help="the COUNT+SUM rows alone")
    args = parser.parse_args()
    saved = RESULTS / "zcdp.json"
    results = json.loads(saved.read_text()) if saved.exists() else {}  # tables not re-run keep their rows
    stamp = {"command": command(args), "commit": os.environ.get("GIT_COMMIT", "?")}
    for c in args.tables.split(","):
        if not args.only_count_sum:
            results[f"Adult-{c}"] = run_table(int(c), args) | stamp
        if not args.no_count_sum:
            results[f"Adult-{c} COUNT+SUM"] = count_sum_rows(int(c), args) | stamp
    text = report(results, args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "zcdp.md").write_text(text + "\n")
    (RESULTS / "zcdp.json").write_text(json.dumps(results, indent=1))
    print(text)


if __name__ == "__main__":
    main()
