"""Tables that grow: append time against history, and range errors of flat and tree releases.

A generated events table over 365 days (DuckDB writes it as `day=YYYY-MM-DD/` Parquet folders):
persons with many events (a Zipf-like id), a heavy-tailed amount (log-normal), three category
dimensions, a varying number of rows per day.

**Appends.** The table registered as growing (flat releases, and the table's tree), then appended
one day at a time through the CLI (`prima append <table> --next`, Typer's runner in this process: the
same command code, the library opened on the data dir each time). Seconds per append against the
history already measured: flat releases read one day each, so the time should not grow with history;
a tree's append also reads each block it closes (b, b², … days) — amortised L reads per row.

**Errors.** Per run (fresh noise, same rows): the flat table, the tree table, and the reference — one
measurement of the whole year at the same per-row budget (the table's dense strategy over the 365-day
axis, `hierarchical`: trees and least squares across the whole axis; impossible in practice, since it
needs the year's rows at once). For range lengths r, random ranges' COUNT and SUM(amount) against
DuckDB's SQL on the raw rows: RMSE, the mean stated stddev, and how often the 95 % interval covers.
The theory column is `privacy.accounting.periods.Releases.relative_variance` (tree over flat, in variance).

Run:  .venv/bin/python bench/growing.py [--runs 6] [--rows-per-day 800] [--currency rho|epsilon]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.answers.options import AnswerOptions  # noqa: E402
from engine.builds import growing  # noqa: E402
from engine.service import Prima  # noqa: E402
from privacy.accounting.periods import Releases  # noqa: E402
from storage.schema import TableSpec  # noqa: E402

DAYS = 365
START = dt.date(2025, 1, 1)
LENGTHS = (1, 7, 30, 91, 182, 365)
RESULTS = Path(__file__).resolve().parent / "results"


def generate(root: Path, rows_per_day: int, seed: int = 11) -> Path:
    """The events directory (and one Parquet file of all rows, for SQL's answers)."""
    con = duckdb.connect()
    con.execute(f"SELECT setseed({seed / 1000})")
    con.execute(f"""CREATE TABLE ev AS
        WITH days AS (SELECT d, CAST({rows_per_day} * (0.6 + 0.8 * random()) AS INTEGER) AS n
                      FROM range({DAYS}) t(d))
        SELECT DATE '{START}' + CAST(d AS INTEGER) AS day,
               CAST(floor(pow(random(), 2.5) * 20000) AS INTEGER) AS person,
               ['web', 'app', 'store', 'phone'][1 + CAST(floor(random() * 4) AS INTEGER)] AS channel,
               ['north', 'south', 'east', 'west'][1 + CAST(floor(random() * 4) AS INTEGER)] AS region,
               ['food', 'home', 'toys', 'books', 'garden'][1 + CAST(floor(random() * 5) AS INTEGER)] AS category,
               round(exp(3 + 1.2 * sqrt(-2 * ln(random())) * cos(2 * pi() * random())), 2) AS amount
        FROM days, range(n) r(i)""")
    out = root / "events"
    con.execute(f"COPY ev TO '{out}' (FORMAT parquet, PARTITION_BY (day))")
    con.execute(f"COPY ev TO '{root / 'events.parquet'}' (FORMAT parquet)")
    return out


def spec(path: Path, name: str, currency: str, releases: str | None, strategy: str = "auto") -> TableSpec:
    """Public metadata: the horizon, the declared values, amount bounds [0, 2000] (a published cap)."""
    body: dict[str, Any] = {
        "name": name,
        "source": {"parquet": str(path)},
        "dimensions": [
            {
                "name": "day",
                "type": "date",
                "lo": str(START),
                "hi": str(START + dt.timedelta(DAYS - 1)),
                "outside": "exclude",
            },
            {"name": "channel", "type": "category", "values": ["web", "app", "store", "phone"]},
            {"name": "region", "type": "category", "values": ["north", "south", "east", "west"]},
            {"name": "category", "type": "category", "values": ["food", "home", "toys", "books", "garden"]},
        ],
        "measures": [{"name": "amount", "lo": 0, "hi": 2000, "nullable": False}],
        "cube": {"strategy": strategy},
        currency: 1.0 if currency == "epsilon" else 0.5,
    }
    if releases is not None:
        body["growth"] = {"period": "day", "releases": releases, "typical_range": 91}
    return TableSpec.model_validate(body)


def append_times(root: Path, events: Path, currency: str) -> dict[str, Any]:
    """Seconds per `prima append --next` against the days already measured, flat and tree."""
    from typer.testing import CliRunner

    from app.cli import cli

    runner, out = CliRunner(), {}
    for releases in ("flat", "auto"):
        data = root / f"times-{releases}"
        prima = Prima(data)
        prima.register(spec(events, "events", currency, releases))
        scheme = growing.releases_of(prima.spec("events"))
        prima.close()
        seconds = []
        for _ in range(DAYS):
            t = time.perf_counter()
            result = runner.invoke(cli, ["append", "events", "--next", "--data-dir", str(data)])
            seconds.append(time.perf_counter() - t)
            assert result.exit_code == 0, result.output
        buckets = {f"{a + 1}-{b}": statistics.median(seconds[a:b]) for a, b in ((0, 30), (150, 180), (335, 365))}
        out[scheme.name] = {
            "median_s": statistics.median(seconds),
            "by_history": buckets,
            "max_s": max(seconds),
            "total_s": sum(seconds),
            "closing_appends_s": statistics.median(
                [s for t, s in enumerate(seconds) if len(scheme.closing(t)) > 1] or [0.0]
            ),
        }
    return out


def range_errors(root: Path, events: Path, currency: str, runs: int, ranges: int) -> dict[str, Any]:
    """Per scheme and range length: RMSE, mean stated stddev and 95 % coverage of COUNT and SUM."""
    raw = root / "events.parquet"
    rng = np.random.default_rng(3)  # which ranges, not noise
    starts = {r: rng.integers(0, DAYS - r + 1, size=ranges) for r in LENGTHS}
    truth = {}
    for r, ss in starts.items():
        for s in ss:
            lo, hi = START + dt.timedelta(int(s)), START + dt.timedelta(int(s) + r - 1)
            truth[(r, int(s))] = duckdb.sql(
                f"SELECT COUNT(*), SUM(LEAST(GREATEST(amount, 0), 2000)) FROM '{raw}' "
                f"WHERE day BETWEEN DATE '{lo}' AND DATE '{hi}'"
            ).fetchall()[0]
    stats: dict[str, dict[int, dict[str, list[float]]]] = {}
    names = {}
    for run in range(runs):
        data = root / f"errors-{run}"
        prima = Prima(data, seed=1000 + run)
        # Each table reads its own copy of the rows: tables over the same source share its budget per period.
        copies = {name: _copy(events, root / f"events_{name}") for name in ("flat", "tree")}
        tables = {
            "flat": spec(copies["flat"], "flat", currency, "flat"),
            "tree": spec(copies["tree"], "tree", currency, "auto"),
            "whole year (reference)": spec(raw, "year", currency, None, strategy="hierarchical"),
        }
        for label, s in tables.items():
            prima.register(s)
            if s.growth is not None:
                prima.append(s.name)
                names[label] = growing.releases_of(s).name
            else:
                prima.build(s.name)
        for label, s in tables.items():
            per = stats.setdefault(label, {})
            for (r, start), want in truth.items():
                lo, hi = START + dt.timedelta(start), START + dt.timedelta(start + r - 1)
                got = prima.query(
                    f"SELECT COUNT(*), SUM(amount) FROM {s.name} WHERE day BETWEEN '{lo}' AND '{hi}'",
                    AnswerOptions(clamp=False),
                )
                cell = per.setdefault(
                    r, {"err2_count": [], "err2_sum": [], "sd_count": [], "sd_sum": [], "covered": []}
                )
                for k, agg in enumerate(("count", "sum")):
                    value, sd, ci = got["rows"][0][k], got["stddev"][0][k], got["ci95"][0][k]
                    cell[f"err2_{agg}"].append((value - want[k]) ** 2)
                    cell[f"sd_{agg}"].append(sd)
                    cell["covered"].append(ci[0] <= want[k] <= ci[1])
        prima.close()
    out: dict[str, Any] = {"schemes": names}
    for label, per in stats.items():
        out[label] = {
            r: {
                "rmse_count": math.sqrt(np.mean(c["err2_count"])),
                "sd_count": float(np.mean(c["sd_count"])),
                "rmse_sum": math.sqrt(np.mean(c["err2_sum"])),
                "sd_sum": float(np.mean(c["sd_sum"])),
                "coverage": float(np.mean(c["covered"])),
                "intervals": len(c["covered"]),
            }
            for r, c in per.items()
        }
    return out


def _copy(events: Path, to: Path) -> Path:
    if not to.exists():
        shutil.copytree(events, to)
    return to


def theory(currency: str, tree: str) -> dict[int, float]:
    """Tree variance over flat for each range length (`Releases.relative_variance`)."""
    b = {"dyadic": 2}.get(tree) or int(tree.split("-")[0])
    t, f = Releases(DAYS, b), Releases(DAYS)
    return {r: t.relative_variance(r, currency) / f.relative_variance(r, currency) for r in LENGTHS}


def report(args: argparse.Namespace, times: dict[str, Any], errors: dict[str, Any], commit: str) -> str:
    tree = errors["schemes"]["tree"]
    predicted = theory(args.currency, tree)
    lines = [
        f"Commit {commit}; {DAYS} days, ~{args.rows_per_day} rows/day; budget per day "
        f"{'ε = 1' if args.currency == 'epsilon' else 'ρ = 0.5'}; {args.runs} runs × {args.ranges} ranges per length.",
        "",
        "### Append time against history (`prima append --next`, median seconds)",
        "",
        "| releases | days 1-30 | days 151-180 | days 336-365 | last/first | closing a block | max | all 365 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    if times.get("commit"):
        lines.insert(4, f"(append times measured at commit {times['commit']}; the append path is unchanged since)")
    for name, t in ((k, v) for k, v in times.items() if k != "commit"):
        b = list(t["by_history"].values())
        lines.append(
            f"| {name} | {b[0]:.3f} | {b[1]:.3f} | {b[2]:.3f} | {b[2] / b[0]:.2f}× | "
            f"{t['closing_appends_s']:.3f} | {t['max_s']:.2f} | {t['total_s']:.0f} s |"
        )
    lines += [
        "",
        f"### Range errors (tree: {tree}; theory = tree variance / flat variance)",
        "",
        "| days | flat RMSE count | tree RMSE count | year RMSE count | flat RMSE sum | tree RMSE sum | "
        "year RMSE sum | tree/flat variance (measured, sum) | theory | coverage flat / tree / year |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    flat, tr, year = errors["flat"], errors["tree"], errors["whole year (reference)"]
    for r in LENGTHS:
        f, t, y = flat[r], tr[r], year[r]
        lines.append(
            f"| {r} | {f['rmse_count']:.1f} | {t['rmse_count']:.1f} | {y['rmse_count']:.1f} | "
            f"{f['rmse_sum']:.0f} | {t['rmse_sum']:.0f} | {y['rmse_sum']:.0f} | "
            f"{(t['sd_sum'] / f['sd_sum']) ** 2:.2f} (stated) / {(t['rmse_sum'] / f['rmse_sum']) ** 2:.2f} "
            f"(RMSE) | {predicted[r]:.2f} | {f['coverage']:.1%} / {t['coverage']:.1%} / {y['coverage']:.1%} |"
        )
    cover = [errors[k][r]["coverage"] for k in ("flat", "tree") for r in LENGTHS]
    lines += [
        "",
        f"Coverage of the growing tables' 95 % intervals, all lengths: "
        f"{np.mean(cover):.1%} ({sum(errors[k][r]['intervals'] for k in ('flat', 'tree') for r in LENGTHS)} intervals).",
        "",
        f"Reproduce: `.venv/bin/python bench/growing.py --runs {args.runs} --ranges {args.ranges} "
        f"--rows-per-day {args.rows_per_day} --currency {args.currency}`",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--ranges", type=int, default=20, help="random ranges per length")
    ap.add_argument("--rows-per-day", type=int, default=800)
    ap.add_argument("--currency", choices=["rho", "epsilon"], default="rho")
    ap.add_argument("--skip-times", action="store_true")
    ap.add_argument(
        "--reuse-times",
        action="store_true",
        help="keep the append times of the last run's JSON (they measure the append path only)",
    )
    args = ap.parse_args()
    import subprocess

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        events = generate(root, args.rows_per_day)
        previous = RESULTS / f"growing_{args.currency}.json"
        if args.reuse_times and previous.exists():
            times = json.loads(previous.read_text())["times"]
        else:
            times = {} if args.skip_times else append_times(root, events, args.currency)
        errors = range_errors(root, events, args.currency, args.runs, args.ranges)
    text = report(args, times, errors, commit)
    print(text)
    stem = f"growing_{args.currency}"
    (RESULTS / f"{stem}.md").write_text(text + "\n")
    times.setdefault("commit", commit)
    (RESULTS / f"{stem}.json").write_text(
        json.dumps({"times": times, "errors": {k: v for k, v in errors.items()}}, indent=1, default=str) + "\n"
    )


if __name__ == "__main__":
    main()
