"""End to end against a real uvicorn server on 127.0.0.1, including a restart on the same data dir."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest

from tests.conftest import TLS, LiveServer, admin_headers, sales_spec


def test_readme_curl_query_on_the_demo_table(live_server: LiveServer) -> None:
    # Exactly what `curl -s localhost:8000/v1/query -d '{"sql": ...}'` sends (a form content type).
    body = '{"sql":"SELECT SUM(salary) FROM people WHERE age BETWEEN 30 AND 40"}'
    r = httpx.post(
        live_server.url + "/v1/query",
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        timeout=30,
        verify=TLS,
    )
    assert r.status_code == 200, r.text
    data = r.json()
    assert len(data["rows"]) == 1 and len(data["rows"][0]) == 1
    assert data["stddev"][0][0] > 0


def test_register_query_restart_same_answer_and_ledger(tmp_path: Path, sales_csv: Path) -> None:
    server = LiveServer(tmp_path / "data", demo=False)
    server.start()
    try:
        r = httpx.post(
            server.url + "/v1/admin/tables", json=sales_spec(sales_csv), headers=admin_headers(), timeout=30, verify=TLS
        )
        assert r.status_code == 201, r.text
        sql = {"sql": "SELECT SUM(amount), COUNT(*) FROM sales WHERE age >= 40 AND day < '2021-01-01'"}
        answers = [
            httpx.post(server.url + "/v1/query", json=sql, timeout=30, verify=TLS).json()["rows"] for _ in range(20)
        ]
        assert all(a == answers[0] for a in answers)
        budget = httpx.get(server.url + "/v1/tables/sales/budget", verify=TLS).json()
        ledger = httpx.get(server.url + "/v1/admin/tables/sales/ledger", headers=admin_headers(), verify=TLS).json()
        assert budget["epsilon_spent"] == pytest.approx(sum(e["epsilon"] for e in ledger["entries"]))
        assert budget["epsilon_spent"] == pytest.approx(1.0)
    finally:
        server.stop()
    server.start()
    try:
        after = httpx.post(server.url + "/v1/query", json=sql, timeout=30, verify=TLS).json()["rows"]
        assert after == answers[0]
        assert httpx.get(server.url + "/v1/tables/sales/budget", verify=TLS).json() == budget
        assert (
            httpx.get(server.url + "/v1/admin/tables/sales/ledger", headers=admin_headers(), verify=TLS).json()
            == ledger
        )
        assert httpx.get(server.url + "/v1/tables", verify=TLS).json()["tables"][0]["name"] == "sales"  # --no-demo
    finally:
        server.stop()


def test_the_server_runs_blas_on_one_thread_for_its_life(tmp_path: Path) -> None:
    """Answers' BLAS products on OpenBLAS's own threads spun a second core per process for nothing
    (bench/workers.py: 1.96 cores for what 1.0 core answered); the app pins BLAS to one thread while
    it runs and gives the process its setting back when it stops."""
    from fastapi.testclient import TestClient
    from threadpoolctl import threadpool_info, threadpool_limits

    from app.config import Settings
    from app.http.app import create_app

    def blas_threads() -> set[int]:
        return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}

    if not blas_threads():
        pytest.skip("no BLAS library loaded")
    with threadpool_limits(limits=2, user_api="blas"):  # what a 2-core machine's OpenBLAS starts with
        settings = Settings(data_dir=tmp_path / "data", import_dir=tmp_path, demo=False)
        with TestClient(create_app(settings)) as c:
            assert c.get("/healthz").status_code == 200
            assert blas_threads() == {1}
        assert blas_threads() == {2}


def test_ctrl_c_stops_the_server_quietly(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT) after a query that built a cube: exit code 0, the shutdown logged, and none of
    DuckDB's ~40 "nanobind: leaked …" lines from the interpreter's teardown."""
    server = LiveServer(tmp_path / "data")
    server.start()
    try:
        r = httpx.post(server.url + "/v1/query", json={"sql": "SELECT COUNT(*) FROM people"}, timeout=120, verify=TLS)
        assert r.status_code == 200
    finally:
        assert server.proc is not None
        server.proc.send_signal(signal.SIGINT)
        code = server.proc.wait(timeout=30)
    log = server.log.read_text()
    assert code == 0 and "nanobind" not in log, log[-2000:]


def test_a_fresh_servers_start_loads_neither_scipys_optimiser_nor_an_http_client(tmp_path: Path) -> None:
    """What a server's start imports is its start-up time, paid by every server, worker and test: the
    app loads no HTTP client (only a reader forwarding to its writer needs httpx, ~0.2 s with its
    CLI), and the demo table registers without planning its workload (scipy's optimiser, ~0.3 s to
    import; a build plans it when one runs): a fresh server started in 0.90 s of CPU, not 1.60 s."""
    import subprocess
    import sys

    code = (
        "import sys; import app.http.app; from engine.service import Prima; "
        f"p = Prima({str(tmp_path / 'data')!r}); created = p.ensure_demo(); "
        "loaded = sorted(m for m in ('httpx', 'scipy.optimize') if m in sys.modules); "
        "print(created, loaded, p.table_names())"
    )
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True [] ['people']", out
