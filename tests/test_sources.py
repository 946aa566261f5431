"""Data where it lives: the same table in DuckDB, PostgreSQL and Spark gives identical true base
cuboids and histograms, and a build from each charges the same ε and (same seed) the same cube."""

from __future__ import annotations

import csv
import datetime as dt
import os
from collections.abc import Iterator
from pathlib import Path

import duckdb
import numpy as np
import pytest

from engine.builds import axes
from engine.errors import Invalid
from engine.service import Prima
from privacy.clipping import data_driven as double_clipping
from privacy.estimation.cuboid_fit import default_cuboids, true_marginals
from storage import ledger, sources
from storage.schema import TableSpec
from tests.conftest import sales_spec
from tests.servers import REQUIRED, postgres_server, unavailable

pytestmark = pytest.mark.slow  # `-m "not slow"` skips it while developing; CI runs it

ROWS = 4000


def _write_rows(path: Path) -> Path:
    """Integer amounts (so every engine's float sums are exact and comparable bit for bit), values
    outside the domains, and a category outside the declared list."""
    rng = np.random.default_rng(21)  # test data, not noise
    regions = ["north", "south", "east", "west", "mars"]
    start = dt.date(2019, 11, 1).toordinal()
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["age", "region", "day", "score", "amount"])
        for _ in range(ROWS):
            w.writerow(
                [
                    int(rng.integers(10, 100)),
                    regions[int(rng.integers(0, 5))],
                    dt.date.fromordinal(start + int(rng.integers(0, 900))).isoformat(),
                    int(rng.integers(0, 25)),
                    int(rng.normal(200, 400)),
                ]
            )
    return path


@pytest.fixture(scope="module")
def rows_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_rows(tmp_path_factory.mktemp("rows") / "rows.csv")


@pytest.fixture(scope="module")
def pg_dsn(rows_csv: Path) -> Iterator[str]:
    psycopg = pytest.importorskip("psycopg")
    with postgres_server() as dsn:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("DROP SCHEMA IF EXISTS sales_data CASCADE")
            conn.execute("CREATE SCHEMA sales_data")
            conn.execute(
                "CREATE TABLE sales_data.rows (age integer, region text, day date, score integer, "
                "amount double precision)"
            )
            with conn.cursor().copy("COPY sales_data.rows FROM STDIN WITH (FORMAT csv, HEADER true)") as copy:
                copy.write(rows_csv.read_bytes())
        yield dsn


@pytest.fixture(scope="module")
def spark_parquet(rows_csv: Path) -> Iterator[Path]:
    if os.environ.get("PRIMA_SKIP_SPARK") == "1" and not REQUIRED:
        pytest.skip("PRIMA_SKIP_SPARK=1")
    try:
        import pyspark  # noqa: F401
    except ImportError:
        unavailable("pyspark is not installed (pip install '.[spark]', or PRIMA_EXTRAS=spark ./run.sh test)")
    path = rows_csv.with_suffix(".parquet")
    duckdb.sql(f"COPY (SELECT * FROM read_csv('{rows_csv}')) TO '{path}' (FORMAT parquet)")
    from storage.engines import spark_source

    # Spark's JVM here lives for this file's few dozen small queries: its quick JIT compiler only (C1;
    # unless the environment says otherwise). The optimising one (C2) cost ~26 s of the file's 67 s of
    # CPU on 2 cores (41 s without it); the queries and what the tests assert are the same.
    with pytest.MonkeyPatch.context() as env:
        if not os.environ.get("PYSPARK_SUBMIT_ARGS"):
            env.setenv("PYSPARK_SUBMIT_ARGS", "--driver-java-options -XX:TieredStopAtLevel=1 pyspark-shell")
        yield path
        spark_source.stop_all()


def _spec(name: str, source: dict, clipping: str = "fixed") -> TableSpec:
    spec = sales_spec(Path("/unused"), name) | {"source": source}
    spec["measures"] = [{"name": "amount", "lo": -100, "hi": 1000, "clipping": clipping}]
    spec["dimensions"][2] = {
        "name": "day",
        "type": "date",
        "lo": "2020-01-01",
        "hi": "2021-12-31",
        "granularity": "month",
    }
    return TableSpec.model_validate(spec)


