"""Registering tables: what is refused and what each refusal says to do (unknown fields, no usable
row, a source in another id space), who builds (the admin, unless declared otherwise), retired
tables' ledgers, re-registration, previews and dry runs, the preflight's fit report."""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from engine.errors import Invalid
from engine.service import Prima
from storage.schema import TableSpec
from tests.conftest import ADULT_COLUMNS, admin_headers, dataset, sales_spec
from tests.small_tables import ADMIN, unit_spec, write_table


def _register(empty_client: TestClient, spec: dict[str, Any], query: str = "") -> Any:
    return empty_client.post("/v1/admin/tables" + query, headers=ADMIN, json=spec)


def _plain_spec(name: str, path: Path, **cube: Any) -> dict[str, Any]:
    spec = unit_spec(name, {"csv": str(path)}, 2)
    del spec["privacy_unit"]
    spec["cube"] = {"strategy": "identity", **cube}
    return spec


def test_an_analyst_query_builds_only_where_the_admin_allowed_it(empty_client: TestClient, tmp_path: Path) -> None:
    path = write_table(tmp_path / "t.csv", None)
    assert _register(empty_client, _plain_spec("guarded", path)).status_code == 201  # default: the admin builds
    r = empty_client.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM guarded"})
    assert r.status_code == 409 and "prima build guarded" in r.json()["detail"]
    assert empty_client.get("/v1/tables/guarded/budget").json()["epsilon_spent"] == 0
    assert empty_client.post("/v1/admin/tables/guarded/cube", headers=ADMIN).status_code == 201
    assert empty_client.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM guarded"}).status_code == 200
    spec = _plain_spec("lazy", tmp_path / "t.csv", build="on_first_query") | {"name": "lazy"}
    spec["source"] = {"csv": str(write_table(tmp_path / "u.csv", "1.0"))}
    assert _register(empty_client, spec).status_code == 201
    assert empty_client.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM lazy"}).status_code == 200


def test_request_bodies_refuse_unknown_fields(empty_client: TestClient, tmp_path: Path) -> None:
    assert _register(empty_client, _plain_spec("strict", write_table(tmp_path / "t.csv", None))).status_code == 201
    for path, body in (
        ("/v1/admin/tables/strict/cube", {"epsilon": 0.1, "strategy": "identity"}),
        ("/v1/query", {"sql": "SELECT COUNT(*) FROM strict", "epsilon": 5}),
        ("/v1/query/batch", {"queries": [], "epsilon": 5}),
    ):
        r = empty_client.post(path, headers=ADMIN, json=body)
        assert r.status_code == 422 and "extra_forbidden" in r.text, (path, r.text)
    assert (
        empty_client.put("/v1/admin/tables/strict/budget", headers=ADMIN, json={"epsilon": 2, "x": 1}).status_code
        == 422
    )
    assert empty_client.get("/v1/tables/strict/budget").json()["epsilon_spent"] == 0  # nothing was built or spent


def test_a_source_with_no_usable_row_is_refused_unless_forced(empty_client: TestClient, tmp_path: Path) -> None:
    path = write_table(tmp_path / "t.csv", None)
    spec = _plain_spec("empty", path)
    spec["dimensions"][0]["values"] = ["A", "B", "C"]  # the file says a, b, c: nothing matches
    r = _register(empty_client, spec)
    assert r.status_code == 422 and "no row" in r.json()["detail"], r.text
    assert r.json()["preflight"]["rows_in_every_domain"] == 0  # the admin sees why
    assert empty_client.get("/v1/tables/empty").status_code == 404  # nothing registered, nothing loaded
    r = _register(empty_client, spec, "?force=true")
    assert r.status_code == 201 and "force=true" in r.json()["preflight"]["warnings"][0]


