"""The SQL surface end to end: supported shapes equal DuckDB on the clipped data (noise off); unsupported
shapes are refused with specific messages; GROUP BY equals single-cell queries; batches equal singles."""

from __future__ import annotations

import datetime as dt
import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.http.app import create_app
from engine.answers.options import AnswerOptions
from engine.errors import QueryError
from engine.service import Prima
from storage.schema import TableSpec
from tests.conftest import ADMIN_TOKEN, REPO, admin_headers, sales_spec, write_sales_csv

REF_VIEW = """
CREATE OR REPLACE VIEW ref AS
SELECT age, region, CAST(day AS DATE) AS day, strftime(CAST(day AS DATE), '%Y-%m') AS month,
       score, CAST(5 * floor(score / 5) AS BIGINT) AS score_bin,
       LEAST(GREATEST(amount, -100), 1000) AS amount
FROM src.sales
WHERE age BETWEEN 18 AND 90 AND region IN ('north', 'south', 'east', 'west')
  AND CAST(day AS DATE) BETWEEN DATE '2020-01-01' AND DATE '2021-12-31' AND score BETWEEN 0 AND 24
"""

# (Prima SQL, DuckDB SQL over the view `ref`, number of leading group-key columns, ordered?)
SUPPORTED: list[tuple[str, str, int, bool]] = [
    ("SELECT SUM(amount) FROM sales", "SELECT SUM(amount) FROM ref", 0, False),
    ("SELECT COUNT(*) FROM sales", "SELECT COUNT(*) FROM ref", 0, False),
    ("SELECT COUNT(1) FROM sales", "SELECT COUNT(*) FROM ref", 0, False),
    ("SELECT AVG(amount) FROM sales", "SELECT AVG(amount) FROM ref", 0, False),
    (
        "select sum(amount) as total, count(*) n, avg(amount) a from sales",
        "SELECT SUM(amount), COUNT(*), AVG(amount) FROM ref",
        0,
        False,
    ),
    ('SELECT SUM("amount") FROM "sales" WHERE "age" >= 40', "SELECT SUM(amount) FROM ref WHERE age >= 40", 0, False),
    ("SELECT SUM(s.amount) FROM sales s WHERE s.age < 30", "SELECT SUM(amount) FROM ref WHERE age < 30", 0, False),
    (
        "SELECT SUM(amount) FROM sales WHERE age BETWEEN 30 AND 40",
        "SELECT SUM(amount) FROM ref WHERE age BETWEEN 30 AND 40",
        0,
        False,
    ),
    ("SELECT SUM(amount) FROM sales WHERE age > 50", "SELECT SUM(amount) FROM ref WHERE age > 50", 0, False),
    ("SELECT SUM(amount) FROM sales WHERE age <= 25", "SELECT SUM(amount) FROM ref WHERE age <= 25", 0, False),
    ("SELECT COUNT(*) FROM sales WHERE age = 33", "SELECT COUNT(*) FROM ref WHERE age = 33", 0, False),
    ("SELECT COUNT(*) FROM sales WHERE 40 <= age", "SELECT COUNT(*) FROM ref WHERE age >= 40", 0, False),
    ("SELECT COUNT(*) FROM sales WHERE age >= 30.5", "SELECT COUNT(*) FROM ref WHERE age >= 31", 0, False),
    (
        "SELECT COUNT(*) FROM sales WHERE age NOT BETWEEN 30 AND 60",
        "SELECT COUNT(*) FROM ref WHERE age NOT BETWEEN 30 AND 60",
        0,
        False,
    ),
    ("SELECT COUNT(*) FROM sales WHERE age <> 40", "SELECT COUNT(*) FROM ref WHERE age <> 40", 0, False),
    ("SELECT COUNT(*) FROM sales WHERE age != 40", "SELECT COUNT(*) FROM ref WHERE age <> 40", 0, False),
    (
        "SELECT COUNT(*) FROM sales WHERE age IN (20, 30, 31, 32, 70)",
        "SELECT COUNT(*) FROM ref WHERE age IN (20, 30, 31, 32, 70)",
        0,
        False,
    ),
    (
        "SELECT COUNT(*) FROM sales WHERE age NOT IN (20, 30)",
        "SELECT COUNT(*) FROM ref WHERE age NOT IN (20, 30)",
        0,
        False,
    ),
    (
        "SELECT COUNT(*) FROM sales WHERE age > 30 AND age < 50 AND age <> 40",
        "SELECT COUNT(*) FROM ref WHERE age > 30 AND age < 50 AND age <> 40",
        0,
        False,
    ),
    (
        "SELECT COUNT(*) FROM sales WHERE (age < 25 OR age > 80)",
        "SELECT COUNT(*) FROM ref WHERE age < 25 OR age > 80",
        0,
        False,
    ),
    ("SELECT COUNT(*) FROM sales WHERE age BETWEEN 60 AND 30", "SELECT COUNT(*) FROM ref WHERE FALSE", 0, False),
    (
        "SELECT SUM(amount) FROM sales WHERE region = 'north'",
        "SELECT SUM(amount) FROM ref WHERE region = 'north'",
        0,
        False,
    ),
    (
        "SELECT SUM(amount) FROM sales WHERE region IN ('east', 'west')",
        "SELECT SUM(amount) FROM ref WHERE region IN ('east', 'west')",
        0,
        False,
    ),
    (
        "SELECT SUM(amount) FROM sales WHERE region <> 'south'",
        "SELECT SUM(amount) FROM ref WHERE region <> 'south'",
        0,
        False,
    ),
    (
        "SELECT COUNT(*) FROM sales WHERE region BETWEEN 'south' AND 'west'",
        "SELECT COUNT(*) FROM ref WHERE region IN ('south', 'east', 'west')",
        0,
        False,
    ),
    (
        "SELECT COUNT(*) FROM sales WHERE region > 'south'",
        "SELECT COUNT(*) FROM ref WHERE region IN ('east', 'west')",
        0,
        False,
    ),
    ("SELECT COUNT(*) FROM sales WHERE region = 'mars'", "SELECT COUNT(*) FROM ref WHERE FALSE", 0, False),
    (
        "SELECT COUNT(*) FROM sales WHERE day >= '2021-01-01'",
        "SELECT COUNT(*) FROM ref WHERE day >= DATE '2021-01-01'",
        0,
        False,
    ),
    (
        "SELECT COUNT(*) FROM sales WHERE day BETWEEN DATE '2020-03-01' AND DATE '2020-08-31'",
        "SELECT COUNT(*) FROM ref WHERE day BETWEEN DATE '2020-03-01' AND DATE '2020-08-31'",
        0,
        False,
    ),
    ("SELECT COUNT(*) FROM sales WHERE day = '2020-07'", "SELECT COUNT(*) FROM ref WHERE month = '2020-07'", 0, False),
    ("SELECT COUNT(*) FROM sales WHERE day = '2021'", "SELECT COUNT(*) FROM ref WHERE year(day) = 2021", 0, False),
    (
        "SELECT COUNT(*) FROM sales WHERE day < '2020-05-01'",
        "SELECT COUNT(*) FROM ref WHERE day < DATE '2020-05-01'",
        0,
        False,
    ),
    (
        "SELECT SUM(amount) FROM sales WHERE score BETWEEN 5 AND 14",
        "SELECT SUM(amount) FROM ref WHERE score BETWEEN 5 AND 14",
        0,
        False,
    ),
    ("SELECT SUM(amount) FROM sales WHERE score >= 20", "SELECT SUM(amount) FROM ref WHERE score >= 20", 0, False),
    (
        "SELECT COUNT(*), SUM(amount), AVG(amount) FROM sales WHERE age BETWEEN 25 AND 45 AND region IN ('north', 'east') "
        "AND day >= '2020-06-01' AND score < 15",
        "SELECT COUNT(*), SUM(amount), AVG(amount) FROM ref WHERE age BETWEEN 25 AND 45 AND region IN ('north', 'east') "
        "AND day >= DATE '2020-06-01' AND score < 15",
        0,
        False,
    ),
    (
        "SELECT region, COUNT(*) FROM sales GROUP BY region",
        "SELECT region, COUNT(*) FROM ref GROUP BY region",
        1,
        False,
    ),
    (
        "SELECT region, SUM(amount), AVG(amount) FROM sales WHERE age > 40 GROUP BY region",
        "SELECT region, SUM(amount), AVG(amount) FROM ref WHERE age > 40 GROUP BY region",
        1,
        False,
    ),
    (
        "SELECT age, COUNT(*) FROM sales WHERE age BETWEEN 20 AND 29 GROUP BY age",
        "SELECT age, COUNT(*) FROM ref WHERE age BETWEEN 20 AND 29 GROUP BY age",
        1,
        False,
    ),
    (
        "SELECT score, SUM(amount) FROM sales GROUP BY score",
        "SELECT score_bin, SUM(amount) FROM ref GROUP BY score_bin",
        1,
        False,
    ),
    (
        "SELECT day, COUNT(*) FROM sales WHERE day < '2020-07-01' GROUP BY day",
        "SELECT month, COUNT(*) FROM ref WHERE day < DATE '2020-07-01' GROUP BY month",
        1,
        False,
    ),
    (
        "SELECT region, score, COUNT(*), SUM(amount) FROM sales GROUP BY region, score",
        "SELECT region, score_bin, COUNT(*), SUM(amount) FROM ref GROUP BY region, score_bin",
        2,
        False,
    ),
    (
        "SELECT score AS s, region AS r, COUNT(*) FROM sales GROUP BY r, s",
        "SELECT score_bin, region, COUNT(*) FROM ref GROUP BY region, score_bin",
        2,
        False,
    ),
    ("SELECT region, COUNT(*) FROM sales GROUP BY 1", "SELECT region, COUNT(*) FROM ref GROUP BY region", 1, False),
    (
        "SELECT region, day, SUM(amount) FROM sales GROUP BY ALL",
        "SELECT region, month, SUM(amount) FROM ref GROUP BY ALL",
        2,
        False,
    ),
    (
        "SELECT region, COUNT(*) FROM sales WHERE region IN ('west', 'north') GROUP BY region",
        "SELECT region, COUNT(*) FROM ref WHERE region IN ('west', 'north') GROUP BY region",
        1,
        False,
    ),
    (
        "SELECT region, COUNT(*) AS n FROM sales GROUP BY region ORDER BY region",
        "SELECT region, COUNT(*) FROM ref GROUP BY region ORDER BY region",
        1,
        True,
    ),
    (
        "SELECT region, score, COUNT(*) FROM sales GROUP BY region, score ORDER BY region DESC, score LIMIT 7",
        "SELECT region, score_bin, COUNT(*) FROM ref GROUP BY ALL ORDER BY region DESC, score_bin LIMIT 7",
        2,
        True,
    ),
    (
        "SELECT day, SUM(amount) FROM sales GROUP BY day ORDER BY day LIMIT 5 OFFSET 3",
        "SELECT month, SUM(amount) FROM ref GROUP BY month ORDER BY month LIMIT 5 OFFSET 3",
        1,
        True,
    ),
    (
        "SELECT region, COUNT(*) FROM sales GROUP BY region ORDER BY COUNT(*) DESC, 1",
        "SELECT region, COUNT(*) FROM ref GROUP BY region ORDER BY COUNT(*) DESC, 1",
        1,
        True,
    ),
    (
        "SELECT region, AVG(amount) AS a FROM sales GROUP BY region ORDER BY a LIMIT 2",
        "SELECT region, AVG(amount) AS a FROM ref GROUP BY region ORDER BY a LIMIT 2",
        1,
        True,
    ),
    ("SELECT COUNT(*) FROM sales LIMIT 1", "SELECT COUNT(*) FROM ref", 0, False),
    # SQL as BI clients write it
    (
        "SELECT region, COUNT(*) AS n FROM sales GROUP BY region HAVING COUNT(*) > 900 ORDER BY n, region",
        "SELECT region, COUNT(*) AS n FROM ref GROUP BY region HAVING COUNT(*) > 900 ORDER BY n, region",
        1,
        True,
    ),
    (
        "SELECT COUNT(*) FROM sales WHERE region LIKE '%th'",
        "SELECT COUNT(*) FROM ref WHERE region LIKE '%th'",
        0,
        False,
    ),
    (
        "SELECT COUNT(*) FROM sales WHERE region NOT ILIKE 'N%'",
        "SELECT COUNT(*) FROM ref WHERE region NOT ILIKE 'N%'",
        0,
        False,
    ),
    (
        "SELECT COUNT(*) FROM sales WHERE age >= CAST('40' AS INTEGER) AND day < TIMESTAMP '2021-01-01 00:00:00'",
        "SELECT COUNT(*) FROM ref WHERE age >= 40 AND day < DATE '2021-01-01'",
        0,
        False,
    ),
    (
        "SELECT COUNT(*) FROM sales WHERE day >= MAKE_DATE(2021, 3, 1) - INTERVAL '2 months'",
        "SELECT COUNT(*) FROM ref WHERE day >= DATE '2021-01-01'",
        0,
        False,
    ),
    (
        "SELECT * FROM (SELECT region, SUM(amount) AS s FROM sales GROUP BY region) AS t ORDER BY s DESC LIMIT 2",
        "SELECT region, SUM(amount) AS s FROM ref GROUP BY region ORDER BY s DESC LIMIT 2",
        1,
        True,
    ),
    (
        "WITH q AS (SELECT * FROM sales WHERE age < 40) SELECT COUNT(*) FROM q WHERE region = 'east'",
        "SELECT COUNT(*) FROM ref WHERE age < 40 AND region = 'east'",
        0,
        False,
    ),
]

