"""Cube builds: charged once, charged before release, failures keep their spend, noise at its scale."""

from __future__ import annotations

import concurrent.futures
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fastapi.testclient import TestClient

from engine.errors import Conflict, Unavailable
from engine.service import Prima
from privacy.accounting import split as budget
from privacy.strategies.pairwise import REPLICATES
from storage import ledger
from storage.schema import TableSpec
from tests.conftest import admin_headers, sales_spec

SQL = "SELECT SUM(amount), COUNT(*) FROM sales WHERE age BETWEEN 20 AND 60"


def test_concurrent_first_queries_build_once(sales: Prima) -> None:
    """One query builds; those arriving meanwhile are told so at once (503) and, retried, agree."""

    def ask(_: int) -> Any:
        for _ in range(2000):
            try:
                return sales.query(SQL)["rows"]
            except Unavailable as exc:
                assert exc.retry_after and "being built" in exc.detail
                time.sleep(0.01)
        raise AssertionError("the build never finished")

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, range(48)))
    assert all(a == answers[0] for a in answers)
    entries = ledger.entries(sales.db, "sales")
    assert len({e.build_id for e in entries}) == 1
    assert [e.status for e in entries] == ["done"] * 3
    assert ledger.spent(sales.db, "sales") == pytest.approx(1.0)


def test_ledger_charge_never_exceeds_total(sales: Prima) -> None:
    ledger.charge(sales.db, "sales", "b1", [ledger.Charge(0.6, "first")])
    with pytest.raises(ledger.BudgetExceeded):
        ledger.charge(sales.db, "sales", "b2", [ledger.Charge(0.3, "a"), ledger.Charge(0.2, "b")])
    assert ledger.spent(sales.db, "sales") == pytest.approx(0.6)  # the refused pair left no trace
    ledger.charge(sales.db, "sales", "b3", [ledger.Charge(0.4, "rest")])
    assert ledger.spent(sales.db, "sales") == pytest.approx(1.0)


def test_concurrent_charges_cannot_overspend(sales: Prima) -> None:
    def attempt(i: int) -> bool:
        try:
            ledger.charge(sales.db, "sales", f"b{i}", [ledger.Charge(0.15, f"try {i}")])
            return True
        except ledger.BudgetExceeded:
            return False

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        granted = sum(pool.map(attempt, range(64)))
    assert granted == 6  # floor(1.0 / 0.15)
    assert ledger.spent(sales.db, "sales") == pytest.approx(0.9)


def test_failed_build_keeps_its_spend_and_needs_an_explicit_rebuild(sales: Prima) -> None:
    # A file where the cube directory must go makes persistence fail after the charge.
    blocker = sales.cube_root / "sales"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a directory")
    with pytest.raises(OSError):
        sales.query(SQL)
    entries = ledger.entries(sales.db, "sales")
    assert [e.status for e in entries] == ["failed"] * 3
    assert ledger.spent(sales.db, "sales") == pytest.approx(1.0)
    assert sales.cube_status("sales")["status"] == "failed"
    with pytest.raises(Conflict, match="rebuild explicitly"):
        sales.query(SQL)
    blocker.unlink()
    sales.set_budget("sales", 2.0)
    status, built = sales.build("sales", force=True)
    assert built and status["status"] == "ready" and status["epsilon"] == pytest.approx(1.0)
    assert ledger.spent(sales.db, "sales") == pytest.approx(2.0)
    assert sales.query(SQL)["rows"][0][1] is not None


def test_restart_after_a_crash_between_charge_and_store(tmp_path: Path, sales_csv: Path) -> None:
    service = Prima(tmp_path / "data")
    service.register(TableSpec.model_validate(sales_spec(sales_csv)))
    # What a process killed right after charging leaves behind: committed entries, no cube,
    # and possibly a half-written cube directory.
    ledger.charge(service.db, "sales", "crashed", [ledger.Charge(0.5, "cube measurement")])
    half = service.cube_root / "sales" / ".tmp-crashed"
    half.mkdir(parents=True)
    (half / "0.npy").write_bytes(b"partial")
    service.close()
    restarted = Prima(tmp_path / "data")
    try:
        assert [e.status for e in ledger.entries(restarted.db, "sales")] == ["failed"]
        assert ledger.spent(restarted.db, "sales") == pytest.approx(0.5)
        assert not half.exists()
        assert restarted.cube_status("sales")["status"] == "failed"
        with pytest.raises(Conflict):
            restarted.query(SQL)
    finally:
        restarted.close()


