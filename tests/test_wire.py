"""BI tools over the PostgreSQL wire protocol: real psql and psycopg against `prima serve --pg-port`."""

from __future__ import annotations

import json
import re
import shutil
import socket
import struct
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_TOKEN, REPO, TLS, LiveServer, free_port
from tests.servers import unavailable
from tests.wire_server import ANALYST_TOKEN, wire  # noqa: F401 — the module's server fixture
from tests.wire_server import dsn as _dsn
from tests.wire_server import rest as _rest

PSQL = shutil.which("psql")


@pytest.mark.skipif(PSQL is None, reason="postgresql-client (psql) is not installed")
def test_psql_lists_describes_and_answers_like_rest(wire: tuple[LiveServer, int]) -> None:
    """psql: `\\dt`, `\\d people`, and the README's SQL examples on `people`, each equal to REST's answer."""
    server, port = wire
    readme = (REPO / "README.md").read_text()
    examples = [q for q in re.findall(r'"sql":"(SELECT [^"]+)"', readme) if " FROM people" in q]
    assert len(examples) >= 2
    args = [PSQL, _dsn(port), "-X", "-A", "-F", "|", "-c", r"\dt", "-c", r"\d people"]
    for sql in examples:
        args += ["-c", sql]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "public|people|table" in text
    assert "age|integer" in text and "education|text" in text and "salary|double precision" in text
    for sql in examples:
        rest = _rest(server, sql)
        keys = set(rest["group_columns"])
        aggregates = [i for i, c in enumerate(rest["columns"]) if c not in keys]  # stddevs after every column
        header = "|".join(rest["columns"] + [f"{rest['columns'][i]}_stddev" for i in aggregates])
        assert header in text, (sql, header)
        for row, sd in zip(rest["rows"], rest["stddev"]):
            cells = [("" if v is None else str(v)) if c in keys else _psql(v) for c, v in zip(rest["columns"], row)]
            cells += [_psql(sd[i]) for i in aggregates]
            assert "|".join(cells) in text, (sql, cells)


def _psql(value: object) -> str:
    """How psql's unaligned output shows a float (NULL: empty)."""
    return "" if value is None else repr(value)


def test_psycopg_parameters_errors_and_boilerplate(wire: tuple[LiveServer, int]) -> None:
    psycopg = pytest.importorskip("psycopg")
    server, port = wire
    with psycopg.connect(_dsn(port)) as conn:
        got = conn.execute(
            "SELECT SUM(salary), COUNT(*) FROM people WHERE age BETWEEN %s AND %s AND education = %s", [30, 40, "phd"]
        ).fetchall()
        rest = _rest(
            server, "SELECT SUM(salary), COUNT(*) FROM people WHERE age BETWEEN 30 AND 40 AND education = 'phd'"
        )
        assert got == [(rest["rows"][0][0], rest["rows"][0][1], rest["stddev"][0][0], rest["stddev"][0][1])]
        assert conn.execute("SELECT version()").fetchone()[0].startswith("PostgreSQL 15.")
        assert conn.info.server_version // 10000 == 15  # the PostgreSQL whose catalogs are emulated
        assert conn.execute("SHOW standard_conforming_strings").fetchone() == ("on",)
        conn.execute("SET application_name = 'superset'")
        for sql, state in (
            ("SELECT * FROM people", "42501"),
            ("SELECT age FROM people", "42501"),
            ("SELECT COUNT(*) FROM nope", "42P01"),
            ("SELECT COUNT(*) FROM people WHERE", "42601"),
        ):
            with pytest.raises(psycopg.Error) as err:
                conn.execute(sql)
            assert err.value.sqlstate == state, sql
            conn.rollback()
        cur = conn.cursor()
        cur.execute("SELECT region, SUM(salary) FROM people GROUP BY region")
        assert [c.name for c in cur.description] == ["region", "sum(salary)", "sum(salary)_stddev"]
        shown = [r[0] for r in cur.fetchall()]  # no (other) or NULL group unless its noisy count says rows are there
        assert shown == [r[0] for r in _rest(server, "SELECT region, SUM(salary) FROM people GROUP BY region")["rows"]]
        assert shown[:4] == ["north", "south", "east", "west"]
        cur.execute("SET prima.outside_groups = all")
        cur.execute("SELECT region, SUM(salary) FROM people GROUP BY region")
        assert [r[0] for r in cur.fetchall()] == ["north", "south", "east", "west", "(other)", None]  # asked for
        with pytest.raises(psycopg.Error) as err:
            cur.execute("SET prima.noisy = 'maybe'")
        assert err.value.sqlstate == "22023" and "flag, null" in str(err.value)
        conn.rollback()