def _register_all(
    tmp: Path, rows_csv: Path, pg_dsn: str, parquet: Path, monkeypatch: pytest.MonkeyPatch, clipping: str = "fixed"
) -> tuple[Prima, list[str]]:
    monkeypatch.setenv("PRIMA_TEST_SOURCE_DSN", pg_dsn)
    prima = Prima(tmp / "data", seed=77)
    prima.register(_spec("in_duckdb", {"csv": str(rows_csv)}, clipping))
    prima.register(
        _spec("in_postgres", {"postgres": {"dsn": "env:PRIMA_TEST_SOURCE_DSN", "table": "sales_data.rows"}}, clipping)
    )
    prima.register(_spec("in_spark", {"spark": {"parquet": str(parquet), "master": "local[1]"}}, clipping))
    return prima, ["in_duckdb", "in_postgres", "in_spark"]


def test_three_engines_give_identical_true_cuboids_and_histograms(
    tmp_path: Path, rows_csv: Path, pg_dsn: str, spark_parquet: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prima, names = _register_all(tmp_path, rows_csv, pg_dsn, spark_parquet, monkeypatch)
    cubes, hists, fits, wide, single = [], [], [], [], []
    cuboids = default_cuboids(4, [(0, 1, 2)])
    edges = (double_clipping.histogram_edges(-100.0, 1000.0), double_clipping.bucket_edges(-100.0, 1000.0))
    for name in names:
        record = prima.record(name)
        fits.append(sources.fit_report(prima.db, record.spec.source, record.source_table, record.spec))
        cubes.append(
            sources.base_cuboids(
                prima.db, record.spec.source, record.source_table, record.spec, {"amount": (-50.0, 700.0)}
            )
        )
        hists.append(
            [
                sources.measure_histogram(prima.db, record.spec.source, record.source_table, record.spec, "amount", e)
                for e in edges
            ]
        )  # geometric and equal-width buckets
        wide.append(
            sources.marginal_cuboids(
                prima.db, record.spec.source, record.source_table, record.spec, {"amount": (-50.0, 700.0)}, cuboids
            )
        )  # GROUPING SETS
        single.append(
            sources.marginal_cuboids(
                prima.db, record.spec.source, record.source_table, record.spec, {"amount": (-50.0, 700.0)}, [(2,)]
            )
        )  # one set (a time rollup's date axis): a plain GROUP BY to the engines, once a binder error
    assert cubes[0]["count"].sum() > ROWS / 3  # a real, partly out-of-domain table
    assert fits[0]["rows"] == ROWS and 0 < fits[0]["rows_in_every_domain"] < ROWS and fits[1:] == fits[:1] * 2
    assert cubes[0]["count"].sum() == ROWS  # every row in a cell: out-of-domain ones in the outside cells
    for other, hist in zip(cubes[1:], hists[1:]):
        assert set(other) == set(cubes[0])
        for key in cubes[0]:
            assert np.array_equal(other[key], cubes[0][key]), key
        assert all(np.array_equal(h, h0) for h, h0 in zip(hist, hists[0]))
    for key, base in cubes[0].items():  # every engine's cuboids are the base cuboid's exact sums
        for c in cuboids:
            want = true_marginals(base, [c])[c]
            assert all(np.array_equal(w[key][c], want) for w in wide), (key, c)
        assert all(np.array_equal(one[key][(2,)], true_marginals(base, [(2,)])[(2,)]) for one in single), key
    prima.close()


def test_builds_from_each_engine_charge_the_same_and_give_the_same_cube(
    tmp_path: Path, rows_csv: Path, pg_dsn: str, spark_parquet: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prima, names = _register_all(tmp_path, rows_csv, pg_dsn, spark_parquet, monkeypatch, clipping="clasp")
    answers, charges = [], []
    for name in names:
        prima.reseed(1234)  # same noise for every table: same inputs, same outputs
        prima.build(name)
        charges.append([(e.purpose, e.epsilon) for e in ledger.entries(prima.db, name)])
        answers.append(
            prima.query(
                f"SELECT region, SUM(amount), COUNT(*) FROM {name} WHERE age BETWEEN 20 AND 60 GROUP BY region"
            )["rows"]
        )
    assert charges[0] == charges[1] == charges[2]
    assert sum(eps for _, eps in charges[0]) == pytest.approx(1.0)
    assert answers[0] == answers[1] == answers[2]
    prima.close()


def test_postgres_dsn_is_a_reference_and_never_echoed(
    tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError):
        _spec("t", {"postgres": {"dsn": pg_dsn, "table": "sales_data.rows"}})  # the DSN itself is refused
    prima = Prima(tmp_path / "data")
    monkeypatch.delenv("PRIMA_NOT_SET", raising=False)
    with pytest.raises(Invalid) as missing:
        prima.register(_spec("t", {"postgres": {"dsn": "env:PRIMA_NOT_SET", "table": "sales_data.rows"}}))
    assert "PRIMA_NOT_SET" in str(missing.value)
    secret = tmp_path / "dsn"
    secret.write_text(pg_dsn + "\n")
    info = prima.register(_spec("t", {"postgres": {"dsn": f"file:{secret}", "table": "sales_data.rows"}}))
    assert pg_dsn not in str(info) and "127.0.0.1" not in str(info)
    monkeypatch.setenv("PRIMA_BAD_DSN", pg_dsn.replace("/postgres", "/no_such_db"))
    with pytest.raises(Invalid) as bad:
        prima.register(_spec("u", {"postgres": {"dsn": "env:PRIMA_BAD_DSN", "table": "sales_data.rows"}}))
    assert "no_such_db" not in str(bad.value) and "127.0.0.1" not in str(bad.value)
    with pytest.raises(Invalid) as no_table:
        prima.register(_spec("v", {"postgres": {"dsn": f"file:{secret}", "table": "sales_data.nope"}}))
    assert "PostgreSQL" in str(no_table.value)
    prima.close()


def test_the_postgres_example_registers_and_answers(
    tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/staff_postgres.yaml, against a real table of the same shape as examples/staff.csv."""
    import psycopg
    import yaml

    repo = Path(__file__).resolve().parents[1]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS hr CASCADE")
        conn.execute("CREATE SCHEMA hr")
        conn.execute("CREATE TABLE hr.staff (age integer, dept text, hired date, salary double precision)")
        with conn.cursor().copy(
            "COPY hr.staff (age, dept, hired, salary) FROM STDIN WITH (FORMAT csv, HEADER true)"
        ) as copy:
            copy.write((repo / "examples" / "staff.csv").read_bytes())
    monkeypatch.setenv("PRIMA_PG_DSN", pg_dsn)
    prima = Prima(tmp_path / "data", seed=3)
    prima.register(TableSpec.model_validate(yaml.safe_load((repo / "examples" / "staff_postgres.yaml").read_text())))
    prima.build("staff_pg")
    result = prima.query("SELECT dept, AVG(salary) FROM staff_pg GROUP BY dept")
    assert [r[0] for r in result["rows"]] == ["ops", "eng", "sales", "support"]  # no other or NULL dept in the file
    assert ledger.spent(prima.db, "staff_pg") == pytest.approx(1.0)
    prima.close()


def _unit_spec(name: str, source: dict) -> TableSpec:
    """Units of up to 3 rows: `score` (25 values, ~160 rows each) as the id, amount with a class axis."""
    spec = _spec(name, source).model_dump(mode="json")
    spec["dimensions"] = [d for d in spec["dimensions"] if d["name"] != "score"]
    spec["measures"][0]["axis"] = {"kind": "log2", "count": True}
    spec["cube"] = {"build": "on_first_query", "strategy": "identity"}
    spec["privacy_unit"] = {"column": "score", "max_rows": 3}
    return TableSpec.model_validate(spec)


def test_three_engines_keep_the_same_rows_per_unit_and_the_same_classes(
    tmp_path: Path, rows_csv: Path, pg_dsn: str, spark_parquet: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On every engine: per-unit truncation (same salt: same rows kept) and the
    measure's class cuboids are identical on DuckDB, PostgreSQL and Spark; a build charges the same."""
    from storage.catalog import with_salt

    monkeypatch.setenv("PRIMA_TEST_SOURCE_DSN", pg_dsn)
    prima = Prima(tmp_path / "data", seed=5)
    names = {
        "u_duckdb": {"csv": str(rows_csv)},
        "u_postgres": {"postgres": {"dsn": "env:PRIMA_TEST_SOURCE_DSN", "table": "sales_data.rows"}},
        "u_spark": {"spark": {"parquet": str(spark_parquet), "master": "local[1]"}},
    }
    for name, source in names.items():
        prima.register(_unit_spec(name, source))
    prima.db.run("UPDATE prima.tables SET salt = 'one-salt' WHERE name LIKE 'u_%'")
    out = []
    for name in names:
        record = prima.record(name)
        spec = with_salt(record.spec, "one-salt")
        classes = axes.measure_classes(spec)["amount"]
        base = sources.base_cuboids(prima.db, spec.source, record.source_table, spec, {"amount": (-100.0, 1000.0)})
        counts, sums = sources.class_cuboids(
            prima.db,
            spec.source,
            record.source_table,
            spec,
            {"amount": (-100.0, 1000.0)},
            "amount",
            list(classes.edges),
            classes.closed_above,
            classes.bounds.tolist(),
        )
        wide = sources.class_marginal_cuboids(
            prima.db,
            spec.source,
            record.source_table,
            spec,
            {"amount": (-100.0, 1000.0)},
            "amount",
            list(classes.edges),
            list(classes.closed_above),
            classes.bounds.tolist(),
            [(0, 3), (1, 3), (3,), (0, 1)],
        )
        together, (one_counts, one_sums) = sources.base_and_class_cuboids(  # one read of the rows
            prima.db,
            spec.source,
            record.source_table,
            spec,
            {"amount": (-100.0, 1000.0)},
            "amount",
            list(classes.edges),
            list(classes.closed_above),
            classes.bounds.tolist(),
        )
        assert (
            all(np.allclose(together[k], base[k], rtol=0, atol=1e-9) for k in base) and together.keys() == base.keys()
        )
        assert np.array_equal(one_counts, counts) and np.allclose(one_sums, sums, rtol=0, atol=1e-9)
        d = len(spec.dimensions)  # a wide table's class axis: the same cells as the dense class cuboid's sums
        for s in [(0, 3), (1, 3), (3,), (0, 1)]:
            drop = tuple(i for i in range(d + 1) if i not in s)
            assert np.array_equal(wide[0][s], counts.sum(axis=drop)) and np.allclose(wide[1][s], sums.sum(axis=drop))
        out.append((base, counts, sums))
    kept = out[0][0]["count"].sum()
    per_unit = duckdb.sql(
        f"SELECT score, COUNT(*) FROM read_csv('{rows_csv}') WHERE age BETWEEN 18 AND 90 AND region "
        "IN ('north','south','east','west') AND day BETWEEN DATE '2020-01-01' AND DATE '2021-12-31' "
        "GROUP BY score"
    ).fetchall()
    assert kept == sum(min(n, 3) for _, n in per_unit) and kept <= 25 * 3
    for base, counts, sums in out[1:]:
        assert all(np.array_equal(base[k], out[0][0][k]) for k in base)
        assert np.array_equal(counts, out[0][1]) and np.allclose(sums, out[0][2], rtol=0, atol=1e-9)
    charges = []
    for name in names:
        prima.reseed(99)
        prima.build(name)
        charges.append([(e.purpose.split(": ")[-1], e.epsilon) for e in ledger.entries(prima.db, name)])
        status = prima.cube_status(name)
        assert status["aggregates"]["COUNT(*)"]["sensitivity"] == 3.0
        assert status["aggregates"]["SUM(amount)"]["sensitivity"] == 3.0  # normalised class sums: 1 per row
    assert charges[0] == charges[1] == charges[2]
    prima.close()


def test_a_growing_table_releases_the_same_from_every_engine(
    tmp_path: Path, pg_dsn: str, spark_parquet: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One events table as a DuckDB directory of day folders, a PostgreSQL table and a Spark
    Parquet directory, appended day by day with the same seed: the same charges and, release by
    release, the same noisy arrays (each engine read only the block's rows it was asked for)."""
    import psycopg

    from storage import cube_store
    from tests.test_growing import events_spec, write_events

    events = write_events(tmp_path, days=6, whole=True)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS sales_data.events")
        conn.execute(
            "CREATE TABLE sales_data.events (day date, channel text, cat text, person integer, amount double precision)"
        )
        with conn.cursor().copy("COPY sales_data.events FROM STDIN WITH (FORMAT csv, HEADER true)") as copy:
            copy.write((tmp_path / "events.csv").read_bytes())
    monkeypatch.setenv("PRIMA_TEST_SOURCE_DSN", pg_dsn)
    prima = Prima(tmp_path / "data", seed=55)
    sources_by_name = {
        "ev_duckdb": {"parquet": str(events)},
        "ev_postgres": {"postgres": {"dsn": "env:PRIMA_TEST_SOURCE_DSN", "table": "sales_data.events"}},
        "ev_spark": {"spark": {"parquet": str(events), "master": "local[1]"}},
    }
    releases = []
    for name, source in sources_by_name.items():
        prima.register(
            events_spec(
                events,
                name,
                releases="dyadic",
                source=source,
                privacy_unit={"column": "person", "max_rows": 2, "id_space": name},
            )
        )
        prima.db.run("UPDATE prima.tables SET salt = 'one-salt' WHERE name = ?", [name])  # the same rows kept
        prima.append(name, through=dt.date(2025, 1, 6))
        stored = cube_store.load_prefixed(prima.db, prima.cube_root, name + "~")
        releases.append({k.split("~")[1]: {a: np.asarray(v) for a, v in c.arrays.items()} for k, c in stored.items()})
        assert [e["period"] for e in prima.growth_status(name)["ledger"]] == [f"2025-01-0{d}" for d in range(1, 7)]
    assert sorted(releases[0]) == ["0+1", "0+2", "0+4", "1+1", "2+1", "2+2", "3+1", "4+1", "4+2", "5+1"]
    for other in releases[1:]:
        assert other.keys() == releases[0].keys()
        for node, arrays in releases[0].items():
            assert all(np.array_equal(arrays[k], other[node][k]) for k in arrays), node
    prima.close()


def test_a_latin1_csv_is_refused_saying_so_and_loads_with_its_encoding(prima: Prima, tmp_path: Path) -> None:
    """One Latin-1 byte once gave "check the delimiter, header and columns options"; the refusal names
    the encoding (without quoting the row), and ``"encoding": "latin-1"`` loads the file."""
    path = tmp_path / "cafes.csv"
    path.write_bytes("city,visits\nMálaga,3\nLyon,4\nSão Paulo,5\n".encode("latin-1"))
    raw = {
        "name": "cafes",
        "source": {"csv": str(path)},
        "dimensions": [{"name": "city", "type": "category", "values": ["Málaga", "Lyon", "São Paulo"]}],
        "measures": [{"name": "visits", "lo": 0, "hi": 10}],
        "epsilon": 1.0,
    }
    with pytest.raises(Invalid) as refused:
        prima.register(TableSpec.model_validate(raw))
    assert "not utf-8" in refused.value.detail and '"encoding": "latin-1"' in refused.value.detail
    assert "Málaga" not in refused.value.detail and "M\\xe1laga" not in refused.value.detail
    raw["source"]["encoding"] = "latin-1"
    info = prima.register(TableSpec.model_validate(raw))
    assert info["preflight"]["rows_in_every_domain"] == 3


def test_duckdbs_enum_lookup_codes_categories_as_the_list_scan_does(tmp_path: Path) -> None:
    """`aggregate_sql.duckdb_enums`: the same base cuboid as the ARRAY_POSITION it replaces, over
    declared values with quotes and non-ASCII text, and rows holding undeclared values, NULL (an
    empty CSV field), a number and the declared values' case variants (the ``(other)`` and NULL
    cells)."""
    from sqlglot import exp

    from storage import aggregate_sql
    from storage.engines.duckdb_source import DuckDBEngine

    class ListScan(DuckDBEngine):
        def prepared(self, query: exp.Expression, values: dict) -> tuple[exp.Expression, dict]:
            return query, values  # ARRAY_POSITION as written

    declared = ["a", "it's", "Zürich", 'say "hi"', "7x"]
    rows = [*declared, "A", "zurich", "other", None, "7", "it's", "Zürich", ""]
    path = tmp_path / "c.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["kind", "amount"])
        w.writerows([[v, i] for i, v in enumerate(rows)])
    raw = {
        "name": "c",
        "source": {"csv": str(path)},
        "dimensions": [{"name": "kind", "type": "category", "values": declared}],
        "measures": [{"name": "amount", "lo": 0, "hi": 100}],
        "epsilon": 1.0,
    }
    spec = TableSpec.model_validate(raw)
    prima = Prima(tmp_path / "data")
    prima.register(spec)
    bounds = {"amount": (0.0, 100.0)}
    enums = DuckDBEngine(prima.db, sources.source_table_name("c")).base_cuboids(spec, bounds)
    scan = ListScan(prima.db, sources.source_table_name("c")).base_cuboids(spec, bounds)
    for key in enums:
        np.testing.assert_array_equal(enums[key], scan[key])
    # a, it's ×2, Zürich ×2, say "hi", 7x; (other): A, zurich, other, 7; NULL: the two empty fields
    assert enums["count"].tolist() == [1, 2, 2, 1, 1, 4, 2]
    query, params = aggregate_sql.cuboid_query(exp.to_table("src.c"), spec, bounds)
    sql = aggregate_sql.render(aggregate_sql.duckdb_enums(query, params.values)[0], "duckdb")
    assert "ENUM(" in sql and "ARRAY_POSITION" not in sql.upper()
    prima.close()


def test_a_binding_is_remembered_only_while_the_columns_and_their_types_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build checks that the aggregate binds before it charges (`SourceEngine.check`); a DuckDB
    source's outcome is remembered per (columns and their types, spec), so repeated builds skip the
    ~20 ms of building and binding the query. Another type binds again; a missing column is refused
    whatever was remembered."""
    from storage.database import Database, StorageError
    from storage.engines import interface
    from storage.engines.duckdb_source import DuckDBEngine

    bound: list[str] = []
    real_bind = interface.SourceEngine._bind
    monkeypatch.setattr(
        interface.SourceEngine, "_bind", lambda self, spec: bound.append("bind") or real_bind(self, spec)
    )
    spec = TableSpec.model_validate(sales_spec(tmp_path / "unused.csv"))
    db = Database(tmp_path / "store.duckdb")
    try:
        typed = "age BIGINT, region VARCHAR, day {}, score BIGINT, amount DOUBLE"
        db.run(f"CREATE TABLE src.sales ({typed.format('DATE')})")
        for _ in range(3):
            DuckDBEngine(db, "src.sales").check(spec)
        assert len(bound) == 1  # bound once, then remembered
        db.run(f"DROP TABLE src.sales; CREATE TABLE src.sales ({typed.format('TIMESTAMP')})")
        DuckDBEngine(db, "src.sales").check(spec)
        assert len(bound) == 2  # the same names with another type: bound again
        db.run("DROP TABLE src.sales; CREATE TABLE src.sales (age BIGINT, region VARCHAR, day DATE, score BIGINT)")
        with pytest.raises(StorageError, match=r"source has no column\(s\) \['amount'\]"):
            DuckDBEngine(db, "src.sales").check(spec)
    finally:
        db.close()
