"""Interfaces for BI tools and operators: CSV/Arrow answers, /metrics, background builds."""

from __future__ import annotations

import io
import time

import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import admin_headers

GROUPED = "SELECT education, region, COUNT(*) AS n, AVG(salary) FROM people WHERE age >= 30 GROUP BY education, region"


@pytest.mark.parametrize("sql", [GROUPED, "SELECT SUM(salary), COUNT(*) FROM people WHERE age BETWEEN 30 AND 40"])
def test_csv_and_arrow_carry_the_json_numbers(client: TestClient, sql: str) -> None:
    as_json = client.post("/v1/query", json={"sql": sql}).json()
    csv_r = client.post("/v1/query", json={"sql": sql}, headers={"Accept": "text/csv"})
    arrow_r = client.post("/v1/query", json={"sql": sql}, headers={"Accept": "application/vnd.apache.arrow.stream"})
    assert csv_r.headers["content-type"].startswith("text/csv")
    assert arrow_r.headers["content-type"] == "application/vnd.apache.arrow.stream"
    from_csv = pacsv.read_csv(
        io.BytesIO(csv_r.content),  # an empty field is the NULL group's key
        convert_options=pacsv.ConvertOptions(strings_can_be_null=True),
    ).to_pydict()
    from_arrow = pa.ipc.open_stream(arrow_r.content).read_all().to_pydict()
    for j, name in enumerate(as_json["columns"]):
        want = [row[j] for row in as_json["rows"]]
        assert from_arrow[name] == want and from_csv[name] == want
        if name not in as_json["group_columns"]:
            sds = [row[j] for row in as_json["stddev"]]
            assert from_arrow[f"{name}_stddev"] == sds
            assert _same(from_csv[f"{name}_stddev"], sds)
            for end, part in (("lo", 0), ("hi", 1)):  # the JSON's own interval, not value ± 1.96·sd
                ends = [None if row[j] is None else row[j][part] for row in as_json["ci95"]]
                assert from_arrow[f"{name}_ci95_{end}"] == ends
                assert _same(from_csv[f"{name}_ci95_{end}"], ends)


def _same(got: list, want: list) -> bool:
    """Equal as CSV carries floats (shortest repr), a withheld value (None) as an empty field."""
    return len(got) == len(want) and all(
        (a is None) == (b is None) and (a is None or a == pytest.approx(b, rel=1e-15)) for a, b in zip(got, want)
    )


def test_metrics_parse_and_count_the_queries(client: TestClient) -> None:
    for _ in range(7):
        assert client.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM people"}).status_code == 200
    for _ in range(3):
        assert client.post("/v1/query", json={"sql": "SELECT nonsense"}).status_code == 400
    client.post("/v1/query/batch", json={"queries": ["SELECT COUNT(*) FROM people"]})
    families = {f.name: f for f in text_string_to_metric_families(client.get("/metrics", headers=admin_headers()).text)}
    counts = {
        (s.labels["endpoint"], s.labels["status"]): s.value
        for s in families["prima_queries"].samples
        if s.name == "prima_queries_total"
    }
    assert counts[("query", "200")] == 7 and counts[("query", "400")] == 3 and counts[("batch", "200")] == 1
    latency = [s for s in families["prima_query_latency_seconds"].samples if s.name.endswith("_count")]
    assert sum(s.value for s in latency) == 11
    inf = {
        s.labels["endpoint"]: s.value
        for s in families["prima_query_latency_seconds"].samples
        if s.name.endswith("_bucket") and s.labels["le"] == "+Inf"
    }
    assert inf == {"query": 10, "batch": 1}
    builds = {s.labels["outcome"]: s.value for s in families["prima_cube_builds"].samples}
    assert builds["done"] == 1 and builds["failed"] == 0
    remaining = {s.labels["table"]: s.value for s in families["prima_budget_remaining_epsilon"].samples}
    assert remaining == {"people": 0.0}


def test_background_build_answers_202_and_reports_phases(client: TestClient) -> None:
    r = client.post("/v1/admin/tables/people/cube", json={"background": True}, headers=admin_headers())
    assert r.status_code == 202, r.text
    assert r.json()["status_url"] == "/v1/admin/tables/people/cube"
    seen = []
    for _ in range(200):
        status = client.get("/v1/admin/tables/people/cube", headers=admin_headers()).json()
        seen.append(status.get("phase"))
        if status["status"] != "building":
            break
        assert 0.0 <= status["fraction"] < 1.0
        time.sleep(0.02)
    assert status["status"] == "ready"
    again = client.post("/v1/admin/tables/people/cube", json={"background": True}, headers=admin_headers())
    assert again.status_code == 200 and again.json()["status"] == "ready"
    ledger = client.get("/v1/admin/tables/people/ledger", headers=admin_headers()).json()["entries"]
    assert len({e["build_id"] for e in ledger}) == 1


def test_openapi_documents_every_endpoint_with_errors_and_examples(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if path.startswith("/v1/"):
                assert any(code.startswith("4") for code in op["responses"]), (method, path)
                ok = next(r for code, r in op["responses"].items() if code.startswith("2"))
                assert "example" in ok["content"]["application/json"], (method, path)
    schemas = spec["components"]["schemas"]
    assert "examples" in schemas["TableSpec"] and "ErrorDetail" in schemas
    assert "example" in spec["paths"]["/v1/query"]["post"]["responses"]["200"]["content"]["application/json"]
    assert client.get("/docs").status_code == 200


def test_a_repeated_query_body_follows_a_rebuild(client: TestClient) -> None:
    """The fast path remembers answers by request bytes; a rebuilt cube must never be shadowed."""
    body = b'{"sql": "SELECT COUNT(*) FROM people WHERE age BETWEEN 30 AND 40"}'
    first = client.post("/v1/query", content=body).json()
    assert client.post("/v1/query", content=body).json() == first  # served from the remembered bytes
    assert (
        client.put("/v1/admin/tables/people/budget", json={"epsilon": 5.0}, headers=admin_headers()).status_code == 200
    )
    rebuilt = client.post("/v1/admin/tables/people/cube", json={"force": True}, headers=admin_headers())
    assert rebuilt.status_code == 201, rebuilt.text
    after = client.post("/v1/query", content=body).json()
    assert after["cube"]["build_id"] == rebuilt.json()["build_id"] != first["cube"]["build_id"]
    assert after["rows"] != first["rows"]  # fresh noise


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
    assert list(frame) == ["education", "a", "a_stddev", "a_ci95_lo", "a_ci95_hi", "a_noisy", "notes"] and len(
        frame["a"]
    ) == len(body["rows"])
    assert frame["notes"][0] == " | ".join(body["notes"])
    assert json.loads(as_csv.headers["X-Prima-Notes"]) == body["notes"]
    assert json.loads(as_csv.headers["X-Prima-Cube"])["strategy"] == "auto"
    arrow = client.post("/v1/query", json={"sql": sql}, headers={"Accept": "application/vnd.apache.arrow.stream"})
    table = pa.ipc.open_stream(arrow.content).read_all()
    meta = {k.decode(): v.decode() for k, v in table.schema.metadata.items()}
    assert json.loads(meta["prima.notes"]) == body["notes"]
    assert json.loads(meta["prima.cube"])["strategy"] == "auto" and meta["prima.table"] == "people"