# Answers whose flags do not hang on the noise: whole-table counts by education (~25,000 ± 100) are
# never noise; SUMs of a region with (almost) no rows always are (noise beyond 3.9σ in every group).
# The declared educations only: an empty NULL or (other) group shows in 0.1 % of builds
# (`engine.answers.outside_groups`), and such a group is noise, rightly flagged (a CI run saw one).
PRECISE = (
    "SELECT education, COUNT(*) AS pay FROM people WHERE education IN ('hs', 'bsc', 'msc', 'phd') GROUP BY education"
)
NOISY = "SELECT education, SUM(salary) AS pay FROM people WHERE age = 90 AND hours = 1 GROUP BY education"


def test_noise_flags_and_suppression_over_the_wire(wire: tuple[LiveServer, int]) -> None:
    """`SET prima.flags = on` adds `<aggregate>_noisy` columns (REST's ``noisy``), the count of flagged
    values arrives as a NOTICE, and `SET prima.noisy = null` shows exactly the flagged values as NULL."""
    psycopg = pytest.importorskip("psycopg")
    server, port = wire
    with psycopg.connect(_dsn(port), autocommit=True) as conn:
        heard: list[str] = []
        conn.add_notice_handler(lambda d: heard.append(d.message_primary))
        for sql, expect_noise in ((PRECISE, False), (NOISY, True)):
            want = _rest(server, sql)
            flags = [f[1] for f in want["noisy"]]
            assert (True in flags) == expect_noise and (False in flags) != expect_noise, flags
            conn.execute("SET prima.flags = on")
            conn.execute("SET prima.noisy = DEFAULT")
            heard.clear()
            cur = conn.execute(sql)
            assert [c.name for c in cur.description] == ["education", "pay", "pay_stddev", "pay_noisy"]
            assert [r[3] for r in cur.fetchall()] == flags
            flagged, known = sum(f is True for f in flags), sum(f is not None for f in flags)
            assert any(f"{flagged} of {known} values are noise" in n for n in heard) == expect_noise
            conn.execute("SET prima.noisy = null")
            rows = conn.execute(sql).fetchall()
            assert [r[1] is None for r in rows] == [f is not False for f in flags]  # (None: withheld, no count)
            assert [r[1] for r in rows if r[1] is not None] == [r[1] for r, f in zip(want["rows"], flags) if f is False]


def test_wire_queries_are_counted_like_rest_ones(wire: tuple[LiveServer, int]) -> None:
    psycopg = pytest.importorskip("psycopg")
    server, port = wire
    with psycopg.connect(_dsn(port)) as conn:
        conn.execute("SELECT COUNT(*) FROM people").fetchall()
    text = httpx.get(
        server.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10, verify=TLS
    ).text
    assert 'prima_queries_total{endpoint="wire",status="200"}' in text


def test_a_wrong_token_is_refused(wire: tuple[LiveServer, int]) -> None:
    psycopg = pytest.importorskip("psycopg")
    _, port = wire
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(_dsn(port, password="not-a-token"))
    with psycopg.connect(_dsn(port, password=ADMIN_TOKEN)) as conn:  # the admin token works too
        assert conn.execute("SELECT COUNT(*) FROM people").fetchone()[0] > 0


def test_garbage_on_the_wire_closes_that_connection_only(wire: tuple[LiveServer, int]) -> None:
    server, port = wire
    for payload in (
        b"\x00\x00\x00\x08\x04\xd2\x16\x2f" + b"garbage" * 100,  # SSL request, then junk
        b"\x7f\xff\xff\xff" + b"\x00" * 64,  # a startup packet claiming 2 GB
        b"Q\x00\x00\x00\x10SELECT '" + b"x" * 8,
    ):  # a query before startup, unterminated
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(payload)
            s.settimeout(10)
            try:
                while s.recv(4096):
                    pass
            except (TimeoutError, ConnectionResetError):
                pass
    assert httpx.get(server.url + "/healthz", timeout=10, verify=TLS).status_code == 200
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(_dsn(port)) as conn:  # the listener still serves
        assert conn.execute("SELECT COUNT(*) FROM people").fetchone()[0] > 0