UNSUPPORTED: list[tuple[str, str]] = [
    ("SELECT * FROM sales", "SELECT * is not supported"),
    ("SELECT age FROM sales", "must be inside an aggregate or listed in GROUP BY"),
    ("SELECT SUM(amount) FROM sales a JOIN sales b ON a.age = b.age", "JOIN is not supported"),
    ("SELECT SUM(s) FROM (SELECT SUM(amount) AS s FROM sales)", "aggregates over an aggregate subquery"),
    ("SELECT SUM(amount) FROM sales, sales", "JOIN is not supported"),
    ("SELECT SUM(amount) FROM sales WHERE age IN (SELECT age FROM sales)", "subqueries are supported only in FROM"),
    ("WITH t AS (SELECT * FROM sales) SELECT COUNT(*) FROM t, t", "read more than once"),
    ("SELECT COUNT(*) FROM sales WHERE age = 30 OR region = 'north'", "OR across different dimensions"),
    ("SELECT COUNT(*) FROM sales WHERE abs(age) = 3", "functions and expressions on columns are not supported"),
    ("SELECT SUM(amount * 2) FROM sales", "expected a column"),
    ("SELECT COUNT(*) FROM sales WHERE age + 1 > 3", "expected a column"),
    ("SELECT MAX(amount) FROM sales", "aggregate MAX is not supported"),
    ("SELECT MEDIAN(amount) FROM sales", 'declare an axis with "count": true'),
    ("SELECT COUNT(age) FROM sales", "COUNT takes *, 1 or a measure"),
    ("SELECT COUNT(DISTINCT age) FROM sales", "COUNT(DISTINCT ...) is not supported"),
    ("SELECT COUNT(DISTINCT amount) FROM sales", "COUNT(DISTINCT ...) is not supported"),
    ("SELECT SUM(DISTINCT amount) FROM sales", "DISTINCT"),
    ("SELECT DISTINCT SUM(amount) FROM sales", "SELECT DISTINCT is not supported"),
    ("SELECT SUM(bonus) FROM sales", "unknown column 'bonus'"),
    ("SELECT SUM(age) FROM sales", "is a dimension, not a measure"),
    ("SELECT COUNT(*) FROM sales WHERE amount > 3", "conditions on measure 'amount' need an axis on it"),
    ("SELECT COUNT(*) FROM sales GROUP BY amount", "is a measure"),
    ("SELECT COUNT(*) FROM sales WHERE age = 'old'", "is not a number"),
    ("SELECT COUNT(*) FROM sales WHERE day = 'yesterday'", "is not a date"),
    ("SELECT COUNT(*) FROM sales WHERE region > 'mars'", "not a declared value"),
    ("SELECT COUNT(*) FROM sales WHERE age = NULL", "expected a literal value"),
    ("SELECT COUNT(*) FROM sales; SELECT COUNT(*) FROM sales", "exactly one statement"),
    ("DROP TABLE sales", "only SELECT queries are supported; got DROP"),
    ("INSERT INTO sales VALUES (1)", "only SELECT queries are supported; got INSERT"),
    ("UPDATE sales SET age = 1", "only SELECT queries are supported; got UPDATE"),
    ("CREATE TABLE x (a INT)", "only SELECT queries are supported; got CREATE"),
    ("SELECT COUNT(*) FROM sales UNION SELECT COUNT(*) FROM sales", "only SELECT queries are supported; got UNION"),
    ("SELECT COUNT(*) FROM sales GROUP BY region HAVING SUM(amount) > 3", "add that aggregate to the SELECT list"),
    ("SELECT COUNT(*) FROM sales ORDER BY age", "ORDER BY must name a column of the SELECT list"),
    ("SELECT region, COUNT(*) FROM sales GROUP BY 3", "GROUP BY 3 is not a position"),
    ("SELECT COUNT(*) FROM sales LIMIT 'a'", "LIMIT takes a non-negative integer"),
    ("SELECT COUNT(*) FROM other.sales", "optionally in schema public"),
    ("SELECT COUNT(*) FROM sales x WHERE y.age = 1", "unknown table qualifier 'y'"),
    ("SELECT COUNT(*)", "missing FROM"),
    ("SELECT COUNT(*) FROM sales WHERE age BETWEEN 1 AND", "syntax error"),
    ("SELECT COUNT(*) FROM sales WHERE", "syntax error"),
]


