"""Answers estimate what their SQL means on the whole raw table.

A table generated here holds what real files hold: 10-12 % NULL or non-numeric measures, 3 % of
dimension values outside the declared domain and 2-3 % NULL, bins that conditions cut, a
heavy-tailed measure with an axis, and a privacy unit with NULL ids (no person above k rows, so
truncation does not move the truth). Over many seeded builds under the default strategy, each
query class's ci95 must hold DuckDB's answer on the raw file in ≥ 93 % of cells (≥ 94 % where the
answer is one cell's single Laplace), and no interval is zero-width next to a non-zero stddev.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from engine.answers.options import AnswerOptions
from engine.service import Prima
from storage.schema import TableSpec
from tests.conftest import registered_template, seeded_copy, side_by_side

CARRIERS = ["AA", "DL", "UA", "WN", "B6", "AS"]  # declared; "NK" is in the file, not declared
BUILDS = int(os.environ.get("PRIMA_HONEST_BUILDS", "200"))
ROWS = 6_000


def write_flights(path: Path, seed: int = 1) -> Path:
    """Flights with the faults of real files (test data, not noise)."""
    rng = np.random.default_rng(seed)
    n = ROWS
    person = rng.integers(0, n // 2, n).astype(object)
    person[rng.random(n) < 0.05] = None  # no tail number
    carrier = rng.choice(CARRIERS + ["NK"], n, p=[0.25, 0.2, 0.2, 0.15, 0.1, 0.07, 0.03]).astype(object)
    carrier[rng.random(n) < 0.02] = None
    delay = np.round(rng.normal(20, 45, n)).astype(object)  # declared -60..179 in 30-minute bins
    delay[rng.random(n) < 0.03] = None
    day = [dt.date(2024, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 380, n)]  # some in 2025
    day = [None if rng.random() < 0.03 else d for d in day]
    fare = np.round(rng.uniform(40, 480, n), 2).astype(object)
    fare[rng.random(n) < 0.12] = None
    amount = np.minimum(np.round(rng.lognormal(6, 1.6, n), 2), 99_000).astype(object)  # heavy tail
    missing = rng.random(n) < 0.10
    amount[missing] = np.where(rng.random(missing.sum()) < 0.5, None, "n/a")
    con = duckdb.connect()
    con.execute("CREATE TABLE f (person VARCHAR, carrier VARCHAR, delay DOUBLE, day DATE, fare DOUBLE, amount VARCHAR)")
    rows = pa.table(  # one INSERT of an Arrow table: executemany ran one INSERT per row (2 s here)
        [
            pa.array([None if p is None else str(p) for p in person.tolist()], pa.string()),
            pa.array(carrier.tolist(), pa.string()),
            pa.array(delay.tolist(), pa.float64()),
            pa.array(day, pa.date32()),
            pa.array(fare.tolist(), pa.float64()),
            pa.array([None if a is None else str(a) for a in amount.tolist()], pa.string()),
        ],
        names=["person", "carrier", "delay", "day", "fare", "amount"],
    )
    con.register("rows", rows)
    con.execute("INSERT INTO f SELECT * FROM rows")
    # at most k = 3 rows per person, so the truncated table is the table
    con.execute(
        "DELETE FROM f WHERE person IS NOT NULL AND rowid IN (SELECT rowid FROM (SELECT rowid, ROW_NUMBER() "
        "OVER (PARTITION BY person ORDER BY rowid) AS r FROM f) WHERE r > 3)"
    )
    con.execute(f"COPY f TO '{path}' (HEADER)")
    con.close()
    return path


def flights_spec(path: Path) -> dict[str, Any]:
    return {
        "name": "flights",
        "source": {"csv": str(path)},
        "epsilon": 2.0,
        "dimensions": [
            {"name": "carrier", "type": "category", "values": CARRIERS},
            {"name": "delay", "type": "int", "lo": -60, "hi": 179, "bin": 30},
            {"name": "day", "type": "date", "lo": "2024-01-01", "hi": "2024-12-31", "granularity": "month"},
        ],
        "measures": [
            {"name": "fare", "lo": 0, "hi": 500},
            {"name": "amount", "lo": 0, "hi": 100_000, "axis": {"kind": "log2", "count": True}},
        ],
        "privacy_unit": {"column": "person", "max_rows": 3},
        "cube": {"build": "on_first_query"},
    }


FARE = "CASE WHEN TRY_CAST(fare AS DOUBLE) IS NOT NULL THEN LEAST(GREATEST(TRY_CAST(fare AS DOUBLE), 0), 500) END"
AMOUNT = (
    "CASE WHEN TRY_CAST(amount AS DOUBLE) IS NOT NULL THEN LEAST(GREATEST(TRY_CAST(amount AS DOUBLE), 0), 100000) END"
)
CARRIER_KEY = f"CASE WHEN carrier IS NULL THEN NULL WHEN carrier IN ({', '.join(repr(c) for c in CARRIERS)}) THEN carrier ELSE '(other)' END"

# (class, Prima SQL, DuckDB SQL over the raw file `f` — same columns, group keys first)
QUERIES: list[tuple[str, str, str]] = [
    (
        "totals",
        "SELECT COUNT(*), SUM(fare), COUNT(fare), SUM(amount) FROM flights",
        f"SELECT COUNT(*), COALESCE(SUM({FARE}), 0), COUNT({FARE}), COALESCE(SUM({AMOUNT}), 0) FROM f",
    ),
    ("avg", "SELECT AVG(fare), AVG(amount) FROM flights", f"SELECT AVG({FARE}), AVG({AMOUNT}) FROM f"),
    (
        "group 1-way",
        "SELECT carrier, COUNT(*), SUM(fare), AVG(fare) FROM flights GROUP BY carrier",
        f"SELECT {CARRIER_KEY} k, COUNT(*), COALESCE(SUM({FARE}), 0), AVG({FARE}) FROM f GROUP BY k",
    ),
    (
        "group 2-way",
        "SELECT carrier, day, COUNT(*) FROM flights WHERE day BETWEEN '2024-01' AND '2024-06' GROUP BY carrier, day",
        f"SELECT {CARRIER_KEY} k, strftime(day, '%Y-%m') m, COUNT(*) FROM f WHERE day BETWEEN DATE '2024-01-01' "
        "AND DATE '2024-06-30' GROUP BY k, m",
    ),
    (
        "misaligned",
        "SELECT COUNT(*), SUM(fare), AVG(fare) FROM flights WHERE delay >= 15",
        f"SELECT COUNT(*), COALESCE(SUM({FARE}), 0), AVG({FARE}) FROM f WHERE delay >= 15",
    ),
    (
        "misaligned",
        "SELECT COUNT(*), SUM(fare) FROM flights WHERE delay BETWEEN -70 AND 100 AND carrier = 'UA'",
        f"SELECT COUNT(*), COALESCE(SUM({FARE}), 0) FROM f WHERE delay BETWEEN -70 AND 100 AND carrier = 'UA'",
    ),
    (
        "small groups",
        "SELECT day, COUNT(*), AVG(fare) FROM flights WHERE carrier = 'AS' AND delay > 149 GROUP BY day",
        f"SELECT strftime(day, '%Y-%m') m, COUNT(*), AVG({FARE}) FROM f WHERE carrier = 'AS' AND delay > 149 "
        "AND (day IS NULL OR day BETWEEN DATE '2024-01-01' AND DATE '2024-12-31') GROUP BY m",
    ),
    (
        "measure conditions",
        "SELECT COUNT(*), SUM(amount) FROM flights WHERE amount > 3125",
        f"SELECT COUNT(*), COALESCE(SUM({AMOUNT}), 0) FROM f WHERE {AMOUNT} > 3125",
    ),
    (
        "measure conditions",
        "SELECT COUNT(*), SUM(amount) FROM flights WHERE amount < 1000 AND carrier = 'DL'",
        f"SELECT COUNT(*), COALESCE(SUM({AMOUNT}), 0) FROM f WHERE {AMOUNT} < 1000 AND carrier = 'DL'",
    ),
    (
        "null and other",
        "SELECT COUNT(*), SUM(fare) FROM flights WHERE carrier IS NULL OR carrier = 'NK'",
        f"SELECT COUNT(*), COALESCE(SUM({FARE}), 0) FROM f WHERE carrier IS NULL OR carrier = 'NK'",
    ),
    ("null and other", "SELECT COUNT(*) FROM flights WHERE day IS NULL", "SELECT COUNT(*) FROM f WHERE day IS NULL"),
    (
        "one cell",
        "SELECT carrier, delay, COUNT(*) FROM flights WHERE day = '2024-03' GROUP BY carrier, delay",
        f"SELECT {CARRIER_KEY} k, CAST(-60 + 30 * floor((delay + 60) / 30) AS BIGINT) b, COUNT(*) FROM f "
        "WHERE strftime(day, '%Y-%m') = '2024-03' AND (delay IS NULL OR delay BETWEEN -60 AND 179) GROUP BY k, b",
    ),
]
SINGLE_LAPLACE = {"one cell"}  # under identity each answer is one cell's noise: ≥ 94 %


def _truths(path: Path) -> list[dict[tuple, list[float | None]]]:
    """Per query, DuckDB's answer on the raw file by group key."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE raw AS SELECT * FROM read_csv('{path}', all_varchar=true)")  # (a view would push
    con.execute(
        "CREATE VIEW f AS SELECT person, carrier, TRY_CAST(delay AS DOUBLE) AS delay, "  # TRY_CAST into
        "TRY_CAST(day AS DATE) AS day, fare, amount FROM raw"
    )  # the reader as a failing CAST)
    out = []
    for _, ours, theirs in QUERIES:
        keys = _keys(ours)
        out.append({tuple(r[:keys]): list(r[keys:]) for r in con.execute(theirs).fetchall()})
    con.close()
    return out


