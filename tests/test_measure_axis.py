"""Measure axes: classes, the normalised release, conditions on measures, truncation."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import duckdb
import numpy as np
import pytest

from engine.answers.classes import truncated_sum
from engine.answers.options import AnswerOptions
from engine.builds import steps
from engine.errors import Invalid, QueryError
from engine.plan import QueryPlan
from engine.service import Prima
from engine.synopses.cube import Cube
from privacy.clipping import measure_axis
from privacy.clipping.measure_axis import classes_of
from privacy.estimation.prefix import cell_runs, prefix_sums
from privacy.mechanisms.sampler import RandomSource
from privacy.strategies import get_strategy
from storage.engines.duckdb_source import DuckDBEngine
from storage.schema import MeasureAxis, TableSpec
from tests.conftest import sales_spec, write_sales_csv

DOMAIN = (
    "age BETWEEN 18 AND 90 AND region IN ('north','south','east','west') "
    "AND CAST(day AS DATE) BETWEEN DATE '2020-01-01' AND DATE '2021-12-31' AND score BETWEEN 0 AND 24"
)
CLIPPED = "LEAST(GREATEST(amount, -100), 1000)"


def axis_spec(csv: Path, name: str = "sales", strategy: str = "identity", **axis: object) -> dict:
    spec = sales_spec(csv, name)
    spec["dimensions"] = [d | {"outside": "exclude"} for d in spec["dimensions"]]  # `_truth`'s rows: in every domain
    spec["measures"] = [{"name": "amount", "lo": -100, "hi": 1000, "axis": {"kind": "log2", "count": True, **axis}}]
    spec["cube"] = {"build": "on_first_query", "strategy": strategy}
    spec["answers"] = {"truncate": True}  # the truncation these tests are about (the default is off)
    return spec


@pytest.fixture
def axis_sales(prima: Prima, sales_csv: Path) -> Prima:
    prima.register(TableSpec.model_validate(axis_spec(sales_csv)))
    return prima


def _exact(prima: Prima, name: str = "sales") -> Cube:
    return steps.exact_cube(prima.db, prima.record(name))


# -- classes -------------------------------------------------------------------------------------
def test_default_log2_classes_have_a_top_class_two_octaves_wide() -> None:
    """No edge at hi/2 (or lo/2): the untruncated cost factor √(Σu²)/hi is √(13/12) instead of √(4/3)."""
    c = classes_of("log2", 0, 1024)
    assert c.edges[-3:] == (128.0, 256.0, 1024.0) and 512.0 not in c.edges
    assert c.cost_factor(0, 1024) == pytest.approx(math.sqrt(13 / 12), rel=0.01)
    assert classes_of("log2", 0, 1024, classes=4).edges[-3:] == (256.0, 512.0, 1024.0)  # declared: Qiu's own
    signed = classes_of("log2", -100, 1000)
    assert -50.0 not in signed.edges and -25.0 in signed.edges and 250.0 in signed.edges


def test_log2_classes_are_anchored_at_the_bounds_and_mirrored() -> None:
    c = classes_of("log2", -100, 1000, classes=3)
    assert c.edges == (-100.0, -50.0, -25.0, -12.5, 0.0, 0.0, 125.0, 250.0, 500.0, 1000.0)
    assert c.bounds.tolist() == [100, 50, 25, 12.5, 12.5, 125, 250, 500, 1000]  # zero class borrows 12.5
    values = np.array([-100, -50, -50.01, -12.5, -0.001, 0, 0.001, 125, 125.01, 1000])
    assert c.classify(values).tolist() == [0, 1, 0, 3, 3, 4, 5, 5, 6, 8]
    assert c.cost_factor(-100, 1000) == pytest.approx(math.sqrt(float(np.sum(c.bounds**2))) / 1000)


@pytest.mark.parametrize(
    "condition,runs,exact",
    [
        ((0, None, True, False), ((5, 8),), True),  # > 0
        ((None, 0, False, True), ((0, 3),), True),  # < 0
        ((0, 0, False, False), ((4, 4),), True),  # = 0
        ((None, 250, False, False), ((0, 6),), True),  # <= 250
        ((None, 250, False, True), ((0, 6),), False),  # < 250: class (125, 250] holds 250
        ((250, None, True, False), ((7, 8),), True),  # > 250
        ((-25, None, False, False), ((2, 8),), True),  # >= -25: [-25, -12.5) starts there
        ((2000, None, False, False), (), True),  # above the clip range: nothing
    ],
)
def test_conditions_select_covering_classes(condition: tuple, runs: tuple, exact: bool) -> None:
    assert classes_of("log2", -100, 1000, classes=3).runs_for(*condition) == (runs, exact)


@pytest.mark.parametrize(
    "axis,fragment",
    [
        ({"kind": "edges"}, 'kind "edges" needs'),
        ({"kind": "edges", "edges": [5, 2000]}, "within [-100, 1000]"),
        ({"kind": "linear", "classes": 65}, "less than or equal to 64"),
        ({"kind": "linear", "edges": [1, 2]}, 'goes with kind "edges"'),
        ({"kind": "cubic"}, "log2"),
    ],
)
def test_registration_refuses_invalid_axis_specs(prima: Prima, sales_csv: Path, axis: dict, fragment: str) -> None:
    spec = sales_spec(sales_csv)
    spec["measures"][0]["axis"] = axis
    with pytest.raises((Invalid, ValueError), match=re.escape(fragment)):
        prima.register(TableSpec.model_validate(spec))


def test_a_wide_table_axis_on_a_signed_measure_needs_counts(prima: Prima, sales_csv: Path) -> None:
    """cuboids' model answers shift the class sums by the counts per class (`engine.synopses.wide`)."""
    spec = axis_spec(sales_csv, strategy="cuboids")
    spec["measures"][0]["axis"]["count"] = False
    with pytest.raises((Invalid, ValueError), match='needs "count": true'):
        prima.register(TableSpec.model_validate(spec))
    spec["measures"][0]["lo"] = 0  # a measure ≥ 0 needs no shift
    prima.register(TableSpec.model_validate(spec))


