"""Wide tables: registration up to 32 dimensions, cuboid answers equal to DuckDB's with the
noise off, model answers that fit every collapsed pair (tree models: equal to brute force), exact bars that
cover, persistence, and the whole SQL surface on the cuboid path."""

from __future__ import annotations

import csv
import itertools
import math
from pathlib import Path

import duckdb
import numpy as np
import pytest

from engine.errors import TooLarge
from engine.service import Prima
from engine.synopses.wide import WideCube
from privacy.estimation.cuboid_fit import CuboidLattice, default_cuboids, true_marginals
from privacy.estimation.tree_model import (
    TreeTables,
    box_total,
    box_totals,
    collapsed_fit,
    collapsed_totals,
    spanning_trees,
)
from privacy.mechanisms.sampler import RandomSource
from privacy.strategies.cuboids import CuboidsStrategy
from storage.schema import CubeConfig, TableSpec
from tests.conftest import dataset

D = 9
SIZES = [4, 3, 5, 2, 6, 3, 4, 2, 3]
ROWS = 6000


def _write(path: Path) -> Path:
    """Correlated columns (each depends on the one before), a signed measure and out-of-domain rows."""
    rng = np.random.default_rng(5)  # test data, not noise
    cols = [rng.integers(0, SIZES[0], ROWS)]
    for n in SIZES[1:]:
        cols.append(np.where(rng.random(ROWS) < 0.6, cols[-1] % n, rng.integers(0, n, ROWS)))
    cols[4][:50] = 99  # outside the declared domain of d4
    amount = np.round(rng.normal(20, 30, ROWS), 2)
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([f"d{i}" for i in range(D)] + ["amount"])
        w.writerows(zip(*cols, amount))
    return path


def _spec(csv_path: Path, name: str = "wide", outside: str = "keep", **cube: object) -> TableSpec:
    return TableSpec.model_validate(
        {
            "name": name,
            "source": {"csv": str(csv_path)},
            "epsilon": 1.0,
            "dimensions": [
                {"name": f"d{i}", "type": "int", "lo": 0, "hi": n - 1, "outside": outside} for i, n in enumerate(SIZES)
            ],
            "measures": [{"name": "amount", "lo": -40, "hi": 100}],
            "cube": {"strategy": "cuboids", **cube},
        }
    )


@pytest.fixture(scope="module")
def wide_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("wide") / "wide.csv")


def _duck(csv_path: Path, sql: str) -> list[tuple]:
    return duckdb.sql(sql.replace("FROM wide", f"FROM read_csv('{csv_path}')")).fetchall()


IN_DOMAIN = " AND ".join(f"d{i} BETWEEN 0 AND {n - 1}" for i, n in enumerate(SIZES))


def _clipped(sql: str, domain: bool = False) -> str:
    """The same query with the measure clipped, over every row (``domain``: the rows inside every
    domain, what a cube whose dimensions exclude outside rows holds)."""
    sql = sql.replace("SUM(amount)", "SUM(LEAST(GREATEST(amount, -40), 100))")
    sql = sql.replace("AVG(amount)", "AVG(LEAST(GREATEST(amount, -40), 100))")
    if not domain:
        return sql
    if " WHERE " in sql:
        return sql.replace(" WHERE ", f" WHERE {IN_DOMAIN} AND ")
    return sql.replace("FROM wide", f"FROM wide WHERE {IN_DOMAIN}", 1)


CUBOID_QUERIES = [  # constrained + grouped columns inside one measured cuboid
    "SELECT COUNT(*), SUM(amount), AVG(amount) FROM wide",
    "SELECT COUNT(*), SUM(amount) FROM wide WHERE d2 BETWEEN 1 AND 3",
    "SELECT COUNT(*), SUM(amount) FROM wide WHERE d0 IN (0, 2, 3) AND d4 >= 2",
    "SELECT d5, COUNT(*), SUM(amount) FROM wide WHERE d1 < 2 GROUP BY d5 ORDER BY d5",
    "SELECT d0, d7, COUNT(*) FROM wide GROUP BY d0, d7 ORDER BY d0, d7",
    "SELECT COUNT(*), SUM(amount) FROM wide WHERE d0 < 3 AND d1 > 0 AND d2 BETWEEN 1 AND 4",  # named 3-way
]