def _keys(sql: str) -> int:
    select = sql.split(" FROM ")[0]
    return select.count(",") + 1 - sum(select.count(a) for a in ("COUNT(", "SUM(", "AVG("))


def _coverage(tmp_path: Path, strategy: str | None, builds: int) -> tuple[dict[str, float], int, dict[str, int]]:
    """Per query class, the share of answer cells whose ci95 held DuckDB's answer on the raw file,
    over ``builds`` seeded builds; and how many intervals were zero-width next to a stddev."""
    csv = write_flights(tmp_path / "flights.csv")
    spec = flights_spec(csv)
    if strategy:
        spec["cube"]["strategy"] = strategy
    registered_template(tmp_path / "template", TableSpec.model_validate(spec))
    jobs = [(tmp_path, spec, _truths(csv), range(start, builds, 2)) for start in (0, 1)]
    parts = side_by_side(_held, jobs)  # pure Python builds: two processes on 2 cores halve the time
    held = {k: parts[0][0].get(k, []) + parts[1][0].get(k, []) for k in {**parts[0][0], **parts[1][0]}}
    zero_width = parts[0][1] + parts[1][1]
    rates = {k: sum(v) / len(v) for k, v in held.items()}
    print(
        f"\n{strategy or 'default'} strategy, {builds} builds: ci95 held the raw file's SQL answer in "
        + ", ".join(f"{k} {r:.3f} ({len(held[k])} cells)" for k, r in rates.items())
    )
    return rates, zero_width, {k: len(v) for k, v in held.items()}


