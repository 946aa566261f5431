"""What tripped a new user in the first hour, each checked where it can fail."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from engine.errors import Invalid
from engine.service import Prima
from storage.schema import TableSpec
from tests.conftest import admin_headers, sales_spec

SPARSE_GROUPS = "SELECT age, COUNT(*) AS n, AVG(amount) AS a FROM sales WHERE region = 'west' GROUP BY age"


def _sparse(tmp_path: Path, sales_csv: Path, epsilon: float = 0.05) -> Prima:
    """Low ε over thin groups: the noise pushes many counts below 0 and many AVGs out of bounds."""
    prima = Prima(tmp_path / "data", seed=3)
    prima.register(
        TableSpec.model_validate(
            sales_spec(sales_csv, epsilon=epsilon) | {"cube": {"build": "on_first_query", "strategy": "identity"}}
        )
    )
    return prima


def test_counts_and_avgs_are_clamped_into_their_possible_range_by_default(tmp_path: Path, sales_csv: Path) -> None:
    prima = _sparse(tmp_path, sales_csv)
    raw = prima.query(SPARSE_GROUPS, clamp=False)
    clamped = prima.query(SPARSE_GROUPS)
    raw_counts = [r[1] for r in raw["rows"]]
    assert min(raw_counts) < 0  # the defect: negative counts
    assert all(r[1] >= 0 for r in clamped["rows"])
    avgs = [r[2] for r in clamped["rows"] if r[2] is not None]
    assert all(-100 <= a <= 1000 for a in avgs)  # amount's clip range
    for row, raw_row, ci in zip(clamped["rows"], raw["rows"], clamped["ci95"]):
        assert row[1] == max(raw_row[1], 0.0)  # clamping moves only what was impossible
        assert ci[1][0] >= 0 and ci[1][1] >= 0
    assert any("clamped to ≥ 0" in n for n in clamped["notes"]) and any('"clamp": false' in n for n in clamped["notes"])
    assert raw["stddev"] == clamped["stddev"]
    prima.close()


def test_clamp_flag_over_http(tmp_path: Path, sales_csv: Path) -> None:
    from app.config import Settings
    from app.http.app import create_app
    from tests.conftest import ADMIN_TOKEN

    settings = Settings(data_dir=tmp_path / "data", admin_token=ADMIN_TOKEN, import_dir=tmp_path, demo=False)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        spec = sales_spec(sales_csv, epsilon=0.05) | {"cube": {"build": "on_first_query", "strategy": "identity"}}
        assert c.post("/v1/admin/tables", json=spec, headers=admin_headers()).status_code == 201
        clamped = c.post("/v1/query", json={"sql": SPARSE_GROUPS}).json()
        raw = c.post("/v1/query", json={"sql": SPARSE_GROUPS, "clamp": False}).json()
        assert min(r[1] for r in raw["rows"]) < 0 <= min(r[1] for r in clamped["rows"])
        assert c.post("/v1/query", json={"sql": SPARSE_GROUPS, "clamp": "maybe"}).status_code == 422


@pytest.fixture
def demo(tmp_path: Path) -> Prima:
    prima = Prima(tmp_path / "data", seed=1)
    prima.ensure_demo()
    yield prima
    prima.close()


def test_unquoted_table_names_are_case_insensitive_quoted_exact(demo: Prima) -> None:
    assert demo.query("SELECT COUNT(*) FROM PEOPLE")["rows"] == demo.query("SELECT COUNT(*) FROM people")["rows"]
    with pytest.raises(Exception) as err:
        demo.query('SELECT COUNT(*) FROM "PEOPLE"')
    assert getattr(err.value, "status", None) == 404


@pytest.mark.parametrize(
    "sql,expected",
    [
        ("SELECT COUNT(*) FROM people WHERE education = 'PhD'", "did you mean 'phd'?"),
        ("SELECT COUNT(*) FROM people WHERE education IN ('phd', 'BSC')", "did you mean 'bsc'?"),
        ("SELECT COUNT(*) FROM people WHERE age = 30.5", "whole numbers only"),
        ("SELECT COUNT(*) FROM people WHERE region = 'atlantis'", "its values are"),
    ],
)
def test_literals_matching_no_declared_value_say_so(demo: Prima, sql: str, expected: str) -> None:
    notes = demo.query(sql)["notes"]
    assert any(expected in n for n in notes), notes
    assert not any(literal in n for n in notes for literal in ("PhD", "BSC", "30.5", "atlantis"))  # literals not echoed


@pytest.mark.parametrize(
    "sql,expected,leak",
    [
        ("SELECT COUNT(*) FROM people GROUP BY age/10", "a division 'age / 10'", "DIV"),
        ("SELECT COUNT(*) FROM people WHERE age BETWEEN 2 AND 5E", "malformed number at line 1", "5E"),
        ("SELECT COUNT(*) FROM people WHERE age = nan", "the column 'nan'", "COLUMN"),
        ("SELECT COUNT(*) FROM people WHERE age BETWEEN 1 AND", "syntax error", "<class"),
    ],
)
def test_errors_speak_sql_not_parser_internals(demo: Prima, sql: str, expected: str, leak: str) -> None:
    with pytest.raises(Exception) as err:
        demo.query(sql)
    detail = getattr(err.value, "detail", "")
    assert getattr(err.value, "status", None) == 400 and expected in detail and leak not in detail, detail


def test_an_unquoted_dashed_column_gets_a_quoting_hint(tmp_path: Path) -> None:
    csv_path = tmp_path / "w.csv"
    csv_path.write_text("age,hours-per-week\n30,40\n40,50\n")
    prima = Prima(tmp_path / "data", seed=1)
    prima.register(
        TableSpec.model_validate(
            {
                "name": "w",
                "source": {"csv": str(csv_path)},
                "epsilon": 1.0,
                "dimensions": [{"name": "age", "type": "int", "lo": 0, "hi": 120}],
                "measures": [{"name": "hours-per-week", "lo": 0, "hi": 99}],
                "cube": {"build": "on_first_query"},
            }
        )
    )
    with pytest.raises(Exception) as err:
        prima.query("SELECT SUM(hours-per-week) FROM w")
    assert 'quote it: "hours-per-week"' in err.value.detail
    assert prima.query('SELECT SUM("hours-per-week") FROM w')["rows"][0][0] is not None
    prima.close()


def test_a_table_can_be_retired_and_registered_again_with_its_ledger(tmp_path: Path, sales_csv: Path) -> None:
    from app.config import Settings
    from app.http.app import create_app
    from tests.conftest import ADMIN_TOKEN

    settings = Settings(data_dir=tmp_path / "data", admin_token=ADMIN_TOKEN, import_dir=tmp_path, demo=False)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        spec = sales_spec(sales_csv) | {"cube": {"build": "on_first_query", "strategy": "identity"}, "epsilon": 2.0}
        assert c.post("/v1/admin/tables", json=spec, headers=admin_headers()).status_code == 201
        sql = "SELECT COUNT(*) FROM sales WHERE age > 30"
        for _ in range(3):  # into the fast path's memory
            assert c.post("/v1/query", json={"sql": sql}).status_code == 200
        assert c.delete("/v1/admin/tables/sales").status_code == 401  # admin only
        r = c.delete("/v1/admin/tables/sales", headers=admin_headers())
        assert r.status_code == 200 and r.json()["epsilon_spent"] == pytest.approx(2.0)
        assert c.post("/v1/query", json={"sql": sql}).status_code == 404  # nothing remembered answers it
        assert c.get("/v1/tables/sales").status_code == 404
        assert c.delete("/v1/admin/tables/sales", headers=admin_headers()).status_code == 404
        assert not (tmp_path / "data" / "cubes" / "sales").exists()
        # corrected metadata under the same name: allowed, and the spent budget still counts
        assert c.post("/v1/admin/tables", json=spec | {"epsilon": 3.0}, headers=admin_headers()).status_code == 201
        budget = c.get("/v1/tables/sales/budget").json()
        assert budget["epsilon_spent"] == pytest.approx(2.0) and budget["epsilon_remaining"] == pytest.approx(1.0)
        ledger = c.get("/v1/admin/tables/sales/ledger", headers=admin_headers()).json()["entries"]
        assert len(ledger) == 3  # COUNT(*), SUM and COUNT(amount) of the first build, kept


ADULT = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "adult.data"


def _adult_spec(path: Path, sex_values: list[str]) -> dict:
    return {
        "name": "adult",
        "source": {
            "csv": str(path),
            "header": False,
            "delimiter": ",",
            "columns": [
                "age",
                "workclass",
                "fnlwgt",
                "education",
                "education_num",
                "marital_status",
                "occupation",
                "relationship",
                "race",
                "sex",
                "capital_gain",
                "capital_loss",
                "hours_per_week",
                "native_country",
                "income",
            ],
        },
        "epsilon": 1.0,
        "dimensions": [
            {"name": "age", "type": "int", "lo": 0, "hi": 120},
            {"name": "sex", "type": "category", "values": sex_values},
        ],
        "measures": [{"name": "hours_per_week", "lo": 0, "hi": 168}],
    }


@pytest.mark.skipif(not ADULT.exists(), reason="shared datasets not present")
def test_comma_space_csv_values_are_trimmed_and_the_preflight_reports_the_fit(tmp_path: Path) -> None:
    """adult.data separates fields by ", ": categories used to load as " Male" and match nothing."""
    prima = Prima(tmp_path / "data", seed=1)
    info = prima.register(TableSpec.model_validate(_adult_spec(ADULT, ["Female", "Male"])))
    pre = info["preflight"]
    assert pre["rows"] == 32_561 and pre["outside_domain"]["sex"] == 0 and pre["warnings"] == []
    assert "nullable" in pre["suggestions"][0]  # no NULL hours: "nullable": false would save COUNT(hours)'s ε
    assert prima.budget("adult")["epsilon_spent"] == 0  # nothing spent to learn this
    assert "preflight" not in prima.table_info("adult")  # analysts never see it
    prima.retire("adult")
    with pytest.raises(Invalid) as refused:  # nothing usable: refused, with the preflight that says why
        prima.register(TableSpec.model_validate(_adult_spec(ADULT, ["female", "male"])))
    bad = refused.value.extra["preflight"]
    assert bad["outside_domain"]["sex"] == 32_561 and bad["rows_in_every_domain"] == 0
    assert bad["warnings"][0].startswith("no row falls inside every declared domain")
    assert "adult" not in prima.table_names()
    prima.close()


def test_a_query_during_a_build_gets_503_at_once_with_the_builds_progress(tmp_path: Path, sales_csv: Path) -> None:
    import time

    from app.config import Settings
    from app.http.app import create_app
    from tests.conftest import ADMIN_TOKEN

    settings = Settings(data_dir=tmp_path / "data", admin_token=ADMIN_TOKEN, import_dir=tmp_path, demo=False)
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        assert c.post("/v1/admin/tables", json=sales_spec(sales_csv), headers=admin_headers()).status_code == 201
        r = c.post("/v1/admin/tables/sales/cube", json={"background": True}, headers=admin_headers())
        assert r.status_code == 202
        started = time.monotonic()
        q = c.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM sales"})
        assert q.status_code == 503 and time.monotonic() - started < 2
        assert q.headers["Retry-After"] == "5" and q.json()["build"]["phase"] in (
            "waiting",
            "bound",
            "aggregate",
            "charge",
            "measure",
        )
        steps = set()
        while (status := c.get("/v1/admin/tables/sales/cube", headers=admin_headers()).json())["status"] == "building":
            steps.add(status.get("step", ""))
            time.sleep(0.005)
        assert status["status"] == "ready"
        assert any("bootstrap refit" in s for s in steps) and any(s.startswith("COUNT(*)") for s in steps), steps
        assert c.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM sales"}).status_code == 200


def test_api_docs_are_served_without_internet(client: TestClient) -> None:
    for page in ("/docs", "/redoc"):
        html = client.get(page).text
        assert "cdn.jsdelivr" not in html and "fonts.googleapis" not in html and "/docs-assets/" in html
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js"):
        r = client.get(f"/docs-assets/{asset}")
        assert r.status_code == 200 and len(r.content) > 10_000
    assert "SwaggerUIBundle" in client.get("/docs-assets/swagger-ui-bundle.js").text


def test_csv_and_arrow_answers_carry_the_notes_and_cube_facts(client: TestClient) -> None:
    import io
    import json

    import pyarrow as pa
    import pyarrow.csv as pacsv

    sql = "SELECT education, AVG(salary) AS a FROM people WHERE education IN ('phd', 'PhD') GROUP BY education"
    body = client.post("/v1/query", json={"sql": sql}).json()
    assert body["notes"]  # 'PhD' is not declared: the note says so
    as_csv = client.post("/v1/query", json={"sql": sql}, headers={"Accept": "text/csv"})
    frame = pacsv.read_csv(io.BytesIO(as_csv.content)).to_pydict()
    assert list(frame) == ["education", "a", "a_stddev", "a_ci95_lo", "a_ci95_hi", "notes"] and len(frame["a"]) == len(
        body["rows"]
    )
    assert frame["notes"][0] == " | ".join(body["notes"])
    assert json.loads(as_csv.headers["X-Prima-Notes"]) == body["notes"]
    assert json.loads(as_csv.headers["X-Prima-Cube"])["strategy"] == "auto"
    arrow = client.post("/v1/query", json={"sql": sql}, headers={"Accept": "application/vnd.apache.arrow.stream"})
    table = pa.ipc.open_stream(arrow.content).read_all()
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    assert json.loads(meta["prima.notes"]) == body["notes"]
    assert json.loads(meta["prima.cube"])["strategy"] == "auto" and meta["prima.table"] == "people"


def test_registration_previews_expected_errors_and_a_dry_run_costs_nothing(client: TestClient, sales_csv: Path) -> None:
    import math

    from privacy.mechanisms.sampler import GridLaplace

    spec = sales_spec(sales_csv) | {"cube": {"build": "on_first_query", "strategy": "identity"}}
    r = client.post("/v1/admin/tables?dry_run=true", json=spec, headers=admin_headers())
    assert r.status_code == 200 and r.json()["dry_run"] is True
    preview = r.json()["preview"]
    assert client.get("/v1/tables/sales").status_code == 404  # nothing registered
    count = preview["expected_errors"]["COUNT(*)"]
    # identity: a cell's variance times the cells a query sums (COUNT gets 20 % of ε = 1)
    cell_var = GridLaplace(1.0, 0.2).variance
    shape = (73 + 3, 4 + 2, 24 + 3, 5 + 3)  # declared cells, then below/above/NULL (other/NULL for region)
    assert count["total_stddev"] == pytest.approx(math.sqrt(cell_var * math.prod(shape)), rel=1e-3)
    assert count["group_by_one_dimension_stddev"]["region"] == pytest.approx(
        math.sqrt(cell_var * 76 * 27 * 8), rel=1e-3
    )
    assert preview["stored_bytes"] == math.prod(n + 1 for n in shape) * 3 * 8  # COUNT(*), SUM, COUNT(amount)
    assert any("COUNT grouped by two dimensions" in w for w in preview["warnings"])  # ±50 % needs many rows
    registered = client.post("/v1/admin/tables", json=spec, headers=admin_headers()).json()
    assert registered["preview"] == preview and registered["budget"]["epsilon_spent"] == 0
    assert client.post("/v1/admin/tables?dry_run=true", json=spec, headers=admin_headers()).status_code == 409


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
