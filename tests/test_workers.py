"""``prima serve --workers 2``: one writer, a reader, one data dir, one ledger.

A real server: the supervisor, a writer and a reader process, each listening on the port with
SO_REUSEPORT. Checked: both answer, every answer to one query is the same bytes, eight concurrent
first queries make one build and one charge, a cube built through the admin API is served by every
worker at once, admin requests reaching the reader are the writer's, and a writer killed with
SIGKILL in the middle of a build leaves one recorded charge and no second one.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_TOKEN, TLS, LiveServer

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
REPO = Path(__file__).resolve().parents[1]
QUERY = "SELECT region, education, SUM(salary) FROM people WHERE age BETWEEN 30 AND 60 GROUP BY region, education"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path / "data", extra_args=("--workers", "2"))
    server.start()
    workers_seen(server)  # both up before a test starts
    yield server
    server.stop()


def fresh(server: LiveServer) -> httpx.Client:
    """A client whose connections are new (the kernel picks the worker per connection)."""
    return httpx.Client(base_url=server.url, timeout=60, limits=httpx.Limits(max_keepalive_connections=0), verify=TLS)


def workers_seen(server: LiveServer, want: int = 2, timeout: float = 30) -> dict[str, dict]:
    """role → its /healthz body, from new connections until ``want`` distinct workers answered."""
    seen: dict[int, dict] = {}
    deadline = time.monotonic() + timeout
    with fresh(server) as c:
        while len(seen) < want and time.monotonic() < deadline:
            try:
                body = c.get("/healthz").json()
                seen[body["pid"]] = body
            except httpx.HTTPError:
                time.sleep(0.1)
    assert len(seen) == want, f"only {len(seen)} worker(s) answered: {seen}"
    return {b["role"]: b for b in seen.values()}


def staff_csv(server: LiveServer, variant: int = 0) -> str:
    """The README tour's CSV where the server may read it (PRIMA_IMPORT_DIR); each ``variant`` adds
    rows, so it is another file (another id space, its own budget)."""
    path = server.import_dir / f"staff{variant}.csv"
    if not path.exists():
        extra = "".join(f"{30 + i},eng,2015-01-01,50000.0\n" for i in range(variant))
        path.write_text((REPO / "examples" / "staff.csv").read_text() + extra)
    return str(path)


def builds_in_ledger(server: LiveServer, table: str) -> dict[str, set[str]]:
    with fresh(server) as c:
        entries = c.get(f"/v1/admin/tables/{table}/ledger", headers=ADMIN).json()["entries"]
    out: dict[str, set[str]] = {}
    for e in entries:
        out.setdefault(e["build_id"], set()).add(e["status"])
    return out


def test_eight_concurrent_first_queries_make_one_build_and_every_worker_answers_alike(served: LiveServer) -> None:
    roles = workers_seen(served)
    assert set(roles) == {"writer", "reader"}
    bodies: list[bytes] = []

    def ask() -> None:
        with fresh(served) as c:
            r = c.post("/v1/query", json={"sql": QUERY})
            while r.status_code == 503:  # "being built, retry shortly": a client's retry
                time.sleep(0.2)
                r = c.post("/v1/query", json={"sql": QUERY})
            assert r.status_code == 200, r.text
            bodies.append(r.content)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(bodies) == 8 and len(set(bodies)) == 1  # the same bytes from every worker
    builds = builds_in_ledger(served, "people")
    assert len(builds) == 1 and list(builds.values())[0] == {"done"}  # one build, one charge
    with fresh(served) as c:  # 40 more connections: spread over both workers, still one answer
        assert {c.post("/v1/query", json={"sql": QUERY}).content for _ in range(40)} == set(bodies)


def test_a_cube_built_by_the_writer_is_served_by_every_worker_within_a_second(served: LiveServer) -> None:
    spec = {
        "name": "staff",
        "source": {"csv": staff_csv(served)},
        "epsilon": 3.0,
        "cube": {"epsilon": 1.0},
        "dimensions": [
            {"name": "age", "type": "int", "lo": 15, "hi": 74, "bin": 5},
            {"name": "dept", "type": "category", "values": ["eng", "ops", "sales", "support"]},
        ],
        "measures": [{"name": "salary", "lo": 0, "hi": 300000}],
    }
    with fresh(served) as c:  # admin requests reach the writer from whichever worker accepts them
        assert c.post("/v1/admin/tables", json=spec, headers=ADMIN).status_code == 201
        assert c.post("/v1/admin/tables/staff/cube", json={}, headers=ADMIN).status_code == 201
        built = time.monotonic()
        answers = set()
        while time.monotonic() - built < 1.0 or len(answers) == 0:
            r = c.post("/v1/query", json={"sql": "SELECT dept, COUNT(*) FROM staff GROUP BY dept"})
            assert r.status_code == 200, r.text
            answers.add(r.content)
        assert len(answers) == 1
        assert c.post("/v1/admin/tables", json=spec, headers=ADMIN).status_code == 409  # the writer's catalog
        # Rebuilds replace the cube files while both workers answer: never an error, never a stale file.
        codes: list[int] = []
        stop = threading.Event()

        def hammer() -> None:
            with fresh(served) as h:
                while not stop.is_set():
                    codes.append(
                        h.post("/v1/query", json={"sql": "SELECT dept, COUNT(*) FROM staff GROUP BY dept"}).status_code
                    )

        t = threading.Thread(target=hammer)
        t.start()
        for _ in range(2):
            assert c.post("/v1/admin/tables/staff/cube", json={"force": True}, headers=ADMIN).status_code == 201
            time.sleep(0.3)
        stop.set()
        t.join()
        assert codes and set(codes) <= {200, 503}, sorted(set(codes))
    assert len(builds_in_ledger(served, "staff")) == 3


def test_a_writer_killed_mid_build_charges_once_and_comes_back(served: LiveServer) -> None:
    """SIGKILL of the writer at several points of a build: afterwards every build id in the ledger is
    'done' or 'failed' (never left 'charged'), there is at most one, and asking again without force
    neither builds nor charges."""
    for run, delay in enumerate((0.05, 0.3, 0.8)):
        name = f"staff{run}"
        spec = {
            "name": name,
            "source": {"csv": staff_csv(served, run + 1)},
            "epsilon": 1.0,
            "dimensions": [
                {"name": "age", "type": "int", "lo": 15, "hi": 74},
                {"name": "dept", "type": "category", "values": ["eng", "ops", "sales", "support"]},
                {"name": "hired", "type": "date", "lo": "2000-01-01", "hi": "2024-12-31", "granularity": "month"},
            ],
            "measures": [{"name": "salary", "lo": 0, "hi": 300000}],
            "cube": {"strategy": "pairwise"},
        }
        with fresh(served) as c:
            assert c.post("/v1/admin/tables", json=spec, headers=ADMIN).status_code == 201
            writer = workers_seen(served)["writer"]["pid"]
            assert c.post(f"/v1/admin/tables/{name}/cube", json={"background": True}, headers=ADMIN).status_code in (
                200,
                202,
            )
            time.sleep(delay)
            os.kill(writer, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while workers_seen(served).get("writer", {}).get("pid") == writer:  # the supervisor restarts it
                assert time.monotonic() < deadline
                time.sleep(0.2)
            builds = builds_in_ledger(served, name)
            assert len(builds) <= 1 and all(s <= {"done"} or s <= {"failed"} for s in builds.values()), builds
            again = c.post(f"/v1/admin/tables/{name}/cube", json={}, headers=ADMIN)
            if builds:  # charged before the kill: the cube, or "rebuild explicitly"; never a second charge
                assert again.status_code in (200, 409), again.text
                assert builds_in_ledger(served, name) == builds
            else:  # killed before its charge: nothing was spent, so this is the one build
                assert again.status_code == 201, again.text
                assert len(builds_in_ledger(served, name)) == 1


def test_forwarded_admin_requests_keep_per_address_limits_and_tcp_cannot_claim_an_address(served: LiveServer) -> None:
    """Over the writer's Unix socket a reader names the client; over TCP that header is ignored."""
    from app.workers import writer_socket

    wrong = {"Authorization": "Bearer wrong"}
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(writer_socket(served.data_dir)))) as uds:
        codes = [
            uds.get("http://w/v1/admin/spaces", headers=wrong | {"x-prima-forwarded-for": "198.51.100.7"}).status_code
            for _ in range(12)
        ]
        assert codes[0] == 403 and codes[-1] == 429  # one address used up its allowance …
        assert (
            uds.get("http://w/v1/admin/spaces", headers=wrong | {"x-prima-forwarded-for": "198.51.100.8"}).status_code
            == 403
        )
    with fresh(served) as c:  # … and a TCP client claiming that address is not locked out
        r = c.get("/v1/admin/spaces", headers=ADMIN | {"x-prima-forwarded-for": "198.51.100.7"})
        assert r.status_code == 200, r.text


