"""Scripted client sessions against a running Prima wire listener (run inside each client's own
environment by `bench/bi_clients/run.py`). Each prints one JSON object: {check: [got, ok, detail]}.

A session drives the client the way its users do and compares every number with REST's answer
for the same SQL (the harness passes REST's answers in)."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

from statements import STATEMENTS, placeholders, python_value

HOST, PORT, USER, PASSWORD, DB = "127.0.0.1", int(sys.argv[2]), "bi", sys.argv[3], "prima"
EXPECTED: dict[str, Any] = json.loads(Path(sys.argv[4]).read_text()) if len(sys.argv) > 4 else {}
RESULTS: dict[str, list] = {}
OUTCOMES: dict[str, dict] = {}  # statement name -> {"rows": …} or {"error": [sqlstate, message]}


def run_statements(execute: Callable[[str, list], list], style: str, state: Callable[[Exception], str | None],
                   rollback: Callable[[], None] | None = None) -> None:
    """Every shared statement through the driver (`statements.py`); the harness compares them with REST.
    ``execute(sql, params)`` returns the rows; ``state`` reads a driver error's SQLSTATE; ``rollback``
    ends a transaction an error aborted (SQLAlchemy opens one, as against PostgreSQL)."""
    for statement in STATEMENTS:
        sql = statement["sql"] if style == "numeric" else placeholders(statement["sql"], style)
        try:
            rows = execute(sql, [python_value(v) for v in statement["params"]])
            OUTCOMES[statement["name"]] = {"rows": json.loads(json.dumps([list(r) for r in rows], default=str))}
        except Exception as exc:  # noqa: BLE001 — a refusal or a failure is the outcome
            OUTCOMES[statement["name"]] = {"error": [state(exc), str(exc)[:400]]}
            if rollback is not None:
                rollback()


def check(name: str, run: Callable[[], Any], expect: Callable[[Any], bool] | None = None) -> None:
    try:
        got = run()
        ok = True if expect is None else bool(expect(got))
        RESULTS[name] = [repr(got)[:160], ok, ""]
    except Exception as exc:  # noqa: BLE001 — a client's failure is a result
        RESULTS[name] = [None, False, f"{type(exc).__name__}: {str(exc)[:300]}"]


def check_refused(name: str, run: Callable[[], Any], words: str) -> None:
    """A refusal that says what to do is the expected answer (raw rows are never released)."""
    try:
        got = run()
        RESULTS[name] = [repr(got)[:160], False, "answered: expected a refusal"]
    except Exception as exc:  # noqa: BLE001
        RESULTS[name] = [None, words in str(exc), f"refused as expected: {str(exc)[:200]}"]


def close(a: float, b: float, slack: float = 0.0) -> bool:
    """Equal to REST's value; ``slack`` 1 where a client casts a COUNT to an integer (ibis)."""
    return abs(float(a) - float(b)) <= max(slack, 1e-6 * max(1.0, abs(float(b))))


def _key(k: Any) -> str:
    return "NULL" if k is None or (isinstance(k, float) and k != k) else str(k)  # NaN: pandas' NULL


def same_groups(rows: list, want: list, slack: float = 0.0) -> bool:
    got = {_key(r[0]): float(r[1]) for r in rows}
    return len(got) == len(want) and all(close(got[_key(k)], v, slack) for k, v in want)


def ibis_session() -> None:
    import ibis

    con = ibis.postgres.connect(host=HOST, port=PORT, user=USER, password=PASSWORD, database=DB,
                                options="-c prima.stddev=off")
    t = con.table("people")
    check("list_tables", con.list_tables, lambda got: {"people", "staff"} <= set(got))
    check("group_by().aggregate()", lambda: t.group_by("education").aggregate(n=t.count()).execute().values.tolist(),
          lambda rows: same_groups(rows, EXPECTED["count_by_education"], slack=1))
    check("filter() count", lambda: t.filter(t.age > 30).count().execute(),
          lambda got: abs(got - EXPECTED["count_age_over_30"]) <= 1)  # ibis casts COUNT to an integer
    check("order_by()", lambda: t.group_by("region").aggregate(s=t.salary.sum()).order_by(ibis.desc("s"))
          .execute().values.tolist(), lambda rows: [_key(r[0]) for r in rows] == [_key(r[0]) for r in
                                                                                    EXPECTED["sum_by_region_desc"]])
    check("value_counts()", lambda: t.education.value_counts().execute().values.tolist(),
          lambda rows: same_groups(rows, EXPECTED["count_by_education"], slack=1))
    s = con.table("staff")
    check("date filter", lambda: s.filter(s.hired >= ibis.date(2020, 1, 1)).count().execute(),
          lambda got: abs(got - EXPECTED["staff_since_2020"]) <= 1)
    check_refused("head() refused with advice", lambda: t.head().execute(), "GROUP BY")


