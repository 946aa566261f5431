"""Per-group medians: Prima's one release against per-query DP quantiles.

    .venv/bin/python bench/quantiles.py [--builds 10] [--trials 10] [--opendp /tmp/opendp-venv/bin/python]

Three tables, each a group column and a measure with public bounds:

* Adult (adult.data, 32,561 rows): hours-per-week in [1, 99] by education (16 values);
* Bank (bank-full.csv, 45,211 rows): balance in [−10,000, 100,000] by job (12 values);
* Salary (generated here: 20 departments of 200–6,000 people, log-normal pay) in [0, 500,000] by dept.

**Prima**: one build at ε = 1 for the whole table (default strategy; the default ε split between
COUNT(*), SUM and the COUNT per class the medians read — 20/40/40 % — and a split for a table kept
for medians, 10/10/80 %), then `SELECT g, MEDIAN(m) FROM t GROUP BY g`
— any number of such queries, free. Classes: linear of width 2 for hours; log2 for money (10 octaves per side with 2 each for balance, 12 with 4 for salary: at most 64 classes).

**OpenDP** (`opendp` 0.16, `make_private_quantile`: the exponential mechanism over a public candidate
grid, Smith 2011) in a bench-only environment (`bench/quantiles_opendp.py`, run in its own venv):
a dashboard that asks N queries of one ε = 1 budget gives each ε/N; the GROUP BY costs one query (the
groups are disjoint). N = 1, 10, 100. Candidates: every integer for hours, 2,001 signed log-spaced
points for money — finer than Prima's classes.

Reported per table and method: the median over groups and runs of the **rank error** |F_g(answer) −
0.5| (F_g the group's empirical CDF: 0.1 means the answer sits at the 40th or 60th percentile) and of
the **value error** |answer − true median|, relative to the true median; for Prima the coverage of
its 95 % intervals. The exact quantile is DuckDB's `quantile_cont` of the clipped values.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.service import Prima  # noqa: E402
from storage.schema import TableSpec  # noqa: E402

DATA = ROOT.parent / "shared" / "datasets"
NS = (1, 10, 100)
# A table kept for medians says so in its weights (public): COUNT(*) 10 %, SUM 10 %, COUNT per class 80 %.
MEDIANS_FIRST = {"count": 1.0, "v": 1.0, "count:v": 8.0}


def tables(tmp: Path) -> list[dict]:
    """(name, csv, groups, measure bounds, axis, candidate grid) per table; groups from public lists."""
    con = duckdb.connect()
    adult = tmp / "adult.csv"
    con.sql(
        f"COPY (SELECT trim(column03) AS g, column12 AS v FROM read_csv('{DATA / 'adult.data'}', header=false) "
        f"WHERE column12 IS NOT NULL) TO '{adult}' (HEADER)"
    )
    bank = tmp / "bank.csv"
    con.sql(
        f"COPY (SELECT job AS g, balance AS v FROM read_csv('{DATA / 'bank-full.csv'}', delim=';')) TO '{bank}' (HEADER)"
    )
    rng = np.random.default_rng(11)  # the generated table's data, not noise
    sizes = np.linspace(200, 6000, 20).astype(int)
    salary = tmp / "salary.csv"
    with salary.open("w") as f:
        f.write("g,v\n")
        for i, n in enumerate(sizes):
            for v in np.round(np.exp(rng.normal(10.6 + 0.03 * i, 0.5, n)), 2):
                f.write(f"d{i:02d},{v}\n")
    money = np.geomspace(1.0, 1e5, 1000)
    return [
        {
            "name": "adult_hours",
            "csv": adult,
            "lo": 1,
            "hi": 99,
            "axis": {"kind": "linear", "classes": 49, "count": True},
            "groups": [
                "Bachelors",
                "Some-college",
                "11th",
                "HS-grad",
                "Prof-school",
                "Assoc-acdm",
                "Assoc-voc",
                "9th",
                "7th-8th",
                "12th",
                "Masters",
                "1st-4th",
                "10th",
                "Doctorate",
                "5th-6th",
                "Preschool",
            ],
            "candidates": np.arange(1, 100, dtype=float),
        },
        {
            "name": "bank_balance",
            "csv": bank,
            "lo": -10000,
            "hi": 100000,
            "axis": {"kind": "log2", "count": True, "classes": 10, "per_octave": 2},
            "groups": [
                "admin.",
                "blue-collar",
                "entrepreneur",
                "housemaid",
                "management",
                "retired",
                "self-employed",
                "services",
                "student",
                "technician",
                "unemployed",
                "unknown",
            ],
            "candidates": np.unique(np.concatenate([-money[money <= 1e4], [0.0], money])),
        },
        {
            "name": "salary",
            "csv": salary,
            "lo": 0,
            "hi": 500000,
            "axis": {"kind": "log2", "count": True, "classes": 12, "per_octave": 4},
            "groups": [f"d{i:02d}" for i in range(20)],
            "candidates": np.unique(np.concatenate([[0.0], np.geomspace(1.0, 5e5, 2000)])),
        },
    ]


def truths(t: dict) -> dict[str, np.ndarray]:
    rows = duckdb.sql(
        f"SELECT g, LEAST(GREATEST(v, {t['lo']}), {t['hi']}) FROM read_csv('{t['csv']}') WHERE v IS NOT NULL"
    ).fetchall()
    out: dict[str, list[float]] = {}
    for g, v in rows:
        out.setdefault(g, []).append(float(v))
    return {g: np.sort(np.array(v)) for g, v in out.items() if g in t["groups"]}


def errors(answer: float, values: np.ndarray) -> tuple[float, float]:
    """(rank error |F(answer) − 0.5|, value error relative to the true median)."""
    below = np.searchsorted(values, answer, side="left") / len(values)
    at_or_below = np.searchsorted(values, answer, side="right") / len(values)
    rank = 0.0 if below <= 0.5 <= at_or_below else min(abs(below - 0.5), abs(at_or_below - 0.5))
    true = float(np.quantile(values, 0.5))
    return rank, abs(answer - true) / max(abs(true), 1.0)


def prima_runs(t: dict, data: dict[str, np.ndarray], builds: int, tmp: Path, weights: dict | None = None) -> dict:
    cube = {"build": "admin"} | ({"weights": weights} if weights else {})
    spec = {
        "name": t["name"],
        "source": {"csv": str(t["csv"])},
        "epsilon": 1.0,
        "cube": cube,
        "dimensions": [{"name": "g", "type": "category", "values": t["groups"]}],
        "measures": [{"name": "v", "lo": t["lo"], "hi": t["hi"], "axis": t["axis"]}],
    }
    ranks, values, hits, widths, seconds = [], [], 0, [], []
    for b in range(builds):
        prima = Prima(tmp / f"{t['name']}-{b}-{bool(weights)}", seed=1000 + b)
        prima.register(TableSpec.model_validate(spec))
        start = time.perf_counter()
        prima.build(t["name"])
        seconds.append(time.perf_counter() - start)
        answer = prima.query(f"SELECT g, MEDIAN(v) FROM {t['name']} GROUP BY g")
        for (g, m), ci in zip(answer["rows"], answer["ci95"]):
            if g not in data or m is None:
                continue
            r, v = errors(m, data[g])
            ranks.append(r), values.append(v)
            truth = float(np.quantile(data[g], 0.5))
            hits += ci[1][0] <= truth <= ci[1][1]
            widths.append((ci[1][1] - ci[1][0]) / max(abs(truth), 1.0))
        prima.close()
    return {
        "rank": float(np.median(ranks)),
        "value": float(np.median(values)),
        "coverage": hits / len(ranks),
        "width": float(np.median(widths)),
        "build_s": float(np.median(seconds)),
    }


def resolution_floor(t: dict, data: dict[str, np.ndarray]) -> dict:
    """Prima with noise off: the within-class model's own error (what finer classes would buy)."""
    from engine.answers.quantiles import _read
    from privacy.clipping.measure_axis import classes_of

    axis = t["axis"]
    classes = classes_of(
        axis["kind"], t["lo"], t["hi"], classes=axis.get("classes"), per_octave=axis.get("per_octave", 1)
    )
    pairs = []
    for values in data.values():
        cumulative = np.cumsum(np.bincount(classes.classify(values), minlength=classes.count)).astype(float)
        pairs.append(errors(_read(cumulative, 0.5 * cumulative[-1], list(range(classes.count)), classes), values))
    return {"rank": float(np.median([p[0] for p in pairs])), "value": float(np.median([p[1] for p in pairs]))}