def test_cuboid_answers_equal_duckdb_with_noise_off(tmp_path: Path, wide_csv: Path) -> None:
    prima = Prima(tmp_path / "data")
    prima.register(_spec(wide_csv, cuboids=[["d0", "d1", "d2"]]))
    for sql in CUBOID_QUERIES:
        got = prima.answer_with(sql, prima.exact_cube)
        want = _duck(wide_csv, _clipped(sql))
        assert not [n for n in got["notes"] if "model fitted" in n], sql
        rows = _without_null_groups(sql, got["rows"])
        assert len(rows) == len(want), sql
        for row, expected in zip(rows, want):
            assert row == pytest.approx(list(expected), rel=1e-9, abs=1e-6), sql
    prima.close()


def _without_null_groups(sql: str, rows: list[list]) -> list[list]:
    """The groups SQL lists: Prima also shows each NULL group (empty in these files: a count of 0)."""
    if "GROUP BY" not in sql:
        return rows
    keys = sql.split("GROUP BY")[1].count(",") + 1
    return [r for r in rows if None not in r[:keys]]


def _brute_force(tables: TreeTables, tree: tuple, axes: tuple[int, ...], cells: dict[int, np.ndarray]) -> np.ndarray:
    """The tree model materialised over the query's columns, cell by cell (Π P_ij / Π P_i^(deg−1))."""
    shape = [tables.ones[a].shape[1] for a in axes]
    degree = {a: sum(a in e for e in tree) for a in axes}
    joint = np.zeros(shape)
    for index in itertools.product(*[range(n) for n in shape]):
        x = dict(zip(axes, index))
        p = math.prod(tables.joint(i, j)[0, x[i], x[j]] for i, j in tree)
        for a in axes:
            if degree[a] > 1:
                p /= tables.joint(a, next(b for e in tree for b in e if a in e and b != a))[0].sum(axis=1)[x[a]] ** (
                    degree[a] - 1
                )
        joint[index] = p * tables.total[0]
    return joint[np.ix_(*[cells[a] for a in axes])]


def test_model_answers_fit_every_collapsed_pair_and_come_near_the_truth(tmp_path: Path, wide_csv: Path) -> None:
    """Noise off: a query on 4 columns is answered by the all-pairs model collapsed to the query —
    its fitted table reproduces each collapsed pair table of the data (they are consistent), the
    answer is that table's inside cell, a GROUP BY's groups come near the ungrouped answer, and the
    answer says it is a model estimate."""
    prima = Prima(tmp_path / "data")
    prima.register(_spec(wide_csv, outside="exclude"))  # the cells below are the declared ones
    cube = prima.exact_cube("wide")
    assert isinstance(cube, WideCube)
    sql = "SELECT COUNT(*) FROM wide WHERE d0 < 3 AND d3 = 1 AND d5 >= 1 AND d8 IN (0, 2)"
    got = prima.answer_with(sql, lambda _: cube)
    assert any("model fitted to the measured 2-way cuboids" in n for n in got["notes"])
    model = cube._model("count")
    axes = (0, 3, 5, 8)
    cells = {0: np.arange(3), 3: np.array([1]), 5: np.array([1, 2]), 8: np.array([0, 2])}
    maps = {
        a: np.stack([np.isin(np.arange(SIZES[a]), cells[a]), ~np.isin(np.arange(SIZES[a]), cells[a])], axis=1).astype(
            float
        )
        for a in axes
    }
    converged = collapsed_fit(model.main, axes, maps, iterations=1000, tolerance=1e-14)[0]
    for x, y in itertools.combinations(range(4), 2):
        pair = maps[axes[x]].T @ model.main.joint(axes[x], axes[y])[0] @ maps[axes[y]]
        assert converged.sum(axis=tuple(z for z in range(4) if z not in (x, y))) == pytest.approx(pair, abs=1e-9)
    p = collapsed_fit(model.main, axes, maps)[0]  # the rounds an answer runs: within 0.1 % of the fixed point
    assert got["rows"][0][0] == pytest.approx(model.main.total[0] * p[0, 0, 0, 0], rel=1e-9)
    assert p[0, 0, 0, 0] == pytest.approx(converged[0, 0, 0, 0], rel=1e-3)
    grouped = prima.answer_with(
        "SELECT d5, d0, COUNT(*) FROM wide WHERE d0 < 3 AND d3 = 1 AND d5 >= 1 AND d8 IN (0, 2) GROUP BY d5, d0",
        lambda _: cube,
    )
    assert len(grouped["rows"]) >= 6
    assert sum(r[2] for r in grouped["rows"] if None not in r[:2]) == pytest.approx(got["rows"][0][0], rel=0.05)
    # the truth is near: these columns are correlated in a chain, which pairs can hold
    truth = _duck(wide_csv, _clipped(sql, domain=True))[0][0]
    assert abs(got["rows"][0][0] - truth) < 0.25 * truth
    prima.close()


