"""Wire statements real clients send, each seen failing: array and comma-packed
parameters, SQLSTATE classes a client understands, catalog details, constant SELECTs."""

from __future__ import annotations

import pytest

from tests.conftest import TLS, LiveServer
from tests.wire_server import ANALYST_TOKEN, dsn, rest, wire  # noqa: F401 — the module's server fixture

psycopg = pytest.importorskip("psycopg")


def test_array_and_packed_parameters_answer_as_rest(wire: tuple[LiveServer, int]) -> None:  # noqa: F811
    server, port = wire
    want = rest(server, "SELECT COUNT(*) FROM people WHERE education IN ('hs', 'phd')")["rows"][0][0]
    ages = rest(server, "SELECT COUNT(*) FROM people WHERE age IN (30, 31)")["rows"][0][0]
    others = rest(server, "SELECT COUNT(*) FROM people WHERE education NOT IN ('hs', 'phd')")["rows"][0][0]
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        assert (
            conn.execute("SELECT COUNT(*) FROM people WHERE education = ANY(%s)", [["hs", "phd"]]).fetchone()[0] == want
        )
        assert conn.execute("SELECT COUNT(*) FROM people WHERE age IN (%s,%s)", [30, 31]).fetchone()[0] == ages
        assert (
            conn.execute("SELECT COUNT(*) FROM people WHERE education <> ALL(%s)", [["hs", "phd"]]).fetchone()[0]
            == others
        )


def test_relative_dates_over_the_wire_equal_rest(wire: tuple[LiveServer, int]) -> None:  # noqa: F811
    server, port = wire
    sql = "SELECT COUNT(*) FROM people WHERE age >= CAST('30' AS INT) AND age < 40 + 5"
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        assert conn.execute(sql).fetchone()[0] == rest(server, sql)["rows"][0][0]


@pytest.mark.parametrize(
    "sql,sqlstate,words",
    [
        ("INSERT INTO people VALUES (1)", "25006", "only SELECT"),
        ("DELETE FROM people", "25006", "only SELECT"),
        ("SELECT * FROM people", "42501", "GROUP BY"),  # Superset's Samples, harlequin's Preview, ibis head()
        ("SELECT age FROM people", "42501", "GROUP BY age"),
        ("SELECT MAX(salary) FROM people", "0A000", "use SUM, COUNT(*) or AVG"),
        ("SELECT COUNT(*) FROM people a JOIN people b ON a.age = b.age", "0A000", "JOIN"),
        ("SELECT COUNT(*) FROM people WHERE age IN (SELECT 1)", "0A000", "only in FROM"),
        ("SELECT COUNT(*) FROM people WHERE", "42601", "syntax error"),
    ],
)
def test_refusals_carry_sqlstate_classes_clients_understand(
    wire: tuple[LiveServer, int],
    sql: str,  # noqa: F811
    sqlstate: str,
    words: str,
) -> None:
    _, port = wire
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as caught:
            conn.execute(sql)
        assert caught.value.sqlstate == sqlstate and words in str(caught.value)


@pytest.mark.parametrize(
    "sql,expected",
    [
        ("SELECT datname, datistemplate, datallowconn FROM pg_database", [("prima", False, True)]),
        ("SELECT DISTINCT catalog_name FROM information_schema.schemata", [("prima",)]),
        ("SELECT count(*) > 0 FROM pg_type WHERE typtype = ANY('{b,p}')", [(True,)]),
        (
            "SELECT pg_table_size('people'::regclass), pg_total_relation_size('people'::regclass), pg_database_size('prima')",
            [(0, 0, 0)],
        ),  # no data sizes leak
        ("SELECT 'a' NOT LIKE 'b' ESCAPE '\\'", [(True,)]),  # a constant SELECT without FROM (pgcli)
        (
            "SELECT current_database(), current_schemas(false), current_schemas(true)",  # harlequin's search path
            [("prima", ["public"], ["pg_catalog", "public"])],
        ),
        ("SELECT current_user, session_user FROM pg_roles LIMIT 1", [("bi", "bi")]),  # the login, not the engine's user
        ("SELECT current_user, current_setting('default_table_access_method')", [("bi", "heap")]),
    ],
)
def test_catalog_details_as_postgresql_has_them(wire: tuple[LiveServer, int], sql: str, expected: list) -> None:  # noqa: F811
    _, port = wire
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        assert conn.execute(sql).fetchall() == expected