@pytest.mark.parametrize(
    "change,fragment",
    [
        ({"cube": {"build": "on_first_query", "strategy": "prima"}}, "SCOPE"),
        ({"cube": {"build": "on_first_query", "strategy": "hdpview"}}, "hdpview"),
        ({"clipping": "clasp"}, "needs fixed clipping"),
    ],
)
def test_axes_are_refused_where_they_cannot_be_sound(
    prima: Prima, sales_csv: Path, change: dict, fragment: str
) -> None:
    spec = axis_spec(sales_csv)
    if "clipping" in change:
        spec["measures"][0]["clipping"] = change["clipping"]
    else:
        spec["cube"] = change["cube"]
        spec["measures"][0]["clipping"] = "fixed"  # (prima would default to clasp, refused on its own)
    with pytest.raises((Invalid, ValueError), match=re.escape(fragment)):
        prima.register(TableSpec.model_validate(spec))


# -- the release ---------------------------------------------------------------------------------
def test_class_sums_add_up_to_the_clipped_sum_cuboid(axis_sales: Prima) -> None:
    record = axis_sales.record("sales")
    plan = steps.plan_build(record, 1.0)
    true = steps.true_cuboids(axis_sales.db, record, plan)
    classes = plan.axes["amount"]
    base = DuckDBEngine(axis_sales.db, record.source_table).base_cuboids(record.spec, plan.bounds)
    np.testing.assert_allclose((true["sum:amount"] * classes.bounds).sum(axis=-1), base["sum:amount"], atol=1e-6)
    np.testing.assert_allclose(true["count:amount"].sum(axis=-1), base["count"])  # no NULL amounts here
    assert np.abs(true["sum:amount"]).max() <= true["count:amount"].max() + 1e-9  # each row adds ≤ 1


@pytest.mark.parametrize("value", [-100.0, -50.0, -0.01, 0.0, 0.01, 125.0, 125.01, 999.99, 1000.0, 5000.0, -700.0])
def test_one_row_moves_the_normalised_release_by_at_most_one(tmp_path: Path, value: float) -> None:
    """Neighbouring tables (one row at a class bound, at 0, at lo, at hi, beyond them) differ by ≤ 1 in L1."""
    spec = TableSpec.model_validate(axis_spec(tmp_path / "x.csv"))
    classes = classes_of("log2", -100, 1000)
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT 30 AS age, 'north' AS region, DATE '2020-05-01' AS day, 3 AS score, "
        "x::DOUBLE AS amount FROM range(0, 40) r(x)"
    )
    engine = DuckDBEngine(_Db(con), "t")
    args = (
        spec,
        {"amount": (-100.0, 1000.0)},
        "amount",
        list(classes.edges),
        classes.closed_above,
        classes.bounds.tolist(),
    )
    counts, before = engine.class_cuboids(*args)
    con.execute(f"INSERT INTO t VALUES (30, 'north', DATE '2020-05-01', 3, {value})")
    counts1, after = engine.class_cuboids(*args)
    con.close()
    assert np.abs(after - before).sum() <= 1.0 + 1e-12
    assert np.abs(counts1 - counts).sum() == 1.0


