"""Many servers on one state: three `prima serve` processes, each with a data dir of its own, on one
PostgreSQL state (`storage.shared_state`) and one shared cube directory — the way a load balancer
would spread users over them. One build and one charge whatever server a request reaches; never
more charged than the total, however many servers charge at once; an append answered by all within
a second; a server killed mid-build neither charges twice nor hangs the others; one rate limit and
one lockout per client across all three; cubes in an S3-compatible store (moto's server) instead
of a shared disk."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.conftest import TLS, LiveServer, admin_headers, free_port, sales_spec, write_sales_csv
from tests.servers import postgres_server
from tests.test_growing import events_spec, write_events

ANALYST = "analyst-shared-1"
QUERY = "SELECT region, COUNT(*), SUM(amount) FROM sales WHERE age BETWEEN 30 AND 60 GROUP BY region ORDER BY region"


def _servers(
    root: Path,
    dsn: str | None,
    count: int,
    env: dict[str, str] | None = None,
    name: str = "server",
    demo: bool = False,
    cube_dir: str | None = None,
) -> list[LiveServer]:
    """``count`` servers on ``dsn``, started in parallel: data dirs of their own, one cube dir (or
    object store); with no ``dsn``, embedded servers (each its own state). bench/shared_state.py too."""
    shared = ("--state", dsn, "--cube-dir", cube_dir or str(root / "cubes")) if dsn else ()
    servers = [
        LiveServer(
            root / f"{name}-{i}" / "data",
            demo=demo,
            import_dir=root / "import",
            extra_args=shared,
            env={"PRIMA_ANALYST_TOKENS": ANALYST, "PRIMA_APPEND_EVERY": "0", **(env or {})},
        )
        for i in range(count)
    ]
    for s in servers:
        s.data_dir.parent.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(count) as pool:
        list(pool.map(LiveServer.start, servers))
    return servers


@pytest.fixture(scope="module")
def trio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[LiveServer], str, Path]]:
    root = tmp_path_factory.mktemp("shared")
    (root / "import").mkdir()
    write_sales_csv(root / "import" / "sales.csv", rows=20_000)
    with postgres_server() as dsn:
        servers = _servers(root, dsn, 3)
        try:
            yield servers, dsn, root
        finally:
            for s in servers:
                s.stop()


def _post(server: LiveServer, path: str, body: dict | None = None, timeout: float = 120) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=admin_headers(), timeout=timeout, verify=TLS)


def _get(server: LiveServer, path: str) -> dict:
    r = httpx.get(server.url + path, headers=admin_headers(), timeout=30, verify=TLS)
    assert r.status_code == 200, r.text
    return r.json()


def _query(server: LiveServer, sql: str) -> httpx.Response:
    return httpx.post(
        server.url + "/v1/query",
        json={"sql": sql},
        headers={"Authorization": f"Bearer {ANALYST}"},
        timeout=60,
        verify=TLS,
    )


def test_24_concurrent_builds_over_three_servers_make_one_build_and_one_charge(trio) -> None:
    servers, _, root = trio
    spec = sales_spec(root / "import" / "sales.csv")
    assert _post(servers[0], "/v1/admin/tables", spec).status_code == 201
    # the table registered on server 0 is known to the others (their data dirs hold no copy of it)
    assert _get(servers[2], "/v1/tables/sales")["name"] == "sales"

    order = [servers[i % 3] for i in range(24)]
    with ThreadPoolExecutor(24) as pool:
        responses = list(pool.map(lambda s: _post(s, "/v1/admin/tables/sales/cube"), order))
    codes = sorted(r.status_code for r in responses)
    assert codes == [200] * 23 + [201], [r.text for r in responses if r.status_code not in (200, 201)]
    builds = {r.json()["build_id"] for r in responses}
    assert len(builds) == 1

    for s in servers:  # one ledger: the same entries seen from every server, all of one build
        entries = _get(s, "/v1/admin/tables/sales/ledger")["entries"]
        assert {e["build_id"] for e in entries} == builds and {e["status"] for e in entries} == {"done"}
        assert sum(e["epsilon"] for e in entries) == pytest.approx(1.0)
    answers = [_query(s, QUERY).json() for s in servers]  # one cube: the same noisy answer everywhere
    assert answers[0]["rows"] and all(a["rows"] == answers[0]["rows"] for a in answers)


def test_two_servers_building_tables_of_one_budget_at_once_cannot_overspend_it(trio) -> None:
    """Two tables over the same rows share one id space and its ε = 1; each build needs all of it.
    Built at the same moment on two servers, one is charged and the other refused."""
    servers, _, root = trio
    write_sales_csv(root / "import" / "twins.csv", rows=3_000, seed=11)
    for i, name in enumerate(("twin_a", "twin_b")):
        spec = sales_spec(root / "import" / "twins.csv", name=name)
        assert _post(servers[i], "/v1/admin/tables", spec).status_code == 201
    for attempt in range(3):  # builds racing for the last of a budget: refused, never both charged
        with ThreadPoolExecutor(2) as pool:
            codes = sorted(
                pool.map(
                    lambda p: _post(p[0], f"/v1/admin/tables/{p[1]}/cube").status_code,
                    [(servers[1], "twin_a"), (servers[2], "twin_b")],
                )
            )
        if attempt == 0:
            assert codes == [201, 409]
        else:
            assert codes in ([200, 409], [409, 409])  # the built one stays built; nothing more is charged
    spent = [e for t in ("twin_a", "twin_b") for e in _get(servers[0], f"/v1/admin/tables/{t}/ledger")["entries"]]
    assert sum(e["epsilon"] for e in spent) == pytest.approx(1.0)


def test_charges_from_many_connections_at_once_never_exceed_the_total(trio) -> None:
    """The charge-first rule across servers, at its source: 40 charges of ε = 0.1 against a total of
    1, from four connections (four servers' states) at once. Exactly ten are recorded."""
    from types import SimpleNamespace

    from storage import ledger
    from storage.shared_state import SharedState

    servers, dsn, root = trio
    write_sales_csv(root / "import" / "quota.csv", rows=1_000, seed=12)
    assert (
        _post(servers[0], "/v1/admin/tables", sales_spec(root / "import" / "quota.csv", name="quota")).status_code
        == 201
    )
    states = [SharedState(dsn) for _ in range(4)]

    def charge(k: int) -> bool:
        try:
            ledger.charge(SimpleNamespace(state=states[k % 4]), "quota", f"b{k}", [ledger.Charge(0.1, "test")])
            return True
        except ledger.BudgetExceeded:
            return False

    try:
        with ThreadPoolExecutor(16) as pool:
            charged = sum(pool.map(charge, range(40)))
    finally:
        for st in states:
            st.close()
    entries = _get(servers[1], "/v1/admin/tables/quota/ledger")["entries"]
    assert charged == len(entries) == 10 and sum(e["epsilon"] for e in entries) == pytest.approx(1.0)


def test_an_append_on_one_server_is_answered_by_all_within_a_second(trio) -> None:
    servers, _, root = trio
    events = write_events(root / "import", days=4)
    body = events_spec(events).model_dump(mode="json", exclude_none=True)
    assert _post(servers[1], "/v1/admin/tables", body).status_code == 201
    sql = "SELECT COUNT(*) FROM events WHERE day BETWEEN '2025-01-01' AND '2025-01-03'"

    def covers(server: LiveServer) -> str:
        """The days the server's answer says it covers (its note), e.g. "2025-01-01 to 2025-01-02"."""
        note = next(n for n in _query(server, sql).json()["notes"] if "covers the measured days" in n)
        return note.split("range, ")[1][:24]

    assert _post(servers[1], "/v1/admin/tables/events/append", {"through": "2025-01-02"}).status_code == 200
    assert [covers(s) for s in servers] == ["2025-01-01 to 2025-01-02"] * 3
    r = _post(servers[1], "/v1/admin/tables/events/append", {"through": "2025-01-03"})
    assert r.status_code == 200 and r.json()["appended"] == ["2025-01-03"], r.text
    appended = time.monotonic()
    waits = []
    for s in (servers[0], servers[2]):
        while covers(s) != "2025-01-01 to 2025-01-03":
            assert time.monotonic() - appended < 5, "the append is not answered by another server"
            time.sleep(0.02)
        waits.append(time.monotonic() - appended)
    assert max(waits) <= 1.0, waits
    ledger = _get(servers[0], "/v1/admin/tables/events/ledger")["entries"]
    assert [e["period"] for e in ledger] == ["2025-01-01", "2025-01-02", "2025-01-03"]  # each period once


def test_a_server_killed_mid_build_charges_once_and_another_reports_it(trio) -> None:
    servers, dsn, root = trio
    write_sales_csv(root / "import" / "doomed.csv", rows=5_000, seed=8)  # other rows: a budget of their own
    assert (
        _post(servers[0], "/v1/admin/tables", sales_spec(root / "import" / "doomed.csv", name="doomed")).status_code
        == 201
    )
    (doomed,) = _servers(root, dsn, 1, env={"PRIMA_FAULT_KILL_AT": "during_persist"}, name="doomed")
    try:
        with pytest.raises(httpx.HTTPError):  # dies holding the build: charged, a cube file half written
            _post(doomed, "/v1/admin/tables/doomed/cube", timeout=60)
        doomed.proc.wait(timeout=10)
        assert doomed.proc.returncode < 0
    finally:
        doomed.stop()
    charged = _get(servers[1], "/v1/admin/tables/doomed/ledger")["entries"]
    assert len({e["build_id"] for e in charged}) == 1 and sum(e["epsilon"] for e in charged) == pytest.approx(1.0)
    # PostgreSQL frees the dead server's build lock once its backend sees the socket closed: at once
    # on an idle machine, a moment later under CI's load ("building" until then, never "none")
    died = time.monotonic()
    while (status := _get(servers[1], "/v1/admin/tables/doomed/cube")["status"]) == "building":
        assert time.monotonic() - died < 10, "the dead server's build lock is never released"
        time.sleep(0.05)
    assert status == "failed", status
    # a plain build request anywhere is refused (no second charge) and says what to do
    r = _post(servers[2], "/v1/admin/tables/doomed/cube")
    assert r.status_code == 409 and "force" in r.json()["detail"], r.text
    after = _get(servers[0], "/v1/admin/tables/doomed/ledger")["entries"]
    assert [e["id"] for e in after] == [e["id"] for e in charged] and {e["status"] for e in after} == {"failed"}
    # the admin raises the budget and rebuilds explicitly on another server: charged once more
    r = httpx.put(
        servers[1].url + "/v1/admin/tables/doomed/budget", json={"epsilon": 2.0}, headers=admin_headers(), verify=TLS
    )
    assert r.status_code == 200, r.text
    r = _post(servers[2], "/v1/admin/tables/doomed/cube", {"force": True})
    assert r.status_code == 201, r.text
    assert _get(servers[0], "/v1/admin/tables/doomed/cube")["status"] == "ready"
    # what the dead server left in the shared cube dir went when the table's lock was next taken
    assert [p.name for p in (root / "cubes" / "doomed").iterdir()] == [r.json()["build_id"]]


def test_one_analyst_gets_one_allowance_across_three_servers(tmp_path: Path) -> None:
    rate, burst = 1.0, 10  # app/guard.py: burst = max(10, 2 × rate)
    with postgres_server() as dsn:
        (tmp_path / "import").mkdir()
        servers = _servers(tmp_path, dsn, 3, env={"PRIMA_RATE_LIMIT": str(rate)})
        try:
            started = time.monotonic()
            codes = [
                httpx.get(
                    s.url + "/v1/tables", headers={"Authorization": f"Bearer {ANALYST}"}, timeout=30, verify=TLS
                ).status_code
                for s in itertools.islice(itertools.cycle(servers), 36)
            ]
            elapsed = time.monotonic() - started
            # PostgreSQL drops every server's connection (a restart, a failover): they reconnect
            with psycopg.connect(dsn, autocommit=True) as con:
                con.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'prima'")
            admin = [
                httpx.get(s.url + "/v1/admin/spaces", headers=admin_headers(), timeout=30, verify=TLS) for s in servers
            ]
            assert [r.status_code for r in admin] == [200] * 3, [r.text for r in admin]
            # a token guesser locked out on one server is locked out on the others (one address, one bucket)
            wrong = [
                httpx.get(
                    servers[0].url + "/v1/tables", headers={"Authorization": "Bearer guess"}, verify=TLS
                ).status_code
                for _ in range(12)
            ]
            assert wrong[:10] == [403] * 10 and wrong[-1] == 429
            time.sleep(0.3)  # a server re-reads a peeked bucket after 0.25 s (app/guard.py PEEK_SECONDS)
            right = [
                httpx.get(s.url + "/v1/tables", headers={"Authorization": f"Bearer {ANALYST}"}, verify=TLS).status_code
                for s in servers[1:]
            ]
            assert right == [429, 429]
        finally:
            for s in servers:
                s.stop()
    answered = codes.count(200)
    # one bucket: the burst plus what refilled meanwhile; three buckets would answer all 36 at once
    assert burst <= answered <= burst + rate * elapsed + 1, (answered, elapsed)
    assert set(codes) == {200, 429}


def test_servers_starting_together_share_one_demo_table_any_of_them_builds(tmp_path: Path) -> None:
    with postgres_server() as dsn:
        (tmp_path / "import").mkdir()
        servers = _servers(tmp_path, dsn, 2, demo=True)
        try:
            assert [len(_get(s, "/v1/tables")["tables"]) for s in servers] == [1, 1]
            sql = "SELECT education, AVG(salary) FROM people GROUP BY education ORDER BY education"
            first = _query(servers[1], sql)  # built on its first query, by the server it reached
            assert first.status_code == 200, first.text
            assert _query(servers[0], sql).json()["rows"] == first.json()["rows"]
            entries = _get(servers[0], "/v1/admin/tables/people/ledger")["entries"]
            assert len({e["build_id"] for e in entries}) == 1
        finally:
            for s in servers:
                s.stop()


def test_cubes_in_an_s3_compatible_store_are_fetched_replaced_and_retired(tmp_path: Path) -> None:
    """Servers without a shared disk: cubes in an object store (moto's S3 server on loopback), each
    server fetching a copy into its own data dir before mapping it."""
    boto3 = pytest.importorskip("boto3")
    moto_server = pytest.importorskip("moto.server")
    port = free_port()
    s3 = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    s3.start()
    aws = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    bucket = boto3.client(
        "s3",
        endpoint_url=aws["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )
    bucket.create_bucket(Bucket="prima-cubes")

    def stored() -> set[str]:
        """The build folders in the bucket: prefix/table/build."""
        listed = bucket.list_objects_v2(Bucket="prima-cubes", Prefix="prod/").get("Contents", [])
        return {"/".join(o["Key"].split("/")[1:3]) for o in listed}

    (tmp_path / "import").mkdir()
    write_sales_csv(tmp_path / "import" / "sales.csv", rows=5_000)
    try:
        with postgres_server() as dsn:
            servers = _servers(tmp_path, dsn, 2, env=aws, cube_dir="s3://prima-cubes/prod")
            try:
                assert (
                    _post(servers[0], "/v1/admin/tables", sales_spec(tmp_path / "import" / "sales.csv")).status_code
                    == 201
                )
                first = _post(servers[0], "/v1/admin/tables/sales/cube").json()["build_id"]
                assert stored() == {f"sales/{first}"}
                answers = [_query(s, QUERY).json() for s in servers]
                assert answers[1]["rows"] == answers[0]["rows"] and answers[1]["cube"]["build_id"] == first
                assert (servers[1].data_dir / "cubes" / "sales" / first).is_dir()  # fetched, then mapped
                r = httpx.put(
                    servers[1].url + "/v1/admin/tables/sales/budget",
                    json={"epsilon": 2.0},
                    headers=admin_headers(),
                    verify=TLS,
                )
                assert r.status_code == 200, r.text
                second = _post(servers[1], "/v1/admin/tables/sales/cube", {"force": True}).json()["build_id"]
                assert stored() == {f"sales/{second}"}  # the replaced cube's objects are gone
                deadline = time.monotonic() + 1.0
                while _query(servers[0], QUERY).json()["cube"]["build_id"] != second:
                    assert time.monotonic() < deadline, "the rebuild is not answered by the other server"
                    time.sleep(0.02)
                assert (
                    httpx.delete(
                        servers[0].url + "/v1/admin/tables/sales", headers=admin_headers(), verify=TLS
                    ).status_code
                    == 200
                )
                assert stored() == set()
            finally:
                for s in servers:
                    s.stop()
    finally:
        s3.stop()


def test_state_and_cube_dir_go_together(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from app.cli import cli

    def refusal(*args: str) -> str:
        """What `prima serve` says before it starts anything (in-process: no server comes up)."""
        out = CliRunner().invoke(cli, ["serve", "--data-dir", str(tmp_path / "d"), *args])
        assert out.exit_code != 0
        return out.output

    assert "--cube-dir" in refusal("--state", "postgresql://u:secret-pw@127.0.0.1:1/x")
    assert "--state" in refusal("--cube-dir", str(tmp_path / "c"))
    assert "PostgreSQL URL" in refusal("--state", "mysql://u@h/x", "--cube-dir", str(tmp_path / "c"))
    assert "more servers" in refusal(
        "--state", "postgresql://u@127.0.0.1:1/x", "--cube-dir", str(tmp_path), "--workers", "2"
    )


def test_an_unreachable_state_fails_the_start_without_its_password(tmp_path: Path) -> None:
    server = LiveServer(
        tmp_path / "data",
        demo=False,
        extra_args=("--state", "postgresql://u:secret-pw@127.0.0.1:1/x", "--cube-dir", str(tmp_path / "c")),
    )
    with pytest.raises(RuntimeError, match="server exited") as failed:
        server.start()
    assert "shared state database" in str(failed.value) and "secret-pw" not in server.log.read_text()
