"""Golden replays: the SQL real BI clients sent, captured from Superset 6.0 and ibis 12
by bench/bi_clients/run.py, replayed over the wire with each client's own driver (psycopg 2 for
Superset, psycopg 3 for ibis) and over REST — every value equal, and the series limit doing what
Superset means by it."""

from __future__ import annotations

import pytest

from tests.conftest import LiveServer
from tests.test_wire_clients import with_staff  # noqa: F401 — the module's server fixture, with staff
from tests.wire_server import dsn, rest, wire  # noqa: F401

psycopg = pytest.importorskip("psycopg")

SUPERSET = {  # chart → the SQL Superset 6.0 generated for it (result_type "query")
    "table, three metrics": 'SELECT education AS education, COUNT(*) AS count, sum(salary) AS "SUM(salary)", '
    'AVG(salary) AS "AVG(salary)" \nFROM public.people GROUP BY education \n LIMIT 100',
    "pivot": 'SELECT region AS region, education AS education, sum(salary) AS "SUM(salary)", AVG(salary) AS '
    '"AVG(salary)" \nFROM public.people GROUP BY region, education \n LIMIT 1000',
    "bar, series limit": 'SELECT region AS region, education AS education, sum(salary) AS "SUM(salary)" \nFROM '
    "public.people JOIN (SELECT region AS region__, sum(salary) AS mme_inner__ \nFROM public.people "
    "GROUP BY region ORDER BY sum(salary) DESC \n LIMIT 2) AS series_limit ON region = region__ "
    "GROUP BY region, education \n LIMIT 100",
    "time series, last 5 years": "SELECT DATE_TRUNC('year', hired) AS hired, COUNT(*) AS count \nFROM public.staff "
    "\nWHERE hired >= TO_DATE('2021-11-25', 'YYYY-MM-DD') AND hired < "
    "TO_DATE('2026-11-25', 'YYYY-MM-DD') GROUP BY DATE_TRUNC('year', hired) \n LIMIT 100",
    "big number, filter": "SELECT COUNT(*) AS count \nFROM public.people \nWHERE education IN ('phd', 'msc') \n LIMIT 50000",
    "HAVING": "SELECT education AS education, COUNT(*) AS count \nFROM public.people GROUP BY education \nHAVING "
    "COUNT(*) > 1000 \n LIMIT 50000",
    "IS NOT NULL": "SELECT region AS region, COUNT(*) AS count \nFROM public.people \nWHERE region IS NOT NULL GROUP BY "
    "region \n LIMIT 50000",
}
IBIS = {  # ibis 12's SQL (ibis.to_sql) for group_by().aggregate(), value_counts(), a date filter, order_by()
    "group_by().aggregate()": 'SELECT\n  "t0"."education",\n  COUNT(*) AS "n"\nFROM "people" AS "t0"\nGROUP BY\n  1',
    "value_counts()": 'SELECT\n  "t1"."education",\n  COUNT(*) AS "education_count"\nFROM (\n  SELECT\n    "t0"."education"'
    '\n  FROM "people" AS "t0"\n) AS "t1"\nGROUP BY\n  1',
    "date filter count()": 'SELECT\n  COUNT(*) AS "CountStar()"\nFROM (\n  SELECT\n    *\n  FROM "staff" AS "t0"\n  WHERE\n'
    '    "t0"."hired" >= MAKE_DATE(CAST(2020 AS INT), CAST(1 AS INT), CAST(1 AS INT))\n) AS "t1"',
    "order_by()": 'SELECT\n  *\nFROM (\n  SELECT\n    "t0"."region",\n    SUM("t0"."salary") AS "total"\n  FROM "people" AS '
    '"t0"\n  GROUP BY\n    1\n) AS "t1"\nORDER BY\n  "t1"."total" DESC NULLS LAST',
}


def _psycopg2_rows(port: int, sql: str) -> list:
    """As Superset sends it: psycopg 2 (libpq's simple protocol), a transaction around each query."""
    psycopg2 = pytest.importorskip("psycopg2")
    conn = psycopg2.connect(dsn(port), options="-c prima.stddev=off")
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("name,sql", list(SUPERSET.items()) + list(IBIS.items()))
def test_client_sql_replays_equal_rest(with_staff: tuple[LiveServer, int], name: str, sql: str) -> None:  # noqa: F811
    server, port = with_staff
    want = rest(server, sql)
    if name in SUPERSET:
        got = _psycopg2_rows(port, sql)
    else:  # ibis: psycopg 3
        with psycopg.connect(dsn(port), autocommit=True) as conn:
            conn.execute("SET prima.stddev = off")
            got = conn.execute(sql, prepare=False).fetchall()
    assert len(got) == len(want["rows"])
    for row, expected in zip(got, want["rows"]):
        values = [v.strftime("%Y-%m") if hasattr(v, "strftime") else v for v in row]
        assert values == expected, (name, values, expected)


def test_series_limit_keeps_the_ranking_answers_top_groups(with_staff: tuple[LiveServer, int]) -> None:  # noqa: F811
    server, _ = with_staff
    top = rest(server, "SELECT region, SUM(salary) AS s FROM people GROUP BY region ORDER BY s DESC LIMIT 2")["rows"]
    limited = rest(server, SUPERSET["bar, series limit"])
    plain = {
        (r[0], r[1]): r[2]
        for r in rest(server, "SELECT region, education, SUM(salary) FROM people GROUP BY region, education")["rows"]
    }
    assert {r[0] for r in limited["rows"]} == {r[0] for r in top}
    assert all(plain[(r[0], r[1])] == r[2] for r in limited["rows"])
    assert any("series limit" in n for n in limited["notes"])