class _Db:
    """The slice of `storage.database.Database` the DuckDB engine uses, over a bare connection."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def numpy(self, sql: str, params: dict) -> dict:
        return self.con.execute(sql, params).fetchnumpy()


def test_noise_is_at_the_stated_scale_in_every_class() -> None:
    """Identity over the class axis: per (cell, class), the rescaled noise has sd u_k·√2/ε (Laplace of
    the normalised sensitivity 1), checked over many builds."""
    classes = classes_of("log2", 0, 1000, classes=4)
    true = np.zeros((3, classes.count))
    strategy = get_strategy("identity")
    plan_sens, eps = measure_axis.CLASS_SUM_SENSITIVITY, 0.5
    draws = np.array(
        [
            steps.on_class_scale(strategy.measure(true, plan_sens, eps, RandomSource(seed=s)), classes).noisy
            for s in range(3000)
        ]
    )
    observed = draws.reshape(-1, 3, classes.count).std(axis=(0, 1))
    np.testing.assert_allclose(observed, classes.bounds * math.sqrt(2) / eps, rtol=0.05)


# -- answers with noise off ----------------------------------------------------------------------
def _truth(prima: Prima, select: str, where: str = "") -> float:
    cond = DOMAIN + (f" AND {where}" if where else "")
    select = select.replace("amount", "a")
    return float(
        prima.db.run(f"SELECT COALESCE({select}, 0) FROM (SELECT *, {CLIPPED} AS a FROM src.sales WHERE {cond}) s")[0][
            0
        ]
    )


MEASURE_CONDITIONS = [  # (Prima, DuckDB over the clipped value a), class-aligned
    ("amount > 0", "a > 0"),
    ("amount < 0", "a < 0"),
    ("amount = 0", "a = 0"),
    ("amount <= 250", "a <= 250"),
    ("amount > 250", "a > 250"),
    ("amount >= -25", "a >= -25"),
    ("amount BETWEEN -25 AND 125", "a >= -25 AND a <= 125"),
    ("amount > 62.5 AND amount <= 250", "a > 62.5 AND a <= 250"),
    ("(amount < -25 OR amount > 250)", "(a < -25 OR a > 250)"),
    ("250 < amount", "a > 250"),
    ("amount > 1000", "a > 1000"),
    ("amount < -100", "a < -100"),
]


def test_measure_conditions_on_class_aligned_literals_equal_duckdb(axis_sales: Prima) -> None:
    cube = _exact(axis_sales)
    rng = random.Random(5)
    classes = classes_of("log2", -100, 1000)
    aligned = [(f"amount <= {e!r}", f"a <= {e!r}") for e in classes.edges if e > 0] + MEASURE_CONDITIONS
    for prima_cond, duck_cond in aligned:
        dims = rng.choice(["", "age BETWEEN 30 AND 60", "region = 'south'", "score >= 10"])
        where = " AND ".join(x for x in (dims, prima_cond) if x)
        duck_where = " AND ".join(x for x in (dims, duck_cond) if x)
        result = axis_sales.answer_with(
            f"SELECT SUM(amount), COUNT(*), AVG(amount) FROM sales WHERE {where}", lambda _: cube
        )
        s, n = result["rows"][0][:2]
        assert s == pytest.approx(_truth(axis_sales, "SUM(amount)", duck_where), abs=1e-6), where
        assert n == pytest.approx(_truth(axis_sales, "COUNT(*)", duck_where), abs=1e-9), where
        assert not any("does not align" in note for note in result["notes"]), where


def test_unaligned_conditions_are_answered_between_inner_and_covering_classes(axis_sales: Prima) -> None:
    """A condition cutting a class lies between the classes wholly inside it and the
    covering ones; the value is between them and the interval spans both (and holds the truth)."""
    cube = _exact(axis_sales)
    result = axis_sales.answer_with("SELECT SUM(amount), COUNT(*) FROM sales WHERE amount < 300", lambda _: cube)
    classes = classes_of("log2", -100, 1000)
    covering = next(e for e in classes.edges if e >= 300)  # the class holding 300: the wide top class (250, 1000]
    inner = max(e for e in classes.edges if e < 300)  # 250: the classes up to it are wholly inside
    for j, what in enumerate(("SUM(amount)", "COUNT(*)")):
        low, high = _truth(axis_sales, what, f"a <= {inner!r}"), _truth(axis_sales, what, f"a <= {covering!r}")
        truth = _truth(axis_sales, what, "a < 300")
        assert min(low, high) <= result["rows"][0][j] <= max(low, high)
        lo, hi = result["ci95"][0][j]
        assert lo <= truth <= hi and lo <= min(low, high) and max(low, high) <= hi
    assert any("does not align with its classes" in n for n in result["notes"])


@pytest.mark.parametrize(
    "sql,fragment",
    [
        ("SELECT SUM(amount) FROM sales WHERE amount > 0 AND age > amount", "one measure and no dimension"),
        ("SELECT COUNT(*) FROM plain WHERE amount > 3", "need an axis"),
        ("SELECT SUM(amount) FROM sales WHERE amount <> 3", "BETWEEN, IN"),
        ("SELECT SUM(amount) FROM sales WHERE NOT amount > 3", "BETWEEN, IN"),
        ("SELECT SUM(amount) FROM sales WHERE amount > 'x'", "expected a number"),
    ],
)
def test_measure_conditions_refused_with_a_reason(axis_sales: Prima, sales_csv: Path, sql: str, fragment: str) -> None:
    axis_sales.register(TableSpec.model_validate(sales_spec(sales_csv, "plain")))
    with pytest.raises(QueryError) as err:
        axis_sales.plan(sql)
    assert fragment in str(err.value)


def test_count_and_other_measures_under_a_condition_need_their_release(prima: Prima, sales_csv: Path) -> None:
    spec = axis_spec(sales_csv, count=False)
    spec["dimensions"] = [d for d in spec["dimensions"] if d["name"] != "age"]
    spec["measures"].append({"name": "age", "lo": 0, "hi": 100})
    prima.register(TableSpec.model_validate(spec))
    with pytest.raises(QueryError, match='declare "count": true'):
        prima.plan("SELECT COUNT(*) FROM sales WHERE amount > 0")
    with pytest.raises(QueryError, match='declare "count": true'):
        prima.plan("SELECT AVG(amount) FROM sales WHERE amount > 0")
    with pytest.raises(QueryError, match="released per class of its own measure"):
        prima.plan("SELECT SUM(age) FROM sales WHERE amount > 0")
    spec["measures"][1]["axis"] = {"kind": "linear", "classes": 4}
    prima.register(TableSpec.model_validate({**spec, "name": "two"}))
    with pytest.raises(QueryError, match="two measures"):
        prima.plan("SELECT SUM(amount) FROM two WHERE amount > 0 AND age > 50")


# -- builds: ledger, bars, truncation -------------------------------------------------------------
def test_ledger_entries_add_up_to_the_build(axis_sales: Prima) -> None:
    axis_sales.build("sales")
    entries = axis_sales.ledger_entries("sales")
    purposes = [e["purpose"] for e in entries]
    assert any("SUM(amount)" in p for p in purposes) and any("COUNT(*) per class of amount" in p for p in purposes)
    assert sum(e["epsilon"] for e in entries) == pytest.approx(1.0, abs=1e-12)
    status = axis_sales.cube_status("sales")
    axis = status["clipping"]["amount"]["axis"]
    assert axis["kind"] == "log2" and axis["cost_factor"] == pytest.approx(1.046, abs=0.001)  # √(13/12 + …)
    assert status["aggregates"]["SUM(amount)"]["sensitivity"] == 1.0


def test_truncation_is_deterministic_after_restart_and_never_reads_the_source(tmp_path: Path) -> None:
    csv = write_sales_csv(tmp_path / "sales.csv")
    sql = "SELECT SUM(amount) FROM sales WHERE age BETWEEN 30 AND 33 AND region = 'east'"
    first = Prima(tmp_path / "data", seed=3)
    first.register(TableSpec.model_validate(axis_spec(csv)))
    first.build("sales")
    a = first.query(sql)
    first.db.run("DROP TABLE src.sales")  # nothing at query time may read rows
    assert first.query(sql)["rows"] == a["rows"]
    first.close()
    again = Prima(tmp_path / "data")
    b = again.query(sql)
    assert b["rows"] == a["rows"] and b["ci95"] == a["ci95"] and b["truncation"] == a["truncation"]
    untruncated = again.query(sql, AnswerOptions(truncate=False))
    assert "truncation" not in untruncated
    again.close()


def _build_cube(true: dict[str, np.ndarray], classes: measure_axis.MeasureClasses, strategy: str, seed: int) -> Cube:
    """A cube of a SUM released over a class axis, as a build makes it (rescaled, class-axis error)."""
    m = get_strategy(strategy).measure(true["sum"], 1.0, 1.0, RandomSource(seed=seed), nonnegative=True)
    m = steps.on_class_scale(m, classes)
    return Cube("t", str(seed), {"sum": prefix_sums(m.noisy)}, {"sum": m.error}, {})


@pytest.mark.parametrize("strategy", ["identity", "marginals", "hierarchical"])
def test_bars_and_truncated_intervals_cover_over_200_builds(strategy: str) -> None:
    """Untruncated bars cover 93–97 % (exact for linear strategies); truncated asymmetric intervals
    cover ≥ 93 %, on a heavy-tailed measure where truncation drops classes."""
    rng = np.random.default_rng(0)  # data, not noise
    shape, classes = (6, 5), classes_of("log2", 0, 100_000)
    rows = 3000
    cells = rng.integers(0, 6, rows), rng.integers(0, 5, rows)
    values = np.where(rng.random(rows) < 0.85, 0.0, np.minimum(np.exp(rng.normal(6, 2, rows)), 100_000))
    k, w = measure_axis.normalised_weights(values, classes)
    true = np.zeros(shape + (classes.count,))
    np.add.at(true, (*cells, k), w)
    boxes = [(((0, 5),), ((0, 4),)), (((1, 2),), ((0, 4),)), (((3, 3),), ((2, 3),)), (((0, 5),), ((1, 1),))]
    truths = [
        float(
            values[
                (cells[0] >= b[0][0][0])
                & (cells[0] <= b[0][0][1])
                & (cells[1] >= b[1][0][0])
                & (cells[1] <= b[1][0][1])
            ].sum()
        )
        for b in boxes
    ]
    hits_plain = hits_cut = total = dropped = 0
    for seed in range(200):
        cube = _build_cube({"sum": true}, classes, strategy, seed)
        for box, t in zip(boxes, truths):
            sel = box + (((0, classes.count - 1),),)
            v, sd = cube.total("sum", sel), math.sqrt(cube.variance("sum", sel))
            hits_plain += abs(v - t) <= 1.959963984540054 * sd
            cut = truncated_sum(cube, "sum", sel, classes)
            hits_cut += cut.ci95[0] <= t <= cut.ci95[1]
            dropped += cut.classes_dropped > 0
            total += 1
    assert 0.93 <= hits_plain / total <= 0.97, hits_plain / total
    assert hits_cut / total >= 0.93, hits_cut / total
    assert dropped / total > 0.5  # the test exercises truncation


def test_truncated_answers_beat_untruncated_ones_on_a_heavy_tail(axis_sales: Prima) -> None:
    """Not a bar check — the point of the feature: on small regions the truncated SUM is closer."""
    rng = np.random.default_rng(1)
    classes = classes_of("log2", 0, 100_000)
    shape = (20, 8)
    rows = 20_000
    cells = rng.integers(0, shape[0], rows), rng.integers(0, shape[1], rows)
    values = np.where(rng.random(rows) < 0.92, 0.0, np.minimum(np.exp(rng.normal(7, 1.5, rows)), 100_000))
    k, w = measure_axis.normalised_weights(values, classes)
    true = np.zeros(shape + (classes.count,))
    np.add.at(true, (*cells, k), w)
    errors_cut, errors_plain = [], []
    for seed in range(5):
        cube = _build_cube({"sum": true}, classes, "identity", seed)
        for a in range(shape[0]):
            sel = (((a, a),), ((2, 3),), ((0, classes.count - 1),))
            t = float(values[(cells[0] == a) & (cells[1] >= 2) & (cells[1] <= 3)].sum())
            errors_plain.append(abs(cube.total("sum", sel) - t))
            errors_cut.append(abs(truncated_sum(cube, "sum", sel, classes).value - t))
    assert np.median(errors_cut) < 0.5 * np.median(errors_plain)


def test_preview_reports_the_axis_cost(prima: Prima, sales_csv: Path) -> None:
    spec = axis_spec(sales_csv)
    spec["measures"][0]["nullable"] = False  # no COUNT(amount) share: the SUM's share is 0.4 in both
    out = prima.register(TableSpec.model_validate(spec), dry_run=True)
    axes = out["preview"]["measure_axes"]["amount"]
    assert axes["classes"] == len(axes["edges"]) - 1 and 1.0 < axes["cost_factor"] < 1.25
    plain = sales_spec(sales_csv)
    plain["dimensions"] = spec["dimensions"]
    plain["measures"][0]["nullable"] = False
    plain["cube"] = {
        "build": "on_first_query",
        "strategy": "identity",
        "weights": {"count": 1.5, "amount": 1.0},
    }  # the same SUM share, 0.4
    plain = prima.register(TableSpec.model_validate(plain), dry_run=True)
    sds = [p["preview"]["expected_errors"]["SUM(amount)"]["total_stddev"] for p in (out, plain)]
    assert sds[0] / sds[1] == pytest.approx(axes["cost_factor"], rel=1e-3)  # identity: exactly the cost factor


def test_pairwise_answers_over_an_axis_with_bars(tmp_path: Path) -> None:
    csv = write_sales_csv(tmp_path / "sales.csv", rows=2000)
    prima = Prima(tmp_path / "data", seed=9)
    spec = axis_spec(csv, strategy="pairwise")
    spec["dimensions"] = spec["dimensions"][:2]
    prima.register(TableSpec.model_validate(spec))
    a = prima.query("SELECT SUM(amount), COUNT(*) FROM sales WHERE amount > 0 AND age BETWEEN 20 AND 40")
    assert all(sd is not None and sd > 0 for sd in a["stddev"][0])
    g = prima.query("SELECT region, SUM(amount) FROM sales WHERE amount > 125 GROUP BY region")
    assert len(g["rows"]) == 4 and all(row[1] is not None for row in g["rows"])
    prima.close()


def test_plan_reads_add_the_class_axis() -> None:
    plan = QueryPlan("t", (), (((0, 1),),), class_axes=(("m", 5),), measure_filter=("m", ((2, 4),)))
    from engine.plan import Aggregate

    (key, sel), (ckey, csel) = plan.reads(Aggregate("sum", "m", "s"))
    assert key == "sum:m" and sel == (((0, 1),), ((2, 4),))
    assert ckey == "count:m" and csel == sel
    plan = QueryPlan("t", (), (((0, 1),),), class_axes=(("m", 5),))
    (key, sel), (ckey, csel) = plan.reads(Aggregate("avg", "m", "a"))
    assert sel == (((0, 1),), ((0, 4),)) and ckey == "count" and csel == (((0, 1),),)


def test_the_sql_guide_examples_run(prima: Prima, tmp_path: Path) -> None:
    """docs/sql.md "Conditions on measures": its registration, and every example answers."""
    import json
    import re

    guide = (Path(__file__).resolve().parents[1] / "docs" / "sql.md").read_text()
    section = guide[guide.index("## Conditions on measures") :]
    spec = json.loads(re.search(r"```json\n(.*?)```", section, re.S).group(1))
    rng = np.random.default_rng(4)  # data, not noise
    csv = tmp_path / "pay.csv"
    bonus = np.where(rng.random(3000) < 0.6, 0.0, np.round(np.exp(rng.normal(8, 1.2, 3000)), 2))
    regions = rng.choice(["north", "south", "east", "west"], 3000)
    csv.write_text(
        "age,region,bonus\n" + "".join(f"{a},{r},{b}\n" for a, r, b in zip(rng.integers(18, 91, 3000), regions, bonus))
    )
    spec["source"]["csv"] = str(csv)
    prima.register(TableSpec.model_validate(spec))
    prima.build(spec["name"])  # the admin builds a registered table (the guide says so)
    examples = re.search(r"```sql\n(.*?)```", section, re.S).group(1).strip().splitlines()
    assert len(examples) >= 8
    for sql in examples:
        result = prima.query(sql)
        assert result["rows"] and all(v is not None for v in result["rows"][0]), sql


def test_grouped_sums_are_truncated_per_group_like_single_queries(axis_sales: Prima) -> None:
    grouped = axis_sales.query("SELECT region, SUM(amount) FROM sales WHERE age < 40 GROUP BY region")
    assert "truncation" in grouped
    for row, sd, ci in zip(grouped["rows"], grouped["stddev"], grouped["ci95"]):
        one = axis_sales.query(f"SELECT SUM(amount) FROM sales WHERE age < 40 AND region = '{row[0]}'")
        assert one["rows"][0][0] == pytest.approx(row[1])
        assert one["stddev"][0][0] == pytest.approx(sd[1]) and one["ci95"][0][0] == pytest.approx(ci[1])
    plain = axis_sales.query(
        "SELECT region, SUM(amount) FROM sales WHERE age < 40 GROUP BY region", AnswerOptions(truncate=False)
    )
    total = axis_sales.query("SELECT SUM(amount) FROM sales WHERE age < 40", AnswerOptions(truncate=False))
    assert sum(r[1] for r in plain["rows"]) == pytest.approx(total["rows"][0][0])  # untruncated: additive


@pytest.mark.parametrize("strategy", ["identity", "marginals", "hierarchical-forced"])
def test_class_axis_variances_equal_the_inner_models_covariances(strategy: str) -> None:
    """The weighted closed forms of `ClassAxisError` against Σ_kk' u_k u_k' Cov(X_k, X_k'), each
    covariance from the strategy's own model on unweighted class runs; grouped = one group at a time."""
    from privacy.estimation.error import ClassAxisError
    from privacy.strategies.hierarchical import HierarchicalStrategy

    shape, u = (6, 5, 4), np.array([1.0, 3.0, 8.0, 20.0])
    chosen = (
        HierarchicalStrategy(branching=(2, None, 2)) if strategy == "hierarchical-forced" else get_strategy(strategy)
    )
    inner = chosen.measure(np.ones(shape), 1.0, 1.0, RandomSource(seed=1), nonnegative=True).error
    model = ClassAxisError(inner, tuple(u))
    dims = (((1, 3),), ((0, 4),))
    runs = ((1, 3),)
    cells = [k for lo, hi in runs for k in range(lo, hi + 1)]

    def var(ks: list[int]) -> float:
        return inner.variance(dims + (cell_runs(ks),))

    brute = sum(
        u[a] * u[b] * (var([a]) if a == b else (var([a, b]) - var([a]) - var([b])) / 2) for a in cells for b in cells
    )
    assert model.variance(dims + (runs,)) == pytest.approx(brute, rel=1e-9)
    assert model.variance(dims + (runs,), normalised=True) == pytest.approx(var(cells), rel=1e-9)
    grouped = model.grouped_variance(dims + (runs,), [np.arange(1, 4)], (0,))
    single = [model.variance((((i, i),), dims[1], runs)) for i in range(1, 4)]
    np.testing.assert_allclose(grouped, single, rtol=1e-9)


def test_the_api_takes_truncate_false(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from app.config import Settings
    from app.http.app import create_app
    from tests.conftest import ADMIN_TOKEN, admin_headers

    csv = write_sales_csv(tmp_path / "sales.csv", rows=1500)
    settings = Settings(data_dir=tmp_path / "data", admin_token=ADMIN_TOKEN, import_dir=tmp_path, demo=False)
    with TestClient(create_app(settings)) as client:
        r = client.post("/v1/admin/tables", json=axis_spec(csv), headers=admin_headers())
        assert r.status_code == 201 and r.json()["preview"]["measure_axes"]["amount"]["cost_factor"] > 1
        sql = "SELECT SUM(amount) FROM sales WHERE amount > 0"
        cut = client.post("/v1/query", json={"sql": sql}).json()
        plain = client.post("/v1/query", json={"sql": sql, "truncate": False}).json()
        assert "truncation" in cut and "truncation" not in plain
        # a table that does not ask (another file: a budget of its own): untruncated, unless a query does
        untold = axis_spec(write_sales_csv(tmp_path / "other.csv", rows=1500, seed=9), name="untold")
        del untold["answers"]
        assert client.post("/v1/admin/tables", json=untold, headers=admin_headers()).status_code == 201
        sql_untold = sql.replace("FROM sales", "FROM untold")
        assert "truncation" not in client.post("/v1/query", json={"sql": sql_untold}).json()
        assert "truncation" in client.post("/v1/query", json={"sql": sql_untold, "truncate": True}).json()
        assert plain["ci95"][0][0][1] - plain["rows"][0][0] == pytest.approx(
            plain["rows"][0][0] - plain["ci95"][0][0][0]
        )
        bad = client.post("/v1/query", json={"sql": "SELECT COUNT(*) FROM sales WHERE age > amount"})
        assert bad.status_code == 400 and "one measure and no dimension" in bad.json()["detail"]


def test_an_axis_with_no_cube_section_previews_registers_builds_and_answers(prima: Prima, sales_csv: Path) -> None:
    """The default strategy ("auto") carries a measure axis (it was a 500 at preview)."""
    spec = axis_spec(sales_csv)
    del spec["cube"]
    preview = prima.register(TableSpec.model_validate(spec), dry_run=True)["preview"]
    assert preview["expected_errors"]["SUM(amount)"]["total_stddev"] > 0
    prima.register(TableSpec.model_validate(spec))
    prima.build("sales")
    a = prima.query("SELECT SUM(amount), COUNT(*), AVG(amount) FROM sales WHERE amount > 100")
    assert all(sd is not None and sd > 0 for sd in a["stddev"][0])
    g = prima.query("SELECT region, SUM(amount) FROM sales GROUP BY region")
    assert len(g["rows"]) == 4 and all(row[1] is not None for row in g["rows"])


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT DATE_TRUNC('year', day) AS y, SUM(amount) FROM sales GROUP BY 1",
        "SELECT DATE_TRUNC('quarter', day) AS q, SUM(amount) FROM sales WHERE region = 'east' GROUP BY 1",
        "SELECT DATE_TRUNC('year', day) AS y, SUM(amount) FROM sales WHERE amount BETWEEN 0 AND 499 GROUP BY 1",
    ],
)
def test_coarse_date_groups_of_a_truncated_sum_merge_their_truncation_facts(axis_sales: Prima, sql: str) -> None:
    """Superset's most basic chart: each coarse group is answered as one query whose truncation facts
    are a single row's; merged, they are the grouped form (once a KeyError, a 500)."""
    got = axis_sales.query(sql)
    facts = got["truncation"]["sum(amount)"]
    assert set(facts) == {"groups_truncated", "tau_min", "tau_max"}
    assert 0 <= facts["groups_truncated"] <= len(got["rows"]) and facts["tau_min"] <= facts["tau_max"]
    assert [r[0] for r in got["rows"]][:2] in (["2020-01", "2021-01"], ["2020-01", "2020-04"])


