"""Wide tables: the `cuboids` synopsis on whole real tables, from their example YAML files.

Tables: examples/adult.yaml (adult.data, 32,561 rows, 14 dimensions + hours_per_week),
examples/traffic.yaml (48,204 rows, 7 dimensions + traffic_volume), examples/bank.yaml (45,211 rows,
16 dimensions + balance) — registered exactly as an admin would, metadata from public knowledge.

Per table, ε and build (the service's own plan: COUNT 20 %, the SUM the rest; declared bounds):
  * random range queries on k = 1..4 dimensions (uniform ranges over each chosen dimension's cells),
    COUNT, SUM and AVG; errors against the truth over the rows the cube holds (clipped measure);
    RMSE, MAE, median relative error (|err| / max(truth, 1)), and how often the 95 % interval
    (value ± 1.96·stddev) covers the truth — exact bars for k ≤ 2 (a measured cuboid), model bars
    (bootstrap noise + tree spread) for k = 3, 4;
  * GROUP BY one dimension under a range on one or two others: RMSE per group;
  * build time (measure step), peak traced memory of the build, stored bytes, and the in-process
    latency of a never-seen query on each path.
The source aggregation (one GROUPING SETS query) is timed once per table.

COUNT with all of ε (the setting of HDPView's paper and of the prototype figures): `cuboids`
against HDPView (`privacy.mechanisms.hdpview_partition`, Algorithm 1 of the paper with its default parameters, on the
sparse non-zero cells), same queries, same ε. HDPView's bar is its perturbation noise only (the
paper's p-view does not bound the error of spreading a block's total evenly); its coverage is shown.

Run:  .venv/bin/python bench/wide_tables.py                   (3 builds, 600 queries per k; ~5 min)
      .venv/bin/python bench/wide_tables.py --builds 10 --queries 3000      (the issue's full size)
Results: bench/results/wide_tables.md (and .json)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import yaml  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_data import SHARED  # noqa: E402
from engine.builds import steps  # noqa: E402
from engine.service import Prima  # noqa: E402
from engine.synopses.wide import WideCube  # noqa: E402
from privacy.mechanisms import hdpview_partition as hdpview  # noqa: E402
from privacy.mechanisms.sampler import RandomSource  # noqa: E402
from privacy.strategies.cuboids import CuboidsStrategy  # noqa: E402
from storage import aggregate_sql, sources  # noqa: E402
from storage.schema import TableSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
Z95 = 1.959963984540054


def load_table(name: str, data_dir: Path) -> tuple[Prima, TableSpec, np.ndarray, np.ndarray]:
    """Register the example table; return the service, its spec, per-row cells and clipped measure
    (the truth side of the benchmark reads rows; the service never does outside its aggregates)."""
    raw = yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())
    spec_dict = json.loads(json.dumps(raw, default=str))
    spec_dict["source"]["csv"] = str(SHARED / Path(spec_dict["source"]["csv"]).name)
    if name == "adult":
        spec_dict["source"]["csv"] = str(SHARED / "adult.data")
    prima, spec, cells, measure = register_rows(spec_dict, data_dir)
    assert measure is not None, f"{name}: the bench reads its first measure"
    return prima, spec, cells, measure


def register_rows(spec_dict: dict, data_dir: Path) -> tuple[Prima, TableSpec, np.ndarray, np.ndarray | None]:
    """Register ``spec_dict`` in a service at ``data_dir``; return it, the spec, each in-domain row's
    cells and its first measure clipped to the declared bounds (None without measures) — the rows the
    cube holds, read on the bench's truth side."""
    spec = TableSpec.model_validate(spec_dict)
    prima = Prima(data_dir)
    prima.register(spec)
    record = prima.record(spec.name)
    p = aggregate_sql.Params()
    table = sources.engine_for(prima.db, spec.source, record.source_table).table
    rows, known = aggregate_sql._rows(table, spec, {m.name: (m.lo, m.hi) for m in spec.measures[:1]}, p)
    cols = prima.db.numpy(aggregate_sql.render(rows.where(known), "duckdb"), p.values)
    cells = np.stack([np.asarray(cols[f"c{i}"], dtype=np.int64) for i in range(len(spec.dimensions))], axis=1)
    measure = np.nan_to_num(np.asarray(cols["m0"], dtype=np.float64)) if spec.measures else None
    return prima, spec, cells, measure


