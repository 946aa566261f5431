"""BI drivers' introspection over the wire: real SQLAlchemy, pgjdbc and psqlODBC clients,
Npgsql's and Metabase's catalog queries replayed verbatim, and the catalog engine's sandbox."""

from __future__ import annotations

import glob
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import LiveServer
from tests.servers import postgres_server, unavailable
from tests.wire_server import ANALYST_TOKEN, dsn, rest, wire  # noqa: F401 — the module's server fixture

GOLDEN = Path(__file__).with_name("wire_golden")
PEOPLE = [
    ("age", "integer"),
    ("education", "text"),
    ("hours", "integer"),
    ("region", "text"),
    ("salary", "double precision"),
]


def _statements(path: Path) -> list[tuple[str, str, dict[str, str]]]:
    """`-- @name NAME [params=a,b] [error=SQLSTATE]` blocks of a golden file."""
    out = []
    for block in re.split(r"^-- @name ", path.read_text(), flags=re.M)[1:]:
        head, _, sql = block.partition("\n")
        name, *options = head.split()
        out.append((name, sql.strip(), dict(o.split("=", 1) for o in options)))
    return out


def _batch(conn, sql: str) -> list[list[tuple] | None]:
    """One simple-query message with several statements, every result set."""
    cur = conn.execute(sql.encode(), prepare=False)
    results = []
    while True:
        results.append(cur.fetchall() if cur.description else None)
        if not cur.nextset():
            return results


def test_sqlalchemy_inspector_sees_tables_columns_and_comments(wire: tuple[LiveServer, int]) -> None:
    sa = pytest.importorskip("sqlalchemy")
    _, port = wire
    engine = sa.create_engine(f"postgresql+psycopg://bi:{ANALYST_TOKEN}@127.0.0.1:{port}/prima")
    inspector = sa.inspect(engine)
    assert inspector.get_table_names() == ["people"]
    assert inspector.get_schema_names() == ["information_schema", "public"]
    columns = inspector.get_columns("people")
    assert [(c["name"], type(c["type"]).__name__) for c in columns] == [
        ("age", "INTEGER"),
        ("education", "TEXT"),
        ("hours", "INTEGER"),
        ("region", "TEXT"),
        ("salary", "DOUBLE_PRECISION"),
    ]
    assert "measure in [0, 250000]" in columns[-1]["comment"]
    assert "differentially private" in inspector.get_table_comment("people")["text"]
    assert inspector.get_pk_constraint("people")["constrained_columns"] == []
    assert inspector.get_foreign_keys("people") == [] and inspector.get_indexes("people") == []
    assert inspector.has_table("people") and not inspector.has_table("nope")
    engine.dispose()


