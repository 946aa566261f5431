"""Privacy units: at most k rows per unit, k-fold sensitivities, neighbours = whole units."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import numpy as np
import pytest

from engine.builds import axes, steps
from engine.service import Prima
from privacy.estimation.cuboid_fit import default_cuboids
from privacy.mechanisms.sampler import RandomSource
from privacy.strategies import get_strategy
from privacy.strategies.cuboids import CuboidsStrategy
from storage.catalog import with_salt
from storage.engines.duckdb_source import DuckDBEngine
from storage.schema import TableSpec

K = 3


class _Db:
    """The slice of `storage.database.Database` the DuckDB engine uses, over a bare connection."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def numpy(self, sql: str, params: dict) -> dict:
        return self.con.execute(sql, params).fetchnumpy()


def _spec(k: int = K) -> TableSpec:
    spec = TableSpec.model_validate(
        {
            "name": "ev",
            "source": {"duckdb_table": "ev"},
            "epsilon": 1.0,
            "dimensions": [
                {"name": "mon", "type": "int", "lo": 1, "hi": 12},
                {"name": "kind", "type": "category", "values": ["visit", "call", "mail"]},
                {"name": "site", "type": "int", "lo": 0, "hi": 4},
            ],
            "measures": [{"name": "amount", "lo": -50, "hi": 500, "axis": {"kind": "log2", "count": True}}],
            "privacy_unit": {"column": "pid", "max_rows": k},
        }
    )
    return with_salt(spec, "test-salt")


def _events(con: duckdb.DuckDBPyConnection, seed: int, persons: int = 60) -> None:
    """Persons with a heavy-tailed number of events (some far above k), a few outside the domains."""
    rng = np.random.default_rng(seed)  # test data, not noise
    counts = np.minimum(rng.zipf(1.7, persons), 40)
    pid = np.repeat(np.arange(persons), counts)
    n = len(pid)
    con.execute("DROP TABLE IF EXISTS ev")
    con.execute(
        "CREATE TABLE ev AS SELECT * FROM (SELECT unnest(?) AS pid, unnest(?) AS mon, unnest(?) AS kind, "
        "unnest(?) AS site, unnest(?) AS amount)",
        [
            pid.tolist(),
            rng.integers(0, 14, n).tolist(),
            rng.choice(["visit", "call", "mail"], n).tolist(),
            rng.integers(0, 5, n).tolist(),
            np.round(rng.normal(100, 200, n), 2).tolist(),
        ],
    )


def _aggregates(engine: DuckDBEngine, spec: TableSpec) -> dict[str, np.ndarray]:
    bounds = {"amount": (-50.0, 500.0)}
    classes = axes.measure_classes(spec)["amount"]
    out = engine.base_cuboids(spec, bounds)
    counts, sums = engine.class_cuboids(
        spec, bounds, "amount", list(classes.edges), classes.closed_above, classes.bounds.tolist()
    )
    out |= {"class counts": counts, "class sums": sums}
    for key, per in engine.marginal_cuboids(spec, bounds, default_cuboids(3)).items():
        out |= {f"{key} {c}": a for c, a in per.items()}
    return out


def test_truncation_keeps_at_most_k_rows_per_unit() -> None:
    con = duckdb.connect()
    _events(con, 1)
    engine = DuckDBEngine(_Db(con), "ev")
    kept = engine.base_cuboids(_spec(), {"amount": (-50.0, 500.0)})["count"].sum()
    per_unit = con.execute("SELECT COUNT(*) FROM ev GROUP BY pid").fetchall()  # out-of-domain rows count too
    assert kept == sum(min(n, K) for (n,) in per_unit) < sum(n for (n,) in per_unit)
    con.close()


