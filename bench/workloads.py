"""Dashboard workloads: Prima's default, Prima with the dashboard declared, a per-query engine and
the optimum, side by side.

For Adult, Bank, PUMS and Traffic (declarations from public facts: domains, a week's hours, the
datasets' published bounds), a dashboard of 21–25 aggregate queries — the total, every one-column
GROUP BY (COUNT, SUM, AVG), two two-column GROUP BYs (COUNT, SUM), and on Traffic quarterly and
yearly series of its month axis — at ε = 1 and at ρ = 0.015, over ``--builds`` seeded builds:

* ``default`` — the table as declared (the dense ``auto`` cube);
* ``workload`` — the same with ``cube.workload`` listing the dashboard's statements;
* ``per-query`` — an engine answering each of the Q aggregate queries alone with 1/Q of the budget
  (an AVG halves its part between its COUNT and its SUM), one Laplace (ε) or Gaussian (ρ) draw per
  answer cell at the query's sensitivity, simulated on the exact answers;
* ``optimum`` — the least variance any measurement of the workload's marginals reaches for the
  dashboard's objective (each query's variance over the per-query split's, summed):
  ResidualPlanner's closed form under ρ, HDMM's OPT_M under ε (privacy/strategies/optimum.py),
  computed from the shapes alone (an AVG's: its SUM's part).

Errors are per answer cell against each table's exact cube (noise off, the same semantics). The
report gives per aggregate class the geometric mean (and the worst) over the dashboard's queries of
RMSE ratios, and the median relative error of one-column AVG and SUM over groups of ≥ 1,000 rows.

Run: .venv/bin/python bench/workloads.py [--builds 5] [--tables adult,bank]
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.shared_data import publish  # noqa: E402
from engine.answers.options import AnswerOptions  # noqa: E402
from engine.builds.workload import workload_queries  # noqa: E402
from engine.service import Prima  # noqa: E402
from privacy.strategies.optimum import AggregateQuery, opt_m_ratios, residual_planner_ratios  # noqa: E402
from storage.schema import TableSpec  # noqa: E402
from tests.conftest import dataset  # noqa: E402
from tests.test_bias import TABLES as bias_tables  # noqa: E402
from tests.test_bias import _cps as _cps_table  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RAW = AnswerOptions(clamp=False, outside_groups="all")
EPSILON, RHO = 1.0, 0.015
OPTIMUM_MAX_DIMENSIONS = 10
DETAIL = False
AGGREGATES = ("COUNT", "SUM", "AVG")


def _adult() -> dict[str, Any]:
    """tests/test_bias.py's Adult (age, sex, workclass; hours a week) and three more UCI columns."""
    raw = bias_tables["adult"]()
    raw["dimensions"] += [
        {"name": "education_num", "type": "int", "lo": 1, "hi": 16},  # UCI's 16 levels
        {"name": "race", "type": "category", "values": ["White", "Black", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other"]},
        {"name": "marital_status", "type": "category", "values": [
            "Married-civ-spouse", "Never-married", "Divorced", "Separated", "Widowed", "Married-spouse-absent",
            "Married-AF-spouse",
        ]},
    ]  # fmt: skip
    return raw | {"pairs": [("sex", "workclass"), ("age", "education_num")]}


def _adult_wide() -> dict[str, Any]:
    """`_adult` with UCI's occupation, relationship and income class: nine dimensions, past the dense
    cube's six, so measured as ``cuboids`` (whose shares the workload leaves; it sets the split)."""
    raw = _adult()
    raw["name"] = "adult_wide"
    occupations = [
        "Tech-support", "Craft-repair", "Other-service", "Sales", "Exec-managerial", "Prof-specialty",
        "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical", "Farming-fishing", "Transport-moving",
        "Priv-house-serv", "Protective-serv", "Armed-Forces",
    ]  # fmt: skip
    relationships = ["Wife", "Own-child", "Husband", "Not-in-family", "Other-relative", "Unmarried"]
    raw["dimensions"] += [
        {"name": "occupation", "type": "category", "values": occupations},
        {"name": "relationship", "type": "category", "values": relationships},
        {"name": "income", "type": "category", "values": ["<=50K", ">50K"]},
    ]
    return raw


def _bank() -> dict[str, Any]:
    """tests/test_bias.py's Bank (age, marital, education; balance) and UCI's job, housing and loan."""
    jobs = ["admin.", "blue-collar", "entrepreneur", "housemaid", "management", "retired", "self-employed"]
    jobs += ["services", "student", "technician", "unemployed", "unknown"]  # UCI's list
    raw = bias_tables["bank"]()
    raw["dimensions"] += [
        {"name": "job", "type": "category", "values": jobs},
        {"name": "housing", "type": "category", "values": ["yes", "no"]},
        {"name": "loan", "type": "category", "values": ["yes", "no"]},
    ]
    return raw | {"pairs": [("marital", "education"), ("age", "job")]}


def _pums() -> dict[str, Any]:
    """tests/test_bias.py's PUMS (age, sex, educ; income) and the census's race and married codes."""
    raw = bias_tables["pums"]()
    raw["dimensions"] += [
        {"name": "race", "type": "int", "lo": 1, "hi": 6},
        {"name": "married", "type": "int", "lo": 0, "hi": 1},
    ]
    return raw | {"pairs": [("sex", "educ"), ("age", "married")]}


def _traffic() -> dict[str, Any]:
    """tests/test_bias.py's Traffic with cloud cover and the date by month (a series dashboard)."""
    raw = bias_tables["traffic"]()
    weather, date = raw["dimensions"]
    raw["dimensions"] = [
        weather,
        {"name": "clouds_all", "type": "int", "lo": 0, "hi": 100, "bin": 25},  # cloud cover, %
        date | {"granularity": "month"},
    ]
    return raw | {
        "pairs": [("weather_main", "clouds_all"), ("weather_main", "date_time")],
        "series": [("quarter", AGGREGATES), ("year", ("COUNT", "SUM"))],
    }


def _adult_wide_triple() -> dict[str, Any]:
    """`_adult_wide` whose dashboard also asks one 3-column GROUP BY (sex × race × income), which a
    declared workload has measured as a cuboid (`engine.builds.workload.declared_cuboids`)."""
    return _adult_wide() | {"name": "adult_wide_triple", "triples": [("sex", "race", "income")]}


def _cps() -> dict[str, Any]:
    """The issue's CPS-shaped wage table (tests/test_bias.py: generated, a log2 axis on the wage)."""
    raw = _cps_table(Path(tempfile.mkdtemp()))
    return raw | {"pairs": [("education", "region"), ("experience", "parttime")]}


def _bank_wide() -> dict[str, Any]:
    """examples/bank.yaml (sixteen columns: `cuboids`; `balance` with a log2 axis and counts per class)
    without its explicit weights and truncation, so that the workload sets the split and answers are
    unbiased: the wide table whose SUMs ride on a class axis."""
    raw = yaml.safe_load((REPO / "examples" / "bank.yaml").read_text())
    raw = {k: v for k, v in raw.items() if k not in ("cube", "answers", "epsilon", "expected_rows")}
    raw["source"] = raw["source"] | {"csv": str(dataset("bank-full.csv"))}
    return raw | {"name": "bank_wide", "pairs": [("housing", "loan"), ("job", "education")]}


def _never_null(make: Any) -> Any:
    """The table with its measure declared never NULL, as the datasets' documentation states (UCI lists
    Adult's missing values in workclass, occupation and native-country only; Bank and Traffic have
    none; SmartNoise's PUMS sample none): COUNT(*) then divides AVGs, and COUNT(m)'s 10 % share stays
    with COUNT and the SUMs."""

    def made() -> dict[str, Any]:
        raw = make()
        raw["measures"] = [m | {"nullable": False} for m in raw["measures"]]
        return raw

    return made


TABLES = {
    "adult": _never_null(_adult),
    "bank": _never_null(_bank),
    "pums": _never_null(_pums),
    "traffic": _never_null(_traffic),
    "cps": _cps,
    "adult_wide": _never_null(_adult_wide),
    "adult_wide_triple": _never_null(_adult_wide_triple),
    "bank_wide": _never_null(_bank_wide),
}


def dashboard(raw: dict[str, Any]) -> list[tuple[str, tuple[str, ...]]]:
    """The dashboard's statements and the aggregates each asks (one query per aggregate)."""
    t, m = raw["name"], raw["measures"][0]["name"]
    out = [(f"SELECT COUNT(*), SUM({m}), AVG({m}) FROM {t}", AGGREGATES)]
    for d in raw["dimensions"]:
        out.append((f"SELECT {d['name']}, COUNT(*), SUM({m}), AVG({m}) FROM {t} GROUP BY {d['name']}", AGGREGATES))
    for a, b in raw["pairs"]:
        out.append((f"SELECT {a}, {b}, COUNT(*), SUM({m}) FROM {t} GROUP BY {a}, {b}", ("COUNT", "SUM")))
    for cols in raw.get("triples", []):  # a wide table measures a declared triple (declared_cuboids)
        keys = ", ".join(cols)
        out.append((f"SELECT {keys}, COUNT(*), SUM({m}) FROM {t} GROUP BY {keys}", ("COUNT", "SUM")))
    date = next((d["name"] for d in raw["dimensions"] if d["type"] == "date"), None)
    for grain, aggs in raw.get("series", []):
        cols = ", ".join({"COUNT": "COUNT(*)", "SUM": f"SUM({m})", "AVG": f"AVG({m})"}[a] for a in aggs)
        out.append((f"SELECT DATE_TRUNC('{grain}', {date}) AS {grain}, {cols} FROM {t} GROUP BY 1", aggs))
    return out


def undeclared(raw: dict[str, Any]) -> list[str]:
    """Two-column GROUP BYs the dashboard does not ask: what an ad-hoc analyst gets."""
    t, m = raw["name"], raw["measures"][0]["name"]
    dims = [d["name"] for d in raw["dimensions"]]
    asked = {frozenset(p) for p in raw["pairs"]}
    pairs = [(a, b) for i, a in enumerate(dims) for b in dims[i + 1 :] if frozenset((a, b)) not in asked]
    return [f"SELECT {a}, {b}, COUNT(*), SUM({m}) FROM {t} GROUP BY {a}, {b}" for a, b in pairs]


# name: cube.ad_hoc_weight with the dashboard declared; "default": nothing declared (the default
# workload); "no workload": ``cube.workload: []`` (every pair alike, COUNT 20 %: the default until now)
VARIANTS: dict[str, float | str] = {
    "no workload": "none",
    "default": "default",
    "workload": 0.05,
    "dashboard only": 0.0,
}


def spec_of(raw: dict[str, Any], currency: str, variant: float | str) -> TableSpec:
    """The table at ``currency`` as ``variant`` (`VARIANTS`) declares it."""
    spec = {k: v for k, v in raw.items() if k not in ("pairs", "series", "triples")}
    spec |= {"epsilon": EPSILON} if currency == "epsilon" else {"rho": RHO}
    cube: dict[str, Any] = {"build": "on_first_query"}
    if variant == "none":
        cube["workload"] = []
    elif isinstance(variant, float):
        cube |= {"workload": [{"sql": sql} for sql, _ in dashboard(raw)], "ad_hoc_weight": variant}
    return TableSpec.model_validate(spec | {"cube": cube})


def aggregate_queries(raw: dict[str, Any]) -> list[tuple[int, str, AggregateQuery]]:
    """(statement, aggregate, its shape and per-query share) for every aggregate query."""
    spec = spec_of(raw, "epsilon", 0.0)
    shape = tuple(d.cells for d in spec.dimensions)
    shapes = [w.on(shape) for w in workload_queries(spec) or ()]
    asked = [(s, a) for s, (_, aggs) in enumerate(dashboard(raw)) for a in aggs]
    q = len(asked)
    return [(s, a, AggregateQuery(shapes[s], a != "COUNT", 1 / q / (2 if a == "AVG" else 1))) for s, a in asked]


def _answers(prima: Prima, sql: str, aggs: tuple[str, ...]) -> tuple[dict[tuple, list], list[list]]:
    """An answer's cells by group key, and its stated stddevs."""
    got = prima.query(sql, RAW)
    k = len(got["group_columns"])
    return {tuple(r[:k]): r[k:] for r in got["rows"]}, [sd[k:] for sd in got["stddev"]]


def _delta(raw: dict[str, Any]) -> float:
    """A SUM's sensitivity: one row moves it by at most the measure's largest |bound|."""
    m = raw["measures"][0]
    return float(max(abs(m["lo"]), abs(m["hi"])))


def _scale(sensitivity: float, share: float, currency: str) -> float:
    """The per-query engine's noise for one answer cell at ``share`` of the budget: Laplace's b
    (stddev √2·b) under ε, the Gaussian's σ under ρ."""
    if currency == "epsilon":
        return sensitivity / (EPSILON * share)
    return sensitivity / math.sqrt(2 * RHO * share)


def _per_query(truth: list[dict], raw: dict[str, Any], currency: str, builds: int) -> list[list[dict]]:
    """Each aggregate query released alone with 1/Q of the budget (AVG: halves for COUNT and SUM)."""
    delta = _delta(raw)
    statements = dashboard(raw)
    q = sum(len(aggs) for _, aggs in statements)
    rng = np.random.default_rng(7)  # a simulation of another engine's noise, not a release

    def draw(sensitivity: float, share: float) -> float:
        b = _scale(sensitivity, share, currency)
        return float(rng.laplace(0, b) if currency == "epsilon" else rng.normal(0, b))

    runs = []
    for _ in range(builds):
        answers = []
        for (_, aggs), cells in zip(statements, truth):
            out = {}
            for key, want in cells.items():
                row = []
                for j, a in enumerate(aggs):
                    if a == "COUNT":
                        row.append(want[j] + draw(1, 1 / q))
                    elif a == "SUM":
                        row.append(want[j] + draw(delta, 1 / q))
                    else:
                        count, total = want[0] + draw(1, 0.5 / q), want[1] + draw(delta, 0.5 / q)
                        row.append(total / count if count >= 1 else None)
                out[key] = row
            answers.append(out)
        runs.append(answers)
    return runs


def _rmse(runs: list[list[dict]], truth: list[dict], s: int, j: int) -> float:
    errors = [
        (got[s][key][j] - want[j]) ** 2
        for got in runs
        for key, want in truth[s].items()
        if key in got[s] and want[j] is not None and got[s][key][j] is not None
    ]
    return math.sqrt(statistics.fmean(errors)) if errors else math.nan


def _analytic_per_query(raw: dict[str, Any], currency: str, query: AggregateQuery) -> float:
    """The per-query split's stddev of one answer cell (an AVG's: its SUM's, in SUM units)."""
    scale = _scale(_delta(raw) if query.sums else 1.0, query.share, currency)
    return math.sqrt(2) * scale if currency == "epsilon" else scale


def run(raw: dict[str, Any], currency: str, builds: int, tmp: Path) -> list[str]:
    statements = dashboard(raw)
    queries = aggregate_queries(raw)
    shape = tuple(d.cells for d in spec_of(raw, currency, "none").dimensions)
    # the optimum's lattice walks all 2^d subspaces (and OPT_M's search differentiates numerically):
    # beyond OPTIMUM_MAX_DIMENSIONS columns it is not computed ("–")
    optimum: list[float | None] = (
        list((opt_m_ratios if currency == "epsilon" else residual_planner_ratios)(shape, [q for *_, q in queries]))
        if len(shape) <= OPTIMUM_MAX_DIMENSIONS
        else [None] * len(queries)
    )
    runs: dict[str, list] = {}
    stated: dict[str, list[list[list]]] = {}
    adhoc: dict[tuple[str, str], list[list]] = {}
    truth: list[dict] = []
    for variant, weight in VARIANTS.items():
        runs[variant], stated[variant] = [], [[] for _ in statements]
        for seed in range(builds):
            data = tmp / f"{raw['name']}-{currency}-{variant}-{seed}"
            prima = Prima(data, seed=seed)
            prima.register(spec_of(raw, currency, weight))
            if not truth:
                cube = prima.exact_cube(raw["name"])
                truth = [_exact(prima, sql, cube) for sql, _ in statements]
            answers = [_answers(prima, sql, aggs) for sql, aggs in statements]
            runs[variant].append([cells for cells, _ in answers])
            for s, (_, sds) in enumerate(answers):
                stated[variant][s] += sds
            for sql in undeclared(raw):
                adhoc.setdefault((variant, sql), []).extend(_answers(prima, sql, ("COUNT", "SUM"))[1])
            prima.close()
            shutil.rmtree(data)  # a CPS build keeps ~0.4 GB of cubes: 40 of them filled the disk
    runs["per-query"] = _per_query(truth, raw, currency, builds)
    budget = f"ε = {EPSILON:g}" if currency == "epsilon" else f"ρ = {RHO:g}"
    lines = [f"### {raw['name']}, {budget} ({len(queries)} aggregate queries, {builds} builds)", ""]
    lines += [
        "RMSE over the per-query split's (geometric mean over the class's queries; COUNT and SUM from the "
        "stated stddevs, exact for least squares, and the per-query engine's exact noise; AVG empirical):",
        "",
        "| aggregate | queries | no workload | default | workload | dashboard only | optimum "
        "| workload / optimum (worst) | dashboard only / optimum (worst) | workload, empirical |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label in AGGREGATES:
        ratios: dict[str, list[float]] = {}
        for (s, a, query), ratio in zip(queries, optimum):
            if a != label:
                continue
            j = statements[s][1].index(a)
            r = {k: _rmse(v, truth, s, j) for k, v in runs.items()}
            ratios.setdefault("empirical", []).append(r["workload"] / r["per-query"])
            if a != "AVG":  # exact: stated stddevs (least squares) against the per-query engine's
                r = {k: _rms([sd[j] for sd in stated[k][s]]) for k in stated}
                r["per-query"] = _analytic_per_query(raw, currency, query)
                if ratio is not None:
                    ratios.setdefault("optimum", []).append(math.sqrt(ratio))
            for k in VARIANTS:
                ratios.setdefault(k, []).append(r[k] / r["per-query"])
                if a != "AVG" and ratio is not None:
                    ratios.setdefault(f"{k}/optimum", []).append(r[k] / r["per-query"] / math.sqrt(ratio))
            if DETAIL:
                print(raw["name"], currency, label, statements[s][0][:60], {k: f"{v:.4g}" for k, v in r.items()})
        g = {k: _geomean(v) for k, v in ratios.items()}
        worst = {k: max(v) for k, v in ratios.items()}
        cells = [f"{g[k]:.2f}" for k in VARIANTS] + [f"{g['optimum']:.2f}" if "optimum" in g else "–"]
        cells += [
            f"{g[k + '/optimum']:.2f} ({worst[k + '/optimum']:.2f})" if k + "/optimum" in g else "–"
            for k in ("workload", "dashboard only")
        ]
        lines.append(f"| {label} | {len(ratios['default'])} | " + " | ".join(cells) + f" | {g['empirical']:.2f} |")
    lines += ["", f"undeclared two-column GROUP BYs ({len(undeclared(raw))}), stated stddev over no workload's:", ""]
    for j, label in enumerate(("COUNT", "SUM")):
        parts = []
        for k in [v for v in VARIANTS if v != "no workload"]:
            r = [
                _rms([sd[j] for sd in adhoc[(k, q)]]) / _rms([sd[j] for sd in adhoc[("no workload", q)]])
                for q in undeclared(raw)
            ]
            parts.append(f"{k} {_geomean(r):.2f} (worst {max(r, default=math.nan):.2f})")
        lines.append(f"* {label}: " + ", ".join(parts))
    lines += ["", "median relative error, one-column GROUP BY, groups of ≥ 1,000 rows:", ""]
    for name in runs:
        parts = []
        for j, label in ((1, "SUM"), (2, "AVG")):
            rel = [
                abs(got[s][key][j] - want[j]) / abs(want[j])
                for got in runs[name]
                for s in range(1, 1 + len(raw["dimensions"]))
                for key, want in truth[s].items()
                if want[0] >= 1000 and want[j] and key in got[s] and got[s][key][j] is not None
            ]
            parts.append(f"{label} {statistics.median(rel):.1%}" if rel else f"{label} – (no such group)")
        lines.append(f"* {name}: " + ", ".join(parts))
    return lines + [""]


def _exact(prima: Prima, sql: str, cube: Any) -> dict[tuple, list]:
    got = prima.answer_with(sql, lambda _: cube)
    k = len(got["group_columns"])
    return {tuple(r[:k]): r[k:] for r in got["rows"]}


def _rms(values: list[Any]) -> float:
    kept = [v for v in values if v is not None]
    return math.sqrt(statistics.fmean(v * v for v in kept)) if kept else math.nan


def _geomean(values: list[float]) -> float:
    kept = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(statistics.fmean(math.log(v) for v in kept)) if kept else math.nan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--builds", type=int, default=5)
    # and cps (the CPS-shaped table), adult_wide (nine dimensions: cuboids), adult_wide_triple
    # (the same with a 3-column GROUP BY in its dashboard), bank_wide (sixteen dimensions, a class-axis SUM)
    parser.add_argument("--tables", default="adult,bank,pums,traffic")
    parser.add_argument("--currencies", default="epsilon,rho")
    parser.add_argument("--out", default="workloads.md", help="the report's name under bench/results/")
    parser.add_argument(
        "--clipping", default="fixed", help="the measure's clipping (fixed, sbs, clasp, support: storage/schema.py)"
    )
    args = parser.parse_args()
    lines = ["# Dashboard workloads: default, declared workload, per-query split, optimum", ""]
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.tables.split(","):
            for currency in args.currencies.split(","):
                raw = TABLES[name]()
                if args.clipping != "fixed":
                    raw["name"] = f"{raw['name']}_{args.clipping}"
                    raw["measures"] = [m | {"clipping": args.clipping} for m in raw["measures"]]
                lines += run(raw, currency, args.builds, Path(scratch))
    out = "" if args.out == "workloads.md" else f" --out {args.out}"
    out += "" if args.clipping == "fixed" else f" --clipping {args.clipping}"
    lines += [f"Reproduce: .venv/bin/python bench/workloads.py --builds {args.builds} --tables {args.tables}{out}"]
    publish(args.out, lines)


if __name__ == "__main__":
    main()
