"""SQL as BI clients write it: constants in every spelling, HAVING, LIKE, wrapped
queries — each checked with noise off against DuckDB's answer on the raw file, and against the
plain form Prima always understood."""

from __future__ import annotations

import datetime as dt

import pytest

from engine.answers.options import AnswerOptions
from engine.errors import QueryError
from engine.service import Prima
from tests.test_exact_answers import duckdb_truth

SAME_AS = [  # (client form, the plain form)
    ("age >= CAST('30' AS INT)", "age >= 30"),
    ("age >= '30'::integer", "age >= 30"),
    ("age BETWEEN CAST(30 AS BIGINT) AND 30 + 9", "age BETWEEN 30 AND 39"),
    ("day >= CAST('2020-03-01' AS DATE)", "day >= DATE '2020-03-01'"),
    ("day >= '2020-03-01'::date", "day >= DATE '2020-03-01'"),
    ("day >= TIMESTAMP '2020-03-01 00:00:00'", "day >= DATE '2020-03-01'"),
    ("day >= TIMESTAMP WITH TIME ZONE '2020-03-01 00:00:00+00'", "day >= DATE '2020-03-01'"),
    ("day >= '2020-03-01T00:00:00.000Z'", "day >= DATE '2020-03-01'"),  # a JS Date, as node-postgres sends it
    ("day >= '2020-03-01T01:00:00+01:00'", "day >= DATE '2020-03-01'"),  # midnight UTC
    ("day >= TO_DATE('03/01/2020', 'MM/DD/YYYY')", "day >= DATE '2020-03-01'"),
    ("day >= TO_TIMESTAMP('2020-03-01 00:00', 'YYYY-MM-DD HH24:MI')", "day >= DATE '2020-03-01'"),
    ("day >= MAKE_DATE(2020, 3, 1)", "day >= DATE '2020-03-01'"),
    ("day >= DATE '2020-04-30' - INTERVAL '1 month' - INTERVAL '29 days'", "day >= DATE '2020-03-01'"),
    ("day < DATE_TRUNC('year', DATE '2021-06-15')", "day < DATE '2021-01-01'"),
    ("day >= TIMESTAMP '2020-02-29 12:00:00'", "day > DATE '2020-02-29'"),  # a date is midnight of its day
    ("day <= '2020-02-29 12:00:00'", "day <= DATE '2020-02-29'"),
]


@pytest.mark.parametrize("client,plain", SAME_AS)
def test_constants_as_clients_write_them(sales: Prima, client: str, plain: str) -> None:
    got = sales.answer_with(f"SELECT COUNT(*), SUM(amount) FROM sales WHERE {client}", sales.exact_cube)
    want = sales.answer_with(f"SELECT COUNT(*), SUM(amount) FROM sales WHERE {plain}", sales.exact_cube)
    assert got["rows"] == want["rows"] and got["ci95"] == want["ci95"]
    s, n = duckdb_truth(sales, plain.replace("day", "CAST(day AS DATE)"))  # SQL's meaning of the client form
    (lo_n, hi_n), (lo_s, hi_s) = (ci or (v, v) for ci, v in zip(got["ci95"][0], got["rows"][0]))
    assert lo_n <= n <= hi_n and lo_s - 1e-6 <= s <= hi_s + 1e-6  # exact, or between the bins a time of day cuts


def test_now_and_current_date_fold_at_query_time_and_are_not_cached(sales: Prima) -> None:
    today = dt.datetime.now(dt.UTC).date()
    since = dt.date(today.year - 5, today.month, min(today.day, 28))
    got = sales.answer_with(
        "SELECT COUNT(*) FROM sales WHERE day >= CURRENT_DATE - INTERVAL '5 years'", sales.exact_cube
    )
    if today.day <= 28:
        want = sales.answer_with(
            f"SELECT COUNT(*) FROM sales WHERE day >= DATE '{since.isoformat()}'", sales.exact_cube
        )
        assert got["rows"] == want["rows"]
    sql = "SELECT COUNT(*) FROM sales WHERE day >= NOW() - INTERVAL '10 years'"
    assert sales.plan(sql) == sales.plan(sql)
    assert sql.strip() not in sales.ws.plans  # a plan holding today's date is never kept