def test_k_counts_only_in_domain_rows_when_outside_rows_are_excluded() -> None:
    """A unit with more than k rows of which at most k are in the domain keeps all its in-domain
    rows (heavy units are found from all their rows, then only in-domain rows are ranked)."""
    con = duckdb.connect()
    _events(con, 6)
    engine = DuckDBEngine(_Db(con), "ev")
    raw = _spec().model_dump(mode="json")
    raw["dimensions"][0] |= {"lo": 1, "hi": 6, "outside": "exclude"}  # months 7–13 and 0 leave the cube
    spec = with_salt(TableSpec.model_validate(raw), "test-salt")
    kept = engine.base_cuboids(spec, {"amount": (-50.0, 500.0)})["count"].sum()
    rows = con.execute(
        "SELECT pid, COUNT(*), COUNT(*) FILTER (WHERE mon BETWEEN 1 AND 6) FROM ev GROUP BY pid"
    ).fetchall()
    assert any(total > K >= inside > 0 for _, total, inside in rows)  # the case this test is about
    assert kept == sum(min(inside, K) for _, _, inside in rows)
    con.close()


def test_rows_without_an_id_are_each_their_own_unit_and_k_ignores_them() -> None:
    """A NULL id is nobody's: each such row is a unit of one row, always kept, moving the
    release by one row's sensitivity, and the rows-per-unit histogram ("auto") does not see them."""
    con = duckdb.connect()
    _events(con, 5)
    con.execute("UPDATE ev SET pid = NULL WHERE pid % 4 = 0")
    engine = DuckDBEngine(_Db(con), "ev")
    spec = _spec()
    kept = engine.base_cuboids(spec, {"amount": (-50.0, 500.0)})["count"].sum()
    inside = "TRUE"  # every row is in a cell (out-of-domain months in the outside cells)
    ((nulls,),) = con.execute(f"SELECT COUNT(*) FROM ev WHERE pid IS NULL AND {inside}").fetchall()
    per_unit = con.execute(f"SELECT COUNT(*) FROM ev WHERE pid IS NOT NULL AND {inside} GROUP BY pid").fetchall()
    assert nulls > 3 * K and kept == nulls + sum(min(n, K) for (n,) in per_unit)
    n, units = engine.unit_row_counts(spec)
    assert sorted(zip(n.tolist(), units.tolist())) == sorted(
        (float(a), float(b))
        for a, b in con.execute(
            f"SELECT n, COUNT(*) FROM (SELECT COUNT(*) n FROM ev WHERE pid IS NOT NULL AND {inside} GROUP BY pid) "
            "GROUP BY n"
        ).fetchall()
    )
    before = _aggregates(engine, spec)
    con.execute(f"DELETE FROM ev WHERE rowid = (SELECT MIN(rowid) FROM ev WHERE pid IS NULL AND {inside})")
    after = _aggregates(engine, spec)
    assert np.abs(after["count"] - before["count"]).sum() == 1  # one row, not the NULL "unit"'s k
    con.close()


@pytest.mark.parametrize("seed", [2, 3, 4])
def test_removing_one_unit_moves_every_cuboid_by_at_most_the_sensitivity(seed: int) -> None:
    """Neighbours differ by all rows of one unit (up to 40 rows here, of which k count): every
    measured cuboid moves by at most k (COUNT, class sums, class counts) or k·max|bound| (SUM)."""
    spec = _spec()
    plan = steps.plan_build(_Record(spec), 1.0)
    con = duckdb.connect()
    _events(con, seed)
    engine = DuckDBEngine(_Db(con), "ev")
    before = _aggregates(engine, spec)
    heavy = con.execute("SELECT pid FROM ev GROUP BY pid ORDER BY COUNT(*) DESC LIMIT 3").fetchall()
    for (pid,) in heavy:
        con.execute("CREATE OR REPLACE TABLE kept AS SELECT * FROM ev")
        con.execute("DELETE FROM ev WHERE pid = ?", [pid])
        after = _aggregates(engine, spec)
        assert np.abs(after["count"] - before["count"]).sum() > 0  # the unit had in-domain rows
        for name, a in before.items():
            bound = {
                "class sums": plan.sensitivities["sum:amount"],  # normalised: k·1
                "class counts": plan.sensitivities["count:amount"],
            }.get(name)
            if bound is None:  # COUNT, COUNT(m): k; a plain clipped SUM: k·max(|lo|, |hi|)
                bound = plan.sensitivities["count"] if name.startswith(("count", "present")) else K * 500.0
            assert np.abs(after[name] - a).sum() <= bound + 1e-9, (name, pid)
        con.execute("CREATE OR REPLACE TABLE ev AS SELECT * FROM kept")
    con.close()