def test_tree_box_totals_match_brute_force_on_random_trees() -> None:
    rng = np.random.default_rng(0)
    shape = (3, 4, 2, 5, 3)
    x = rng.poisson(2.0, shape).astype(float)
    m = true_marginals(x, default_cuboids(len(shape)))
    tables = TreeTables.fitted(
        x.sum(), {s[0]: a for s, a in m.items() if len(s) == 1}, {s: a for s, a in m.items() if len(s) == 2}
    )
    axes = (0, 1, 3, 4)
    weights = {e: tables.mutual_information(*e) for e in itertools.combinations(axes, 2)}
    trees = spanning_trees(axes, weights)
    assert len({frozenset(t) for t in trees}) == len(trees) > 1
    cells = {0: np.array([0, 2]), 1: np.array([1, 2, 3]), 3: np.array([0, 4]), 4: np.array([1])}
    for tree in trees:
        box = _brute_force(tables, tree, axes, cells)
        assert float(box_total(tables, tree, axes, cells)) == pytest.approx(box.sum(), rel=1e-9)
        grouped = box_total(tables, tree, axes, cells, (3, 0))
        assert np.allclose(grouped, box.sum(axis=(1, 3)).T)
    other = TreeTables.fitted(
        x.sum() / 2,
        {s[0]: a[::-1] for s, a in m.items() if len(s) == 1},
        {s: a[::-1] for s, a in m.items() if len(s) == 2},
    )
    batch = TreeTables.stacked([tables, other])  # replicates are evaluated as one batch
    for group in ((), (4, 1)):
        both = box_totals(batch, trees[0], axes, cells, group)
        assert np.allclose(both[0], box_total(tables, trees[0], axes, cells, group))
        assert np.allclose(both[1], box_total(other, trees[0], axes, cells, group))


def test_collapsed_totals_of_independent_columns_are_products_for_any_grouping() -> None:
    """Independent columns: the collapsed all-pairs model is the product of the 1-way tables, for
    totals and for every grouping order, and replicates are evaluated as one batch."""
    rng = np.random.default_rng(2)
    shape = (3, 4, 2, 5)
    ones = [rng.dirichlet(np.ones(n)) for n in shape]
    x = 1000.0 * np.einsum("a,b,c,d->abcd", *ones)
    m = true_marginals(x, default_cuboids(len(shape)))
    tables = TreeTables.fitted(
        x.sum(), {s[0]: a for s, a in m.items() if len(s) == 1}, {s: a for s, a in m.items() if len(s) == 2}
    )
    axes = (0, 1, 3)
    cells = {0: np.array([0, 2]), 1: np.array([1, 2, 3]), 3: np.array([0, 4])}
    box = x[np.ix_(cells[0], cells[1], np.arange(2), cells[3])].sum(axis=2)  # (d0, d1, d3)
    assert collapsed_totals(tables, axes, cells)[0] == pytest.approx(box.sum(), rel=1e-9)
    assert np.allclose(collapsed_totals(tables, axes, cells, (3, 0))[0], box.sum(axis=1).T)
    assert np.allclose(collapsed_totals(tables, axes, cells, (1,))[0], box.sum(axis=(0, 2)))
    batch = TreeTables.stacked([tables, tables])
    assert np.allclose(collapsed_totals(batch, axes, cells, (0, 1))[1], box.sum(axis=2))


def test_least_squares_equals_the_full_lattice_solution_marginals() -> None:
    """Eq. 2 of privacy.estimation.cuboid_fit without the base = the full least squares' marginals (unidentified → 0)."""
    from privacy.estimation.lattice import reconstruct

    rng = np.random.default_rng(1)
    shape = (3, 4, 5, 2)
    cuboids = default_cuboids(4, [(0, 1, 2)])
    variances = rng.uniform(1, 3, len(cuboids))
    noisy = [rng.normal(size=[shape[i] for i in s]) for s in cuboids]
    est = CuboidLattice(shape, cuboids, variances).estimate(noisy)
    full = reconstruct(
        shape,
        [frozenset(s) for s in cuboids],
        [1 / v for v in variances],
        [y.reshape([shape[i] if i in s else 1 for i in range(4)]) for s, y in zip(cuboids, noisy)],
    )
    for s in cuboids:
        assert np.allclose(full.sum(axis=tuple(i for i in range(4) if i not in s)), est[s])