def test_built_cells_carry_noise_at_the_stated_scale(prima: Prima, sales_csv: Path) -> None:
    """Privacy rule 5 at the service level: noisy base cells minus true cells ~ Laplace(Δ/ε)."""
    sales = prima
    sales.register(
        TableSpec.model_validate(sales_spec(sales_csv) | {"cube": {"build": "on_first_query", "strategy": "identity"}})
    )
    sales.build("sales")
    cube = sales.cube_for_query("sales")
    exact = sales.exact_cube("sales")
    for key, sensitivity, epsilon in (
        ("count", 1.0, 0.2),
        ("sum:amount", 1000.0, 0.7),  # the default split
        ("present:amount", 1.0, 0.1),
    ):
        noisy = _cells(np.asarray(cube.prefix[key]))
        true = _cells(exact.prefix[key])
        noise = (noisy - true).ravel()
        b = sensitivity / epsilon
        assert noise.size == 76 * 6 * 27 * 8  # declared cells and each axis's outside cells
        assert abs(noise.mean()) < 5 * math.sqrt(2) * b / math.sqrt(noise.size)
        assert np.std(noise) == pytest.approx(math.sqrt(2) * b, rel=0.03)
        label = {"count": "COUNT(*)", "sum:amount": "SUM(amount)", "present:amount": "COUNT(amount)"}[key]
        assert cube.meta["aggregates"][label]["noise_scale"] == pytest.approx(b, rel=1e-3)


def _cells(prefix: np.ndarray) -> np.ndarray:
    cells = prefix
    for axis in range(prefix.ndim):
        cells = np.diff(cells, axis=axis)
    return cells


def test_pairwise_cube_and_its_bootstrap_bars_survive_a_restart(tmp_path: Path, sales_csv: Path) -> None:
    """``pairwise`` persists its bootstrap replicates beside the cube; a restarted service
    answers with the same values and the same error bars (3-axis bars from the replicates)."""
    sqls = [
        "SELECT COUNT(*) FROM sales WHERE age BETWEEN 20 AND 60 AND region IN ('north', 'east') AND score < 15",
        "SELECT COUNT(*) FROM sales WHERE age BETWEEN 20 AND 60",
        "SELECT region, COUNT(*), SUM(amount) FROM sales WHERE age > 30 AND score < 10 GROUP BY region",
        "SELECT region, COUNT(*) FROM sales WHERE age > 30 GROUP BY region",
    ]
    first = Prima(tmp_path / "data", seed=7)
    first.register(
        TableSpec.model_validate(sales_spec(sales_csv) | {"cube": {"build": "on_first_query", "strategy": "pairwise"}})
    )
    before = [first.query(sql) for sql in sqls]
    status = first.cube_status("sales")
    first.close()
    assert status["strategy"] == "pairwise"
    assert status["aggregates"]["COUNT(*)"]["pairwise"]["bootstrap_replicates"] == REPLICATES
    assert "signed clip range" in status["aggregates"]["SUM(amount)"]["pairwise"]  # amount's lo < 0
    measured = status["aggregates"]["SUM(amount)"]["marginals"]["measured"]  # the fallback says what it measured
    assert measured[0] == ["age", "region", "day", "score"] and all(set(c) <= set(measured[0]) for c in measured)
    assert status["aggregates"]["COUNT(*)"]["pairwise"]["marginals"][0] == ["age", "region"]
    assert (
        len(list((tmp_path / "data" / "cubes" / "sales").glob("*/*.npy"))) == 5
    )  # 3 prefix cubes + 2 pairwise replicates
    again = Prima(tmp_path / "data", seed=7)
    after = [again.query(sql) for sql in sqls]
    again.close()
    for b, a in zip(before, after):
        assert (a["rows"], a["stddev"]) == (b["rows"], b["stddev"])
    assert all(sd > 0 for row in before[2]["stddev"] for sd in row[1:])
    # The note on bootstrapped bars is only where they are: 3 constrained axes (a grouped one counts).
    assert [any("bootstrap estimate" in note for note in b["notes"]) for b in before] == [True, False, True, False]


def test_default_split_gives_count_a_fifth_and_the_sums_equal_parts_of_the_rest() -> None:
    """The default COUNT/SUM split (bench/results/weights.md), and explicit weights overriding it."""
    keys = ["count", "sum:a", "sum:b", "sum:c"]
    shares = budget.split(1.0, keys, budget.default_weights(keys, "count"))
    assert shares["count"] == pytest.approx(0.2)
    assert [shares[k] for k in keys[1:]] == pytest.approx([0.8 / 3] * 3)
    assert sum(shares.values()) == 1.0  # exactly: the remainder sits on the last share
    assert budget.split(0.5, keys[:2], budget.default_weights(keys[:2], "count")) == pytest.approx(
        {"count": 0.1, "sum:a": 0.4}
    )
    assert budget.default_weights(["count"], "count") == {}  # a COUNT-only cube spends all on COUNT
    assert budget.split(1.0, keys[:2], {"count": 1.0, "sum:a": 3.0}) == pytest.approx({"count": 0.25, "sum:a": 0.75})