class _Record:
    """What `plan_build` reads of a catalog record."""

    def __init__(self, spec: TableSpec) -> None:
        self.spec, self.name, self.epsilon_total, self.currency = spec, spec.name, spec.epsilon, "epsilon"


@pytest.mark.parametrize("name", ["identity", "marginals", "hierarchical", "pairwise", "prima", "cuboids"])
def test_noise_scales_k_fold(name: str) -> None:
    """Every strategy's noise at sensitivity k·Δ over k coordinates is k× its one-row noise: the
    stated scale exactly (up to the grid), the empirical spread of a linear answer within 6 %."""
    shape = (4, 3, 5)
    strategy = CuboidsStrategy(bootstrap=0) if name == "cuboids" else get_strategy(name)
    true = np.full(shape, 4.0)
    one = strategy.measure(true, 1.0, 1.0, RandomSource(seed=1), nonnegative=True)
    k = strategy.measure(true, 1.0 * K, 1.0, RandomSource(seed=1), nonnegative=True, coordinates=K)
    assert k.noise_scale / one.noise_scale == pytest.approx(K, rel=0.01)
    if name in ("pairwise", "prima", "cuboids"):
        return  # model answers: the stated scale is what the release uses (tests/test_strategies.py)

    def spread(sens: float, coordinates: int) -> float:
        draws = [
            strategy.measure(true, sens, 1.0, RandomSource(seed=s), nonnegative=True, coordinates=coordinates).noisy[
                1, 2, 3
            ]
            for s in range(1500)
        ]
        return float(np.std(draws))

    assert spread(float(K), K) / spread(1.0, 1) == pytest.approx(K, rel=0.06)


def test_a_unit_table_registers_builds_and_answers(tmp_path: Path) -> None:
    prima = Prima(tmp_path / "data", seed=3)
    _events(prima.db._con, 5)  # noqa: SLF001 — the source table inside Prima's own DuckDB file
    spec = _spec().model_dump(mode="json")
    spec["cube"] = {"build": "on_first_query", "strategy": "pairwise"}
    out = prima.register(TableSpec.model_validate(spec))
    assert out["preview"]["expected_errors"]["COUNT(*)"]["total_stddev"] > 0
    answer = prima.query("SELECT kind, COUNT(*), SUM(amount) FROM ev GROUP BY kind")
    assert [r[0] for r in answer["rows"]] == ["visit", "call", "mail"]  # no other or NULL kind: none shown
    status = prima.cube_status("ev")
    assert status["aggregates"]["COUNT(*)"]["sensitivity"] == K
    assert math.isclose(sum(e["epsilon"] for e in prima.ledger_entries("ev")), 1.0)
    prima.close()