@pytest.fixture(scope="module")
def surface(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prima, Any]]:
    tmp = tmp_path_factory.mktemp("surface")
    prima = Prima(tmp / "data", seed=99)
    spec = sales_spec(write_sales_csv(tmp / "sales.csv"))  # `ref` holds the rows inside every domain:
    spec["dimensions"] = [d | {"outside": "exclude"} for d in spec["dimensions"]]  # kept rows: test_exact_answers
    prima.register(TableSpec.model_validate(spec))
    prima.db.run(REF_VIEW)
    yield prima, prima.exact_cube("sales")
    prima.close()


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, str) or isinstance(b, str):
        return str(a) == str(b)
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-6)


def _same_row(ours: list[Any], theirs: tuple[Any, ...]) -> bool:
    return len(ours) == len(theirs) and all(_close(a, b) for a, b in zip(ours, theirs))


@pytest.mark.parametrize("sql,ref_sql,keys,ordered", SUPPORTED, ids=[s[0][:70] for s in SUPPORTED])
def test_supported_shape_equals_duckdb(
    surface: tuple[Prima, Any], sql: str, ref_sql: str, keys: int, ordered: bool
) -> None:
    prima, cube = surface
    ours = prima.answer_with(sql, lambda _: cube)["rows"]
    theirs = prima.db.run(ref_sql)
    if keys == 0:
        assert len(ours) == 1 and _same_row(ours[0], theirs[0] if theirs else ()), (ours, theirs)
    elif ordered:
        assert len(ours) == len(theirs) and all(_same_row(a, b) for a, b in zip(ours, theirs)), (ours, theirs)
    else:
        by_key = {tuple(str(v) for v in row[:keys]): row for row in theirs}
        for row in ours:
            match = by_key.pop(tuple(str(v) for v in row[:keys]), None)
            if match is None:  # a group DuckDB does not list is empty: COUNT/SUM 0, AVG null
                assert all(v in (0.0, None) for v in row[keys:]), row
            else:
                assert _same_row(row, match), (row, match)
        assert not by_key, f"groups missing from Prima's answer: {list(by_key)[:5]}"


