"""Who may call what, and how much: the auth matrix, per-token and per-address rate limits, limits
checked before any work, bounded limiter state, and the wire's pre-authentication and login limits."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.guard import FAILED_AUTH_BURST, FAILED_AUTH_RATE, Buckets
from app.http.app import create_app
from tests.conftest import ADMIN_TOKEN, TLS, LiveServer, free_port, sales_spec, write_sales_csv

ANALYST = "analyst-token-abc"


# -- auth, limits ----------------------------------------------------------------------------------
@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        data_dir=tmp_path / "data",
        admin_token=ADMIN_TOKEN,
        analyst_tokens=frozenset({ANALYST}),
        import_dir=tmp_path,
        demo=True,
        max_body_bytes=64_000,
        max_cube_bytes=50_000_000,
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


ENDPOINTS = [  # (method, path, body, admin-only)
    ("post", "/v1/query", {"sql": "SELECT COUNT(*) FROM people"}, False),
    ("post", "/v1/query/batch", {"queries": ["SELECT COUNT(*) FROM people"]}, False),
    ("get", "/v1/tables", None, False),
    ("get", "/v1/tables/people", None, False),
    ("get", "/v1/tables/people/budget", None, False),
    ("post", "/v1/admin/tables", {"name": "x"}, True),
    ("put", "/v1/admin/tables/people/budget", {"epsilon": 5}, True),
    ("post", "/v1/admin/tables/people/cube", None, True),
    ("get", "/v1/admin/tables/people/cube", None, True),
    ("get", "/v1/admin/tables/people/ledger", None, True),
]


def test_auth_matrix(guarded: TestClient) -> None:
    tokens = {"none": None, "wrong": "nope", "analyst": ANALYST, "admin": ADMIN_TOKEN}
    seen = 0
    for method, path, body, admin_only in ENDPOINTS:
        # one wrong token per endpoint: more than the failed-login allowance of one address, whose
        # throttle the failed-login tests below check on their own; a fresh allowance per endpoint here
        guarded.app.state.guard.failures = Buckets(FAILED_AUTH_RATE, FAILED_AUTH_BURST)
        for who, token in tokens.items():
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            kwargs = {"json": body} if body is not None else {}
            status = getattr(guarded, method)(path, headers=headers, **kwargs).status_code
            if who == "none":
                expected = {401}
            elif who == "wrong" or (admin_only and who == "analyst"):
                expected = {403}
            else:  # allowed through auth: the endpoint's own answer (the registration body is invalid)
                expected = {422} if path == "/v1/admin/tables" else {200, 201}
            assert status in expected, (method, path, who, status)
            seen += 1
    print(f"\nauth matrix: {seen} endpoint x token cases")
    assert guarded.get("/healthz").status_code == 200  # open


def test_rate_limit_per_token(tmp_path: Path) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        admin_token=ADMIN_TOKEN,
        analyst_tokens=frozenset({ANALYST, "b"}),
        import_dir=tmp_path,
        demo=True,
        rate_limit=5.0,
    )
    with TestClient(create_app(settings)) as c:
        hdr = {"Authorization": f"Bearer {ANALYST}"}
        statuses = [
            c.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM people"}, headers=hdr).status_code for _ in range(14)
        ]
        assert statuses[:10] == [200] * 10 and 429 in statuses[10:]
        limited = c.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM people"}, headers=hdr)
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        other = c.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM people"}, headers={"Authorization": "Bearer b"})
        assert other.status_code == 200  # buckets are per token


def test_limits_are_checked_before_work(guarded: TestClient, tmp_path: Path) -> None:
    hdr = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    big = guarded.post("/v1/query", content=b'{"sql": "' + b"x" * 70_000 + b'"}', headers=hdr)
    assert big.status_code == 413 and "limit" in big.json()["detail"]
    assert guarded.post("/v1/query", json={"sql": "SELECT " + "1," * 12_000}, headers=hdr).status_code in (413, 422)
    assert guarded.post("/v1/query/batch", json={"queries": ["SELECT 1"] * 10_001}, headers=hdr).status_code in (
        413,
        422,
    )
    spec = sales_spec(write_sales_csv(tmp_path / "s.csv", rows=10)) | {
        "dimensions": [
            {"name": "age", "type": "int", "lo": 0, "hi": 2000},
            {"name": "score", "type": "int", "lo": 0, "hi": 2000},
        ]
    }
    r = guarded.post("/v1/admin/tables", json=spec, headers=hdr)
    assert r.status_code == 413 and "PRIMA_MAX_CUBE_BYTES" in r.json()["detail"]


def test_group_by_row_limit_and_request_timeout(tmp_path: Path) -> None:
    from engine.answers import assemble as answer

    settings = Settings(
        data_dir=tmp_path / "data", admin_token=ADMIN_TOKEN, import_dir=tmp_path, demo=True, request_timeout=0.001
    )
    with TestClient(create_app(settings)) as c:
        slow = c.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM people"})  # first query builds: > 1 ms
        assert slow.status_code == 503 and "retry" in slow.json()["detail"]
    old = answer.MAX_GROUP_ROWS
    answer.MAX_GROUP_ROWS = 100
    try:
        with TestClient(
            create_app(Settings(data_dir=tmp_path / "data", admin_token=ADMIN_TOKEN, import_dir=tmp_path))
        ) as c:
            r = c.post("/v1/query", json={"sql": "SELECT age, education, COUNT(*) FROM people GROUP BY age, education"})
            assert r.status_code == 413 and "limit" in r.json()["detail"]
            assert c.get("/v1/tables/people/budget").json()["epsilon_spent"] == pytest.approx(1.0)  # built once
    finally:
        answer.MAX_GROUP_ROWS = old


ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


# -- nesting ------------------------------------------------------------------------------------------
def test_sql_nested_ten_thousand_deep_is_a_400_with_no_traceback(tmp_path: Path) -> None:
    server = LiveServer(tmp_path / "data", extra_args=("--log-level", "info", "--log-format", "text"))
    server.start()
    try:
        deep = [("SELECT COUNT(*) FROM people WHERE " + "(" * n + "age = 1" + ")" * n, 400) for n in (500, 4_000)]
        deep += [
            ("SELECT COUNT(*) FROM people WHERE " + "NOT " * 4_000 + "age = 1", 400),
            ("SELECT " + "-" * 5_000 + "1 FROM people", 400),
            ("SELECT COUNT(*) FROM people WHERE age = " + "CASE WHEN TRUE THEN " * 600 + "1" + " END" * 600, 400),
            ("SELECT COUNT(*) FROM people WHERE age IN (" + ",".join(["(1)"] * 4_000) + ")", 200),
            # 10,000 deep is more than REST's 20,000 characters: refused for its length (the wire
            # test below sends it whole)
            ("SELECT COUNT(*) FROM people WHERE " + "(" * 10_000 + "age = 1" + ")" * 10_000, 422),
        ]
        with httpx.Client(timeout=30, verify=TLS) as http:  # one keep-alive connection: it must survive them all
            for sql, status in deep:
                for _ in range(2):
                    r = http.post(server.url + "/v1/query", json={"sql": sql})
                    assert r.status_code == status, (sql[:80], r.text[:200])
                assert http.get(server.url + "/healthz").status_code == 200
        log = server.log.read_text()
        assert "Traceback" not in log and "RecursionError" not in log, log[-2000:]
        assert len(log) < 50_000, len(log)
    finally:
        server.stop()


# -- /metrics and failed logins -------------------------------------------------------------------
@pytest.fixture
def metered(tmp_path: Path) -> Iterator[TestClient]:
    """Analyst, admin and metrics tokens all set."""
    settings = Settings(
        data_dir=tmp_path / "data",
        admin_token=ADMIN_TOKEN,
        analyst_tokens=frozenset({"a-1"}),
        metrics_token="m-1",
        import_dir=tmp_path,
    )
    with TestClient(create_app(settings)) as c:
        yield c


def test_metrics_need_a_token_once_tokens_are_configured(metered: TestClient, tmp_path: Path) -> None:
    assert metered.get("/metrics").status_code == 401
    assert metered.get("/metrics", headers={"Authorization": "Bearer a-1"}).status_code == 403  # not an analyst's
    for token in ("m-1", ADMIN_TOKEN):
        r = metered.get("/metrics", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200 and "prima_" in r.text
    open_settings = Settings(data_dir=tmp_path / "open", import_dir=tmp_path)  # no token at all: all open
    with TestClient(create_app(open_settings)) as c:
        assert c.get("/metrics").status_code == 200


def test_failed_authentications_are_throttled_per_address(metered: TestClient) -> None:
    start = time.monotonic()
    codes = [
        metered.post(
            "/v1/query", headers={"Authorization": f"Bearer wrong-{i}"}, json={"sql": "SELECT COUNT(*) FROM people"}
        ).status_code
        for i in range(1_000)
    ]
    took = time.monotonic() - start
    assert codes[:10] == [403] * 10 and codes[10] == 429, codes[:20]
    assert codes.count(403) <= 10 + took * 1.0 + 1 and set(codes) == {403, 429}, (codes.count(403), took)
    # even the right token, for now: the wrong ones sent while locked out ran the bucket 10 into debt,
    # so the wait is ~11 s (without the debt it was < 1 s, and CI once saw the admin call let through)
    r = metered.get("/v1/tables", headers={"Authorization": "Bearer a-1"})
    assert r.status_code == 429 and int(r.headers["Retry-After"]) >= 10, r.headers
    assert metered.get("/v1/admin/tables/people/ledger", headers=ADMIN).status_code == 429


def test_a_lockout_peek_takes_nothing_and_refused_guesses_run_into_debt(monkeypatch: pytest.MonkeyPatch) -> None:
    from app import guard

    clock = [100.0]
    monkeypatch.setattr(guard.time, "monotonic", lambda: clock[0])
    buckets = Buckets(FAILED_AUTH_RATE, FAILED_AUTH_BURST, debt=FAILED_AUTH_BURST)
    for _ in range(10):
        buckets.take("addr:x", "locked")
    assert buckets.level("addr:x") == 0.0
    for _ in range(50):  # refused guesses: each one further into debt, down to -10
        with pytest.raises(guard.Denied):
            buckets.take("addr:x", "locked")
    assert buckets.level("addr:x") == -FAILED_AUTH_BURST
    clock[0] += 10.5  # 10.5 tokens back: still locked out, and a peek takes nothing
    for _ in range(5):
        with pytest.raises(guard.Denied):
            buckets.check("addr:x", "locked")
    assert buckets.level("addr:x") == 0.5
    clock[0] += 0.5
    buckets.check("addr:x", "locked")  # one token: one more try
    buckets.take("addr:x", "locked")
    plain = Buckets(rate=1.0, burst=2.0)  # no debt: a refused take leaves the bucket as it was
    plain.take("k", "x"), plain.take("k", "x")
    clock[0] += 0.25
    with pytest.raises(guard.Denied):
        plain.take("k", "x")
    assert plain.level("k") == 0.25


def test_random_bearer_strings_do_not_escape_the_rate_limit(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", rate_limit=5, import_dir=tmp_path)  # no analyst tokens
    with TestClient(create_app(settings)) as c:
        start = time.monotonic()
        codes = [c.get("/v1/tables", headers={"Authorization": f"Bearer r{i}"}).status_code for i in range(40)]
        elapsed = time.monotonic() - start
    # one bucket for all of them: a burst of 10, then 5 a second (a loaded machine answers slower, so
    # more refill in between: CI once saw 19 answered in ~1.8 s — what the bucket allows, not an escape)
    assert codes.count(200) <= 10 + 5 * elapsed + 1 and codes.count(429) >= 1, (codes, elapsed)


def test_limiter_state_is_bounded() -> None:
    from app import guard

    buckets = guard.Buckets(rate=1.0, burst=2.0)
    for i in range(guard.MAX_BUCKETS * 3):
        buckets.take(f"addr:{i}", "x")
    assert len(buckets) <= guard.MAX_BUCKETS


# -- the wire: pre-authentication limits, failed logins, catalog bounds, logs ---------------------
def _startup(port: int) -> socket.socket:
    """A raw connection that has sent its startup packet and read the password request."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    body = struct.pack("!i", 196608) + b"user\0bi\0database\0prima\0\0"
    s.sendall(struct.pack("!i", len(body) + 4) + body)
    kind = s.recv(1)
    assert kind == b"R", kind  # AuthenticationCleartextPassword
    s.recv(8)
    return s