def test_having_filters_released_groups_as_sql_filters_true_ones(sales: Prima) -> None:
    sql = (
        "SELECT region, COUNT(*) AS n, SUM(amount) FROM sales WHERE age BETWEEN 18 AND 90 GROUP BY region "
        "HAVING COUNT(*) > 700 AND n < 1400 ORDER BY n DESC"
    )
    got = sales.answer_with(sql, sales.exact_cube)
    truth = sales.db.run(
        "SELECT region, COUNT(*) AS n FROM src.sales WHERE age BETWEEN 18 AND 90 GROUP BY region "
        "HAVING COUNT(*) > 700 AND n < 1400 ORDER BY n DESC"
    )
    assert [(r[0], r[1]) for r in got["rows"]] == [
        (r, float(n)) for r, n in truth if r in ("north", "south", "east", "west")
    ]
    assert any("HAVING filters the released" in n for n in got["notes"])
    none = sales.answer_with("SELECT COUNT(*) FROM sales HAVING COUNT(*) > 1e9", sales.exact_cube)
    assert none["rows"] == []
    with pytest.raises(QueryError, match="add that aggregate to the SELECT list"):
        sales.plan("SELECT region, COUNT(*) FROM sales GROUP BY region HAVING SUM(amount) > 0")


@pytest.mark.parametrize(
    "condition",
    [
        "region LIKE 'n%'",
        "region ILIKE 'N%'",
        "region NOT LIKE '%th'",
        "NOT (region LIKE '_outh')",
        "region LIKE 'm%'",
        "region LIKE 'east'",
    ],
)
def test_like_over_the_declared_values_holds_sqls_answer(sales: Prima, condition: str) -> None:
    got = sales.answer_with(f"SELECT COUNT(*) FROM sales WHERE {condition}", sales.exact_cube)
    _, n = duckdb_truth(sales, condition)  # 'mars' rows are outside the declared list: the other cell
    lo, hi = got["ci95"][0][0] or (got["rows"][0][0],) * 2
    assert lo <= n <= hi
    exact = condition == "region LIKE 'east'"
    assert exact == (lo == hi == got["rows"][0][0] == n)


WRAPPED = [
    (
        "SELECT COUNT(*) FROM (SELECT * FROM sales WHERE age > 30) AS s WHERE region = 'north'",
        "SELECT COUNT(*) FROM sales WHERE age > 30 AND region = 'north'",
    ),
    (
        "WITH q AS (SELECT * FROM sales WHERE day >= DATE '2021-01-01') SELECT region, SUM(amount) FROM q GROUP BY region",
        "SELECT region, SUM(amount) FROM sales WHERE day >= DATE '2021-01-01' GROUP BY region",
    ),
    (
        "SELECT a, COUNT(*) FROM (SELECT age AS a, amount FROM sales) s WHERE a BETWEEN 30 AND 32 GROUP BY a ORDER BY a",
        "SELECT age AS a, COUNT(*) FROM sales WHERE age BETWEEN 30 AND 32 GROUP BY age ORDER BY age",
    ),
    (
        "SELECT * FROM (SELECT region, COUNT(*) AS n FROM sales GROUP BY region) AS t ORDER BY n DESC LIMIT 2",
        "SELECT region, COUNT(*) AS n FROM sales GROUP BY region ORDER BY n DESC LIMIT 2",
    ),
    (
        "SELECT t.region AS r, t.n FROM (SELECT region, COUNT(*) AS n FROM sales GROUP BY region) t "
        "WHERE t.region <> 'west' AND t.n > 500",
        "SELECT region AS r, COUNT(*) AS n FROM sales WHERE region <> 'west' GROUP BY region HAVING COUNT(*) > 500",
    ),
    (
        "SELECT t0.region, t0.s FROM (SELECT t1.region AS region, SUM(t1.amount) AS s FROM (SELECT * FROM sales) AS t1 "
        "GROUP BY 1) AS t0 ORDER BY t0.s DESC",  # ibis
        "SELECT region, SUM(amount) AS s FROM sales GROUP BY 1 ORDER BY s DESC",
    ),
    (  # ibis: an outer ORDER BY on computed group keys and outputs, ordered by their names in the result
        "SELECT t0.y, t0.a FROM (SELECT DATE_TRUNC('year', day) AS y, SUM(amount) / COUNT(*) AS a FROM sales "
        "GROUP BY 1) AS t0 ORDER BY t0.y DESC, t0.a",
        "SELECT DATE_TRUNC('year', day) AS y, SUM(amount) / COUNT(*) AS a FROM sales GROUP BY 1 ORDER BY y DESC, a",
    ),
    (
        "SELECT t0.g, t0.n FROM (SELECT CASE WHEN age < 40 THEN 'young' ELSE 'old' END AS g, COUNT(*) AS n "
        "FROM sales GROUP BY 1) AS t0 ORDER BY t0.g",
        "SELECT CASE WHEN age < 40 THEN 'young' ELSE 'old' END AS g, COUNT(*) AS n FROM sales GROUP BY 1 ORDER BY g",
    ),
]