def test_there_are_at_least_40_supported_and_30_unsupported_shapes() -> None:
    assert len(SUPPORTED) >= 40 and len(UNSUPPORTED) >= 30


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    tmp = tmp_path_factory.mktemp("api")
    settings = Settings(data_dir=tmp / "data", admin_token=ADMIN_TOKEN, import_dir=tmp, demo=False)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        spec = sales_spec(write_sales_csv(tmp / "sales.csv"))
        assert c.post("/v1/admin/tables", json=spec, headers=admin_headers()).status_code == 201
        yield c


@pytest.mark.parametrize("sql,fragment", UNSUPPORTED, ids=[u[0][:60] for u in UNSUPPORTED])
def test_unsupported_shape_is_refused_with_a_specific_message(client: TestClient, sql: str, fragment: str) -> None:
    r = client.post("/v1/query", json={"sql": sql})
    assert r.status_code == 400, r.text
    assert fragment in r.json()["detail"], r.json()["detail"]


def test_group_by_30x30_equals_single_cell_queries(tmp_path: Path) -> None:
    import numpy as np

    rng = np.random.default_rng(5)  # test data
    csv_path = tmp_path / "grid.csv"
    n = 20_000
    cols = {"a": rng.integers(0, 30, n), "b": rng.integers(0, 30, n), "m": rng.integers(0, 30, n)}
    csv_path.write_text("a,b,m\n" + "\n".join(f"{a},{b},{m}" for a, b, m in zip(*cols.values())))
    prima = Prima(tmp_path / "data", seed=3)
    try:
        prima.register(
            TableSpec.model_validate(
                {
                    "name": "grid",
                    "source": {"csv": str(csv_path)},
                    "epsilon": 1.0,
                    "dimensions": [
                        {"name": "a", "type": "int", "lo": 0, "hi": 29},
                        {"name": "b", "type": "int", "lo": 0, "hi": 29},
                    ],
                    "measures": [{"name": "m", "lo": 0, "hi": 30}],
                    "cube": {"build": "on_first_query"},
                }
            )
        )
        grouped = prima.query("SELECT a, b, SUM(m), COUNT(*) FROM grid GROUP BY a, b")
        assert len(grouped["rows"]) == 30 * 30  # no NULL groups: no row has one, and their noisy counts say so
        everything = prima.query(
            "SELECT a, b, SUM(m), COUNT(*) FROM grid GROUP BY a, b", AnswerOptions(outside_groups="all")
        )
        assert len(everything["rows"]) == 31 * 31  # asked for: the NULL groups too
        for (a, b, s, c), (_, _, s_sd, c_sd) in zip(grouped["rows"], grouped["stddev"]):
            if a is None or b is None:
                continue
            single = prima.query(f"SELECT SUM(m), COUNT(*) FROM grid WHERE a = {a} AND b = {b}")
            assert single["rows"][0] == pytest.approx([s, c], rel=1e-9, abs=1e-6)
            assert single["stddev"][0] == pytest.approx([s_sd, c_sd], rel=1e-12)
    finally:
        prima.close()