# -- budgets per population (id spaces) -----------------------------------------------------------
def test_the_same_csv_registered_twice_shares_one_budget(prima: Prima, sales_csv: Path) -> None:
    from engine.errors import Conflict
    from tests.conftest import sales_spec

    prima.register(
        TableSpec.model_validate(
            sales_spec(sales_csv, "first") | {"cube": {"build": "on_first_query", "strategy": "identity"}}
        )
    )
    second = prima.register(
        TableSpec.model_validate(
            sales_spec(sales_csv, "second", epsilon=5.0) | {"cube": {"build": "on_first_query", "strategy": "identity"}}
        )
    )
    assert second["budget"]["id_space"] == prima.budget("first")["id_space"]
    assert second["budget"]["epsilon_total"] == 1.0  # not doubled, not raised by the second registration
    assert "share one budget" in second["notes"][0] and "does not change the shared total" in second["notes"][0]
    prima.build("first")  # spends the whole ε = 1 of the source
    with pytest.raises(Conflict, match="exhausted"):
        prima.build("second")
    assert prima.budget("second")["epsilon_spent"] == pytest.approx(1.0)


def test_tables_declaring_one_id_space_compose(prima: Prima, tmp_path: Path) -> None:
    """Two different sources over the same customers: sequential composition in one space."""
    for name, seed in (("visits", 7), ("claims", 8)):
        prima.db.run(f"CREATE TABLE {name}_rows AS SELECT * FROM range(1)")  # placeholder, replaced below
        con = prima.db._con  # noqa: SLF001 — source tables inside Prima's own DuckDB file
        _events(con, seed)
        con.execute(f"CREATE OR REPLACE TABLE {name}_rows AS SELECT * FROM ev")
        spec = _spec().model_dump(mode="json") | {"name": name, "source": {"duckdb_table": f"{name}_rows"}}
        spec["privacy_unit"]["id_space"] = "customers"
        spec["cube"] = {"build": "on_first_query", "strategy": "identity", "epsilon": 0.6 if name == "visits" else None}
        prima.register(TableSpec.model_validate(spec))
    prima.build("visits")
    assert prima.budget("claims")["epsilon_remaining"] == pytest.approx(0.4)
    prima.build("claims")  # the default build spends what remains of the space
    spent = sum(e["epsilon"] for t in ("visits", "claims") for e in prima.ledger_entries(t))
    assert spent == pytest.approx(1.0) and prima.budget("visits")["tables_in_space"] == ["claims", "visits"]


OLD_SCHEMA = """
CREATE SCHEMA IF NOT EXISTS prima; CREATE SCHEMA IF NOT EXISTS src;
CREATE TABLE prima.tables (name VARCHAR PRIMARY KEY, spec JSON NOT NULL, source_table VARCHAR NOT NULL,
    epsilon_total DOUBLE NOT NULL, created_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'));
CREATE SEQUENCE prima.ledger_seq;
CREATE TABLE prima.ledger (id BIGINT PRIMARY KEY DEFAULT nextval('prima.ledger_seq'), table_name VARCHAR NOT NULL,
    build_id VARCHAR, "at" TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'), epsilon DOUBLE NOT NULL,
    purpose VARCHAR NOT NULL, status VARCHAR NOT NULL);
CREATE TABLE prima.cubes (table_name VARCHAR PRIMARY KEY, build_id VARCHAR NOT NULL, meta JSON NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'));
"""


