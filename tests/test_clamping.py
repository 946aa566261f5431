"""Clamping: COUNTs and AVGs come back inside their possible range by default, with notes, and the
raw (unclamped, additive) values on request, over REST too."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from engine.answers.options import AnswerOptions
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
    raw = prima.query(SPARSE_GROUPS, AnswerOptions(clamp=False))
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