def test_batch_of_1000_equals_one_by_one(client: TestClient) -> None:
    rng = random.Random(11)
    regions = ["north", "south", "east", "west"]
    queries = []
    for i in range(1000):
        lo = rng.randint(18, 80)
        queries.append(
            f"SELECT SUM(amount), COUNT(*) FROM sales WHERE age BETWEEN {lo} AND {lo + rng.randint(0, 10)} "
            f"AND region = '{rng.choice(regions)}'"
            if i % 50
            else "SELECT SUM(nope) FROM sales"
        )
    batch = client.post("/v1/query/batch", json={"queries": queries})
    assert batch.status_code == 200
    results = batch.json()["results"]
    assert len(results) == 1000
    for sql, res in zip(queries, results):
        single = client.post("/v1/query", json={"sql": sql})
        if "error" in res:
            assert single.status_code == res["error"]["status"] == 400
            assert single.json()["detail"] == res["error"]["detail"]
        else:
            assert single.json()["rows"] == res["rows"] and single.json()["stddev"] == res["stddev"]


def test_plan_cache_returns_the_same_plan(surface: tuple[Prima, Any]) -> None:
    prima, _ = surface
    sql = "SELECT region, COUNT(*) FROM sales GROUP BY region"
    assert prima.plan(sql) is prima.plan("  " + sql + "\n")