def test_hierarchical_cube_on_a_daily_axis_answers_within_its_bars_and_survives_a_restart(
    tmp_path: Path, sales_csv: Path
) -> None:
    """731 days is long enough for a tree; the other axes stay identity. Answers sit within their
    exact bars, the branching is in the cube's status, and a restart rebuilds the error model."""
    spec = sales_spec(sales_csv) | {"cube": {"build": "on_first_query", "strategy": "hierarchical"}}
    spec["dimensions"][2] = {**spec["dimensions"][2], "granularity": "day"}
    sqls = [
        "SELECT SUM(amount), COUNT(*) FROM sales WHERE day BETWEEN '2020-03-01' AND '2021-06-30'",
        "SELECT COUNT(*) FROM sales WHERE day >= '2021-01-01' AND region = 'north' AND age < 40",
        "SELECT region, COUNT(*) FROM sales WHERE day < '2020-07-01' GROUP BY region",
    ]
    first = Prima(tmp_path / "data", seed=11)
    first.register(TableSpec.model_validate(spec))
    before = [first.query(sql) for sql in sqls]
    status, exact = first.cube_status("sales"), first.exact_cube("sales")
    first.close()
    tree = status["aggregates"]["COUNT(*)"]["hierarchical"]
    assert tree["branching"][0] is None and tree["branching"][2] is not None and tree["levels"][2] > 1
    again = Prima(tmp_path / "data", seed=11)
    after = [again.query(sql) for sql in sqls]
    repeat = [again.query(sql) for sql in sqls]  # same cube: answers are repeatable
    again.close()
    for b, a, t in zip(before, after, repeat):
        assert (a["rows"], a["stddev"]) == (b["rows"], b["stddev"]) == (t["rows"], t["stddev"])
    count = exact.prefix["count"]  # zero-padded prefix sums: days 60 (2020-03-01) to 546 (2021-06-30)
    assert before[0]["rows"][0][1] == pytest.approx(
        count[-1, -1, 547, -1] - count[-1, -1, 60, -1], abs=5 * before[0]["stddev"][0][1]
    )


def test_a_new_strategy_plugs_in_with_one_registry_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One pipeline: a strategy states what it reads, what serves its release and how it is
    charged, so one registry line (here a monkeypatched entry) is all the engine needs — the build reads,
    charges (under the strategy's own ledger purpose), persists, reloads after a restart and answers,
    and nothing in `engine/` names it."""
    from privacy import strategies
    from privacy.accounting.currencies import mechanism as release_for
    from privacy.estimation.error import UniformCellError
    from privacy.strategies.base import Measurement, MeasurementStrategy
    from tests.conftest import sales_spec, write_sales_csv

    class Halved(MeasurementStrategy):  # Laplace per cell, like identity, under another name
        name = "halved"

        def ledger_parts(self, what: str, epsilon: float) -> list[tuple[float, str]]:
            return [(epsilon, f"halved noise: {what}")]

        def measure(self, true, sensitivity, epsilon, source, *, nonnegative=False, coordinates=1):  # type: ignore[override]
            mechanism = release_for(sensitivity, epsilon, coordinates)  # Laplace under ε, Gaussian under ρ
            return Measurement(
                mechanism.release(true, source),
                UniformCellError(mechanism.variance),
                epsilon,
                sensitivity,
                mechanism.scale,
            )

    monkeypatch.setitem(strategies.STRATEGIES, Halved.name, Halved)
    csv = write_sales_csv(tmp_path / "sales.csv")
    spec = sales_spec(csv)
    spec["cube"] = {"build": "on_first_query", "strategy": "halved"}
    prima = Prima(tmp_path / "data", seed=3)
    prima.register(TableSpec.model_validate(spec))
    first = prima.query("SELECT region, COUNT(*) FROM sales GROUP BY region")
    assert [e["purpose"] for e in prima.ledger_entries("sales")][0].startswith("halved noise: ")
    prima.close()
    again = Prima(tmp_path / "data")
    assert again.query("SELECT region, COUNT(*) FROM sales GROUP BY region")["rows"] == first["rows"]
    assert again.cube_status("sales")["strategy"] == "halved"
    again.close()


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
