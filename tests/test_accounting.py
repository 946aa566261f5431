"""The ledger in two currencies and the zCDP mode through the service: real DuckDB
files, real builds, the ledger read back."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import duckdb
import numpy as np
import pytest

from engine.errors import Conflict, Invalid
from engine.service import Prima
from privacy.accounting.zcdp import rho_for
from storage import ledger
from storage.schema import TableSpec
from tests.conftest import sales_spec, write_sales_csv


def rho_spec(csv: Path, **budget: float) -> dict:
    spec = sales_spec(csv)
    del spec["epsilon"]
    return spec | budget


def test_a_rho_table_is_measured_with_gaussian_noise_and_charged_in_rho(tmp_path: Path) -> None:
    prima = Prima(tmp_path / "data", seed=4)
    csv = write_sales_csv(tmp_path / "sales.csv")
    out = prima.register(TableSpec.model_validate(rho_spec(csv, rho=0.05)))
    assert out["preview"]["privacy"] | {"build_as_epsilon_delta": None} == {
        "currency": "rho",
        "build": 0.05,
        "build_rho": pytest.approx(0.05),
        "noise": "discrete Gaussian",
        "build_as_epsilon_delta": None,
    }
    answer = prima.query("SELECT COUNT(*) FROM sales")
    assert answer["cube"]["currency"] == "rho" and answer["cube"]["rho"] == 0.05 and answer["cube"]["epsilon"] is None
    entries = prima.ledger_entries("sales")
    assert sum(e["rho"] for e in entries) == pytest.approx(0.05)
    assert all(e["epsilon"] is None for e in entries)  # Gaussian releases have no pure ε
    budget = prima.budget("sales")
    assert budget["currency"] == "rho" and budget["rho_total"] == 0.05 and budget["remaining"] == pytest.approx(0)
    assert budget["as_epsilon_delta"]["delta"] == 1e-9 and budget["as_epsilon_delta"]["epsilon_total"] > 1
    with pytest.raises(Conflict, match="exhausted"):
        prima.build("sales", force=True)
    with pytest.raises(Invalid, match="rho"):
        prima.set_budget("sales", epsilon=1.0)
    assert prima.set_budget("sales", rho=0.08)["remaining"] == pytest.approx(0.03)
    prima.close()


def test_an_epsilon_delta_budget_is_kept_as_its_rho(tmp_path: Path) -> None:
    prima = Prima(tmp_path / "data", seed=5)
    csv = write_sales_csv(tmp_path / "sales.csv")
    prima.register(TableSpec.model_validate(rho_spec(csv, epsilon=1.0, delta=1e-9)))
    budget = prima.budget("sales")
    assert budget["currency"] == "rho" and budget["total"] == pytest.approx(rho_for(1.0, 1e-9))
    assert budget["delta"] == 1e-9 and budget["as_epsilon_delta"]["epsilon_total"] == pytest.approx(1.0, rel=1e-3)
    prima.close()


def test_a_pure_epsilon_build_records_its_tight_rho(tmp_path: Path) -> None:
    """Each entry's ρ is its Laplace releases' tight zCDP: below ε²/2, and far below it for a
    strategy that splits its share into many releases."""
    prima = Prima(tmp_path / "data", seed=6)
    csv = write_sales_csv(tmp_path / "sales.csv")
    spec = sales_spec(csv) | {"cube": {"build": "on_first_query", "strategy": "cuboids"}}
    prima.register(TableSpec.model_validate(spec))
    prima.query("SELECT COUNT(*) FROM sales")
    entries = prima.ledger_entries("sales")
    assert sum(e["epsilon"] for e in entries) == pytest.approx(1.0)
    for e in entries:
        assert e["rho"] < e["epsilon"] ** 2 / 2 / 5  # 10 cuboids per aggregate: ρ ≈ ε²/(2·10)·(skew)
    budget = prima.budget("sales")
    assert budget["currency"] == "epsilon" and budget["rho_spent"] == pytest.approx(sum(e["rho"] for e in entries))
    prima.close()


def test_a_space_keeps_one_currency(tmp_path: Path) -> None:
    prima = Prima(tmp_path / "data")
    csv = write_sales_csv(tmp_path / "sales.csv")
    prima.register(TableSpec.model_validate(rho_spec(csv, rho=0.1)))
    with pytest.raises(Invalid, match="budgeted in rho"):  # the same file: the same population
        prima.register(TableSpec.model_validate(sales_spec(csv, name="again")))
    prima.close()


def test_concurrent_rho_charges_never_overspend(tmp_path: Path) -> None:
    prima = Prima(tmp_path / "data")
    csv = write_sales_csv(tmp_path / "sales.csv")
    prima.register(TableSpec.model_validate(rho_spec(csv, rho=0.5)))
    won: list[str] = []

    def attempt(i: int) -> None:
        try:
            ledger.charge(prima.db, "sales", f"b{i}", [ledger.Charge(None, f"try {i}", 0.15)])
            won.append(f"b{i}")
        except ledger.BudgetExceeded:
            pass

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 3 and prima.budget("sales")["spent"] == pytest.approx(0.45)
    prima.close()


def test_gaussian_bars_cover_at_the_normal_quantile(tmp_path: Path) -> None:
    """Over seeded ρ builds, COUNT answers' errors are normal with the stated stddev: ±1.96σ holds
    about 95 % (a Laplace-shaped multiplier would hold more, a wrong σ much less or more)."""
    csv = write_sales_csv(tmp_path / "sales.csv")
    truth = duckdb.sql(
        f"SELECT region, COUNT(*) FROM read_csv('{csv}') WHERE region IS NOT NULL GROUP BY region ORDER BY region"
    ).fetchall()
    expected = dict(truth)
    z, inside = [], 0
    for seed in range(24):
        prima = Prima(tmp_path / f"data{seed}", seed=100 + seed)
        spec = rho_spec(csv, rho=1.0) | {"cube": {"build": "on_first_query", "strategy": "identity"}}
        prima.register(TableSpec.model_validate(spec))
        answer = prima.query("SELECT region, COUNT(*) AS n FROM sales GROUP BY region")
        for row, sd, ci in zip(answer["rows"], answer["stddev"], answer["ci95"]):
            if row[0] not in expected:
                continue
            z.append((row[1] - expected[row[0]]) / sd[1])
            inside += ci[1][0] <= expected[row[0]] <= ci[1][1]
            assert ci[1][1] - row[1] == pytest.approx(1.959964 * sd[1], rel=1e-6)  # the normal quantile
        prima.close()
    z_arr = np.asarray(z)
    assert 0.8 < z_arr.std() < 1.2 and abs(z_arr.mean()) < 0.3
    assert 0.88 <= inside / len(z) <= 0.99
    assert math.isfinite(z_arr.sum())


def test_a_sum_whose_bound_the_data_chooses_is_charged_the_generic_rho(tmp_path: Path) -> None:
    """Data-driven clipping picks the SUM's Δ after the charge: its entry gets ε²/2 (valid whatever
    Δ turns out to be), the COUNT's its tight ρ, the histogram's ε²/2."""
    prima = Prima(tmp_path / "data", seed=8)
    csv = write_sales_csv(tmp_path / "sales.csv")
    spec = sales_spec(csv)
    spec["measures"] = [{"name": "amount", "lo": -100, "hi": 1000, "clipping": "clasp"}]
    prima.register(TableSpec.model_validate(spec))
    prima.query("SELECT SUM(amount) FROM sales")
    by_purpose = {e["purpose"]: e for e in prima.ledger_entries("sales")}
    total = sum(e["epsilon"] for e in by_purpose.values())
    assert total == pytest.approx(1.0)
    for purpose, e in by_purpose.items():
        generic = e["epsilon"] ** 2 / 2
        if "COUNT(*)" in purpose:
            assert e["rho"] < generic
        elif "SUM(amount)" in purpose or "histogram" in purpose:
            assert e["rho"] == pytest.approx(generic)
    prima.close()


def test_an_epsilon_delta_table_is_topped_up_in_epsilon_delta(tmp_path: Path, sales_csv: Path) -> None:
    """A table declared as (ε, δ) is kept in ρ; raising its total takes (ε, δ) too (REST `{"epsilon", "delta"}`,
    CLI `--delta`), converted the same way, while a pure-ε table refuses a δ."""
    from typer.testing import CliRunner

    from app.cli import cli
    from privacy.accounting.zcdp import rho_for

    prima = Prima(tmp_path / "data")
    raw = sales_spec(sales_csv) | {"epsilon": 1.0, "delta": 1e-9}
    prima.register(TableSpec.model_validate(raw))
    assert prima.budget("sales")["total"] == pytest.approx(rho_for(1.0, 1e-9))
    assert prima.set_budget("sales", epsilon=2.0, delta=1e-9)["total"] == pytest.approx(rho_for(2.0, 1e-9))
    with pytest.raises(Invalid):
        prima.set_budget("sales", rho=0.5, delta=1e-9)  # δ goes with ε
    prima.close()
    shown = CliRunner().invoke(
        cli, ["budget", "set", "sales", "3", "--delta", "1e-9", "--data-dir", str(tmp_path / "data")]
    )
    assert shown.exit_code == 0, shown.output
    prima = Prima(tmp_path / "data")
    assert prima.budget("sales")["total"] == pytest.approx(rho_for(3.0, 1e-9))
    other = write_sales_csv(tmp_path / "other.csv", seed=8)  # another source: its own (pure ε) budget
    prima.register(TableSpec.model_validate(sales_spec(other, name="plain") | {"epsilon": 1.0}))
    with pytest.raises(Invalid):
        prima.set_budget("plain", epsilon=2.0, delta=1e-9)
    prima.close()