def pgcli_session() -> None:
    from pgcli.pgexecute import PGExecute

    executor = PGExecute(database=DB, user=USER, password=PASSWORD, host=HOST, port=PORT, dsn="")
    check("tables (\\dt, completion)", lambda: sorted(t[1] for t in executor.tables()),
          lambda got: {"people", "staff"} <= set(got))
    check("columns (completion)", lambda: sorted(c[2] for c in executor.table_columns() if c[1] == "people"),
          lambda got: {"age", "education", "salary"} <= set(got))
    check("functions (completion)", lambda: len(list(executor.functions())), lambda n: n > 0)
    check("datatypes (completion)", lambda: len(list(executor.datatypes())), lambda n: n >= 0)
    check("search_path", executor.search_path, lambda got: "public" in got)
    from pgspecial.main import PGSpecial

    special = PGSpecial()

    def rows_of(statement: str) -> list:
        out: list = []
        for _title, rows, *_ in executor.run(statement, pgspecial=special):
            out += list(rows or [])
        return out

    check("\\dt", lambda: rows_of("\\dt"), lambda rows: any(r[1] == "people" for r in rows))
    check("\\d people", lambda: rows_of("\\d people"), lambda rows: any(r[0] == "salary" for r in rows))
    check("\\dv", lambda: rows_of("\\dv"), lambda rows: rows == [])
    check("query", lambda: rows_of("SELECT education, COUNT(*) FROM people GROUP BY education"),
          lambda rows: same_groups(rows, EXPECTED["count_by_education"]))


def sqlalchemy_psycopg2_session() -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(f"postgresql+psycopg2://{USER}:{PASSWORD}@{HOST}:{PORT}/{DB}")
    with engine.connect() as conn:
        people = sa.Table("people", sa.MetaData(), autoload_with=conn)
        check("Table(autoload_with=)", lambda: [c.name for c in people.columns], lambda got: "salary" in got)
        q = sa.select(people.c.education, sa.func.count()).group_by(people.c.education)
        check("group by", lambda: [tuple(r[:2]) for r in conn.execute(q)],
              lambda rows: same_groups(rows, EXPECTED["count_by_education"]))
        typed = sa.select(sa.func.count()).select_from(people).where(people.c.age > sa.bindparam("a", 30, type_=sa.Integer))
        check("typed parameter", lambda: conn.execute(typed).scalar(), lambda got: close(got, EXPECTED["count_age_over_30"]))


def harlequin_session() -> None:
    from harlequin_postgres.adapter import HarlequinPostgresAdapter

    adapter = HarlequinPostgresAdapter(conn_str=(), host=HOST, port=str(PORT), user=USER, password=PASSWORD, dbname=DB,
                                       sslmode="disable")
    conn = adapter.connect()

    def tree() -> dict:
        out: dict = {}
        for db in conn.get_catalog().items:
            for schema in db.children or []:
                out[f"{db.label}.{schema.label}"] = sorted(t.label for t in schema.children or [])
        return out

    check("catalog tree", tree, lambda got: {"people", "staff"} <= set(got.get("prima.public", [])))

    def columns() -> list:
        db = next(d for d in conn.get_catalog().items if d.label == "prima")
        schema = next(s for s in db.children or [] if s.label == "public")
        table = next(t for t in schema.children or [] if t.label == "people")
        return sorted(c.label for c in table.fetch_children())

    check("catalog columns", columns, lambda got: {"age", "education", "salary"} <= set(got))
    check("query", lambda: conn.execute("SELECT education, COUNT(*) FROM people GROUP BY education").set_limit(100)
          .fetchall(), lambda rows: same_groups(rows, EXPECTED["count_by_education"]))
    check_refused("Preview (SELECT *) refused with advice", lambda: conn.execute("SELECT * FROM people").fetchall(),
                  "GROUP BY")