@pytest.mark.parametrize("wrapped,flat", WRAPPED)
def test_wrapped_queries_answer_as_their_flat_form(sales: Prima, wrapped: str, flat: str) -> None:
    got, want = sales.answer_with(wrapped, sales.exact_cube), sales.answer_with(flat, sales.exact_cube)
    assert (got["columns"], got["rows"], got["ci95"]) == (want["columns"], want["rows"], want["ci95"])


@pytest.mark.parametrize(
    "sql,message",
    [
        ("SELECT SUM(s) FROM (SELECT SUM(amount) AS s FROM sales) x", "aggregates over an aggregate subquery"),
        ("SELECT COUNT(*) FROM sales WHERE age IN (SELECT 1)", "subqueries are supported only in FROM"),
        ("WITH q AS (SELECT * FROM sales) SELECT COUNT(*) FROM q JOIN q AS r ON TRUE", "read more than once"),
        (
            "SELECT * FROM (SELECT region, COUNT(*) AS n FROM sales GROUP BY region LIMIT 2) t LIMIT 1",
            "LIMIT both inside",
        ),
        ("SELECT COUNT(*) FROM sales WHERE age LIKE '3%'", "LIKE works on category dimensions"),
    ],
)
def test_what_stays_refused_says_why(sales: Prima, sql: str, message: str) -> None:
    with pytest.raises(QueryError, match=message):
        sales.plan(sql)


def test_arithmetic_between_aggregates_is_sqls_with_noise_off(sales: Prima) -> None:
    where = "age BETWEEN 18 AND 90 AND region IN ('north', 'south', 'east', 'west') AND score BETWEEN 0 AND 24"
    got = sales.answer_with(
        f"SELECT SUM(amount) / COUNT(*) AS mean, COUNT(*) * 100.0 / 5000, -SUM(amount) FROM sales WHERE {where}",
        sales.exact_cube,
    )
    s, n = sales.db.run(f"SELECT SUM(LEAST(GREATEST(amount, -100), 1000)), COUNT(*) FROM src.sales WHERE {where}")[0]
    assert got["rows"][0] == pytest.approx([s / n, n * 100.0 / 5000, -s])
    assert got["columns"][0] == "mean" and any("delta-method" in note for note in got["notes"])
    grouped = sales.answer_with(
        f"SELECT region, SUM(amount) / NULLIF(COUNT(*), 0) AS m FROM sales WHERE {where} "
        "GROUP BY region HAVING m > 0 ORDER BY m DESC",
        sales.exact_cube,
    )
    truth = sales.db.run(
        f"SELECT region, SUM(LEAST(GREATEST(amount, -100), 1000)) / COUNT(*) AS m FROM src.sales "
        f"WHERE {where} GROUP BY region ORDER BY m DESC"
    )
    assert [(r, pytest.approx(m)) for r, m in grouped["rows"]] == [(r, m) for r, m in truth]


@pytest.mark.slow
def test_arithmetic_bars_cover_over_seeded_builds(tmp_path, sales_csv) -> None:  # noqa: ANN001
    """The delta-method bar of SUM/COUNT and of COUNT·k − SUM holds the noise-free value ≈ 95 % of the time."""
    from storage.schema import TableSpec
    from tests.conftest import registered_template, sales_spec, seeded_copy

    spec = sales_spec(sales_csv, epsilon=4.0)  # the default strategy; a ratio of clear-of-zero parts
    sql = "SELECT SUM(amount) / COUNT(*), COUNT(*) * 300 - SUM(amount) FROM sales WHERE age BETWEEN 30 AND 60"
    held, total, truth = 0, 0, None
    template = registered_template(tmp_path / "template", TableSpec.model_validate(spec))
    for seed in range(40):
        prima = seeded_copy(template, tmp_path / f"d{seed}", seed)
        truth = truth or prima.answer_with(sql, prima.exact_cube)["rows"][0]
        got = prima.query(sql, AnswerOptions(clamp=False))
        for (lo, hi), true in zip(got["ci95"][0], truth):
            held += lo <= true <= hi
            total += 1
        prima.close()
    assert held / total >= 0.9, held / total


@pytest.mark.parametrize(
    "case",
    [
        "CASE WHEN region IN ('north', 'south') THEN 'NS' WHEN region = 'east' THEN 'E' ELSE 'rest' END",
        "CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'mid' ELSE 'old' END",  # NULL and outside ages: ELSE
        "CASE region WHEN 'north' THEN 1 ELSE 0 END",
    ],
)
def test_case_over_one_dimension_groups_as_sql(sales: Prima, case: str) -> None:
    """A CASE over one dimension's values in GROUP BY (Superset's custom dimensions): each group is
    the set of its cells, answered as one query — equal to DuckDB's GROUP BY on the raw file."""
    sql = f"SELECT {case} AS g, COUNT(*), SUM(amount) FROM sales GROUP BY g ORDER BY g"
    got = sales.answer_with(sql, sales.exact_cube)
    truth = sales.db.run(
        f"SELECT {case} AS g, COUNT(*), COALESCE(SUM(LEAST(GREATEST(amount, -100), 1000)), 0) "
        "FROM src.sales GROUP BY g ORDER BY g"
    )
    assert [(str(g), n, pytest.approx(s)) for g, n, s in got["rows"]] == [(str(g), float(n), s) for g, n, s in truth]
    with pytest.raises(QueryError, match="cuts its bins"):
        sales.plan("SELECT CASE WHEN score < 3 THEN 'a' ELSE 'b' END AS g, COUNT(*) FROM sales GROUP BY 1")