def _held(job: tuple[Path, dict[str, Any], list, range]) -> tuple[dict[str, list[int]], int]:
    """One worker's builds: per query class, 1 where the ci95 held the truth; and zero-width intervals."""
    tmp_path, spec, truths, seeds = job
    held: dict[str, list[int]] = {}
    zero_width = 0
    for seed in seeds:
        prima = seeded_copy(tmp_path / "template", tmp_path / f"data{seed}", seed)
        try:
            for (klass, sql, _), truth in zip(QUERIES, truths):
                got = prima.query(sql)
                keys = _keys(sql)
                for row, sds, cis in zip(got["rows"], got["stddev"], got["ci95"]):
                    want = truth.get(tuple(row[:keys]))
                    if want is None:  # a group SQL does not list: no row holds it (COUNT 0, AVG NULL)
                        want = [0.0 if "AVG" not in c.upper() else None for c in got["columns"][keys:]]
                    for value, sd, ci, true in zip(row[keys:], sds[keys:], cis[keys:], want):
                        if value is None or true is None:
                            continue
                        if sd and ci[1] - ci[0] <= 0:
                            zero_width += 1
                        held.setdefault(klass, []).append(int(ci[0] - 1e-9 <= true <= ci[1] + 1e-9))
        finally:
            prima.close()
    return held, zero_width