def duckdb_session() -> None:
    """DuckDB's postgres scanner (the extension from PyPI's duckdb-extension-postgres, loaded from the
    package: nothing is downloaded at run time) reading an answer through `postgres_query`, which
    describes the query and then fetches it with `COPY (…) TO STDOUT (FORMAT binary)`."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"LOAD '{_duckdb_scanner()}'")
    con.execute(f"ATTACH 'host={HOST} port={PORT} user={USER} password={PASSWORD} dbname={DB} sslmode=disable' "
                "AS prima (TYPE postgres, READ_ONLY)")
    check("postgres_query (COPY binary)", lambda: con.execute(
        "SELECT * FROM postgres_query('prima', 'SELECT education, COUNT(*) AS n FROM people GROUP BY education')").fetchall(),
        lambda rows: same_groups(rows, EXPECTED["count_by_education"]))


def psycopg_session() -> None:
    """psycopg 3 binds on the server (the extended protocol), as its users' `execute(sql, params)` does."""
    import psycopg

    with psycopg.connect(host=HOST, port=PORT, user=USER, password=PASSWORD, dbname=DB, sslmode="disable",
                         autocommit=True) as conn:
        run_statements(lambda sql, params: conn.execute(sql, params).fetchall(), "pyformat",
                       lambda e: getattr(e, "sqlstate", None))


def sqlalchemy_psycopg_session() -> None:
    """SQLAlchemy 2 with psycopg 3 (server-side binding)."""
    import sqlalchemy as sa

    engine = sa.create_engine(f"postgresql+psycopg://{USER}:{PASSWORD}@{HOST}:{PORT}/{DB}")
    with engine.connect() as conn:
        people = sa.Table("people", sa.MetaData(), autoload_with=conn)
        check("Table(autoload_with=)", lambda: [c.name for c in people.columns], lambda got: "salary" in got)
        run_statements(lambda sql, params: conn.exec_driver_sql(sql, tuple(params)).fetchall(), "pyformat",
                       lambda e: getattr(getattr(e, "orig", None), "sqlstate", None), conn.rollback)


def asyncpg_session() -> None:
    """asyncpg: every argument encoded by the parameter type the server describes (lists as arrays);
    `server_settings` are startup GUCs, as PostgreSQL honours them."""
    import asyncio

    import asyncpg

    async def main() -> None:
        conn = await asyncpg.connect(host=HOST, port=PORT, user=USER, password=PASSWORD, database=DB, ssl=False)
        loop_rows: dict[str, Any] = {}

        async def one(sql: str, params: list) -> list:
            return [list(r.values()) for r in await conn.fetch(sql, *params)]

        for statement in STATEMENTS:
            try:
                rows = await one(statement["sql"], [python_value(v) for v in statement["params"]])
                loop_rows[statement["name"]] = {"rows": json.loads(json.dumps(rows, default=str))}
            except Exception as exc:  # noqa: BLE001
                loop_rows[statement["name"]] = {"error": [getattr(exc, "sqlstate", None), str(exc)[:400]]}
        OUTCOMES.update(loop_rows)
        await conn.close()
        quiet = await asyncpg.connect(host=HOST, port=PORT, user=USER, password=PASSWORD, database=DB, ssl=False,
                                      server_settings={"prima.stddev": "off"})
        try:
            record = await quiet.fetchrow("SELECT COUNT(*) AS n FROM people WHERE age > 30")
            RESULTS["server_settings prima.stddev=off"] = [repr(list(record.keys())), list(record.keys()) == ["n"]
                                                           and abs(record["n"] - EXPECTED["count_age_over_30"]) < 1e-6, ""]
        finally:
            await quiet.close()

    asyncio.run(main())


def odbc_session() -> None:
    """psqlODBC through pyodbc (Tableau's and Power BI's driver), `?` parameters bound by the driver."""
    import glob

    import pyodbc

    driver = sorted(glob.glob("/usr/lib/*/odbc/psqlodbcw.so"))
    if not driver:
        raise RuntimeError("psqlODBC is not installed (Debian: odbc-postgresql unixodbc)")
    conn = pyodbc.connect(f"DRIVER={driver[0]};SERVER={HOST};PORT={PORT};DATABASE={DB};UID={USER};PWD={PASSWORD};"
                          "SSLmode=disable", autocommit=True)

    def execute(sql: str, params: list) -> list:
        if any(isinstance(p, list) for p in params):  # ODBC has no array parameters: PostgreSQL's literal
            params = ["{" + ",".join(str(x) for x in p) + "}" if isinstance(p, list) else p for p in params]
        return [list(r) for r in conn.cursor().execute(sql, *params).fetchall()]

    run_statements(execute, "qmark", lambda e: e.args[0] if e.args else None)