def test_psycopg_named_cursors_stream_an_answer(wire: tuple[LiveServer, int]) -> None:  # noqa: F811
    """A named (server-side) cursor: DECLARE, then Describe Portal with the cursor's name, then FETCH."""
    server, port = wire
    sql = "SELECT education, COUNT(*) AS n FROM people GROUP BY education"
    want = rest(server, sql)
    with psycopg.connect(dsn(port)) as conn:
        with conn.cursor(name="stream1") as cur:
            cur.itersize = 2
            cur.execute(sql)
            assert [d.name for d in cur.description][:2] == ["education", "n"]
            got = cur.fetchmany(2) + cur.fetchall()
    assert [(r[0], r[1]) for r in got] == [(r[0], r[1]) for r in want["rows"]]


def test_sqlalchemy_core_reflects_binds_streams_and_wraps(wire: tuple[LiveServer, int]) -> None:  # noqa: F811
    """SQLAlchemy 2 Core with psycopg 3: Table(autoload_with=), typed parameters, IN lists,
    stream_results (a named cursor) and a wrapping subquery — each equal to REST's answer."""
    sa = pytest.importorskip("sqlalchemy")
    server, port = wire
    engine = sa.create_engine(f"postgresql+psycopg://bi:{ANALYST_TOKEN}@127.0.0.1:{port}/prima")
    try:
        with engine.connect() as conn:
            people = sa.Table("people", sa.MetaData(), autoload_with=conn)
            assert {"age", "education", "salary"} <= {c.name for c in people.columns}
            grouped = (
                sa.select(people.c.education, sa.func.count().label("n"))
                .where(people.c.age >= sa.bindparam("a", 30, type_=sa.Integer))
                .group_by(people.c.education)
            )
            want = rest(server, "SELECT education, COUNT(*) AS n FROM people WHERE age >= 30 GROUP BY education")
            assert [tuple(r[:2]) for r in conn.execute(grouped)] == [tuple(r) for r in want["rows"]]
            streamed = conn.execution_options(stream_results=True).execute(grouped).fetchall()
            assert [tuple(r[:2]) for r in streamed] == [tuple(r) for r in want["rows"]]
            listed = sa.select(sa.func.count()).select_from(people).where(people.c.age.in_([30, 31, 32]))
            assert (
                conn.execute(listed).scalar()
                == rest(server, "SELECT COUNT(*) FROM people WHERE age IN (30, 31, 32)")["rows"][0][0]
            )
            wrapped = sa.select(sa.func.count()).select_from(sa.select(people).where(people.c.age > 40).subquery())
            assert (
                conn.execute(wrapped).scalar()
                == rest(server, "SELECT COUNT(*) FROM people WHERE age > 40")["rows"][0][0]
            )
    finally:
        engine.dispose()