def test_a_data_dir_from_before_id_spaces_opens_with_its_ledgers(tmp_path: Path, sales_csv: Path) -> None:
    """The schema of the previous release, with a table, its ledger and a retired table's entries."""
    from tests.conftest import sales_spec

    (tmp_path / "data").mkdir()
    con = duckdb.connect(str(tmp_path / "data" / "store.duckdb"))
    con.execute(OLD_SCHEMA)
    con.execute(f"CREATE TABLE src.sales AS SELECT * FROM read_csv('{sales_csv}')")
    spec = TableSpec.model_validate(sales_spec(sales_csv)).model_dump_json()
    con.execute(
        "INSERT INTO prima.tables (name, spec, source_table, epsilon_total) VALUES ('sales', ?, 'src.sales', 2.0)",
        [spec],
    )
    for table, eps in (("sales", 0.3), ("sales", 0.2), ("gone", 0.5)):
        con.execute(
            "INSERT INTO prima.ledger (table_name, build_id, epsilon, purpose, status) VALUES (?, 'b', ?, 'x', 'done')",
            [table, eps],
        )
    con.close()
    prima = Prima(tmp_path / "data")
    assert prima.budget("sales") | {"tables_in_space": None} == {
        "epsilon_total": 2.0,
        "epsilon_spent": pytest.approx(0.5),
        "epsilon_remaining": pytest.approx(1.5),
        "currency": "epsilon",
        "total": 2.0,
        "spent": pytest.approx(0.5),
        "remaining": pytest.approx(1.5),
        "rho_spent": pytest.approx(0.3**2 / 2 + 0.2**2 / 2),  # old entries get ρ = ε²/2
        "id_space": "table:sales",
        "tables_in_space": None,
    }
    assert [e["epsilon"] for e in prima.ledger_entries("sales")] == [0.3, 0.2]
    assert [e["rho"] for e in prima.ledger_entries("sales")] == [pytest.approx(0.045), pytest.approx(0.02)]
    assert prima.db.run("SELECT name, epsilon_total FROM prima.spaces ORDER BY name") == [
        ("table:gone", 0.5),
        ("table:sales", 2.0),
    ]
    prima.close()
    again = Prima(tmp_path / "data")  # the migration is idempotent
    assert again.budget("sales")["epsilon_spent"] == pytest.approx(0.5)
    assert again.query("SELECT COUNT(*) FROM sales")["rows"][0][0] is not None  # builds on the remaining 1.5
    assert again.budget("sales")["epsilon_spent"] == pytest.approx(2.0)
    again.close()


def test_auto_k_spends_its_share_and_publishes_k(tmp_path: Path) -> None:
    """ "max_rows": "auto": its own ledger entry (auto_share of the build's ε), k read from a noisy
    histogram of rows per unit, k and the noisy share truncated in the cube status; sensitivities k×."""
    prima = Prima(tmp_path / "data", seed=11)
    _events(prima.db._con, 6, persons=3000)  # noqa: SLF001
    spec = _spec().model_dump(mode="json")
    spec["privacy_unit"] = {"column": "pid", "max_rows": "auto", "auto_share": 0.1}
    spec["cube"] = {"build": "on_first_query", "strategy": "identity"}
    out = prima.register(TableSpec.model_validate(spec))
    assert any("max_rows" in w for w in out["preview"]["warnings"])
    prima.build("ev")
    entries = prima.ledger_entries("ev")
    assert entries[0]["purpose"].startswith("privacy unit bound (auto)") and entries[0]["epsilon"] == pytest.approx(0.1)
    assert sum(e["epsilon"] for e in entries) == pytest.approx(1.0)
    unit = prima.cube_status("ev")["privacy_unit"]
    per_person = [n for (n,) in prima.db.run("SELECT COUNT(*) FROM ev WHERE mon BETWEEN 1 AND 12 GROUP BY pid")]
    share_covered = np.mean(np.array(per_person) <= unit["max_rows"])  # the quantile k really reaches
    assert 0.85 <= share_covered <= 0.97 and 0 < unit["noisy_share_of_rows_truncated"] < 1
    assert prima.cube_status("ev")["aggregates"]["COUNT(*)"]["sensitivity"] == unit["max_rows"]
    assert prima.query("SELECT COUNT(*) FROM ev")["stddev"][0][0] > 0
    prima.close()