def test_a_cut_class_without_counts_is_refused_naming_the_class(prima: Prima, sales_csv: Path) -> None:
    """A SUM whose measure condition cuts a class is bounded by the cut part's rows; an axis without
    counts per class releases none, so the refusal (0A000, not a KeyError's 500) names the class and
    what works instead; at the class edges the same SUM answers."""
    prima.register(TableSpec.model_validate(axis_spec(sales_csv, count=False)))
    with pytest.raises(QueryError) as refused:
        prima.query("SELECT SUM(amount) FROM sales WHERE amount BETWEEN 0 AND 100")
    assert refused.value.sqlstate == "0A000" and "the class 62.5 to 125 of 'amount'" in refused.value.detail
    assert "class edges" in refused.value.detail and '"count": true' in refused.value.detail
    assert prima.query("SELECT SUM(amount) FROM sales WHERE amount <= 125")["rows"][0][0] is not None


def test_a_linear_axis_over_zero_has_a_zero_class(prima: Prima, tmp_path: Path) -> None:
    """Hours worked over [0, 52] with 47 % zeros: `work = 0` and `work > 0` select whole classes, so
    with noise off they are SQL's answers (before, 0 shared the class [0, 3.25] with 1–3 hours: an
    interpolated answer whose interval spanned [0, twice the truth]). Registration records the choice
    (a stored spec keeps the classes its cubes were built with); `"zero": false` keeps the old classes."""
    rng = np.random.default_rng(11)  # test data, not noise
    path = tmp_path / "work.csv"
    rows = [
        f"{a},{int(w) if rng.random() > 0.47 else 0}"
        for a, w in zip(rng.integers(18, 80, 3000), rng.integers(1, 53, 3000))
    ]
    path.write_text("age,work\n" + "\n".join(rows) + "\n")

    def spec(name: str, **axis: object) -> TableSpec:
        return TableSpec.model_validate(
            {
                "name": name,
                "source": {"csv": str(path)},
                "dimensions": [{"name": "age", "type": "int", "lo": 18, "hi": 79}],
                "measures": [{"name": "work", "lo": 0, "hi": 52, "axis": {"kind": "linear", "count": True, **axis}}],
                "epsilon": 1.0,
                "cube": {"build": "on_first_query", "strategy": "identity"},
            }
        )

    info = prima.register(spec("hours"))
    assert prima.spec("hours").measures[0].axis.zero is True
    assert info["preview"]["measure_axes"]["work"]["edges"][:3] == [0.0, 0.0, 3.25]
    cube = steps.exact_cube(prima.db, prima.record("hours"))
    for cond in ("work = 0", "work > 0", "work <= 0", "work > 3.25 AND age < 40"):
        got = prima.answer_with(f"SELECT SUM(work), COUNT(*) FROM hours WHERE {cond}", lambda _: cube)
        want = prima.db.run(f"SELECT COALESCE(SUM(work), 0), COUNT(*) FROM src.hours WHERE {cond}")[0]
        assert got["rows"][0] == [pytest.approx(float(want[0])), float(want[1])], cond
        assert not any("does not align" in note for note in got["notes"]), cond
    prima.register(spec("old", zero=False))
    cube = steps.exact_cube(prima.db, prima.record("old"))
    got = prima.answer_with("SELECT COUNT(*) FROM old WHERE work = 0", lambda _: cube)
    assert any("does not align" in note for note in got["notes"])
    with pytest.raises(ValueError, match='"zero" goes with axis kind "linear"'):
        MeasureAxis.model_validate({"kind": "log2", "zero": True})