def test_workers_refuse_a_port_another_server_holds(tmp_path: Path) -> None:
    """SO_REUSEPORT must not let N workers silently share a port with something else."""
    import socket
    import subprocess
    import sys

    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "app.cli",
                "serve",
                "--data-dir",
                str(tmp_path / "data"),
                "--port",
                str(port),
                "--workers",
                "2",
                "--no-demo",
                "--log-format",
                "text",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert "cannot listen on" in done.stdout + done.stderr


def test_every_worker_answers_from_an_append_within_a_second(served: LiveServer) -> None:
    """A dashboard repeats one SQL text on both workers; after an append each answers with the new
    period within a second (a reader's remembered answer once outlived appends for minutes)."""
    events = served.import_dir / "daily"
    for day, rows in ((1, 40), (2, 60)):
        folder = events / f"day=2025-01-0{day}"
        folder.mkdir(parents=True)
        (folder / "part.csv").write_text("kind,amount\n" + "a,1\n" * rows)
    spec = {
        "name": "daily",
        "source": {"csv": str(events)},
        "epsilon": 1.0,
        "growth": {"period": "day"},
        "dimensions": [
            {"name": "day", "type": "date", "lo": "2025-01-01", "hi": "2025-01-31", "outside": "exclude"},
            {"name": "kind", "type": "category", "values": ["a", "b"]},
        ],
        "measures": [{"name": "amount", "lo": 0, "hi": 10}],
    }
    sql = {"sql": "SELECT COUNT(*) FROM daily"}
    with fresh(served) as c:
        assert c.post("/v1/admin/tables", json=spec, headers=ADMIN).status_code == 201
        assert c.post("/v1/admin/tables/daily/append", json={"through": "2025-01-01"}, headers=ADMIN).status_code == 200
        before = {c.post("/v1/query", json=sql).content for _ in range(40)}  # remembered on both workers
        assert len(before) == 1
        assert c.post("/v1/admin/tables/daily/append", json={"through": "2025-01-02"}, headers=ADMIN).status_code == 200
        time.sleep(1.0)
        after = {c.post("/v1/query", json=sql).content for _ in range(40)}
    assert len(after) == 1 and after != before, (before, after)
    assert any("2025-01-02" in n for n in json.loads(after.pop())["notes"])