def random_queries(rng: np.random.Generator, shape: tuple[int, ...], k: int, n: int) -> list[list]:
    out = []
    for _ in range(n):
        sel = [((0, s - 1),) for s in shape]
        for a in rng.choice(len(shape), size=k, replace=False):
            lo, hi = sorted(rng.integers(0, shape[a], 2))
            sel[a] = ((int(lo), int(hi)),)
        out.append(sel)
    return out


def truths(cells: np.ndarray, measure: np.ndarray, queries: list[list]) -> tuple[np.ndarray, np.ndarray]:
    counts, sums = np.empty(len(queries)), np.empty(len(queries))
    for q, sel in enumerate(queries):
        mask = np.ones(len(cells), dtype=bool)
        for a, runs in enumerate(sel):
            ((lo, hi),) = runs
            if lo > 0 or hi < cells[:, a].max() + 1:
                mask &= (cells[:, a] >= lo) & (cells[:, a] <= hi)
        counts[q], sums[q] = mask.sum(), measure[mask].sum()
    return counts, sums


def build(spec: TableSpec, true: dict, epsilon: float, seed: int) -> tuple[WideCube, float, float]:
    """One build through the service's own plan and strategy; returns the synopsis, seconds, peak MB."""
    from storage.catalog import TableRecord

    plan = steps.plan_build(TableRecord(spec, "", epsilon), epsilon)
    strategy = steps.table_strategy(spec)
    assert isinstance(strategy, CuboidsStrategy)
    tracemalloc.start()
    start = time.perf_counter()
    ms = steps.measure(true, plan, strategy, RandomSource(seed=seed))
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    releases = {k: m.noisy for k, m in ms.items()}
    meta = {"strategy": "cuboids", "clipping": plan.clipping, "dimension_names": [d.name for d in spec.dimensions]}
    return WideCube(spec.name, str(seed), spec.shape, meta, releases=releases), seconds, peak


def answers(cube: WideCube, key: str, queries: list[list]) -> tuple[np.ndarray, np.ndarray]:
    """Values and stddevs; a SUM released over its measure's class axis (bank's signed
    balance) reads all of its classes, in the measure's units."""
    shape = cube.releases[key].shape
    if len(shape) > len(cube.shape):
        queries = [list(q) + [((0, shape[-1] - 1),)] for q in queries]
    values = np.array([cube.total(key, q) for q in queries])
    sds = np.sqrt(np.maximum([cube.variance(key, q) for q in queries], 0.0))
    return values, sds