def _startup(port: int, password: str = ANALYST_TOKEN) -> socket.socket:
    """A raw protocol-3 connection, authenticated and ready for query."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    body = struct.pack("!i", 196608) + b"user\x00bi\x00database\x00prima\x00\x00"
    s.sendall(struct.pack("!i", len(body) + 4) + body)
    _read_until(s, b"R")
    pw = password.encode() + b"\x00"
    s.sendall(b"p" + struct.pack("!i", len(pw) + 4) + pw)
    _read_until(s, b"Z")
    return s


def _read_until(s: socket.socket, tag: bytes) -> list[tuple[bytes, bytes]]:
    """Messages up to and including the first with `tag`."""
    out = []
    while True:
        head = _recv_exactly(s, 5)
        body = _recv_exactly(s, struct.unpack("!i", head[1:])[0] - 4)
        out.append((head[:1], body))
        if head[:1] == tag:
            return out


def _recv_exactly(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def _query(s: socket.socket, sql: bytes) -> list[tuple[bytes, bytes]]:
    s.sendall(b"Q" + struct.pack("!i", len(sql) + 5) + sql + b"\x00")
    return _read_until(s, b"Z")


def _sqlstate(messages: list[tuple[bytes, bytes]]) -> str | None:
    for tag, body in messages:
        if tag == b"E":
            return dict((f[:1], f[1:]) for f in body.split(b"\x00") if f)[b"C"].decode()
    return None


def test_bad_input_after_startup_is_refused_and_the_server_keeps_serving(wire: tuple[LiveServer, int]) -> None:
    """An unterminated string, 10,000 statements in one message, a 1 GB message, a connection
    dropped mid-query: an error or a closed connection, never a stuck server."""
    server, port = wire
    with _startup(port) as s:
        assert _sqlstate(_query(s, b"SELECT COUNT(*) FROM people WHERE education = 'phd")) == "42601"
        assert _sqlstate(_query(s, b"SELECT 1;" * 10_000)) == "54000"
        assert _sqlstate(_query(s, b"SELECT COUNT(*) FROM people")) is None  # still usable
        s.sendall(b"Q" + struct.pack("!i", 2**30) + b"SELECT")  # claims 1 GB: closed, nothing buffered
        with pytest.raises(ConnectionError):
            _read_until(s, b"Z")
    for _ in range(20):  # queries whose answers nobody reads
        s = _startup(port)
        sql = b"SELECT region, SUM(salary) FROM people GROUP BY region"
        s.sendall(b"Q" + struct.pack("!i", len(sql) + 5) + sql + b"\x00")
        s.close()
    assert httpx.get(server.url + "/healthz", timeout=10, verify=TLS).status_code == 200
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(_dsn(port)) as conn:
        assert conn.execute("SELECT COUNT(*) FROM people").fetchone()[0] > 0


def test_the_listener_needs_tls_off_loopback(tmp_path: Path) -> None:
    out = subprocess.run(
        [str(REPO / ".venv" / "bin" / "python"), "-m", "app.cli", "serve", "--pg-port", "5433", "--pg-host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "400", "PRIMA_DATA_DIR": "/nonexistent/never-created"},
    )
    assert out.returncode != 0 and "requires TLS" in " ".join((out.stderr + out.stdout).split())
    openssl = shutil.which("openssl")
    if openssl is None:
        unavailable("openssl (Debian: openssl) makes the test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            openssl,
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.2",
            "-days",
            "1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    psycopg = pytest.importorskip("psycopg")
    pg_port = free_port()
    server = LiveServer(
        tmp_path / "data",
        extra_args=(
            "--pg-port",
            str(pg_port),
            "--pg-host",
            "127.0.0.2",
            "--pg-tls-cert",
            str(cert),
            "--pg-tls-key",
            str(key),
        ),
        env={"PRIMA_ANALYST_TOKENS": ANALYST_TOKEN},
    )
    server.start()
    try:
        tls_dsn = f"host=127.0.0.2 port={pg_port} user=bi password={ANALYST_TOKEN} dbname=prima connect_timeout=10"
        with psycopg.connect(tls_dsn + " sslmode=require") as conn:
            assert conn.pgconn.ssl_in_use
            assert conn.execute("SELECT COUNT(*) FROM people").fetchone()[0] > 0
        with pytest.raises(psycopg.OperationalError, match="requires TLS"):
            psycopg.connect(tls_dsn + " sslmode=disable")
    finally:
        server.stop()


def test_pandas_reads_a_group_by_through_sqlalchemy(wire: tuple[LiveServer, int]) -> None:
    """How Superset and analysts connect: SQLAlchemy 2 with psycopg (its first statements —
    pg_catalog.version(), SHOW transaction isolation level, savepoints — answered), pandas.read_sql."""
    sa = pytest.importorskip("sqlalchemy")
    pd = pytest.importorskip("pandas")
    server, port = wire
    engine = sa.create_engine(f"postgresql+psycopg://bi:analyst-token-1@127.0.0.1:{port}/prima")
    sql = "SELECT region, COUNT(*) AS n, SUM(salary) AS total FROM people GROUP BY region"
    with engine.connect() as conn:
        frame = pd.read_sql(sa.text(sql), conn)
        with conn.begin_nested():  # a savepoint
            conn.execute(sa.text("SELECT COUNT(*) FROM people"))
    assert list(frame.columns) == ["region", "n", "total", "n_stddev", "total_stddev"]  # as asked, then the bars
    rest = _rest(server, sql)
    assert frame["n"].tolist() == [r[1] for r in rest["rows"]] and frame["total_stddev"].tolist() == [
        s[2] for s in rest["stddev"]
    ]
    engine.dispose()


def test_a_date_dimension_is_a_date_on_the_wire(wire: tuple[LiveServer, int]) -> None:
    """A table with a monthly date dimension: the catalog says `date`, group keys arrive as dates,
    and Superset's coarser time grain (`DATE_TRUNC('year', hired) AS __timestamp`) groups by year."""
    import datetime as dt
    import shutil as sh

    import yaml

    psycopg = pytest.importorskip("psycopg")
    server, port = wire
    sh.copy(REPO / "examples" / "staff.csv", server.import_dir / "staff.csv")
    spec = yaml.safe_load((REPO / "examples" / "staff.yaml").read_text())
    spec["source"]["csv"] = str(server.import_dir / "staff.csv")
    r = httpx.post(
        server.url + "/v1/admin/tables",
        content=json.dumps(spec, default=str),
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"},
        timeout=120,
        verify=TLS,
    )
    assert r.status_code == 201, r.text
    assert (
        httpx.post(
            server.url + "/v1/admin/tables/staff/cube",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
            timeout=120,
            verify=TLS,
        ).status_code
        == 201
    )
    with psycopg.connect(_dsn(port)) as conn:
        types = dict(
            conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'staff'"
            ).fetchall()
        )
        assert types == {"age": "integer", "dept": "text", "hired": "date", "salary": "double precision"}
        rows = conn.execute(
            "SELECT DATE_TRUNC('year', hired) AS __timestamp, COUNT(*) AS n FROM staff "
            "GROUP BY DATE_TRUNC('year', hired) ORDER BY __timestamp LIMIT 3"
        ).fetchall()
        assert [r[0] for r in rows] == [dt.date(2012, 1, 1), dt.date(2013, 1, 1), dt.date(2014, 1, 1)]
        months = conn.execute("SELECT hired, COUNT(*) FROM staff WHERE hired < '2012-03-01' GROUP BY hired").fetchall()
        assert [m[0] for m in months] == [dt.date(2012, 1, 1), dt.date(2012, 2, 1)]
    rest = _rest(
        server,
        "SELECT DATE_TRUNC('year', hired) AS __timestamp, COUNT(*) AS n FROM staff "
        "GROUP BY DATE_TRUNC('year', hired) ORDER BY __timestamp LIMIT 3",
    )
    assert [r[1] for r in rows] == [r[1] for r in rest["rows"]]