def test_exact_bars_cover_93_to_97_percent_over_200_builds() -> None:
    """Acceptance 3 (#17): queries inside a measured cuboid, 200 seeded builds of a 10-D table."""
    rng = np.random.default_rng(3)
    shape = (5, 4, 6, 3, 4, 5, 2, 3, 4, 6)
    base_cuboids = default_cuboids(len(shape))
    x = rng.poisson(0.05, shape).astype(float)
    true = true_marginals(x, base_cuboids)
    strategy = CuboidsStrategy(bootstrap=0)
    queries = []
    for k in range(12):
        axes = sorted(rng.choice(len(shape), size=1 + k % 2, replace=False))
        sel = [((0, n - 1),) for n in shape]
        for a in axes:
            lo = int(rng.integers(0, shape[a]))
            sel[a] = ((lo, int(rng.integers(lo, shape[a]))),)
        queries.append(sel)
    exact = WideCube("t", "exact", shape, releases={"v": strategy.measure(true, 1.0, 1.0, _NoiseOff()).noisy})
    truths = [exact.total("v", q) for q in queries]
    covered = 0
    for b in range(200):
        cube = WideCube(
            "t", str(b), shape, releases={"v": strategy.measure(true, 1.0, 1.0, RandomSource(seed=900 + b)).noisy}
        )
        for q, t in zip(queries, truths):
            covered += abs(cube.total("v", q) - t) <= 1.959964 * math.sqrt(cube.variance("v", q))
    rate = covered / (200 * len(queries))
    print(f"\ncuboid answers: 95 % intervals covered {rate:.3f}")
    assert 0.93 <= rate <= 0.97


class _NoiseOff(RandomSource):
    def words(self, n: int) -> np.ndarray:
        return np.full(n, 2**62, dtype=np.uint64)


def test_a_wide_table_builds_persists_and_answers_the_sql_surface(tmp_path: Path, wide_csv: Path) -> None:
    prima = Prima(tmp_path / "data", seed=3)
    narrow = _spec(wide_csv, name="narrow", strategy="auto").model_dump()
    narrow["dimensions"] = narrow["dimensions"][:3]
    info = prima.register(TableSpec.model_validate(narrow))
    assert info["preview"]["strategy"] == "auto"  # a small dense cube keeps the dense default (pairwise or marginals)
    info = prima.register(_spec(wide_csv, name="wide2", strategy="auto"))
    assert (
        info["preview"]["strategy"] == "cuboids" and info["preview"]["stored_bytes"] < 800_000
    )  # 1-/2-way, and the largest triples picks could be
    assert math.isnan(info["preview"]["expected_errors"]["COUNT(*)"]["total_stddev"]) is False
    status, built = prima.build("wide2")
    assert built and status["strategy"] == "cuboids"
    assert status["aggregates"]["COUNT(*)"]["cuboids"]["measured"][D] == ["d0", "d1"]
    queries = [
        "SELECT COUNT(*) AS n, SUM(amount) FROM wide2 WHERE d2 BETWEEN 1 AND 3",
        "SELECT d1, AVG(amount) FROM wide2 GROUP BY d1 ORDER BY 2 DESC LIMIT 2",
        "SELECT COUNT(*) FROM wide2 WHERE d0 < 2 AND d4 > 1 AND d6 = 1",
    ]
    before = [prima.query(q) for q in queries]
    assert before[0]["columns"] == ["n", "sum(amount)"] and before[0]["stddev"][0][0] > 0
    assert len(before[1]["rows"]) == 2 and any("model fitted" in n for n in before[2]["notes"])
    assert before[2]["stddev"][0][0] > 0
    assert prima.budget("wide2")["epsilon_spent"] == pytest.approx(1.0)
    prima.close()
    again = Prima(tmp_path / "data", seed=3)  # restart: the persisted synopsis answers identically
    after = [again.query(q) for q in queries]
    for a, b in zip(before, after):
        assert a["rows"] == b["rows"] and a["stddev"] == b["stddev"]
    again.close()


