"""A category of many public codes: building the aggregate SQL and running it, per engine.

Registration with a category of 1,458 public codes took 1 min 51 s: each `Case.when()` copied the
growing CASE, so building the expression was quadratic, and the engine then evaluated one branch per
value per row. The cell of a category value is now one ARRAY_POSITION over the bound values. This
bench times, side by side in one run:

* building the cuboid query's expression and its SQL text: the old CASE chain (`Case.when` per
  value, as before) vs the one ARRAY_POSITION over the values bound as one array parameter (on
  Spark, whose named parameters take no arrays, one string split back into the array);
* running the cuboid query on 10^5 rows through each engine's `base_cuboids` (as a build reads
  them): DuckDB's ARRAY_POSITION over a list parameter, PostgreSQL's JSONB lookup (its
  array_position scans per row: 21 s for 10,000 codes), Spark's ARRAY_POSITION over a split
  string; and on DuckDB a CASE built in one go (its evaluation cost without the quadratic build);
* a whole registration + build through the service on DuckDB.

Reproduce:  .venv/bin/python bench/categories.py            (~2 min on 2 cores; PostgreSQL and Spark
            are skipped when missing)
Writes bench/results/categories.md.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from sqlglot import exp  # noqa: E402

from storage import aggregate_sql  # noqa: E402
from storage.schema import TableSpec  # noqa: E402

ROWS = 100_000
SIZES = (1_458, 10_000)
RESULTS = REPO / "bench" / "results"


def spec_for(n: int, source: dict[str, Any]) -> TableSpec:
    return TableSpec.model_validate(
        {
            "name": "codes",
            "source": source,
            "epsilon": 1.0,
            "dimensions": [{"name": "code", "type": "category", "values": [f"C{i:05d}" for i in range(n)]}],
            "measures": [{"name": "amount", "lo": 0, "hi": 100}],
            "cube": {"strategy": "identity"},
        }
    )


def old_case(d: Any, p: aggregate_sql.Params) -> exp.Expression:
    """The CASE chain as it was built before (one `Case.when` per value: each copies the CASE)."""
    text = exp.TryCast(this=exp.column(exp.to_identifier(d.name, quoted=True)), to=exp.DataType.build("VARCHAR"))
    case = exp.Case()
    for k, value in enumerate(d.values):
        case = case.when(exp.EQ(this=text, expression=p.bind(value)), exp.Literal.number(k))
    return case


def one_case(d: Any, p: aggregate_sql.Params) -> exp.Expression:
    """A CASE with a branch per value built in one go: its evaluation cost alone."""
    text = exp.TryCast(this=exp.column(exp.to_identifier(d.name, quoted=True)), to=exp.DataType.build("VARCHAR"))
    return exp.Case(
        ifs=[
            exp.If(this=exp.EQ(this=text.copy(), expression=p.bind(v)), true=exp.Literal.number(k))
            for k, v in enumerate(d.values)
        ]
    )


def timed(fn: Callable[[], Any], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def query_with(
    cell: Callable[[Any, aggregate_sql.Params], exp.Expression] | None, spec: TableSpec, table: exp.Table
) -> tuple[exp.Select, aggregate_sql.Params]:
    original = aggregate_sql._category_cell
    if cell is not None:
        aggregate_sql._category_cell = cell  # type: ignore[assignment]
    try:
        return aggregate_sql.cuboid_query(table, spec, {"amount": (0.0, 100.0)})
    finally:
        aggregate_sql._category_cell = original  # type: ignore[assignment]


def rows(n: int) -> tuple[list[str], list[float]]:
    rng = np.random.default_rng(3)  # test data, not noise
    codes = [f"C{i:05d}" for i in rng.integers(0, n, ROWS)]
    return codes, rng.integers(0, 100, ROWS).astype(float).tolist()


def bench_build_sql(out: list[str]) -> None:
    out += [
        "## Building the cuboid query (expression and SQL text)",
        "",
        "| values | CASE chain, `Case.when` per value (before) | ARRAY_POSITION (now) | ratio |",
        "|---|---|---|---|",
    ]
    for n in (800, 1_458, 10_000):
        spec = spec_for(n, {"duckdb_table": "codes"})
        table = aggregate_sql.table_ref("codes")
        now = timed(lambda: aggregate_sql.render(query_with(None, spec, table)[0], "duckdb"))
        if n > 2_000:  # quadratic: ~(10,000/1,458)² × the 1,458 figure; not worth a quarter of an hour
            out.append(f"| {n:,} | not run (quadratic) | {now * 1000:.1f} ms | |")
            continue
        before = timed(lambda: aggregate_sql.render(query_with(old_case, spec, table)[0], "duckdb"), 1)
        out.append(f"| {n:,} | {before:.2f} s | {now * 1000:.1f} ms | {before / now:,.0f}× |")
    out.append("")


def bench_engines(out: list[str]) -> None:
    out += [
        f"## Running the cuboid query on {ROWS:,} rows",
        "",
        "| values | DuckDB, CASE built in one go | DuckDB | PostgreSQL | Spark local[1] |",
        "|---|---|---|---|---|",
    ]
    with contextlib.ExitStack() as stack:
        pg_dsn = os.environ.get("PRIMA_BENCH_PG_DSN") or _throwaway_postgres(stack)
        for n in SIZES:
            out.append(_engines_row(n, pg_dsn))
    out.append("")


def _throwaway_postgres(stack: contextlib.ExitStack) -> str | None:
    """A PostgreSQL cluster on loopback, as the tests start one (None when not installed)."""
    try:
        from tests.servers import postgres_server

        return stack.enter_context(postgres_server())
    except BaseException:  # noqa: BLE001 — pytest's skip outside pytest: PostgreSQL is not installed
        return None


def _engines_row(n: int, pg_dsn: str | None) -> str:
    """One table row: the cuboid query over n declared codes on each engine, through the engines'
    own `base_cuboids` (how a build reads them)."""
    import duckdb

    from storage.engines.duckdb_source import DuckDBEngine
    from tests.test_privacy_units import _Db  # the DuckDB engine over a bare connection

    codes, amounts = rows(n)
    con = duckdb.connect()
    con.execute("CREATE TABLE codes AS SELECT * FROM (SELECT unnest(?) AS code, unnest(?) AS amount)", [codes, amounts])
    spec = spec_for(n, {"duckdb_table": "codes"})
    q, p = query_with(one_case, spec, aggregate_sql.table_ref("codes"))
    sql = aggregate_sql.render(q, "duckdb")
    cells = [f"{timed(lambda: con.execute(sql, p.values).fetchall()):.3f} s"]
    duck = DuckDBEngine(_Db(con), "codes")
    cells.append(f"{timed(lambda: duck.base_cuboids(spec, BOUNDS)):.3f} s")
    cells.append(_postgres(pg_dsn, spec, codes, amounts))
    cells.append(_spark(spec, codes, amounts))
    return f"| {n:,} | " + " | ".join(cells) + " |"


BOUNDS = {"amount": (0.0, 100.0)}


def _postgres(dsn: str | None, spec: TableSpec, codes: list[str], amounts: list[float]) -> str:
    if not dsn:
        return "not run (PostgreSQL not installed)"
    import psycopg

    from storage.engines.postgres_source import PostgresEngine

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS codes")
        conn.execute("CREATE TABLE codes (code text, amount double precision)")
        with conn.cursor().copy("COPY codes FROM STDIN") as copy:
            for c, a in zip(codes, amounts):
                copy.write_row((c, a))
    os.environ["PRIMA_BENCH_CATEGORIES_DSN"] = dsn
    engine = PostgresEngine("env:PRIMA_BENCH_CATEGORIES_DSN", "codes")
    return f"{timed(lambda: engine.base_cuboids(spec, BOUNDS)):.3f} s"


def _spark(spec: TableSpec, codes: list[str], amounts: list[float]) -> str:
    try:
        from storage.engines import spark_source

        session = spark_source.session("local[1]")
    except Exception as exc:  # noqa: BLE001 — a bench reports what it could not run
        return f"not run ({type(exc).__name__})"
    session.createDataFrame(list(zip(codes, amounts)), "code string, amount double").createOrReplaceTempView("codes")
    engine = spark_source.SparkEngine("local[1]", table="codes")
    return f"{timed(lambda: engine.base_cuboids(spec, BOUNDS), 2):.3f} s"


def bench_service(out: list[str]) -> None:
    from engine.service import Prima

    out += [
        "## Registration + build through the service (DuckDB, CSV)",
        "",
        "| values | register | build |",
        "|---|---|---|",
    ]
    for n in SIZES:
        codes, amounts = rows(n)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "codes.csv"
            path.write_text("code,amount\n" + "".join(f"{c},{a:g}\n" for c, a in zip(codes, amounts)))
            prima = Prima(Path(tmp) / "data", seed=1)
            start = time.perf_counter()
            prima.register(spec_for(n, {"csv": str(path)}))
            registered = time.perf_counter() - start
            start = time.perf_counter()
            prima.build("codes")
            built = time.perf_counter() - start
            prima.close()
        out.append(f"| {n:,} | {registered:.2f} s | {built:.2f} s |")
    out.append("")


def main() -> None:
    out = [
        "# A category of many public codes",
        "",
        f"{platform.node()}, {os.cpu_count()} cores, Python {platform.python_version()}. "
        "Best of 3 (1 for the slowest build). Reproduce: `.venv/bin/python bench/categories.py` "
        "(PostgreSQL with `PRIMA_BENCH_PG_DSN=postgresql://…`).",
        "",
    ]
    bench_build_sql(out)
    bench_engines(out)
    bench_service(out)
    text = "\n".join(out)
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "categories.md").write_text(text + "\n")


if __name__ == "__main__":
    main()