def test_what_bi_tools_send_is_accepted(sales: Prima) -> None:
    """Clients' SQL over REST too: schema- and catalog-qualified names, quoted aliases, a
    LIMIT larger than the answer, and Metabase's `WHERE 1 <> 1 LIMIT 0` column probe."""
    plain = sales.query("SELECT COUNT(*) FROM sales WHERE age > 30")
    for sql in (
        'SELECT COUNT(*) FROM "public"."sales" WHERE age > 30',
        "SELECT COUNT(*) FROM prima.public.sales WHERE age > 30",
        'SELECT COUNT(*) AS "Count" FROM public.sales "s" WHERE "s".age > 30 AND 1 = 1 LIMIT 1000',
    ):
        got = sales.query(sql)
        assert got["rows"] == plain["rows"], sql
    probe = sales.query("SELECT region, SUM(amount) AS total FROM sales WHERE 1 <> 1 GROUP BY region LIMIT 0")
    assert probe["columns"] == ["region", "total"] and probe["rows"] == []
    assert sales.query("SELECT COUNT(*) FROM sales WHERE 1 <> 1")["rows"] == []


def test_date_trunc_at_and_above_the_dimensions_grain(tmp_path: Path) -> None:
    """Superset's time grain: DATE_TRUNC('month', d) AS __timestamp on a monthly dimension is d;
    a coarser grain groups by it, each group exactly the range query of its months; a finer grain
    is refused with the reason."""
    import shutil

    import yaml

    shutil.copy(REPO / "examples" / "staff.csv", tmp_path / "staff.csv")
    raw = yaml.safe_load((REPO / "examples" / "staff.yaml").read_text())
    raw["source"]["csv"] = str(tmp_path / "staff.csv")
    prima = Prima(tmp_path / "data", seed=2)
    prima.register(TableSpec.model_validate(json.loads(json.dumps(raw, default=str))))
    prima.build("staff")
    got = prima.query(
        "SELECT DATE_TRUNC('month', hired) AS __timestamp, COUNT(*) FROM staff "
        "GROUP BY DATE_TRUNC('month', hired) ORDER BY __timestamp LIMIT 3"
    )
    plain = prima.query("SELECT hired, COUNT(*) FROM staff GROUP BY hired ORDER BY hired LIMIT 3")
    assert got["columns"][0] == "__timestamp" and got["rows"] == plain["rows"]
    years = prima.query(
        "SELECT DATE_TRUNC('year', hired) AS y, dept, SUM(salary) FROM staff "
        "WHERE hired >= '2014-07-01' GROUP BY 1, dept ORDER BY y DESC, dept LIMIT 8"
    )
    # 4 departments a year: no other or NULL department in the file, and their noisy counts say so
    assert [r[0] for r in years["rows"]] == ["2025-01"] * 4 + ["2024-01"] * 4
    assert any("grouped by year" in n for n in years["notes"])
    eng = next(r for r in years["rows"] if r[:2] == ["2024-01", "eng"])  # a declared value, not "(other)"
    one = prima.query(
        "SELECT SUM(salary) FROM staff WHERE hired BETWEEN '2024-01-01' AND '2024-12-31' AND dept = 'eng'"
    )
    assert eng[2] == pytest.approx(one["rows"][0][0], rel=1e-12)
    assert years["stddev"][6][2] == pytest.approx(one["stddev"][0][0], rel=1e-12)
    first = prima.query(
        "SELECT DATE_TRUNC('year', hired) AS y, COUNT(*) FROM staff WHERE hired >= '2014-07-01' GROUP BY 1 ORDER BY y"
    )
    partial = prima.query("SELECT COUNT(*) FROM staff WHERE hired BETWEEN '2014-07-01' AND '2014-12-31'")
    assert first["rows"][0] == ["2014-01", partial["rows"][0][0]]  # the selection cuts the first year
    quarters = prima.query("SELECT DATE_TRUNC('quarter', hired), COUNT(*) FROM staff GROUP BY 1")
    assert len(quarters["rows"]) == 4 * 14 and quarters["rows"][1][0] == "2012-04"  # no NULL group: no row has one
    with pytest.raises(QueryError, match="declared by month"):
        prima.plan("SELECT DATE_TRUNC('day', hired), COUNT(*) FROM staff GROUP BY 1")
    prima.close()


