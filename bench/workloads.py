"""Dashboard workloads: today's default, a declared workload, and a per-query engine, side by side.

For Adult, Bank, PUMS, Traffic and the CPS-shaped table of tests/test_bias.py (their declarations),
a dashboard of the total, every one-column GROUP BY (COUNT, SUM, AVG) and two two-column GROUP BYs
(COUNT, SUM) at ε = 1, over ``--builds`` seeded builds each:

* ``default`` — the table as declared (the dense ``auto`` cube);
* ``workload`` — the same with ``cube.workload`` naming the dashboard's GROUP BY sets
  (privacy/strategies/workload.py: HDMM's OPT_M over 0-/1-/2-D marginals);
* ``per-query`` — an engine that answers each of the dashboard's N statements alone with ε/N,
  split evenly over its aggregates (one Laplace draw per answer cell; a GROUP BY's cells partition
  the rows, so a statement's release has sensitivity Δ), simulated on the exact answers.

Errors are against each table's exact cube (noise off, the same semantics), per answer cell; the
report gives, per aggregate class, the geometric mean over the dashboard's queries of each RMSE
ratio (and of the stated stddevs' ratio: exact where the answer is least squares, so it does not
wobble with few builds as the empirical RMSE does), and the median relative error of one-column
AVG and SUM over groups of ≥ 1,000 rows.
Not here: HDMM's or ResidualPlanner's own optimum (their reference code is not installed).

Run: .venv/bin/python bench/workloads.py [--builds 5]
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_data import publish  # noqa: E402
from engine.answers.options import AnswerOptions  # noqa: E402
from engine.service import Prima  # noqa: E402
from storage.schema import TableSpec  # noqa: E402
from tests.test_bias import TABLES, _cps  # noqa: E402

RAW = AnswerOptions(clamp=False, outside_groups="all")


def dashboard(raw: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """The statements and the GROUP BY sets they ask."""
    t, m = raw["name"], raw["measures"][0]["name"]
    dims = [d["name"] for d in raw["dimensions"]]
    sets: list[list[str]] = [[]] + [[d] for d in dims] + [list(p) for p in itertools.combinations(dims, 2)][:2]
    sql = []
    for g in sets:
        keys = ", ".join(g)
        aggs = f"COUNT(*), SUM({m}), AVG({m})" if len(g) <= 1 else f"COUNT(*), SUM({m})"
        sql.append(f"SELECT {keys + ', ' if g else ''}{aggs} FROM {t}" + (f" GROUP BY {keys}" if g else ""))
    return sql, sets


def _answers(prima: Prima, sql: list[str], stated: list[list[list[float]]]) -> list[dict[tuple, list[Any]]]:
    """Each statement's answer cells by group key; their stated stddevs appended to ``stated[q]``."""
    out = []
    for q, text in enumerate(sql):
        got = prima.query(text, RAW)
        k = len(got["group_columns"])
        out.append({tuple(r[:k]): r[k:] for r in got["rows"]})
        stated[q] += [sd[k:] for sd in got["stddev"]]
    return out


def _stated(per_cell: list[list[float]], j: int) -> float:
    """The RMS of the stated stddevs of column j (exact where the answer is least squares)."""
    values = [row[j] for row in per_cell if row[j] is not None]
    return math.sqrt(statistics.fmean(v * v for v in values)) if values else math.nan


def _exact(prima: Prima, name: str, sql: list[str]) -> list[dict[tuple, list[Any]]]:
    cube = prima.exact_cube(name)
    out = []
    for q in sql:
        got = prima.answer_with(q, lambda _: cube)
        k = len(got["group_columns"])
        out.append({tuple(r[:k]): r[k:] for r in got["rows"]})
    return out