def sqlalchemy_psycopg2_statements() -> None:
    """psycopg2 writes parameters into the text on the client (Superset's driver)."""
    import sqlalchemy as sa

    engine = sa.create_engine(f"postgresql+psycopg2://{USER}:{PASSWORD}@{HOST}:{PORT}/{DB}")
    with engine.connect() as conn:
        run_statements(lambda sql, params: conn.exec_driver_sql(sql, tuple(params)).fetchall(), "pyformat",
                       lambda e: getattr(getattr(e, "orig", None), "pgcode", None), conn.rollback)


def ibis_order_by_computed() -> None:
    """ibis wraps a query and orders the outer one by a computed key (once refused naming TIMESTAMP_TRUNC)."""
    import ibis

    con = ibis.postgres.connect(host=HOST, port=PORT, user=USER, password=PASSWORD, database=DB,
                                options="-c prima.stddev=off")
    o = con.table("orders")
    by_year = o.group_by(y=o.order_date.truncate("Y")).aggregate(s=o.amount.sum()).order_by("y")
    check("order_by(truncate key)", lambda: by_year.execute().values.tolist(),
          lambda rows: [round(float(r[1]), 3) for r in rows] == [round(float(v), 3) for _, v in EXPECTED["orders_sum_by_year"]])
    toys = ibis.cases((o.category == "toys", "toys"), else_="other")
    by_case = o.group_by(kind=toys).aggregate(n=o.count()).order_by("kind")
    check("order_by(CASE key)", lambda: by_case.execute().values.tolist(), lambda rows: [r[0] for r in rows] == ["other", "toys"])
    per = o.group_by("category").aggregate(avg=o.amount.sum() / o.count()).order_by(ibis.desc("avg"))
    check("order_by(SUM/COUNT)", lambda: per.execute().values.tolist(), lambda rows: len(rows) == 4)


def duckdb_attached_scan() -> None:
    """DuckDB's attached table scan reads raw rows: refused naming what works (postgres_query)."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"LOAD '{_duckdb_scanner()}'")
    con.execute(f"ATTACH 'host={HOST} port={PORT} user={USER} password={PASSWORD} dbname={DB} sslmode=disable' "
                "AS prima (TYPE postgres, READ_ONLY)")
    check_refused("attached scan SELECT COUNT(*) FROM prima.public.orders refused with advice",
                  lambda: con.execute("SELECT COUNT(*) FROM prima.public.orders").fetchall(), "postgres_query")


def _duckdb_scanner() -> str:
    import os
    import shutil
    import tempfile

    import duckdb
    import duckdb_extension_postgres as package

    folder = os.path.join(os.path.dirname(package.__file__), "extensions", f"v{duckdb.__version__}")
    path = os.path.join(tempfile.mkdtemp(), "postgres_scanner.duckdb_extension")  # its entry point's name
    shutil.copy(os.path.join(folder, "postgres.duckdb_extension"), path)
    return path


def pgcli_types() -> None:
    from pgcli.pgexecute import PGExecute
    from pgspecial.main import PGSpecial

    executor = PGExecute(database=DB, user=USER, password=PASSWORD, host=HOST, port=PORT, dsn="")
    rows = []
    for _title, found, *_ in executor.run("\\dT", pgspecial=PGSpecial()):
        rows += list(found or [])
    RESULTS["\\dT lists no user types"] = [repr(rows)[:160], rows == [], ""]


def both(*sessions: Callable[[], None]) -> Callable[[], None]:
    def run() -> None:
        for session in sessions:
            try:
                session()
            except Exception:  # noqa: BLE001 — one part's failure is a result; the others still run
                RESULTS[f"{session.__name__}"] = [None, False, traceback.format_exc()[-600:]]
    return run


SESSIONS = {"ibis": both(ibis_session, ibis_order_by_computed), "pgcli": both(pgcli_session, pgcli_types),
            "sqlalchemy-psycopg2": both(sqlalchemy_psycopg2_session, sqlalchemy_psycopg2_statements),
            "sqlalchemy-psycopg": sqlalchemy_psycopg_session, "psycopg": psycopg_session,
            "asyncpg": asyncpg_session, "odbc": odbc_session,
            "harlequin": harlequin_session, "duckdb": both(duckdb_session, duckdb_attached_scan)}

if __name__ == "__main__":
    try:
        SESSIONS[sys.argv[1]]()
    except Exception:  # noqa: BLE001
        RESULTS["session"] = [None, False, traceback.format_exc()[-600:]]
    print(json.dumps({"checks": RESULTS, "statements": OUTCOMES}))