def test_listing_a_columns_values_reads_the_declared_domain_without_a_build(tmp_path: Path) -> None:
    """BI tools list a column's values (`GROUP BY dim` without an aggregate, `SELECT DISTINCT dim`):
    answered from the declared domain — public — with no cube, no build and no budget spent."""
    prima = Prima(tmp_path / "data", seed=1)
    prima.ensure_demo()
    got = prima.query(
        'SELECT "education" AS "education" FROM "public"."people" GROUP BY "education" '
        'ORDER BY "education" ASC LIMIT 1000'
    )
    assert got["rows"] == [["bsc"], ["hs"], ["msc"], ["phd"]] and got["stddev"] == [[None]] * 4
    assert prima.query(
        "SELECT DISTINCT region, education FROM people WHERE region IN ('east', 'west') "
        "ORDER BY region DESC, education LIMIT 3"
    )["rows"] == [["west", "bsc"], ["west", "hs"], ["west", "msc"]]
    assert prima.query("SELECT DISTINCT age FROM people WHERE age < 21")["rows"] == [[18], [19], [20]]
    with pytest.raises(QueryError, match="DISTINCT"):
        prima.plan("SELECT DISTINCT COUNT(*) FROM people")
    info = prima.table_info("people")
    assert info["cube"]["status"] == "none" and info["budget"]["epsilon_spent"] == 0.0
    prima.close()