def test_one_rate_limit_bucket_across_three_workers(tmp_path: Path) -> None:
    """With ``--workers 3`` and 5 requests/s (a burst of 10), 60 requests on new connections (spread
    over the workers by the kernel) get what one bucket allows for the time they took — each worker
    kept its own buckets, and 60 in 4.4 s were all answered (failed logins use the same shared store)."""
    server = LiveServer(tmp_path / "data", extra_args=("--workers", "3"), env={"PRIMA_RATE_LIMIT": "5"})
    server.start()
    try:
        workers_seen(server, want=3)
        time.sleep(3)  # the probes' requests refilled
        start = time.monotonic()
        codes = []
        for _ in range(60):
            with fresh(server) as c:
                codes.append(c.get("/v1/tables").status_code)
        took = time.monotonic() - start
        allowed = 10 + 5 * took
        assert set(codes) <= {200, 429}
        assert codes.count(200) <= allowed + 2, (codes.count(200), took)
        assert codes.count(429) >= 60 - allowed - 2
    finally:
        server.stop()


def test_the_supervisor_and_forwarding_never_import_the_app() -> None:
    """`app.workers` (the supervisor, the readers' forwarding) sits below `app.http.app`: importing it
    alone loads no app module above it (the two imported each other)."""
    import subprocess
    import sys

    code = (
        "import sys, app.workers; print(sorted(m for m in sys.modules if m in ('app.http.app', 'app.worker_process')))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