def test_epoch_seconds_fold_like_the_dates_they_name(sales: Prima) -> None:
    """Grafana's `$__timeFrom()` writes `to_timestamp(1609459200)`: seconds since 1970 (UTC), folded to
    the instant before the plan is bound; nonsense is a QueryError, never a 500."""
    by_epoch = "SELECT COUNT(*) FROM sales WHERE day >= to_timestamp(1609459200) AND day < to_timestamp(1612137600)"
    by_text = "SELECT COUNT(*) FROM sales WHERE day >= '2021-01-01' AND day < '2021-02-01'"
    assert sales.plan(by_epoch).selection == sales.plan(by_text).selection
    for bad in ("to_timestamp(1e300)", "to_timestamp('x')", "to_timestamp(CAST('nan' AS DOUBLE))"):
        with pytest.raises(QueryError):
            sales.plan(f"SELECT COUNT(*) FROM sales WHERE day >= {bad}")


@pytest.mark.parametrize("seconds", [3600, 86400, 604800, 2592000])
def test_grafanas_time_group_buckets_a_day_dimension_as_sql(prima: Prima, sales_csv, seconds: int) -> None:  # noqa: ANN001
    """Grafana expands `$__timeGroupAlias(day, '7d')` to `floor(extract(epoch from day)/604800)*604800
    AS "time"` before sending it: on a day-grain dimension every bucket is a run of days, answered
    exactly as SQL groups (NULL dates their NULL group; dates outside the declared range, 2020–2021,
    in none, with the note every date group has). Before: "GROUP BY takes dimension columns"."""
    from storage.schema import TableSpec
    from tests.conftest import sales_spec

    lines = sales_csv.read_text().splitlines() + ["40,north,,3,10", "41,south,2019-05-05,3,10"]
    sales_csv.write_text("\n".join(lines) + "\n")
    spec = sales_spec(sales_csv)
    spec["dimensions"][2]["granularity"] = "day"
    prima.register(TableSpec.model_validate(spec))
    bucket = f"floor(extract(epoch from day)/{seconds})*{seconds}"
    sql = f'SELECT {bucket} AS "time", COUNT(*) AS n, SUM(amount) AS s FROM sales {{where}} GROUP BY 1 ORDER BY 1'
    truth_sql = (
        f"SELECT floor(extract(epoch from CAST(day AS DATE))/{seconds})*{seconds} AS t, COUNT(*), "
        "COALESCE(SUM(LEAST(GREATEST(amount, -100), 1000)), 0) FROM src.sales {where} GROUP BY 1 ORDER BY 1 NULLS LAST"
    )
    inside = "(day IS NULL OR CAST(day AS DATE) BETWEEN DATE '2020-01-01' AND DATE '2021-12-31')"
    for where in ("WHERE day BETWEEN '2020-03-01T00:00:00Z' AND '2020-06-01T00:00:00Z'", ""):
        got = prima.answer_with(sql.format(where=where), prima.exact_cube)
        condition = where.replace("WHERE day", "AND CAST(day AS DATE)")
        truth = prima.db.run(truth_sql.format(where=f"WHERE {inside} {condition}"))
        if not where:  # dates outside the declared range: in no group (a note says so), in every total
            assert any("past its declared range" in n for n in got["notes"])
        assert [(g, n, pytest.approx(s)) for g, n, s in got["rows"]] == [
            (None if t is None else int(t), float(n), s) for t, n, s in truth
        ]


def test_time_buckets_that_cut_a_month_are_refused_saying_what_works(sales: Prima) -> None:
    """A 30-day bucket cuts months, whose rows the cells cannot tell apart: 0A000 naming DATE_TRUNC."""
    with pytest.raises(
        QueryError, match=r"cut its months \(2020-01 falls in two buckets\).*date_trunc\('month', day\)"
    ) as e:
        sales.plan('SELECT floor(extract(epoch from day)/2592000)*2592000 AS "time", COUNT(*) FROM sales GROUP BY 1')
    assert e.value.sqlstate == "0A000"
