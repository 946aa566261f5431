"""HTTP API through FastAPI's TestClient on a real data dir: response shapes, auth and error codes."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.http.app import create_app
from tests.conftest import admin_headers, sales_spec

DEMO_SQL = "SELECT SUM(salary) FROM people WHERE age BETWEEN 30 AND 40"


def test_demo_query_returns_one_noisy_number_and_its_stddev(client: TestClient) -> None:
    r = client.post("/v1/query", json={"sql": DEMO_SQL})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["columns"] == ["sum(salary)"] and body["table"] == "people"
    assert len(body["rows"]) == 1 and isinstance(body["rows"][0][0], float)
    assert body["stddev"][0][0] > 0
    assert body["cube"]["strategy"] == "auto" and body["cube"]["epsilon"] == 1.0


def test_form_encoded_body_from_plain_curl_is_read_as_json(client: TestClient) -> None:
    r = client.post(
        "/v1/query", content=f'{{"sql": "{DEMO_SQL}"}}', headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert r.status_code == 200, r.text


def test_register_csv_then_queries_are_repeatable_and_spend_once(client: TestClient, sales_csv: Path) -> None:
    r = client.post("/v1/admin/tables", json=sales_spec(sales_csv), headers=admin_headers())
    assert r.status_code == 201, r.text
    assert r.json()["cube"]["status"] == "none"
    assert client.post("/v1/admin/tables", json=sales_spec(sales_csv), headers=admin_headers()).status_code == 409
    sql = "SELECT SUM(amount), COUNT(*) FROM sales WHERE age BETWEEN 30 AND 50 AND region = 'north'"
    first = client.post("/v1/query", json={"sql": sql}).json()
    for _ in range(25):
        assert client.post("/v1/query", json={"sql": sql}).json()["rows"] == first["rows"]
    budget = client.get("/v1/tables/sales/budget").json()
    ledger = client.get("/v1/admin/tables/sales/ledger", headers=admin_headers()).json()["entries"]
    assert [e["status"] for e in ledger] == ["done"] * 3  # COUNT(*), SUM(amount), COUNT(amount)
    assert budget["epsilon_spent"] == pytest.approx(sum(e["epsilon"] for e in ledger)) == pytest.approx(1.0)
    assert budget["epsilon_remaining"] == pytest.approx(0.0)
    tables = client.get("/v1/tables").json()["tables"]
    assert {t["name"] for t in tables} == {"people", "sales"}
    assert next(t for t in tables if t["name"] == "sales")["cube"]["status"] == "ready"


def test_admin_build_is_idempotent(client: TestClient) -> None:
    r1 = client.post("/v1/admin/tables/people/cube", headers=admin_headers())
    r2 = client.post("/v1/admin/tables/people/cube", headers=admin_headers())
    assert (r1.status_code, r2.status_code) == (201, 200)
    assert r1.json()["build_id"] == r2.json()["build_id"]
    assert client.get("/v1/admin/tables/people/cube", headers=admin_headers()).json()["status"] == "ready"
    assert len(client.get("/v1/admin/tables/people/ledger", headers=admin_headers()).json()["entries"]) == 3


@pytest.mark.parametrize(
    "method,path,body",
    [
        ("post", "/v1/admin/tables", {"name": "x"}),
        ("put", "/v1/admin/tables/people/budget", {"epsilon": 2}),
        ("post", "/v1/admin/tables/people/cube", None),
        ("get", "/v1/admin/tables/people/cube", None),
        ("get", "/v1/admin/tables/people/ledger", None),
    ],
)
def test_admin_auth(client: TestClient, method: str, path: str, body: dict | None) -> None:
    call = getattr(client, method)
    kwargs = {"json": body} if body is not None else {}
    assert call(path, **kwargs).status_code == 401
    assert call(path, headers={"Authorization": "Bearer nope"}, **kwargs).status_code == 403
    assert call(path, headers={"Authorization": "Basic abc"}, **kwargs).status_code == 401


def test_admin_closed_without_configured_token(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "d", admin_token=None, import_dir=None, demo=False)
    with TestClient(create_app(settings)) as c:
        r = c.get("/v1/admin/tables/people/ledger", headers={"Authorization": "Bearer "})
        assert r.status_code in (401, 403)
        assert c.get("/v1/admin/tables/x/ledger", headers=admin_headers()).status_code == 403


def test_budget_rules(client: TestClient) -> None:
    client.post("/v1/query", json={"sql": DEMO_SQL})  # builds: spends 1.0
    r = client.put("/v1/admin/tables/people/budget", json={"epsilon": 0.5}, headers=admin_headers())
    assert r.status_code == 409 and "spent" in r.json()["detail"]
    r = client.put("/v1/admin/tables/people/budget", json={"epsilon": 3}, headers=admin_headers())
    assert r.status_code == 200 and r.json()["epsilon_remaining"] == pytest.approx(2.0)
    forced = client.post("/v1/admin/tables/people/cube", json={"force": True}, headers=admin_headers())
    assert forced.status_code == 201
    # The default build spends what remains: here all 2.0, leaving nothing for another rebuild.
    assert client.get("/v1/tables/people/budget").json()["epsilon_spent"] == pytest.approx(3.0)
    again = client.post("/v1/admin/tables/people/cube", json={"force": True}, headers=admin_headers())
    assert again.status_code == 409 and "exhausted" in again.json()["detail"]
    assert client.get("/v1/tables/people/budget").json()["epsilon_spent"] == pytest.approx(3.0)


def test_query_refused_when_budget_cannot_cover_the_build(client: TestClient, sales_csv: Path) -> None:
    spec = sales_spec(sales_csv) | {"cube": {"build": "on_first_query", "epsilon": 0.5}, "epsilon": 0.25}
    assert client.post("/v1/admin/tables", json=spec, headers=admin_headers()).status_code == 201
    r = client.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM sales"})
    assert r.status_code == 409 and "epsilon" in r.json()["detail"]
    assert client.get("/v1/tables/sales/budget").json()["epsilon_spent"] == 0.0


@pytest.mark.parametrize(
    "sql,status,fragment",
    [
        ("SELEC SUM(salary) FROM people", 400, "syntax error at line 1"),
        ("SELECT SUM(salary) FROM nowhere", 404, "unknown table"),
        ("SELECT SUM(salary) FROM people WHERE age BETWEEN", 400, "syntax"),
        ("SELECT SUM(wage) FROM people", 400, "unknown column 'wage'"),
        ("SELECT SUM(age) FROM people", 400, "dimension, not a measure"),
        ("SELECT SUM(salary) FROM people WHERE age = 'old'", 400, "not a number"),
        ("SELECT SUM(salary) FROM people; DROP TABLE people", 400, "exactly one statement"),
        ("DELETE FROM people", 400, "only SELECT"),
        ("SELECT * FROM people", 400, "SELECT *"),
        ("SELECT SUM(salary) FROM people a JOIN people b ON a.age = b.age", 400, "JOIN"),
        ("SELECT SUM(salary) FROM people WHERE age = 30 OR region = 'north'", 400, "OR across"),
        ("SELECT SUM(salary) FROM people WHERE abs(age) = 30", 400, "functions"),
        ("SELECT MAX(salary) FROM people", 400, "MAX"),
        ("", 400, "empty"),
    ],
)
def test_bad_queries_get_clear_errors(client: TestClient, sql: str, status: int, fragment: str) -> None:
    r = client.post("/v1/query", json={"sql": sql})
    assert r.status_code == status, r.text
    assert fragment in r.json()["detail"]


@pytest.mark.parametrize(
    "path,body",
    [
        ("/v1/query", {"sql": 5}),
        ("/v1/query", {}),
        ("/v1/query", [1, 2]),
        ("/v1/query/batch", {"queries": "SELECT"}),
    ],
)
def test_malformed_bodies_are_422(client: TestClient, path: str, body: object) -> None:
    assert client.post(path, json=body).status_code == 422


def test_unknown_table_endpoints_404(client: TestClient) -> None:
    assert client.get("/v1/tables/none").status_code == 404
    assert client.get("/v1/tables/none/budget").status_code == 404
    for method, path in [("post", "cube"), ("get", "cube"), ("get", "ledger")]:
        r = getattr(client, method)(f"/v1/admin/tables/none/{path}", headers=admin_headers())
        assert r.status_code == 404, (method, path)
    r = client.put("/v1/admin/tables/none/budget", json={"epsilon": 1}, headers=admin_headers())
    assert r.status_code == 404


@pytest.mark.parametrize(
    "patch,fragment",
    [
        ({"name": "bad name!"}, "table name"),
        ({"source": {"csv": "/does/not/exist.csv"}}, "outside the configured import directory"),
        ({"source": {"csv": "/etc/passwd"}}, "outside the configured import directory"),
        ({"source": {"csv": "relative.csv"}}, "absolute"),
        ({"measures": [{"name": "amount", "lo": 5, "hi": 1}]}, "hi must be"),
        ({"measures": [{"name": "nope", "lo": 0, "hi": 1}]}, "no column"),
        ({"epsilon": -1}, "greater than 0"),
        ({"cube": {"build": "on_first_query", "strategy": "magic"}}, "unknown cube strategy"),
        ({"cube": {"weights": {"salary": 2}}}, "unknown aggregates"),
        ({"dimensions": []}, "at least 1"),
    ],
)
def test_registration_validation_is_422(client: TestClient, sales_csv: Path, patch: dict, fragment: str) -> None:
    r = client.post("/v1/admin/tables", json=sales_spec(sales_csv) | patch, headers=admin_headers())
    assert r.status_code == 422, r.text
    assert fragment in r.text


def test_batch_answers_each_query_and_isolates_errors(client: TestClient) -> None:
    queries = [DEMO_SQL, "SELECT nonsense", "SELECT COUNT(*) FROM people WHERE region = 'north'"]
    results = client.post("/v1/query/batch", json={"queries": queries}).json()["results"]
    assert results[0]["rows"] == client.post("/v1/query", json={"sql": DEMO_SQL}).json()["rows"]
    assert results[1]["error"]["status"] == 400
    assert results[2]["columns"] == ["count(*)"]


def test_import_paths_are_confined_to_the_import_dir(client: TestClient, tmp_path: Path, sales_csv: Path) -> None:
    inside_missing = str(tmp_path / "missing.csv")
    traversal = str(tmp_path / ".." / ".." / "etc" / "passwd")
    link = tmp_path / "link.csv"
    link.symlink_to("/etc/passwd")
    for path, fragment in [(inside_missing, "not found"), (traversal, "outside"), (str(link), "outside")]:
        r = client.post(
            "/v1/admin/tables", json=sales_spec(sales_csv) | {"source": {"csv": path}}, headers=admin_headers()
        )
        assert r.status_code == 422 and fragment in r.json()["detail"], (path, r.text)


def test_full_garbage_collections_are_rarer_while_the_app_runs(tmp_path: Path) -> None:
    """Start-up objects are frozen and full passes wait for FULL_COLLECTION_EVERY young ones while
    the app runs (bench/distinct_queries.py); the process's own thresholds come back on shutdown."""
    import gc

    from app.http.runtime import FULL_COLLECTION_EVERY

    before = gc.get_threshold()
    settings = Settings(data_dir=tmp_path / "d", import_dir=None, demo=False)
    with TestClient(create_app(settings)) as c:
        assert gc.get_threshold() == (before[0], before[1], FULL_COLLECTION_EVERY)
        assert gc.get_freeze_count() > 0
        assert c.get("/healthz").status_code == 200
    assert gc.get_threshold() == before


