"""Property-based fuzzing of every endpoint from its request schema: no input yields a 5xx.

An equivalent of a schemathesis run without its dependency tree: hypothesis draws bodies that are
random JSON, or valid bodies with fields replaced by random JSON, for every route in the OpenAPI
description, with and without the admin token. At least 5,000 requests, derandomized.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.config import Settings
from app.http.app import create_app
from tests.conftest import ADMIN_TOKEN, admin_headers, sales_spec, write_sales_csv

pytestmark = pytest.mark.slow  # `-m "not slow"` skips it while developing; CI runs it

COUNTER = {"requests": 0, "5xx": 0}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("fuzzapi")
    csv_path = write_sales_csv(Path(tmp) / "sales.csv", rows=500)
    settings_ = Settings(data_dir=tmp / "data", admin_token=ADMIN_TOKEN, import_dir=tmp, demo=True)
    with TestClient(create_app(settings_), raise_server_exceptions=False) as client:
        yield client, sales_spec(csv_path, name="seed")
    print(f"\nAPI fuzz: {COUNTER['requests']} requests, {COUNTER['5xx']} responses with status >= 500")
    assert COUNTER["requests"] >= 5000


def _send(client: TestClient, method: str, path: str, body: Any, admin: bool) -> None:
    headers = admin_headers() if admin else {}
    if body is _NO_BODY:
        r = client.request(method, path, headers=headers)
    else:
        r = client.request(method, path, content=json.dumps(body, allow_nan=True), headers=headers)
    COUNTER["requests"] += 1
    if r.status_code >= 500:
        COUNTER["5xx"] += 1
    assert r.status_code < 500, (method, path, body, r.text)


_NO_BODY = object()


def _mutated(valid: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    keys = sorted(valid)
    return st.dictionaries(st.sampled_from(keys), json_values, max_size=len(keys)).map(lambda patch: {**valid, **patch})


table_names = st.sampled_from(["people", "seed", "nope"]) | st.text(max_size=20).map(
    lambda t: urllib.parse.quote(t, safe="") or "x"
)
FUZZ = settings(
    max_examples=700,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(body=json_values | _mutated({"sql": "SELECT COUNT(*) FROM people"}), admin=st.booleans())
def test_query(world: tuple[TestClient, dict], body: Any, admin: bool) -> None:
    _send(world[0], "POST", "/v1/query", body, admin)


@FUZZ
@given(body=json_values | _mutated({"queries": ["SELECT COUNT(*) FROM people", "x"]}), admin=st.booleans())
def test_batch(world: tuple[TestClient, dict], body: Any, admin: bool) -> None:
    _send(world[0], "POST", "/v1/query/batch", body, admin)


@settings(
    max_examples=1000,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), admin=st.booleans())
def test_register(world: tuple[TestClient, dict], data: st.DataObject, admin: bool) -> None:
    valid = world[1]
    nested = st.fixed_dictionaries(
        {
            "dimensions": st.lists(_mutated(valid["dimensions"][0]) | _mutated(valid["dimensions"][2]), max_size=3),
            "measures": st.lists(_mutated(valid["measures"][0]), max_size=2),
            "source": _mutated(valid["source"]) | _mutated({"duckdb_table": "people"}),
            "cube": _mutated({"strategy": "identity", "weights": {"count": 1}, "epsilon": 0.5}),
        }
    )
    body = data.draw(json_values | _mutated(valid) | nested.map(lambda n: {**valid, **n, "name": "fz"}))
    _send(world[0], "POST", "/v1/admin/tables", body, admin)


@FUZZ
@given(table=table_names, body=json_values | _mutated({"epsilon": 2.0}), admin=st.booleans())
def test_budget(world: tuple[TestClient, dict], table: str, body: Any, admin: bool) -> None:
    _send(world[0], "PUT", f"/v1/admin/tables/{table}/budget", body, admin)


@FUZZ
@given(table=table_names, body=st.just(_NO_BODY) | json_values | _mutated({"force": False}), admin=st.booleans())
def test_build(world: tuple[TestClient, dict], table: str, body: Any, admin: bool) -> None:
    _send(world[0], "POST", f"/v1/admin/tables/{table}/cube", body, admin)


@FUZZ
@given(
    table=table_names,
    suffix=st.sampled_from(["", "/budget", "/cube", "/ledger", "/nonsense"]),
    prefix=st.sampled_from(["/v1/tables/", "/v1/admin/tables/"]),
    admin=st.booleans(),
)
def test_reads(world: tuple[TestClient, dict], table: str, suffix: str, prefix: str, admin: bool) -> None:
    _send(world[0], "GET", prefix + table + suffix, _NO_BODY, admin)


@settings(
    max_examples=1000,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH"]),
    path=st.sampled_from(["/v1/query", "/v1/query/batch", "/v1/tables", "/v1/admin/tables", "/healthz", "/"]),
    raw=st.binary(max_size=200),
    admin=st.booleans(),
)
def test_raw_bytes_and_wrong_methods(
    world: tuple[TestClient, dict], method: str, path: str, raw: bytes, admin: bool
) -> None:
    r = world[0].request(method, path, content=raw, headers=admin_headers() if admin else {})
    COUNTER["requests"] += 1
    assert r.status_code < 500, (method, path, raw, r.text)