@pytest.mark.slow
def test_intervals_hold_the_raw_files_sql_answer_over_200_builds(tmp_path: Path) -> None:
    """Acceptance 1 on `identity` (its bars are exact sums of Laplace noise, so a miss is semantics)."""
    rates, zero_width, _ = _coverage(tmp_path, "identity", BUILDS)
    assert zero_width == 0
    assert all(r >= (0.94 if k in SINGLE_LAPLACE else 0.93) for k, r in rates.items()), rates


@pytest.mark.slow
def test_intervals_hold_under_the_default_strategy(tmp_path: Path) -> None:
    """The same table under the default (a dense `auto` cube, 2.3 s a build here): fewer builds, so
    each class may sit a little lower by chance (≥ 0.88, 40 builds); pooled they hold ≥ 93 %."""
    rates, zero_width, cells = _coverage(tmp_path, None, 40)
    pooled = sum(rates[k] * cells[k] for k in rates) / sum(cells.values())
    assert zero_width == 0 and pooled >= 0.93, (pooled, rates)
    assert all(r >= 0.88 for r in rates.values()), rates


def test_a_ranking_says_how_settled_its_top_n_is(prima: Prima, sales_csv: Path) -> None:
    """ORDER BY an aggregate with LIMIT: `ranking.p_top_n` from the released values and bars only;
    a note below 0.95; the same figure every time; settled rankings carry no note."""
    from tests.conftest import sales_spec, write_sales_csv

    loose = sales_spec(sales_csv, epsilon=0.05)
    prima.register(TableSpec.model_validate(loose))
    sql = "SELECT age, COUNT(*) AS n FROM sales GROUP BY age ORDER BY n DESC LIMIT 5"
    got = prima.query(sql)
    assert got["ranking"]["limit"] == 5 and 0 <= got["ranking"]["p_top_n"] < 0.95
    assert any("do not settle" in n for n in got["notes"])
    assert prima.query(sql, AnswerOptions(clamp=False))["ranking"] == got["ranking"]  # deterministic post-processing
    tight = sales_spec(write_sales_csv(sales_csv.parent / "other.csv", seed=8), name="tight", epsilon=100.0)
    prima.register(TableSpec.model_validate(tight))
    settled = prima.query("SELECT region, COUNT(*) AS n FROM tight GROUP BY region ORDER BY n DESC LIMIT 2")
    assert settled["ranking"]["p_top_n"] >= 0.95 and not any("do not settle" in n for n in settled["notes"])
    assert "ranking" not in prima.query(
        "SELECT region, COUNT(*) AS n FROM tight GROUP BY region ORDER BY region LIMIT 2"
    )


def test_clamped_intervals_keep_their_width_where_they_cross_a_bound() -> None:
    """The rule: the part of an interval cut off at a bound is laid back from the bound (a
    COUNT's [−1000, −50] becomes [0, 475], not [0, 0]); intervals inside stay as they are."""
    from engine.answers.assemble import _clamped_intervals

    a = np.array([-1000.0, -10.0, 5.0, 20.0, -30.0])
    b = np.array([-50.0, 90.0, 15.0, 200.0, 250.0])
    np.testing.assert_allclose(_clamped_intervals(a, b, 0.0, np.inf), [[0, 475], [0, 90], [5, 15], [20, 200], [0, 250]])
    np.testing.assert_allclose(
        _clamped_intervals(a, b, 0.0, 100.0),  # an AVG's clip range: both sides
        [[0, 100], [0, 90], [5, 15], [10, 100], [0, 100]],
    )
    np.testing.assert_allclose(_clamped_intervals(np.array([150.0]), np.array([400.0]), 0.0, 100.0), [[0, 100]])
    np.testing.assert_allclose(_clamped_intervals(np.array([90.0]), np.array([130.0]), 0.0, 100.0), [[80, 100]])