def test_a_source_cannot_escape_its_budget_into_another_id_space(empty_client: TestClient, tmp_path: Path) -> None:
    path = write_table(tmp_path / "t.csv", None)
    first = unit_spec("plain", {"csv": str(path)}, 2)
    assert _register(empty_client, first).status_code == 201
    assert empty_client.post("/v1/admin/tables/plain/cube", headers=ADMIN).status_code == 201
    escaped = unit_spec("escaped", {"csv": str(path)}, 2)
    escaped["privacy_unit"]["id_space"] = "persons"
    r = _register(empty_client, escaped)
    assert r.status_code == 409 and "fresh budget" in r.json()["detail"], r.text
    assert empty_client.get("/v1/tables/escaped").status_code == 404
    same = unit_spec("again", {"csv": str(path)}, 2)  # the same file in its own space: shares the spent budget
    assert _register(empty_client, same).json()["budget"]["epsilon_remaining"] == 0
    r = _register(empty_client, escaped, "?new_population=true")  # acknowledged: allowed, and logged
    assert r.status_code == 201 and r.json()["budget"]["id_space"] == "persons"
    spaces = {s["shown_as"]: s for s in empty_client.get("/v1/admin/spaces", headers=ADMIN).json()["spaces"]}
    assert (
        spaces["persons"]["sources"]
        == spaces[empty_client.get("/v1/tables/plain").json()["budget"]["id_space"]]["sources"]
    )


def test_a_retired_tables_ledger_and_an_id_spaces_ledger_stay_readable(
    empty_client: TestClient, tmp_path: Path
) -> None:
    assert _register(empty_client, _plain_spec("gone", write_table(tmp_path / "t.csv", None))).status_code == 201
    assert empty_client.post("/v1/admin/tables/gone/cube", headers=ADMIN).status_code == 201
    space = empty_client.get("/v1/tables/gone/budget").json()["id_space"]
    assert empty_client.delete("/v1/admin/tables/gone", headers=ADMIN).status_code == 200
    entries = empty_client.get("/v1/admin/tables/gone/ledger", headers=ADMIN).json()["entries"]
    assert entries and sum(e["epsilon"] for e in entries) == pytest.approx(1.0)
    in_space = empty_client.get(f"/v1/admin/spaces/{space}/ledger", headers=ADMIN).json()["entries"]
    assert [e["id"] for e in in_space] == [e["id"] for e in entries] and {e["table"] for e in in_space} == {"gone"}
    assert empty_client.get("/v1/admin/tables/never/ledger", headers=ADMIN).status_code == 404
    assert empty_client.get("/v1/admin/spaces/nowhere/ledger", headers=ADMIN).status_code == 404
    assert empty_client.get(f"/v1/admin/spaces/{space}/ledger").status_code == 401  # admin only


# -- categories --------------------------------------------------------------------------------------
def test_ten_thousand_public_codes_register_and_build_in_seconds(empty_client: TestClient, tmp_path: Path) -> None:
    codes = [f"C{i:05d}" for i in range(10_000)]
    path = tmp_path / "codes.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["code", "amount"])
        w.writerows([codes[(i * 7919) % 10_000], i % 50] for i in range(50_000))
    spec = {
        "name": "codes",
        "source": {"csv": str(path)},
        "epsilon": 1.0,
        "dimensions": [{"name": "code", "type": "category", "values": codes}],
        "measures": [{"name": "amount", "lo": 0, "hi": 100}],
        "cube": {"strategy": "identity"},
    }
    start = time.perf_counter()
    r = _register(empty_client, spec)
    assert r.status_code == 201 and r.json()["preflight"]["rows_in_every_domain"] == 50_000, r.text[:300]
    assert empty_client.post("/v1/admin/tables/codes/cube", headers=ADMIN).status_code == 201
    took = time.perf_counter() - start
    assert took <= 10, took
    answer = empty_client.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM codes WHERE code = 'C00042'"}).json()
    assert abs(answer["rows"][0][0] - 5) < 8 * answer["stddev"][0][0]


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


def _adult_spec(path: Path, sex_values: list[str]) -> dict:
    return {
        "name": "adult",
        "source": {
            "csv": str(path),
            "header": False,
            "delimiter": ",",
            "columns": ADULT_COLUMNS,
        },
        "epsilon": 1.0,
        "dimensions": [
            {"name": "age", "type": "int", "lo": 0, "hi": 120},
            {"name": "sex", "type": "category", "values": sex_values},
        ],
        "measures": [{"name": "hours_per_week", "lo": 0, "hi": 168}],
    }