def test_the_rate_limit_counts_wire_statements(tmp_path: Path) -> None:
    """PRIMA_RATE_LIMIT applies per statement on the wire, as per request over REST (53400 when over)."""
    psycopg = pytest.importorskip("psycopg")
    pg_port = free_port()
    server = LiveServer(
        tmp_path / "data",
        extra_args=("--pg-port", str(pg_port)),
        env={"PRIMA_ANALYST_TOKENS": ANALYST_TOKEN, "PRIMA_RATE_LIMIT": "1"},
    )
    server.start()
    try:
        with psycopg.connect(_dsn(pg_port), autocommit=True) as conn:
            states = []
            for _ in range(15):  # the bucket holds 10
                try:
                    conn.execute("SELECT COUNT(*) FROM people").fetchall()
                    states.append(None)
                except psycopg.Error as exc:
                    states.append(exc.sqlstate)
            assert states[:5] == [None] * 5 and "53400" in states
            conn.execute("SHOW search_path")  # boilerplate is not counted
    finally:
        server.stop()


def test_stddev_columns_come_after_every_requested_column_or_not_at_all(wire: tuple[LiveServer, int]) -> None:
    """Superset keeps the first n columns it asked for and labels them by position; with
    each `_stddev` right after its aggregate, a chart's second metric showed the first's stddev. The
    requested columns come first, exactly as requested; the bars follow, or are left out on request."""
    psycopg = pytest.importorskip("psycopg")
    server, port = wire
    sql = "SELECT region, AVG(salary) AS h, COUNT(*) AS n, SUM(salary) AS s FROM people GROUP BY region ORDER BY region"
    rest = _rest(server, sql)
    with psycopg.connect(_dsn(port), autocommit=True) as conn:
        cur = conn.execute(sql)
        assert [d.name for d in cur.description] == ["region", "h", "n", "s", "h_stddev", "n_stddev", "s_stddev"]
        assert [tuple(r) for r in cur.fetchall()] == [
            tuple(v) + tuple(sd[1:]) for v, sd in zip(rest["rows"], rest["stddev"])
        ]
        conn.execute("SET prima.stddev = off")
        assert conn.execute("SHOW prima.stddev").fetchone() == ("off",)
        cur = conn.execute(sql)
        assert [d.name for d in cur.description] == ["region", "h", "n", "s"]
        assert [tuple(r) for r in cur.fetchall()] == [tuple(v) for v in rest["rows"]]
        conn.execute("SET prima.stddev TO DEFAULT")
        assert len(conn.execute(sql).description) == 7
    # libpq's startup option, as psycopg, pgjdbc, Npgsql and node-postgres pass it
    total = "SELECT COUNT(*) AS n, SUM(salary) AS s FROM people"
    with psycopg.connect(_dsn(port) + " options='-c prima.stddev=off'") as conn:
        cur = conn.execute(total)
        assert [d.name for d in cur.description] == ["n", "s"]
        assert cur.fetchone() == tuple(_rest(server, total)["rows"][0])
        with conn.cursor() as prepared:  # the extended protocol (Parse/Describe/Bind) says the same
            prepared.execute(total + " WHERE age > %s", [30], prepare=True)
            assert [d.name for d in prepared.description] == ["n", "s"]