def test_weeks_of_a_daily_dimension_equal_duckdbs_date_trunc(tmp_path: Path) -> None:
    """`DATE_TRUNC('week', d)` (BI tools' default grain) on a dimension declared by day: groups labelled by
    their Monday, each the exact sum over its days (noise off) — DuckDB's own date_trunc on the raw
    file; weeks of a monthly dimension are refused as a feature (0A000) naming what works."""
    import csv as csv_module

    path = tmp_path / "visits.csv"
    with path.open("w", newline="") as f:
        w = csv_module.writer(f)
        w.writerow(["day", "amount"])
        for i in range(400):
            w.writerow([(dt.date(2024, 1, 1) + dt.timedelta(days=(i * 7) % 90)).isoformat(), i % 13])
    prima = Prima(tmp_path / "data", seed=1)
    for name, grain in (("daily", "day"), ("monthly", "month")):
        prima.register(
            TableSpec.model_validate(
                {
                    "name": name,
                    "source": {"csv": str(path)},
                    "dimensions": [
                        {"name": "day", "type": "date", "lo": "2024-01-01", "hi": "2024-03-31", "granularity": grain}
                    ],
                    "measures": [{"name": "amount", "lo": 0, "hi": 20}],
                    "epsilon": 1.0,
                    "cube": {"build": "on_first_query"},
                }
            )
        )
    sql = "SELECT DATE_TRUNC('week', day) AS w, COUNT(*), SUM(amount) FROM daily GROUP BY 1 ORDER BY 1"
    got = prima.answer_with(sql, prima.exact_cube)
    want = duckdb.sql(
        f"SELECT strftime(date_trunc('week', CAST(day AS DATE)), '%Y-%m-%d'), COUNT(*), SUM(amount) "
        f"FROM read_csv('{path}') GROUP BY 1 ORDER BY 1"
    ).fetchall()
    rows = [r for r in got["rows"] if r[0] is not None and "declared range" not in str(r[0])]
    assert [(r[0], r[1], r[2]) for r in rows] == [(w, float(n), float(s)) for w, n, s in want]
    assert rows[0][0] == "2024-01-01" and dt.date.fromisoformat(rows[1][0]).weekday() == 0
    with pytest.raises(QueryError) as refused:
        prima.plan("SELECT DATE_TRUNC('week', day) AS w, COUNT(*) FROM monthly GROUP BY 1")
    assert refused.value.sqlstate == "0A000" and "weeks need a dimension declared by day" in refused.value.detail
    prima.close()


@pytest.mark.parametrize(
    "sql, sqlstate",
    [
        ("SELECT COUNT(DISTINCT age) FROM people", "0A000"),
        ("SELECT salary FROM people", "42501"),
        ("SELECT age, salary FROM people GROUP BY age", "42501"),
        ("SELECT age, COUNT(*) FROM people GROUP BY salary", "42601"),
    ],
)
def test_refusals_carry_the_sqlstate_the_docs_promise(tmp_path: Path, sql: str, sqlstate: str) -> None:
    """0A000 for a feature Prima does not offer, 42501 for raw values (a measure outside an aggregate)."""
    prima = Prima(tmp_path / "data")
    prima.ensure_demo()
    with pytest.raises(QueryError) as refused:
        prima.plan(sql)
    assert refused.value.sqlstate == sqlstate, refused.value.detail
    prima.close()


@pytest.mark.parametrize("written", ["2021-01-01 +00", "2021-01-01+02:00", "2021-01-01 UTC"])
def test_a_date_with_a_zone_after_it_reads_as_the_date(sales: Prima, written: str) -> None:
    """pgjdbc's `setDate` sends '2021-01-01 +00'; PostgreSQL reads a date and ignores the zone."""
    plain = sales.plan("SELECT COUNT(*) FROM sales WHERE day >= '2021-01-01'")
    assert sales.plan(f"SELECT COUNT(*) FROM sales WHERE day >= '{written}'").selection == plain.selection


@pytest.mark.parametrize("item", ["NULL", "1", "'x'", "TRUE"])
def test_a_constant_per_row_is_refused_as_raw_rows_saying_how_to_count(tmp_path: Path, item: str) -> None:
    """DuckDB's postgres scanner counts an attached table with `SELECT NULL FROM t`: one value per row,
    refused as raw rows (42501), naming COUNT(*) and postgres_query."""
    prima = Prima(tmp_path / "data")
    prima.ensure_demo()
    with pytest.raises(QueryError) as refused:
        prima.plan(f'SELECT {item} FROM "public"."people"')
    assert refused.value.sqlstate == "42501" and "postgres_query('prima', 'SELECT COUNT(*) FROM people')" in str(
        refused.value.detail
    )
    prima.close()