def test_pgjdbc_metadata_and_a_prepared_statement(wire: tuple[LiveServer, int], tmp_path: Path) -> None:
    """The path Metabase and Looker take: DatabaseMetaData, then a prepared statement with a parameter."""
    server, port = wire
    jar, javac, java = Path("/usr/share/java/postgresql.jar"), shutil.which("javac"), shutil.which("java")
    if not (jar.exists() and javac and java):
        unavailable("pgjdbc needs Debian's libpostgresql-jdbc-java and a JDK (openjdk-17-jdk-headless)")
    subprocess.run(
        [javac, "-d", str(tmp_path), str(Path(__file__).with_name("clients") / "WireProbe.java")],
        check=True,
        capture_output=True,
        timeout=180,
    )
    sql = "SELECT education, COUNT(*) AS n FROM people WHERE age >= ? GROUP BY education"
    out = subprocess.run(
        [
            java,
            "-cp",
            f"{jar}:{tmp_path}",
            "WireProbe",
            f"jdbc:postgresql://127.0.0.1:{port}/prima",
            "bi",
            ANALYST_TOKEN,
            sql,
            "40",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("product|PostgreSQL|15.")
    assert "table|public|people|TABLE" in lines
    jdbc_types = {"integer": "4|int4", "text": "12|text", "double precision": "8|float8"}
    for position, (name, pg_type) in enumerate(PEOPLE, start=1):
        assert f"column|people|{name}|{jdbc_types[pg_type]}|{position}" in lines
    assert not [line for line in lines if line.startswith("pk|")]
    typeinfo = next(line.split("|") for line in lines if line.startswith("typeinfo|"))
    assert int(typeinfo[1]) > 50 and typeinfo[2] == "true"  # getTypeInfo (once 54000 on current_schemas)
    assert {line.split("|")[2] for line in lines if line.startswith("privilege|")} == {"SELECT"}  # read-only
    assert "header|education:text|n:float8|n_stddev:float8" in lines
    answer = rest(server, sql.replace("?", "40"))
    rows = [line.split("|")[1:] for line in lines if line.startswith("row|")]
    assert [(r[0], float(r[1]), float(r[2])) for r in rows] == [  # Java prints a NULL key as "null"
        ("null" if values[0] is None else values[0], values[1], sds[1])
        for values, sds in zip(answer["rows"], answer["stddev"])
    ]


def _odbc_driver() -> str:
    found = sorted(glob.glob("/usr/lib/*/odbc/psqlodbcw.so"))
    if not found:
        unavailable("psqlODBC is not installed (Debian: odbc-postgresql unixodbc)")
    return found[0]


@pytest.mark.parametrize("cursors", [True, False], ids=["declare-fetch", "plain"])
def test_psqlodbc_tables_columns_and_a_cursor_fetch(wire: tuple[LiveServer, int], cursors: bool) -> None:
    """The path Tableau and Power BI's ODBC connector take: SQLTables, SQLColumns, and (UseDeclareFetch)
    DECLARE … CURSOR WITH HOLD / FETCH n / CLOSE, two rows per round trip."""
    pyodbc = pytest.importorskip("pyodbc")
    server, port = wire
    options = "UseDeclareFetch=1;Fetch=2;" if cursors else ""
    conn = pyodbc.connect(
        f"DRIVER={_odbc_driver()};SERVER=127.0.0.1;PORT={port};DATABASE=prima;UID=bi;"
        f"PWD={ANALYST_TOKEN};SSLmode=disable;{options}",
        autocommit=True,
        timeout=30,
    )
    cur = conn.cursor()
    assert [(t.table_schem, t.table_name, t.table_type) for t in cur.tables(tableType="TABLE")] == [
        ("public", "people", "TABLE")
    ]
    assert [(c.column_name, c.type_name) for c in cur.columns(table="people")] == [
        ("age", "int4"),
        ("education", "text"),
        ("hours", "int4"),
        ("region", "text"),
        ("salary", "float8"),
    ]
    sql = "SELECT region, SUM(salary) AS total FROM people WHERE hours >= ? GROUP BY region"
    cur.execute(sql, 40)
    assert [d[0] for d in cur.description] == ["region", "total", "total_stddev"]
    rows = cur.fetchmany(3) + cur.fetchall()  # crosses FETCH boundaries of 2
    answer = rest(server, sql.replace("?", "40"))
    assert [tuple(r) for r in rows] == [(v[0], v[1], s[1]) for v, s in zip(answer["rows"], answer["stddev"])]
    conn.close()


def test_cursor_statements_directly(wire: tuple[LiveServer, int]) -> None:
    psycopg = pytest.importorskip("psycopg")
    server, port = wire
    groups = len(rest(server, "SELECT region, COUNT(*) FROM people GROUP BY region")["rows"])  # 4 regions (and
    with psycopg.connect(dsn(port), autocommit=True) as conn:  # an outside group if its noisy count says so)
        out = _batch(
            conn,
            'BEGIN;declare "C 1" cursor with hold for SELECT region, COUNT(*) FROM people '
            'GROUP BY region;fetch 3 in "C 1"',
        )
        assert len(out[-1]) == 3
        assert len(conn.execute('FETCH ALL FROM "C 1"').fetchall()) == groups - 3
        assert conn.execute('FETCH NEXT FROM "C 1"').fetchall() == []
        conn.execute('CLOSE "C 1"')
        for sql, state in (('FETCH 1 FROM "C 1"', "34000"), ("FETCH PRIOR FROM c", "0A000")):
            with pytest.raises(psycopg.Error) as err:
                conn.execute(sql)
            assert err.value.sqlstate == state
            conn.execute("ROLLBACK")  # the batch's BEGIN is still open, as on PostgreSQL


def test_npgsql_type_loading_equals_a_real_postgresql(wire: tuple[LiveServer, int]) -> None:
    """Npgsql's first batch on every new connection (PostgresDatabaseInfo.cs), verbatim: version(),
    the types, free-standing composites, enums — the answer equals a real PostgreSQL 15's."""
    psycopg = pytest.importorskip("psycopg")
    _, port = wire
    batch = (GOLDEN / "npgsql_types.sql").read_text()
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        ours = _batch(conn, batch)
    assert ours[0][0][0].startswith("PostgreSQL 15.")
    types = {row[2]: row for row in ours[1]}
    assert types["int4"][1:] == (23, "int4", "b", False, None) and types["_float8"][3:] == ("a", False, 701)
    assert types["int4range"][5] == 23 and ours[2] == [] and ours[3] == []
    with postgres_server() as pg_dsn, psycopg.connect(pg_dsn, autocommit=True) as real:
        version = real.execute("SHOW server_version_num").fetchone()[0]
        theirs = _batch(real, batch)
    if int(version) // 10000 != 15:
        pytest.skip(f"the local PostgreSQL is {version}, the emulated catalog is 15's")
    assert sorted(ours[1]) == sorted(theirs[1]) and ours[2:] == theirs[2:]


def test_metabase_sync_queries_replayed(wire: tuple[LiveServer, int]) -> None:
    """Metabase's connection check, privileges, table and field sync, FKs, indexes and a field-values
    scan (tests/wire_golden/metabase.sql), through the extended protocol as pgjdbc sends them."""
    psycopg = pytest.importorskip("psycopg")
    server, port = wire
    got = {}
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        for name, sql, options in _statements(GOLDEN / "metabase.sql"):
            params = options["params"].split(",") if "params" in options else None
            if params:  # $n placeholders -> psycopg's, literal % doubled
                sql = re.sub(r"\$\d+", "%s", sql.replace("%", "%%"))
            if "error" in options:
                with pytest.raises(psycopg.Error) as err:
                    conn.execute(sql, params)
                assert err.value.sqlstate == options["error"], name
                continue
            cur = conn.execute(sql, params)
            got[name] = cur.fetchall() if cur.description else None
    assert got["connection-check"] == [(1,)]
    assert got["table-privileges"] == [(None, "public", "people", False, True, False, False)]  # read-only
    assert [r[:3] for r in got["syncable-tables"]] == [("public", "people", "TABLE")]
    assert got["syncable-tables"][0][4] is None  # no row estimate: pg_stat_* hold nothing
    assert [(r[0], r[1], r[2]) for r in got["describe-fields"]] == [
        ("age", "int4", 0),
        ("education", "text", 1),
        ("hours", "int4", 2),
        ("region", "text", 3),
        ("salary", "float8", 4),
    ]
    assert got["describe-fks"] == [] and got["describe-indexes"] == [] and got["enum-types"] == []
    # sorted as text, NULL last; an outside group only when its noisy count shows rows (as REST)
    declared = [r[0] for r in got["scan-sample"] if r[0] not in ("(other)", None)]
    assert declared == ["bsc", "hs", "msc", "phd"]
    scan = rest(server, "SELECT education, COUNT(*) FROM people GROUP BY education")
    assert sorted(r[0] for r in got["scan-sample"] if r[0] is not None) == sorted(
        r[0] for r in scan["rows"] if r[0] is not None
    )


def test_the_catalog_holds_no_data_and_cannot_reach_any(wire: tuple[LiveServer, int]) -> None:
    """Catalog queries run on an empty, sealed engine: no row counts or statistics, no files, no
    writes, no mixing with a registered table."""
    psycopg = pytest.importorskip("psycopg")
    _, port = wire
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        assert conn.execute("SELECT reltuples, relpages FROM pg_class WHERE relname = 'people'").fetchall() == [
            (-1.0, 0)
        ]
        for view in ("pg_stat_user_tables", "pg_statistic", "pg_stats", "pg_class_stats"):
            try:
                assert conn.execute(f"SELECT * FROM pg_catalog.{view}").fetchall() == []
            except psycopg.Error:
                pass
        assert conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone() == (1,)
        for sql in (
            "SELECT * FROM pg_class, read_csv('/etc/passwd')",
            "SELECT * FROM pg_class WHERE relname IN (SELECT content FROM read_text('/etc/passwd'))",
            "SELECT * FROM pg_class, people",
            "SELECT * FROM pg_class; DROP TABLE pg_class",
            "SELECT * FROM pg_class c, query('SELECT 1')",
            "WITH x AS (DELETE FROM pg_class RETURNING *) SELECT * FROM x",
            "SELECT count(*) FROM generate_series(1, 1000000000000) AS g(i), pg_class",
        ):
            with pytest.raises(psycopg.Error):
                conn.execute(sql).fetchall()
        assert conn.execute("SELECT relname FROM pg_class").fetchall() == [("people",)]  # nothing was changed


def test_pool_resets_settings_and_array_parameters(wire: tuple[LiveServer, int]) -> None:
    """What connection pools and drivers send between borrowers, settings they read, and catalog
    queries with array parameters (untyped text arrays and typed integer arrays)."""
    psycopg = pytest.importorskip("psycopg")
    _, port = wire
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        for sql in ("DISCARD ALL", "RESET ALL", "DEALLOCATE ALL", "UNLISTEN *", "SET search_path TO public"):
            conn.execute(sql)
        assert conn.execute("SELECT current_setting('server_version_num')").fetchone()[0].startswith("15")
        assert conn.execute("SHOW max_identifier_length").fetchone() == ("63",)
        assert conn.execute(
            "SELECT typname FROM pg_type WHERE typname = ANY(%s) ORDER BY oid", [["int4", "text"]]
        ).fetchall() == [("int4",), ("text",)]
        assert conn.execute(
            "SELECT typname FROM pg_type WHERE oid = ANY(%s) ORDER BY oid", [[701, 1082]]
        ).fetchall() == [("float8",), ("date",)]
        assert conn.execute("SELECT 'people'::regclass::oid = c.oid FROM pg_class c").fetchone() == (True,)


def test_asyncpg_declares_no_parameter_types_and_gets_them_inferred(wire: tuple[LiveServer, int]) -> None:
    """asyncpg sends no parameter types and encodes each argument by the type the server describes:
    a dimension's own type on table queries, oid-like or text on catalog ones."""
    asyncpg = pytest.importorskip("asyncpg")
    import asyncio

    server, port = wire

    async def run() -> tuple:
        conn = await asyncpg.connect(
            host="127.0.0.1", port=port, user="bi", password=ANALYST_TOKEN, database="prima", ssl=False
        )
        try:
            total = await conn.fetch("SELECT SUM(salary) FROM people WHERE age > $1 AND education = $2", 40, "phd")
            types = await conn.fetch(
                "SELECT typname FROM pg_type WHERE oid = $1 OR typname = $2 ORDER BY oid", 701, "int4"
            )
            return total, types
        finally:
            await conn.close()

    total, types = asyncio.run(run())
    rest_answer = rest(server, "SELECT SUM(salary) FROM people WHERE age > 40 AND education = 'phd'")
    assert tuple(total[0]) == (rest_answer["rows"][0][0], rest_answer["stddev"][0][0])
    assert [t["typname"] for t in types] == ["int4", "float8"]


def test_asyncpg_server_settings_set_prima_options_as_startup_gucs(wire: tuple[LiveServer, int]) -> None:
    """PostgreSQL honours settings sent as startup parameters (asyncpg's ``server_settings``) as it does
    ``options=-c …``: `prima.stddev` off leaves the answer with exactly the columns asked for."""
    asyncpg = pytest.importorskip("asyncpg")
    import asyncio

    server, port = wire

    async def run() -> tuple:
        conn = await asyncpg.connect(
            host="127.0.0.1",
            port=port,
            user="bi",
            password=ANALYST_TOKEN,
            database="prima",
            ssl=False,
            server_settings={"prima.stddev": "off"},
        )
        try:
            rows = await conn.fetch("SELECT SUM(salary) AS s FROM people WHERE age > $1", 40)
            return rows, await conn.fetchval("SHOW prima.stddev")
        finally:
            await conn.close()

    rows, shown = asyncio.run(run())
    assert list(rows[0].keys()) == ["s"] and shown == "off"
    assert rows[0]["s"] == rest(server, "SELECT SUM(salary) AS s FROM people WHERE age > 40")["rows"][0][0]


def test_psqls_user_types_listing_is_empty(wire: tuple[LiveServer, int]) -> None:  # noqa: F811
    """psql's `\\dT` lists user-defined types: Prima declares none (it once showed `people[]`, the array
    type of a scratch table on the server the catalog structure was read from)."""
    psycopg = pytest.importorskip("psycopg")
    _, port = wire
    listing = """SELECT n.nspname, pg_catalog.format_type(t.oid, NULL)
FROM pg_catalog.pg_type t LEFT JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
WHERE (t.typrelid = 0 OR (SELECT c.relkind = 'c' FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid))
  AND NOT EXISTS(SELECT 1 FROM pg_catalog.pg_type el WHERE el.oid = t.typelem AND el.typarray = t.oid)
  AND n.nspname <> 'pg_catalog' AND n.nspname <> 'information_schema' AND pg_catalog.pg_type_is_visible(t.oid)
ORDER BY 1, 2"""
    with psycopg.connect(dsn(port), autocommit=True) as conn:
        assert conn.execute(listing).fetchall() == []
        assert conn.execute("SELECT count(*) FROM pg_catalog.pg_type WHERE typname = 'int4'").fetchone()[0] == 1