def test_copy_a_query_to_stdout_in_text_csv_and_binary(wire: tuple[LiveServer, int], tmp_path) -> None:  # noqa: F811, ANN001
    """COPY (SELECT …) TO STDOUT: psql's \\copy, DuckDB's postgres scanner (binary), pandas."""
    import shutil
    import subprocess

    server, port = wire
    sql = "SELECT education, COUNT(*) AS n FROM people GROUP BY education"
    want = [(r[0], r[1]) for r in rest(server, sql)["rows"]]
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        cur = conn.cursor()
        with cur.copy(f"COPY ({sql}) TO STDOUT (FORMAT binary)") as copy:
            copy.set_types(["text", "float8", "float8"])
            assert [(r[0], r[1]) for r in copy.rows()] == want
        with cur.copy(f"COPY ({sql}) TO STDOUT") as copy:
            text = b"".join(bytes(b) for b in copy).decode()
        assert [
            (a if a != "\\N" else None, float(b)) for a, b, _ in (line.split("\t") for line in text.splitlines())
        ] == want
        with cur.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv, HEADER)") as copy:
            lines = b"".join(bytes(b) for b in copy).decode().splitlines()
        assert lines[0] == "education,n,n_stddev" and len(lines) == len(want) + 1
        for statement, sqlstate in (("COPY people TO STDOUT", "42501"), ("COPY people FROM STDIN", "25006")):
            with pytest.raises(psycopg.Error) as caught:
                cur.execute(statement)
            assert caught.value.sqlstate == sqlstate
    if shutil.which("psql"):
        out = tmp_path / "answer.csv"
        done = subprocess.run(
            ["psql", dsn(port), "-X", "-c", f"\\copy ({sql}) TO '{out}' CSV HEADER"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert out.read_text().splitlines()[0] == "education,n,n_stddev"


@pytest.fixture(scope="module")
def with_staff(wire: tuple[LiveServer, int]) -> tuple[LiveServer, int]:  # noqa: F811
    """The wire server with the tour's `staff` table (a monthly date dimension)."""
    import json
    import shutil

    import httpx
    import yaml

    from tests.conftest import ADMIN_TOKEN, REPO

    server, port = wire
    shutil.copy(REPO / "examples" / "staff.csv", server.import_dir / "staff.csv")
    spec = yaml.safe_load((REPO / "examples" / "staff.yaml").read_text())
    spec["source"]["csv"] = str(server.import_dir / "staff.csv")
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    r = httpx.post(
        server.url + "/v1/admin/tables",
        content=json.dumps(spec, default=str),
        headers=admin | {"Content-Type": "application/json"},
        timeout=120,
        verify=TLS,
    )
    assert r.status_code in (201, 409), r.text
    httpx.post(server.url + "/v1/admin/tables/staff/cube", headers=admin, timeout=120, verify=TLS)
    return server, port


def test_bound_date_trunc_units_and_datetime_parameters(with_staff: tuple[LiveServer, int]) -> None:
    """`date_trunc($1, hired)` is described before the unit is bound (psycopg, SQLAlchemy), and Python
    datetime parameters compare with a date dimension."""
    import datetime as dt

    sa = pytest.importorskip("sqlalchemy")
    server, port = with_staff
    want = rest(server, "SELECT DATE_TRUNC('year', hired) AS t, COUNT(*) AS n FROM staff GROUP BY 1 ORDER BY 1")["rows"]
    since = rest(server, "SELECT COUNT(*) FROM staff WHERE hired >= '2020-01-01'")["rows"][0][0]
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT date_trunc(%s, hired) AS t, COUNT(*) AS n FROM staff GROUP BY 1 ORDER BY 1", ["year"]
        ).fetchall()
        assert [(r[0] and r[0].strftime("%Y-%m"), r[1]) for r in rows] == [tuple(r) for r in want]
        for value in (dt.datetime(2020, 1, 1), dt.date(2020, 1, 1), dt.datetime(2020, 1, 1, tzinfo=dt.UTC)):
            assert conn.execute("SELECT COUNT(*) FROM staff WHERE hired >= %s", [value]).fetchone()[0] == since
    engine = sa.create_engine(f"postgresql+psycopg://bi:{ANALYST_TOKEN}@127.0.0.1:{port}/prima")
    try:
        with engine.connect() as conn:
            staff = sa.Table("staff", sa.MetaData(), autoload_with=conn)
            unit = sa.func.date_trunc(sa.bindparam("u", "year"), staff.c.hired)
            q = sa.select(unit.label("t"), sa.func.count().label("n")).group_by(sa.text("1")).order_by(sa.text("1"))
            assert [(r[0] and r[0].strftime("%Y-%m"), r[1]) for r in conn.execute(q)] == [tuple(r) for r in want]
    finally:
        engine.dispose()


def test_copy_prepared_with_the_extended_protocol(wire: tuple[LiveServer, int]) -> None:  # noqa: F811
    """libpq's PQprepare + PQexecPrepared of a COPY (DuckDB's postgres scanner reads answers so),
    and an outer projection naming the answer's own `_stddev` column."""
    from psycopg import pq

    server, port = wire
    inner = "SELECT education, COUNT(*) AS n FROM people GROUP BY education"
    want = rest(server, inner)
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        pgconn = conn.pgconn
        sql = f'COPY (SELECT "education", "n", "n_stddev" FROM ({inner}) AS q) TO STDOUT'.encode()
        assert pgconn.prepare(b"copy1", sql).status == pq.ExecStatus.COMMAND_OK
        assert pgconn.exec_prepared(b"copy1", []).status == pq.ExecStatus.COPY_OUT
        lines = []
        while True:
            n, data = pgconn.get_copy_data(0)
            if n < 0:
                break
            lines.append(bytes(data).decode().rstrip("\n").split("\t"))
        while pgconn.get_result() is not None:
            pass
    assert [(a if a != "\\N" else None, float(b), float(c)) for a, b, c in lines] == [
        (r[0], r[1], s[1]) for r, s in zip(want["rows"], want["stddev"])
    ]


def test_a_constant_select_is_typed_as_postgresql_types_it(wire: tuple[LiveServer, int]) -> None:  # noqa: F811
    _, port = wire
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        cur = conn.execute("SELECT 1, 'a', current_user")
        assert [d.type_code for d in cur.description] == [23, 25, 25]  # int4, text, text (a name in PostgreSQL)
        assert [d.name for d in cur.description][2] == "current_user" and cur.fetchone() == (1, "a", "bi")


def test_psql_lists_tables_with_sizes_that_say_nothing(wire: tuple[LiveServer, int]) -> None:  # noqa: F811
    """psql's `\\dt+` (sizes from pg_table_size: 0, so no data volume leaks) and `\\dv`."""
    import shutil
    import subprocess

    if shutil.which("psql") is None:
        pytest.skip("postgresql-client (psql) is not installed")
    _, port = wire
    done = subprocess.run(
        ["psql", dsn(port), "-X", "-A", "-F", "|", "-c", "\\dt+", "-c", "\\dv"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("public|people|"))
    assert "|0 bytes|" in row
    assert "Did not find any relations" in done.stdout + done.stderr or "(0 rows)" in done.stdout  # no views


def test_bound_parameters_leave_the_clients_postgresql_as_written(wire: tuple[LiveServer, int]) -> None:  # noqa: F811
    """psycopg 3 binds on the server: the statement's text must reach the engine as the client wrote it,
    with the values in place, so a bound statement fares exactly as the same text sent whole. Re-written
    in DuckDB's dialect, `PERCENTILE_CONT … WITHIN GROUP` became a `QUANTILE_CONT` the planner refused
    ("takes one constant level") and `TO_DATE` a `STRPTIME`."""
    _, port = wire
    statements = [
        "SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY salary) FROM people WHERE age > {}",
        "SELECT COUNT(*) FROM people WHERE age > {} AND TO_DATE('01/03/2020', 'DD/MM/YYYY') < DATE '2021-01-01'",
        "SELECT education, COUNT(*) FROM people WHERE age BETWEEN {} AND 60 GROUP BY education ORDER BY 1",
    ]

    def outcome(conn: psycopg.Connection, sql: str, params: list | None) -> object:
        try:
            return conn.execute(sql, params).fetchall()
        except psycopg.Error as exc:
            return exc.sqlstate, str(exc).split(" at line")[0]

    with psycopg.connect(dsn(port), autocommit=True) as conn:
        for sql in statements:
            bound, whole = outcome(conn, sql.format("%s"), [40]), outcome(conn, sql.format(40), None)
            assert bound == whole, sql
            assert "constant level" not in str(bound) and "STRPTIME" not in str(bound)


def test_array_parameters_of_every_driver_answer_as_rest(with_staff: tuple[LiveServer, int]) -> None:
    """`= ANY($1)` is described as its column's array type (`text[]`, `int4[]`, `date[]`), so asyncpg
    encodes a list (it refused one for `text`, and for `int4[]` its type-introspection query, with its
    `$1::oid[]`, was not understood); typed lists (psycopg's int lists, pgjdbc's setArray) arrive as
    lists and were an XX000 `float()` error."""
    asyncpg = pytest.importorskip("asyncpg")
    import asyncio
    import datetime as dt

    server, port = with_staff
    statements = {
        "SELECT COUNT(*) FROM people WHERE education = ANY($1)": (["hs", "phd"], "education IN ('hs', 'phd')"),
        "SELECT COUNT(*) FROM people WHERE age = ANY($1)": ([30, 31], "age IN (30, 31)"),
        "SELECT COUNT(*) FROM people WHERE age <> ALL($1)": ([30, 31], "age NOT IN (30, 31)"),
        "SELECT COUNT(*) FROM staff WHERE hired = ANY($1)": (
            [dt.date(2020, 1, 1), dt.date(2021, 6, 1)],
            "hired IN ('2020-01-01', '2021-06-01')",
        ),
    }
    want = {
        sql: rest(server, sql.split(" WHERE ")[0] + " WHERE " + where)["rows"][0][0]
        for sql, (_, where) in statements.items()
    }

    async def run() -> dict[str, float]:
        conn = await asyncpg.connect(
            host="127.0.0.1", port=port, user="bi", password=ANALYST_TOKEN, database="prima", ssl=False
        )
        try:
            return {sql: await conn.fetchval(sql, values) for sql, (values, _) in statements.items()}
        finally:
            await conn.close()

    assert asyncio.run(run()) == want
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        for sql, (values, _) in statements.items():
            assert conn.execute(sql.replace("$1", "%s"), [values]).fetchone()[0] == want[sql], sql