def test_thirty_two_dimensions_register_and_the_limit_says_what_to_do(tmp_path: Path, wide_csv: Path) -> None:
    prima = Prima(tmp_path / "data")
    dims = [{"name": f"d{i}", "type": "int", "lo": 0, "hi": 9} for i in range(32)]
    body = {"name": "t32", "source": {"csv": str(wide_csv)}, "epsilon": 1.0, "dimensions": dims}
    preview = prima.register(TableSpec.model_validate(body), dry_run=True)["preview"]
    assert preview["strategy"] == "cuboids" and preview["stored_bytes"] < 20 * 2**20
    with pytest.raises(ValueError):
        TableSpec.model_validate(body | {"dimensions": dims + [{"name": "x", "type": "int", "lo": 0, "hi": 1}]})
    big = body | {"dimensions": [{"name": f"d{i}", "type": "int", "lo": 0, "hi": 999} for i in range(32)]}
    with pytest.raises(TooLarge, match="cuboids"):
        prima.register(TableSpec.model_validate(big), dry_run=True)
    with pytest.raises(ValueError, match="not dimensions"):
        TableSpec.model_validate(body | {"cube": {"cuboids": [["d0", "nope"]]}})
    prima.close()


def test_yes_no_csv_columns_stay_text_and_match_declared_categories(tmp_path: Path) -> None:
    """DuckDB's CSV sniffer made UCI Bank's yes/no columns BOOLEAN ('true'/'false'): every row fell
    outside the declared ["no", "yes"] and the build would have spent ε on an empty cube."""
    path = tmp_path / "yn.csv"
    path.write_text("flag;n\nyes;1\nno;2\nyes;3\n")
    prima = Prima(tmp_path / "data")
    info = prima.register(
        TableSpec.model_validate(
            {
                "name": "yn",
                "source": {"csv": str(path), "delimiter": ";"},
                "epsilon": 1.0,
                "dimensions": [{"name": "flag", "type": "category", "values": ["no", "yes"]}],
                "measures": [{"name": "n", "lo": 0, "hi": 10}],
            }
        )
    )
    assert info["preflight"]["outside_domain"] == {"flag": 0} and not info["preflight"]["warnings"]
    got = prima.answer_with("SELECT flag, COUNT(*), SUM(n) FROM yn GROUP BY flag", prima.exact_cube)
    assert got["rows"] == [["no", 1.0, 2.0], ["yes", 2.0, 4.0]]  # as DuckDB's GROUP BY: no other or NULL flag
    prima.close()


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize(
    "name,queries",
    [
        (
            "adult",
            [
                "SELECT sex, COUNT(*), AVG(hours_per_week) FROM adult WHERE age BETWEEN 30 AND 49 GROUP BY sex",
                "SELECT COUNT(*) FROM adult WHERE education = 'Bachelors' AND race = 'White' AND income = '>50K'",
            ],
        ),
        (
            "traffic",
            [
                "SELECT weather_main, SUM(traffic_volume) FROM traffic GROUP BY weather_main",
                "SELECT AVG(traffic_volume) FROM traffic WHERE date_time >= '2016-01-01' AND holiday = 'None'",
            ],
        ),
        (
            "bank",
            [
                "SELECT month, SUM(balance) FROM bank WHERE y = 'yes' GROUP BY month",
                "SELECT COUNT(*), AVG(balance) FROM bank WHERE age BETWEEN 30 AND 39 AND loan = 'no' AND job = 'student'",
            ],
        ),
    ],
)
def test_the_whole_table_examples_register_build_and_answer(tmp_path: Path, name: str, queries: list[str]) -> None:
    """Adult (14 dimensions), Traffic and Bank (16) register, build and answer from public metadata."""
    import json

    import yaml

    raw = json.loads(json.dumps(yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text()), default=str))
    raw["source"]["csv"] = str(dataset(Path(raw["source"]["csv"]).name))
    prima = Prima(tmp_path / "data", seed=11)
    info = prima.register(TableSpec.model_validate(raw))
    report = info["preflight"]
    assert info["preview"]["strategy"] == "cuboids" and not report["warnings"]
    assert report["rows_in_every_domain"] >= 0.99 * report["rows"]  # the declared domains fit the data
    prima.build(name)
    for sql in queries:
        got = prima.query(sql)
        assert got["rows"] and all(sd is None or sd > 0 for row in got["stddev"] for sd in row), sql
        truth = prima.answer_with(sql, prima.exact_cube)
        assert len(truth["rows"]) == len(got["rows"])
    prima.close()