def test_notes_arrive_as_notices_and_intervals_on_request(wire: tuple[LiveServer, int]) -> None:
    """Over the wire an answer's notes were lost and its interval could not be asked for.
    Notes are NoticeResponse messages (psycopg's notice handlers get them); `SET prima.ci95 = on`
    adds each aggregate's REST interval as `_ci95_lo` / `_ci95_hi` after the stddevs."""
    psycopg = pytest.importorskip("psycopg")
    server, port = wire
    sql = "SELECT education, COUNT(*) AS n, AVG(salary) AS a FROM people WHERE education IN ('phd', 'PhD') GROUP BY education"
    rest = _rest(server, sql)
    assert rest["notes"]
    with psycopg.connect(_dsn(port), autocommit=True) as conn:
        heard: list[str] = []
        conn.add_notice_handler(lambda d: heard.append(d.message_primary))
        conn.execute(sql).fetchall()
        assert heard == rest["notes"]
        conn.execute("SET prima.ci95 = on")
        cur = conn.execute(sql)
        assert [d.name for d in cur.description] == [
            "education",
            "n",
            "a",
            "n_stddev",
            "a_stddev",
            "n_ci95_lo",
            "n_ci95_hi",
            "a_ci95_lo",
            "a_ci95_hi",
        ]
        for row, ci in zip(cur.fetchall(), rest["ci95"]):
            assert list(row[5:]) == [None if c is None else c[end] for c in ci[1:] for end in (0, 1)]
        heard.clear()
        conn.execute("SELECT COUNT(*) FROM people").fetchall()
        assert heard == _rest(server, "SELECT COUNT(*) FROM people")["notes"]