def test_two_apps_in_one_process_restore_the_collector_when_the_last_stops(tmp_path: Path) -> None:
    import gc

    from app.http.runtime import FULL_COLLECTION_EVERY

    before = gc.get_threshold()
    first = TestClient(create_app(Settings(data_dir=tmp_path / "a", import_dir=None, demo=False)))
    second = TestClient(create_app(Settings(data_dir=tmp_path / "b", import_dir=None, demo=False)))
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # stops first, while the second still runs
    assert gc.get_threshold()[2] == FULL_COLLECTION_EVERY
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before


def test_api_docs_are_served_without_internet(client: TestClient) -> None:
    for page in ("/docs", "/redoc"):
        html = client.get(page).text
        assert "cdn.jsdelivr" not in html and "fonts.googleapis" not in html and "/docs-assets/" in html
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
        r = client.get(f"/docs-assets/{asset}")
        assert r.status_code == 200 and len(r.content) > 10_000
    assert "SwaggerUIBundle" in client.get("/docs-assets/swagger-ui-bundle.js").text


def test_new_queries_on_a_loaded_cube_take_the_fast_path_only_with_a_valid_token(tmp_path: Path) -> None:
    from app.config import Settings
    from app.http.app import create_app
    from tests.conftest import ADMIN_TOKEN

    settings = Settings(
        data_dir=tmp_path / "data",
        admin_token=ADMIN_TOKEN,
        import_dir=tmp_path,
        demo=True,
        analyst_tokens=frozenset({"analyst-token-123456"}),
    )
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        ok = {"Authorization": "Bearer analyst-token-123456"}
        assert c.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM people"}, headers=ok).status_code == 200
        prima = c.app.state.prima
        sql = "SELECT SUM(salary) FROM people WHERE age BETWEEN 31 AND 47"
        assert c.post("/v1/query", json={"sql": sql}, headers={"Authorization": "Bearer wrong"}).status_code == 403
        assert prima.in_memory(sql) is None  # an invalid token got no parse on the loop
        fast = c.post("/v1/query", json={"sql": sql}, headers=ok)
        assert fast.status_code == 200 and prima.in_memory(sql) is not None
        assert fast.json() == prima.query(sql) | {}  # the same answer as the ordinary path
        bad = c.post("/v1/query", json={"sql": "SELECT SUM(salary) FROM people WHERE age BETWEEN 2 AND 5E"}, headers=ok)
        assert bad.status_code == 400 and "malformed number" in bad.json()["detail"]  # errors come from the route


def test_health_answers_under_both_names(client: TestClient) -> None:
    """`/healthz` (Kubernetes' name) and `/health` (what load balancers and uptime checks try)."""
    assert client.get("/health").status_code == 200 and client.get("/health").json() == client.get("/healthz").json()


def test_a_delta_in_a_pure_epsilon_budget_is_refused_saying_so(client: TestClient) -> None:
    r = client.put("/v1/admin/tables/people/budget", json={"epsilon": 2.0, "delta": 1e-9}, headers=admin_headers())
    assert r.status_code == 422 and "pure ε" in r.json()["detail"]