def opendp_runs(
    all_tables: list[dict],
    data: dict[str, dict[str, np.ndarray]],
    trials: int,
    python: str,
    tmp: Path,
    ns: tuple[int, ...] = NS,
) -> dict:
    arrays = {"ns": np.array(ns), "trials": np.array(trials), "alpha": np.array(0.5)}
    for t in all_tables:
        arrays[f"candidates|{t['name']}"] = t["candidates"]
        for g, v in data[t["name"]].items():
            arrays[f"{t['name']}|{g}"] = v
    np.savez(tmp / "in.npz", **arrays)
    subprocess.run(
        [python, str(ROOT / "bench" / "quantiles_opendp.py"), str(tmp / "in.npz"), str(tmp / "out.json")], check=True
    )
    raw = json.loads((tmp / "out.json").read_text())
    out: dict = {}
    for name, groups in raw.items():
        for n in ns:
            pairs = [errors(a, data[name][g]) for g, per_n in groups.items() for a in per_n[str(n)]]
            out[(name, n)] = {
                "rank": float(np.median([p[0] for p in pairs])),
                "value": float(np.median([p[1] for p in pairs])),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", type=int, default=10)
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument(
        "--ns",
        type=lambda v: tuple(int(x) for x in v.split(",")),
        default=NS,
        help="queries sharing ε = 1 on the OpenDP side (default 1,10,100)",
    )
    parser.add_argument(
        "--opendp", default="/tmp/opendp-venv/bin/python", help="a Python with bench/requirements-opendp.txt installed"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        all_tables = tables(tmp)
        data = {t["name"]: truths(t) for t in all_tables}
        ours = {t["name"]: prima_runs(t, data[t["name"]], args.builds, tmp) for t in all_tables}
        first = {t["name"]: prima_runs(t, data[t["name"]], args.builds, tmp, MEDIANS_FIRST) for t in all_tables}
        floor = {t["name"]: resolution_floor(t, data[t["name"]]) for t in all_tables}
        theirs = opendp_runs(all_tables, data, args.trials, args.opendp, tmp, args.ns)
    lines = [
        "| table | method | median rank error | median value error (× true median) | 95 % interval coverage |",
        "|---|---|---|---|---|",
    ]
    for t in all_tables:
        for label, p in (("default ε split", ours[t["name"]]), ("80 % of ε on the counts per class", first[t["name"]])):
            lines.append(
                f"| {t['name']} | Prima, one build at ε = 1, {label} (any number of queries) | {p['rank']:.4f} | "
                f"{p['value']:.4f} | {p['coverage']:.3f} (median width {p['width']:.2f}× the median) |"
            )
        f = floor[t["name"]]
        lines.append(
            f"| {t['name']} | Prima's classes with noise off (the within-class model alone) | {f['rank']:.4f} | "
            f"{f['value']:.4f} | — |"
        )
        for n in args.ns:
            o = theirs[(t["name"], n)]
            lines.append(
                f"| {t['name']} | OpenDP quantile at ε/{n} per query (N = {n}) | {o['rank']:.4f} | "
                f"{o['value']:.4f} | — |"
            )
    print("\n".join(lines))
    print(
        f"\n{args.builds} Prima builds and {args.trials} OpenDP runs per group and N; reproduce: "
        f".venv/bin/python bench/quantiles.py --builds {args.builds} --trials {args.trials} "
        f"--ns {','.join(map(str, args.ns))}"
    )


if __name__ == "__main__":
    main()