def test_set_prima_clamp_off_returns_the_raw_values_rest_gives_for_clamp_false(wire: tuple[LiveServer, int]) -> None:
    """A clamped answer's note says how to get the raw values in either face; on the wire that is
    `SET prima.clamp = off` (REST: "clamp": false), which must give REST's raw values."""
    psycopg = pytest.importorskip("psycopg")
    server, port = wire
    sql = "SELECT age, region, COUNT(*) AS n FROM people GROUP BY age, region ORDER BY age, region"
    clamped, raw = _rest(server, sql), _rest(server, sql, clamp=False)
    assert any("SET prima.clamp = off" in n for n in clamped["notes"])  # some tiny group's noisy count was < 0
    assert min(row[2] for row in raw["rows"]) < 0 and min(row[2] for row in clamped["rows"]) >= 0
    with psycopg.connect(_dsn(port), autocommit=True) as conn:
        conn.execute("SET prima.stddev = off")
        assert [tuple(r) for r in conn.execute(sql).fetchall()] == [tuple(r) for r in clamped["rows"]]
        conn.execute("SET prima.clamp = off")
        assert [tuple(r) for r in conn.execute(sql).fetchall()] == [tuple(r) for r in raw["rows"]]
        conn.execute("SET prima.clamp TO DEFAULT")
        assert [tuple(r) for r in conn.execute(sql).fetchall()] == [tuple(r) for r in clamped["rows"]]


def test_time_zone_and_show_all_as_pgcli_and_psql_send_them(wire: tuple[LiveServer, int]) -> None:
    """pgcli's first statement is SHOW TIME ZONE (it crashed at start)."""
    psycopg = pytest.importorskip("psycopg")
    _, port = wire
    with psycopg.connect(_dsn(port), autocommit=True) as conn:
        assert conn.execute("SHOW TIME ZONE").fetchone() == ("UTC",)
        assert conn.execute("SET TIME ZONE 'Europe/Paris'").statusmessage == "SET"
        assert conn.execute("SHOW TIME ZONE").fetchone() == ("Europe/Paris",)
        settings = dict((name, value) for name, value, _ in conn.execute("SHOW ALL").fetchall())
        assert settings["server_version_num"].startswith("15") and settings["datestyle"] == "ISO, MDY"
        assert conn.execute("SHOW datestyle").fetchone() == ("ISO, MDY",)


def test_prepared_statements_are_capped_per_connection(wire: tuple[LiveServer, int]) -> None:
    """A connection keeps at most 1,000 named prepared statements (each held its SQL until the
    connection ended, uncapped: 200 of 1 MB held 212 MB); DEALLOCATE frees a place."""
    import psycopg

    from app.wire.transport import MAX_PREPARED

    with psycopg.connect(_dsn(wire[1]), autocommit=True) as conn:
        pg = conn.pgconn
        for i in range(MAX_PREPARED):
            assert pg.prepare(f"s{i}".encode(), b"SELECT 1").status == psycopg.pq.ExecStatus.COMMAND_OK
        refused = pg.prepare(b"one_more", b"SELECT 1")
        assert refused.status == psycopg.pq.ExecStatus.FATAL_ERROR
        assert refused.error_field(psycopg.pq.DiagnosticField.SQLSTATE) == b"53400"
        assert b"DEALLOCATE" in (refused.error_message or b"")
        conn.execute("DEALLOCATE s0")
        assert pg.prepare(b"one_more", b"SELECT 1").status == psycopg.pq.ExecStatus.COMMAND_OK