def metrics(values: np.ndarray, sds: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    err = values - truth
    ok = np.isfinite(values)
    return {
        "rmse": float(np.sqrt(np.mean(err[ok] ** 2))),
        "mae": float(np.mean(np.abs(err[ok]))),
        "median_rel": float(np.median(np.abs(err[ok]) / np.maximum(np.abs(truth[ok]), 1.0))),
        "coverage": float(np.mean(np.abs(err[ok]) <= Z95 * sds[ok])),
        "answered": float(np.mean(ok)),
    }


def avg_answers(
    cube: WideCube, sum_key: str, queries: list[list], c: np.ndarray, c_sd: np.ndarray, s: np.ndarray, s_sd: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """AVG = SUM/COUNT as the service answers it (withheld when the count is within 2 sd of 0)."""
    ok = c >= np.maximum(1.0, 2.0 * c_sd)
    avg = np.where(ok, s / np.where(ok, c, 1.0), np.nan)
    var = s_sd**2 / np.where(ok, c, 1.0) ** 2 + s**2 * c_sd**2 / np.where(ok, c, 1.0) ** 4
    return avg, np.sqrt(var)


def latency(cube: WideCube, key: str, queries: list[list]) -> float:
    """Median µs of a never-seen query (total + variance; each query once, caches cold)."""
    times = []
    for q in queries:
        start = time.perf_counter()
        cube.total(key, q)
        cube.variance(key, q)
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e6)


def run_table(name: str, epsilons: list[float], builds: int, n_queries: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        prima, spec, cells, measure = load_table(name, Path(tmp) / "data")
        record = prima.record(spec.name)
        strategy = steps.table_strategy(spec)
        plan = steps.plan_build(record, 1.0)
        start = time.perf_counter()
        true = steps.true_cuboids(prima.db, record, plan)
        aggregate_seconds = time.perf_counter() - start
        stored = strategy.stored_bytes(spec.shape, 1 + len(spec.measures))
        prima.close()
    key_sum = sources.sum_key(spec.measures[0].name)
    rng = np.random.default_rng(7)  # query workload, not noise
    workloads = {k: random_queries(rng, spec.shape, k, n_queries) for k in (1, 2, 3, 4)}
    truth = {k: truths(cells, measure, q) for k, q in workloads.items()}
    groups = group_queries(rng, spec.shape, max(n_queries // 10, 20))
    count_only = compare_counts(spec, true[steps.COUNT_KEY], cells, workloads, truth, epsilons, builds)
    out = {
        "rows": int(len(cells)),
        "count_only": count_only,
        "dimensions": len(spec.dimensions),
        "cells": float(math.prod(spec.shape)),
        "stored_bytes": stored,
        "aggregate_seconds": aggregate_seconds,
        "results": {},
    }
    for eps in epsilons:
        per_build = []
        for b in range(builds):
            cube, seconds, peak = build(spec, true, eps, seed=1000 * b + int(eps * 10))
            row = {"build_seconds": seconds, "peak_mb": peak}
            for k, qs in workloads.items():
                tc, ts = truth[k]
                c, c_sd = answers(cube, steps.COUNT_KEY, qs)
                s, s_sd = answers(cube, key_sum, qs)
                a, a_sd = avg_answers(cube, key_sum, qs, c, c_sd, s, s_sd)
                row[f"k{k}"] = {
                    "count": metrics(c, c_sd, tc),
                    "sum": metrics(s, s_sd, ts),
                    "avg": metrics(a, a_sd, np.where(tc > 0, ts / np.maximum(tc, 1), 0.0)),
                }
            row["group_by"] = group_metrics(cube, cells, groups)
            fresh = {k: random_queries(np.random.default_rng(100 + b), spec.shape, k, 200) for k in (2, 4)}
            row["latency_us"] = {
                "cuboid": latency(cube, steps.COUNT_KEY, fresh[2]),
                "model": latency(cube, steps.COUNT_KEY, fresh[4]),
            }
            per_build.append(row)
        out["results"][str(eps)] = average(per_build)
        print(
            f"{name} ε={eps}: "
            + ", ".join(
                f"k={k} COUNT RMSE {out['results'][str(eps)][f'k{k}']['count']['rmse']:.0f} "
                f"cov {out['results'][str(eps)][f'k{k}']['count']['coverage']:.2f}"
                for k in (1, 2, 3, 4)
            ),
            flush=True,
        )
    return out


def compare_counts(
    spec: TableSpec, true: dict, cells: np.ndarray, workloads: dict, truth: dict, epsilons: list[float], builds: int
) -> dict:
    """All ε on COUNT: cuboids vs HDPView per k (RMSE, MAE, coverage of the stated bar)."""
    points, counts = np.unique(cells, axis=0, return_counts=True)
    counts = counts.astype(np.float64)
    out = {}
    for eps in epsilons:
        rows = {"cuboids": [], "hdpview": []}
        for b in range(builds):
            m = CuboidsStrategy().measure(
                true, 1.0, eps, RandomSource(seed=5000 + b), nonnegative=True
            )  # a COUNT, as builds
            cube = WideCube(spec.name, str(b), spec.shape, releases={steps.COUNT_KEY: m.noisy})
            params = hdpview.Parameters.of(spec.shape, eps)
            start = time.perf_counter()
            part = hdpview.partition(points, counts, spec.shape, params, RandomSource(seed=6000 + b))
            noisy, var = hdpview.perturb(
                hdpview.block_totals(part, counts), 1.0, params.epsilon_p, RandomSource(seed=7000 + b)
            )
            view = hdpview.PView(part.lo, part.hi, {steps.COUNT_KEY: noisy}, {steps.COUNT_KEY: var})
            hdp_seconds = time.perf_counter() - start
            for name, synopsis in (("cuboids", cube), ("hdpview", view)):
                row = {}
                for k, qs in workloads.items():
                    values = np.array([synopsis.total(steps.COUNT_KEY, q) for q in qs])
                    sds = np.sqrt(np.maximum([synopsis.variance(steps.COUNT_KEY, q) for q in qs], 0.0))
                    row[f"k{k}"] = metrics(values, sds, truth[k][0])
                if name == "hdpview":
                    row["blocks"], row["build_seconds"] = float(len(part.lo)), hdp_seconds
                rows[name].append(row)
        out[str(eps)] = {name: average(r) for name, r in rows.items()}
        res = out[str(eps)]
        print(
            f"COUNT-only ε={eps}: "
            + ", ".join(
                f"k={k} {res['cuboids'][f'k{k}']['rmse']:.0f} vs HDPView {res['hdpview'][f'k{k}']['rmse']:.0f}"
                for k in (1, 2, 3, 4)
            ),
            flush=True,
        )
    return out


def group_queries(rng: np.random.Generator, shape: tuple[int, ...], n: int) -> list[tuple[list, int]]:
    out = []
    for _ in range(n):
        axes = rng.choice(len(shape), size=1 + int(rng.integers(1, 3)), replace=False)
        sel = [((0, s - 1),) for s in shape]
        for a in axes[1:]:
            lo, hi = sorted(rng.integers(0, shape[a], 2))
            sel[a] = ((int(lo), int(hi)),)
        out.append((sel, int(axes[0])))
    return out


def group_metrics(cube: WideCube, cells: np.ndarray, groups: list[tuple[list, int]]) -> dict[str, float]:
    errs, covered = [], []
    for sel, g in groups:
        values = cube.grouped_totals(steps.COUNT_KEY, sel, (g,))
        sds = np.sqrt(np.maximum(cube.grouped_variances(steps.COUNT_KEY, sel, (g,)), 0.0))
        mask = np.ones(len(cells), dtype=bool)
        for a, ((lo, hi),) in enumerate(sel):
            if a != g:
                mask &= (cells[:, a] >= lo) & (cells[:, a] <= hi)
        truth = np.bincount(cells[mask, g], minlength=len(values))[: len(values)]
        errs.extend((values - truth).tolist())
        covered.extend((np.abs(values - truth) <= Z95 * sds).tolist())
    return {"count_rmse_per_group": float(np.sqrt(np.mean(np.square(errs)))), "coverage": float(np.mean(covered))}


def average(rows: list[dict]) -> dict:
    if isinstance(rows[0], dict):
        return {k: average([r[k] for r in rows]) for k in rows[0]}
    return float(np.mean(rows))


def report(results: dict, args: argparse.Namespace) -> str:
    lines = [
        "# Wide tables: the `cuboids` synopsis",
        "",
        f"`{command(args)}` — {args.builds} builds per ε, {args.queries} random range queries per k "
        "(uniform ranges on k random dimensions), truth over the rows the cube holds (measure clipped to "
        "its declared bounds). ε split as the service does: COUNT 20 %, SUM 80 %. Coverage: share of 95 % "
        "intervals holding the truth (exact bars for k ≤ 2; model bars for k = 3, 4).",
        "",
    ]
    for name, r in results.items():
        lines += [
            f"## {name}: {r['rows']:,} rows, {r['dimensions']} dimensions ({r['cells']:.2e} dense cells)",
            "",
            "COUNT with all of ε — `cuboids` vs HDPView (RMSE; ratio = cuboids / HDPView; coverage of each "
            "one's 95 % bar; HDPView's bar is its perturbation noise only):",
            "",
            "| ε | k | cuboids RMSE | HDPView RMSE | ratio | cuboids MAE | HDPView MAE | cuboids cov. | HDPView cov. |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for eps, res in r["count_only"].items():
            for k in (1, 2, 3, 4):
                c, h = res["cuboids"][f"k{k}"], res["hdpview"][f"k{k}"]
                lines.append(
                    f"| {eps} | {k} | {c['rmse']:,.1f} | {h['rmse']:,.1f} | {c['rmse'] / h['rmse']:.3f} | "
                    f"{c['mae']:,.1f} | {h['mae']:,.1f} | {c['coverage']:.3f} | {h['coverage']:.3f} |"
                )
        blocks = ", ".join(
            f"ε={e}: {res['hdpview']['blocks']:,.0f} blocks, {res['hdpview']['build_seconds']:.1f} s"
            for e, res in r["count_only"].items()
        )
        lines += [
            "",
            f"HDPView p-views: {blocks}.",
            "",
            "The service's split (COUNT 20 %, SUM 80 %):",
            "",
            f"Stored: {r['stored_bytes'] / 2**20:.2f} MB for 2 aggregates; source aggregation "
            f"(GROUPING SETS): {r['aggregate_seconds']:.2f} s.",
            "",
            "| ε | k | COUNT RMSE | COUNT MAE | COUNT med. rel. | COUNT cov. | SUM RMSE | SUM med. rel. | "
            "SUM cov. | AVG med. rel. | AVG cov. |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for eps, res in r["results"].items():
            for k in (1, 2, 3, 4):
                c, s, a = (res[f"k{k}"][x] for x in ("count", "sum", "avg"))
                lines.append(
                    f"| {eps} | {k} | {c['rmse']:,.1f} | {c['mae']:,.1f} | {c['median_rel']:.3f} | "
                    f"{c['coverage']:.3f} | {s['rmse']:,.0f} | {s['median_rel']:.3f} | {s['coverage']:.3f} | "
                    f"{a['median_rel']:.3f} | {a['coverage']:.3f} |"
                )
        lines += [
            "",
            "| ε | build s | peak MB | GROUP BY COUNT RMSE/group | GROUP BY cov. | cuboid query µs | model query µs |",
            "|---|---|---|---|---|---|---|",
        ]
        for eps, res in r["results"].items():
            lines.append(
                f"| {eps} | {res['build_seconds']:.2f} | {res['peak_mb']:.0f} | "
                f"{res['group_by']['count_rmse_per_group']:,.1f} | {res['group_by']['coverage']:.3f} | "
                f"{res['latency_us']['cuboid']:.0f} | {res['latency_us']['model']:.0f} |"
            )
        lines.append("")
    return "\n".join(lines)


def command(args: argparse.Namespace) -> str:
    return (
        f".venv/bin/python bench/wide_tables.py --builds {args.builds} --queries {args.queries} "
        f"--eps {','.join(str(e) for e in args.eps)} --tables {','.join(args.tables)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=600)
    parser.add_argument("--eps", type=lambda s: [float(x) for x in s.split(",")], default=[0.1, 1.0, 10.0])
    parser.add_argument("--tables", type=lambda s: s.split(","), default=["adult", "traffic", "bank"])
    args = parser.parse_args()
    results = {name: run_table(name, args.eps, args.builds, args.queries) for name in args.tables}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "wide_tables.json").write_text(json.dumps(results, indent=1))
    (RESULTS / "wide_tables.md").write_text(report(results, args))
    print(report(results, args))
    print(f"\nreproduce: {command(args)}")


if __name__ == "__main__":
    main()