def _per_query(truth: list[dict], raw: dict[str, Any], builds: int, seed: int) -> list[list[dict]]:
    """Each statement released alone with ε/N split over its COUNT and SUM (AVG = their ratio)."""
    m = raw["measures"][0]
    delta = max(abs(m["lo"]), abs(m["hi"]))
    eps = 1.0 / len(truth) / 2  # a statement's share, halved between its COUNT and its SUM
    rng = np.random.default_rng(seed)  # a simulation of another engine's noise, not a release
    runs = []
    for _ in range(builds):
        answers = []
        for cells in truth:
            out = {}
            for key, (count, total, *_) in cells.items():
                c = count + rng.laplace(0, 1 / eps)
                s = total + rng.laplace(0, delta / eps)
                out[key] = [c, s] + ([s / c if c >= 1 else None] if len(next(iter(cells.values()))) == 3 else [])
            answers.append(out)
        runs.append(answers)
    return runs


def _rmse(runs: list[list[dict]], truth: list[dict], q: int, j: int) -> float:
    errors = [
        (got[q][key][j] - want[j]) ** 2
        for got in runs
        for key, want in truth[q].items()
        if key in got[q] and want[j] is not None and got[q][key][j] is not None
    ]
    return math.sqrt(statistics.fmean(errors)) if errors else math.nan


def run(raw: dict[str, Any], builds: int, tmp: Path) -> list[str]:
    sql, sets = dashboard(raw)
    variants = {
        "default": raw | {"epsilon": 1.0, "cube": {"build": "on_first_query"}},
        "workload": raw
        | {"epsilon": 1.0, "cube": {"build": "on_first_query", "workload": [{"group_by": g} for g in sets]}},
    }
    runs: dict[str, list] = {}
    stated: dict[str, list[list[list[float]]]] = {}
    truth: list[dict] = []
    for name, spec in variants.items():
        runs[name], stated[name] = [], [[] for _ in sql]
        for seed in range(builds):
            prima = Prima(tmp / f"{raw['name']}-{name}-{seed}", seed=seed)
            prima.register(TableSpec.model_validate(spec))
            if not truth:
                truth = _exact(prima, raw["name"], sql)
            runs[name].append(_answers(prima, sql, stated[name]))
            prima.close()
    runs["per-query"] = _per_query(truth, raw, builds, seed=7)
    lines = [f"### {raw['name']} ({len(sql)} statements, {builds} builds, ε = 1)", ""]
    lines += [
        "| aggregate | workload / default (stated) | workload / default | workload / per-query | default / per-query |",
        "|---|---|---|---|---|",
    ]
    for j, label in enumerate(["COUNT", "SUM", "AVG"]):
        ratios: dict[str, list[float]] = {"ws": [], "wd": [], "wp": [], "dp": []}
        for q in range(len(sql)):
            if j >= len(next(iter(truth[q].values()))):
                continue
            r = {k: _rmse(v, truth, q, j) for k, v in runs.items()}
            ratios["ws"].append(_stated(stated["workload"][q], j) / _stated(stated["default"][q], j))
            ratios["wd"].append(r["workload"] / r["default"])
            ratios["wp"].append(r["workload"] / r["per-query"])
            ratios["dp"].append(r["default"] / r["per-query"])
        g = {k: math.exp(statistics.fmean(math.log(x) for x in v if x > 0)) for k, v in ratios.items() if v}
        lines.append(f"| {label} | {g['ws']:.2f} | {g['wd']:.2f} | {g['wp']:.2f} | {g['dp']:.2f} |")
    lines += ["", "median relative error, one-column GROUP BY, groups of ≥ 1,000 rows:", ""]
    for name in runs:
        for j, label in ((1, "SUM"), (2, "AVG")):
            rel = [
                abs(got[q][key][j] - want[j]) / abs(want[j])
                for got in runs[name]
                for q in range(1, 1 + len(raw["dimensions"]))
                for key, want in truth[q].items()
                if want[0] >= 1000 and want[j] and key in got[q] and got[q][key][j] is not None
            ]
            lines.append(f"* {name} {label}: {statistics.median(rel):.1%}" if rel else f"* {name} {label}: –")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--builds", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp())
    lines = ["# Dashboard workloads: default vs declared workload vs per-query split", ""]
    for name, make in [*TABLES.items(), ("cps", lambda: _cps(tmp))]:
        lines += run(make(), args.builds, tmp)
    lines += [f"Reproduce: .venv/bin/python bench/workloads.py --builds {args.builds}"]
    publish("workloads.md", lines)


if __name__ == "__main__":
    main()