def test_comma_space_csv_values_are_trimmed_and_the_preflight_reports_the_fit(tmp_path: Path) -> None:
    """adult.data separates fields by ", ": categories used to load as " Male" and match nothing."""
    prima = Prima(tmp_path / "data", seed=1)
    info = prima.register(TableSpec.model_validate(_adult_spec(dataset("adult.data"), ["Female", "Male"])))
    pre = info["preflight"]
    assert pre["rows"] == 32_561 and pre["outside_domain"]["sex"] == 0 and pre["warnings"] == []
    assert "nullable" in pre["suggestions"][0]  # no NULL hours: "nullable": false would save COUNT(hours)'s ε
    assert prima.budget("adult")["epsilon_spent"] == 0  # nothing spent to learn this
    assert "preflight" not in prima.table_info("adult")  # analysts never see it
    prima.retire("adult")
    with pytest.raises(Invalid) as refused:  # nothing usable: refused, with the preflight that says why
        prima.register(TableSpec.model_validate(_adult_spec(dataset("adult.data"), ["female", "male"])))
    bad = refused.value.extra["preflight"]
    assert bad["outside_domain"]["sex"] == 32_561 and bad["rows_in_every_domain"] == 0
    assert bad["warnings"][0].startswith("no row falls inside every declared domain")
    assert "adult" not in prima.table_names()
    prima.close()


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


@pytest.mark.parametrize("axis", [None, {"kind": "log2"}])
def test_a_noisy_sum_warning_advises_an_axis_only_where_none_is_declared(
    tmp_path: Path, sales_csv: Path, axis: dict | None
) -> None:
    raw = sales_spec(sales_csv) | {"expected_rows": 100}
    raw["measures"] = [{"name": "amount", "lo": 0, "hi": 1_000_000, "typical": 1} | ({"axis": axis} if axis else {})]
    prima = Prima(tmp_path / "data")
    warnings = prima.register(TableSpec.model_validate(raw), dry_run=True)["preview"]["warnings"]
    prima.close()
    said = [w for w in warnings if w.startswith("SUM(amount)")]
    assert said and ("measures[].axis" in said[0]) == (axis is None), said


def _settings(prima: Prima) -> list[tuple]:
    return prima.db.run("SELECT current_setting('memory_limit'), current_setting('preserve_insertion_order')")


@pytest.mark.parametrize("copy_memory", ["128MB", "1MB"], ids=["streamed", "too wide to stream: copied unlimited"])
def test_a_source_copy_streams_in_bounded_memory_and_keeps_every_row(
    tmp_path: Path, copy_memory: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The copy of a source file runs under `storage.database.STREAM_MEMORY` without insertion order
    (registering bench/scale.py's Parquet: +127 MB of peak RSS at 10⁷ rows and +163 MB at 10⁸, where DuckDB's
    defaults grew +195 MB and +1,355 MB); the server's settings are back after it. Where rows are too
    wide for that memory (Bank's CSV under 1 MB: DuckDB's OutOfMemory), the copy runs again
    without the limit, and every row is there either way."""
    import duckdb

    from storage import database

    monkeypatch.setattr(database, "STREAM_MEMORY", copy_memory)
    raw = {
        "name": "bank",
        "source": {"csv": str(dataset("bank-full.csv")), "delimiter": ";"},
        "dimensions": [{"name": "age", "type": "int", "lo": 0, "hi": 119, "bin": 10}],
        "measures": [{"name": "balance", "lo": -10_000, "hi": 100_000}],
        "epsilon": 1.0,
    }
    prima = Prima(tmp_path / "data")
    try:
        before = _settings(prima)
        prima.register(TableSpec.model_validate(raw))
        assert _settings(prima) == before
        got = prima.db.run("SELECT count(*), sum(balance) FROM src.bank")
    finally:
        prima.close()
    want = duckdb.sql(f"SELECT count(*), sum(balance) FROM read_csv('{dataset('bank-full.csv')}', delim = ';')")
    assert got == want.fetchall()
    assert ("again without the limit" in caplog.text) == (copy_memory == "1MB")