def test_choose_k_reads_the_quantile_of_units() -> None:
    from privacy.clipping import units

    rows = np.array([1, 2, 3, 10, 50])
    counts = np.array([500, 300, 100, 90, 10])  # 90 % of units have ≤ 3 rows
    hist = units.bucketed(rows, counts)
    assert units.choose_k(hist, 0.9) == 3 and units.choose_k(hist, 0.99) == 10
    # buckets read at their midpoints: 10 rows sits in 9–10 (9.5), 50 in 45–55 (50)
    dropped, rows_total = 90 * (9.5 - 3) + 10 * (50 - 3), 500 * 1 + 300 * 2 + 100 * 3 + 90 * 9.5 + 10 * 50
    assert units.truncated_share(hist, 3, epsilon=1e6) == pytest.approx(dropped / rows_total)  # ε huge: all significant
    assert units.choose_k(units.release(hist, 1.0, RandomSource(seed=1)), 0.9) == 3
    draws = np.array([units.release(np.zeros(5), 0.5, RandomSource(seed=s)) for s in range(3000)])
    assert draws.std() == pytest.approx(math.sqrt(2) / 0.5, rel=0.05)  # Laplace(1/ε): sensitivity 1


def test_the_events_example_runs(tmp_path: Path) -> None:
    """examples/events.py writes the table, examples/events.yaml registers it: auto k, one id space,
    and PUT budget acts on the space (a second table of the same customers shares it)."""
    import datetime as dt
    import json
    import sys

    import yaml

    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo / "examples"))
    import events  # examples/events.py

    csv = events.write(tmp_path / "events.csv", persons=3000)
    raw = json.loads(
        json.dumps(
            yaml.safe_load((repo / "examples" / "events.yaml").read_text()),
            default=lambda v: v.isoformat() if isinstance(v, dt.date) else str(v),
        )
    )
    raw["source"]["csv"] = str(csv)
    prima = Prima(tmp_path / "data", seed=4)
    prima.register(TableSpec.model_validate(raw))
    second = prima.register(TableSpec.model_validate(raw | {"name": "events_web"}))
    assert second["budget"]["id_space"] == "customers" and second["budget"]["tables_in_space"] == [
        "events",
        "events_web",
    ]
    prima.set_budget("events_web", 2.0)
    assert prima.budget("events")["epsilon_total"] == 2.0
    prima.build("events")  # the admin builds (registered tables never build on an analyst's query)
    answer = prima.query("SELECT channel, COUNT(*), SUM(amount) FROM events GROUP BY channel")
    assert [r[0] for r in answer["rows"]] == ["store", "web", "app", "phone"]  # no other or NULL channel: none shown
    unit = prima.cube_status("events")["privacy_unit"]
    assert unit["column"] == "person_id" and unit["auto"] and unit["max_rows"] >= 4
    assert prima.budget("events_web")["epsilon_remaining"] == pytest.approx(0.0)  # the build took all of the space
    prima.close()


@pytest.mark.parametrize(("a", "b"), [(20, 20), (30, 3)])
def test_each_unit_keeps_a_uniform_sample_of_its_rows(a: int, b: int) -> None:
    """Every unit has ``a`` equal rows in one cell and ``b`` in another, k = 10: each keeps a
    uniform sample of its rows, so the cells keep k·a/(a+b) and k·b/(a+b) rows per unit on average
    (a hypergeometric count). Ranking rows without the unit's id made every unit keep the same cell
    (0 or 10 of 10 from the first), and ranking equal rows as one block kept 8.5, not 9.1, of 30 + 3."""
    k, units = 10, 400
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE ev AS SELECT u AS pid, 3 AS mon, 'call' AS kind, "
        f"CASE WHEN r < {a} THEN 1 ELSE 2 END AS site, 100.0 AS amount "
        f"FROM range({units}) t(u), range({a + b}) s(r)"
    )
    counts = np.asarray(DuckDBEngine(_Db(con), "ev").base_cuboids(_spec(k), {"amount": (-50.0, 500.0)})["count"])
    con.close()
    assert counts.sum() == units * k and np.count_nonzero(counts) == 2
    first = float(counts.sum(axis=(0, 1))[1])  # site 1 (the cube is month × kind × site)
    expected = units * k * a / (a + b)
    n, good = a + b, a
    sd = math.sqrt(units * k * (good / n) * (1 - good / n) * (n - k) / (n - 1))
    assert abs(first - expected) < 5 * sd, (first, expected, sd)