def test_the_pair_estimator_is_the_admins_choice_and_answers_say_which(tmp_path: Path, wide_csv: Path) -> None:
    """`cube.estimator`: "shrunk" (default) answers 2-column queries with an estimated bar and says so;
    "least_squares" keeps the exact bar and no note; a dense strategy refuses the option."""
    sql = "SELECT COUNT(*) FROM {} WHERE d0 < 2 AND d4 > 1"
    for name, estimator in (("shrunkt", None), ("lsq", "least_squares")):
        prima = Prima(tmp_path / name, seed=4)  # (one source: one budget, so one data dir each)
        prima.register(_spec(wide_csv, name=name, **({"estimator": estimator} if estimator else {})))
        status, _ = prima.build(name)
        assert status["aggregates"]["COUNT(*)"]["cuboids"]["estimator"] == (estimator or "shrunk")
        notes = prima.query(sql.format(name))["notes"]
        assert any("shrunk toward independence" in n for n in notes) == (estimator is None)
        assert not any("shrunk" in n for n in prima.query(f"SELECT COUNT(*) FROM {name} WHERE d0 < 2")["notes"])
        prima.close()
    with pytest.raises(ValueError, match="cube.estimator applies to the cuboids strategy"):
        _spec(wide_csv, strategy="identity", estimator="least_squares")
    with pytest.raises(ValueError, match="cube.one_way_share applies to the cuboids strategy with shrunk pairs"):
        _spec(wide_csv, estimator="least_squares", one_way_share=0.7)
    prima = Prima(tmp_path / "share", seed=4)
    prima.register(_spec(wide_csv, name="share", one_way_share=0.7))
    status, _ = prima.build("share")
    shares = status["aggregates"]["COUNT(*)"]["cuboids"]["shares"]
    # the 1-way cuboids come first, with 0.7 of what the picked triples leave (shares of the whole budget)
    assert sum(shares[: len(SIZES)]) == pytest.approx(0.7 * (1 - CubeConfig().select_share), abs=1e-3)
    assert sum(shares) == pytest.approx(1 - 0.1 * 0.1, abs=1e-3)  # the rest: the draws that picked the triples
    prima.close()


def test_many_cuboids_are_summed_from_the_cells_as_grouping_sets_and_sql_give_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wide build with more than `MANY_SETS` maximal cuboids reads the base cuboid's non-empty cells
    once and bincounts every cuboid from them: the same counts (exactly) and clipped sums as the
    engine's GROUPING SETS, and as DuckDB's GROUP BY on the raw file — out-of-domain and NULL rows in
    their outside cells included."""
    from storage import sources
    from storage.engines import interface
    from tests.conftest import sales_spec, write_sales_csv

    path = write_sales_csv(tmp_path / "sales.csv", rows=3000)
    prima = Prima(tmp_path / "data", seed=1)
    prima.register(TableSpec.model_validate(sales_spec(path)))
    record = prima.record("sales")
    cuboids = default_cuboids(4, [(0, 1, 2), (1, 2, 3)])
    read = lambda: sources.marginal_cuboids(  # noqa: E731
        prima.db, record.spec.source, record.source_table, record.spec, {"amount": (-50.0, 700.0)}, cuboids
    )
    monkeypatch.setattr(interface, "MANY_SETS", 10**6)
    grouped = read()  # GROUPING SETS
    monkeypatch.setattr(interface, "MANY_SETS", 0)
    cells = read()  # from the cells
    assert grouped.keys() == cells.keys() and len(grouped) == 3
    for key in grouped:
        assert grouped[key].keys() == cells[key].keys()
        for s in grouped[key]:
            np.testing.assert_allclose(cells[key][s], grouped[key][s], rtol=1e-12, atol=1e-9)
    count, total = cells["count"][(1,)], cells["sum:amount"][(1,)]
    sql = duckdb.sql(
        f"SELECT region, COUNT(*), SUM(LEAST(GREATEST(amount, -50), 700)) FROM read_csv('{path}') "
        "WHERE region IN ('north', 'south', 'east', 'west') GROUP BY region"
    ).fetchall()
    order = ["north", "south", "east", "west"]
    for region, n, amount in sql:
        assert count[order.index(region)] == n and math.isclose(total[order.index(region)], amount, rel_tol=1e-9)
    assert count.sum() == 3000  # every row in some cell of the region axis, outside ones included
    prima.close()