def _closed_within(s: socket.socket, seconds: float) -> bool:
    s.settimeout(seconds)
    try:
        while s.recv(65536):
            pass
        return True
    except TimeoutError:
        return False
    except OSError:
        return True


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@pytest.fixture(scope="module")
def wire_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, int]]:
    pg_port = free_port()
    server = LiveServer(
        tmp_path_factory.mktemp("hard") / "data",
        extra_args=("--pg-port", str(pg_port), "--log-level", "info", "--log-format", "text"),
        env={"PRIMA_ANALYST_TOKENS": "a-1", "PRIMA_PG_AUTH_TIMEOUT": "3"},
    )
    server.start()
    yield server, pg_port
    server.stop()


def test_pre_auth_connections_cannot_pin_memory_or_stay_open(wire_server: tuple[LiveServer, int]) -> None:
    server, port = wire_server
    assert server.proc is not None
    before = _rss_mb(server.proc.pid)
    sockets = [_startup(port) for _ in range(50)]
    for s in sockets:  # each announces a 16 MB password and starts sending it
        try:
            s.sendall(b"p" + struct.pack("!i", 16 * 2**20 + 4) + b"x" * 2**20)
        except OSError:
            pass  # refused and closed mid-send: fine
    assert all(_closed_within(s, 5) for s in sockets)
    assert _rss_mb(server.proc.pid) - before < 50, (before, _rss_mb(server.proc.pid))
    idle = [_startup(port) for _ in range(5)]  # logins that never finish are closed at the deadline
    start = time.monotonic()
    assert all(_closed_within(s, 10) for s in idle) and time.monotonic() - start < 8
    many = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(70)]  # per-address cap
    try:
        psycopg = pytest.importorskip("psycopg")
        with pytest.raises(psycopg.OperationalError, match="too many connections"):
            psycopg.connect(f"host=127.0.0.1 port={port} user=bi password=a-1 dbname=prima sslmode=disable")
    finally:
        for s in many:
            s.close()
    time.sleep(0.5)
    import psycopg

    with psycopg.connect(f"host=127.0.0.1 port={port} user=bi password=a-1 dbname=prima sslmode=disable") as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_wire_failed_logins_are_throttled_and_catalog_queries_bounded(wire_server: tuple[LiveServer, int]) -> None:
    psycopg = pytest.importorskip("psycopg")
    server, port = wire_server
    good = f"host=127.0.0.1 port={port} user=bi password=a-1 dbname=prima sslmode=disable"
    with psycopg.connect(good, autocommit=True) as conn, psycopg.connect(good, autocommit=True) as second:
        messages = []  # both opened before the flood: they keep working
        for i in range(1_000):
            try:
                psycopg.connect(f"host=127.0.0.1 port={port} user=bi password=wrong{i} dbname=prima sslmode=disable")
            except psycopg.OperationalError as exc:
                messages.append(str(exc))
        assert sum("too many failed authentications" in m for m in messages) >= 900, messages[:12]
        # A huge set-returning call is refused at once, and another client's catalog query does not wait.
        for sql in (
            "SELECT len(range(0, 100000000))",
            "SELECT count(*) FROM generate_series(0, 100000000) g(n)",
            "SELECT length(repeat(repeat('x', 10000), 10000)) FROM pg_class",
        ):
            start = time.monotonic()
            with pytest.raises(psycopg.Error):
                conn.execute(sql).fetchall()
            assert time.monotonic() - start < 3
        outcome: list[str] = []

        def cross_join() -> None:
            try:
                conn.execute(
                    "SELECT sum(a.x * b.y) FROM pg_catalog.generate_series(1, 10000) a(x), "
                    "pg_catalog.generate_series(1, 10000) b(y), pg_catalog.generate_series(1, 10000) c(z)"
                )
                outcome.append("answered")
            except psycopg.Error as exc:
                outcome.append(exc.sqlstate or "")

        slow = threading.Thread(target=cross_join)
        slow.start()  # runs into the catalog's 2 s limit; the other client does not wait behind it
        time.sleep(0.2)
        start = time.monotonic()
        assert second.execute("SELECT count(*) FROM pg_class").fetchone() == (1,)
        assert time.monotonic() - start < 1.0
        slow.join(10)
        assert outcome == ["57014"]  # cancelled at the time limit
        for setting in ("temp_directory", "secret_directory", "home_directory", "extension_directory"):
            assert conn.execute(f"SELECT current_setting('{setting}') FROM pg_class LIMIT 1").fetchall() in (
                [],
                [(None,)],
            )
        assert conn.execute("SELECT current_setting('server_version_num')").fetchone()[0].startswith("15")
        with pytest.raises(psycopg.Error) as deep:
            conn.execute("SELECT COUNT(*) FROM people WHERE " + "(" * 10_000 + "age = 1" + ")" * 10_000)
        assert deep.value.sqlstate == "42601"
        with pytest.raises(psycopg.Error):  # refused over the wire: its literal must not reach the log
            conn.execute("SELECT COUNT(*) FROM people WHERE nosuchcolumn = 'CANARY-4711'")
    log = server.log.read_text()
    assert "CANARY-4711" not in log and "Traceback" not in log
