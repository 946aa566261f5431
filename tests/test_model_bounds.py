"""Answers ``pairwise`` — or a wide table's ``cuboids`` — fills in from its model hold the truth in
their interval whatever the data's higher-order interactions (`engine/answers/model_bounds.py`).

The table is the pairwise model's worst case: c = (a + b) mod 6 on every row, so each 2-D marginal
of (a, b, c) is uniform and the maximum-entropy model spreads each (a, b) pair over every c — a box
that follows the relation holds 6× what the model says, one that avoids it holds nothing."""

from __future__ import annotations

import csv
import itertools
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engine.answers.options import AnswerOptions
from engine.service import Prima
from storage.schema import TableSpec
from tests.conftest import (
    ADULT_WIDE,
    ADULT_WIDE_NUMBERS,
    ADULT_WIDE_SQL,
    adult_wide_spec,
    registered_template,
    seeded_copy,
)

ROWS = 36_000
QUERIES = [
    "a BETWEEN 0 AND 2 AND b BETWEEN 0 AND 2 AND c BETWEEN 0 AND 2",  # the relation puts most rows here
    "a BETWEEN 0 AND 2 AND b BETWEEN 0 AND 2 AND c BETWEEN 5 AND 5",  # and none here
    "a BETWEEN 1 AND 3 AND b BETWEEN 2 AND 4 AND c BETWEEN 3 AND 5 AND d BETWEEN 0 AND 3",
    "a IN (0, 4) AND b <= 1 AND c = 4 AND d >= 2",
]


def _table(path: Path, shift: float = 0.0) -> Path:
    rng = np.random.default_rng(5)  # test data, not noise
    a, b, d = rng.integers(0, 6, ROWS), rng.integers(0, 6, ROWS), rng.integers(0, 6, ROWS)
    m = rng.uniform(0, 100, ROWS) * (1 + a) - shift  # a SUM whose values follow a (signed when shifted)
    day = [f"2024-{1 + i // 28:02d}-{1 + i % 28:02d}" for i in rng.integers(0, 84, ROWS).tolist()]
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["a", "b", "c", "d", "m", "day"])
        w.writerows(zip(a.tolist(), b.tolist(), ((a + b) % 6).tolist(), d.tolist(), np.round(m, 2).tolist(), day))
    return path


# the strategy, the cube options (a wide table's picks off: its model must answer the relation's
# triple, which a pick would measure), what the answers' notes say, the measure's shift below 0
# (`pairwise` models measures clipped to lo ≥ 0 only; a wide table's signed SUM is bounded through
# its non-negative mass m − lo and its COUNT), and whether the day is a dimension (a wide table's
# synopsis then answers under its time rollups, `engine.synopses.rolled`)
WIDE = {"strategy": "cuboids", "select_rounds": 0}
STRATEGIES = {
    "pairwise": ({"strategy": "pairwise"}, "2-D marginals", 0.0, False),
    "cuboids": (WIDE, "what the measured pairs allow", 0.0, False),
    "cuboids, signed": (WIDE, "what the measured pairs allow", 150.0, False),
    "cuboids, time rollups": (WIDE, "what the measured pairs allow", 0.0, True),
}


def _spec(path: Path, strategy: str = "pairwise", **cube: object) -> TableSpec:
    dims: list[dict] = [{"name": n, "type": "int", "lo": 0, "hi": 5, "outside": "exclude"} for n in "abcd"]
    if STRATEGIES[strategy][3]:
        dims.append({"name": "day", "type": "date", "lo": "2024-01-01", "hi": "2024-03-31", "granularity": "day"})
    return TableSpec.model_validate(
        {
            "name": "t",
            "source": {"csv": str(path)},
            "epsilon": 1.0,
            "dimensions": dims,
            "measures": [{"name": "m", "lo": -STRATEGIES[strategy][2], "hi": 600, "nullable": False}],
            "cube": STRATEGIES[strategy][0] | {"build": "on_first_query"} | cube,
        }
    )


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_model_answers_hold_the_truth_the_model_cannot_represent(tmp_path: Path, strategy: str) -> None:
    path = _table(tmp_path / "t.csv", STRATEGIES[strategy][2])
    note = STRATEGIES[strategy][1]
    held, total, missed_by_noise_bar = 0, 0, 0
    for seed in range(4):
        prima = Prima(tmp_path / f"data{seed}", seed=seed)
        prima.register(_spec(path, strategy))
        for where in QUERIES:
            truth = prima.db.run(f"SELECT COUNT(*), SUM(m), AVG(m) FROM src.t WHERE {where}")[0]
            r = prima.query(f"SELECT COUNT(*), SUM(m), AVG(m) FROM t WHERE {where}", AnswerOptions(clamp=False))
            assert any(note in n for n in r["notes"]), r["notes"]
            for j, true in enumerate(truth):
                if true is None:
                    continue
                (lo, hi), value, sd = r["ci95"][0][j], r["rows"][0][j], r["stddev"][0][j]
                held += lo <= float(true) <= hi
                total += 1
                missed_by_noise_bar += abs(value - float(true)) > 2.5 * sd
        grouped = prima.query(
            "SELECT c, COUNT(*) FROM t WHERE a BETWEEN 0 AND 2 AND b BETWEEN 0 AND 2 GROUP BY c",
            AnswerOptions(clamp=False),
        )
        truths = dict(
            prima.db.run("SELECT c, COUNT(*) FROM src.t WHERE a BETWEEN 0 AND 2 AND b BETWEEN 0 AND 2 GROUP BY c")
        )
        for (c, _), (lo, hi) in zip(grouped["rows"], (ci[1] for ci in grouped["ci95"])):
            held += lo <= truths.get(c, 0) <= hi
            total += 1
        prima.close()
    assert held == total, f"{held} of {total} intervals hold the truth"
    assert missed_by_noise_bar >= total // 4  # the noise-only bar alone would not have held: the test can fail


TRIPLES = [("workclass", "occupation", "sex"), ("relationship", "marital_status", "education_num")]
TRIPLES += [("race", "occupation", "income")]


@pytest.fixture(scope="module")
def adult_wide(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Prima]]:
    """Adult as a wide table (ten columns, `cuboids`), pure ε = 1, three seeded builds: the two tests
    below read the same builds."""
    tmp = tmp_path_factory.mktemp("adult_wide")
    spec = adult_wide_spec({"build": "on_first_query"})
    template = registered_template(tmp / "template", spec)
    builds = [seeded_copy(template, tmp / f"data{seed}", seed) for seed in range(3)]
    for prima in builds:
        prima.build("adult")
    yield builds
    for prima in builds:
        prima.close()


def test_a_real_wide_tables_three_column_groups_hold_the_truth(adult_wide: list[Prima]) -> None:
    """The groups of 3-column GROUP BYs the model fills in, those of ≥ 100 rows (what a chart
    shows), hold DuckDB's count on the raw file in their ci95 over 3 builds (406 of 408 when this
    test was written). The model's own bar (value ± 1.96 stddev: its bootstrap and the spread of its
    trees), all they had before, held 355 of them (0.82 of Adult's test file's): pairs shrunk toward
    independence lose sparse strong dependences (race × native country, education × education_num),
    which the bootstrap, drawn around the shrunk model, does not see."""
    held = noise_bar = total = 0
    for prima in adult_wide:
        for cols in TRIPLES:
            keys = ", ".join(cols)
            truth = {
                tuple(r[:3]): r[3] for r in prima.db.run(f"SELECT {keys}, COUNT(*) FROM src.adult GROUP BY {keys}")
            }
            got = prima.query(f"SELECT {keys}, COUNT(*) FROM adult GROUP BY {keys}", AnswerOptions(clamp=False))
            assert any("what the measured pairs allow" in n for n in got["notes"]), got["notes"]
            for row, sd, (lo, hi) in zip(got["rows"], got["stddev"], (ci[3] for ci in got["ci95"])):
                want = truth.get(tuple(row[:3]), 0)
                if want >= 100:
                    total += 1
                    held += lo <= want <= hi
                    noise_bar += abs(row[3] - want) <= 1.96 * sd[3]
    print(f"\nAdult, 3-column groups of ≥ 100 rows: {held}/{total} held, {noise_bar} by the model's bar")
    assert total >= 100 and held / total >= 0.95, (held, total)
    assert noise_bar / total < 0.9, (noise_bar, total)  # the model's own bar alone did not hold: the test can fail


def test_a_real_wide_tables_two_column_groups_hold_the_truth(adult_wide: list[Prima]) -> None:
    """Every pair's 2-column GROUP BY (a shrunk pair's answer), groups of ≥ 100 rows: the ci95 holds
    DuckDB's count on the raw file in ≥ 97 % of them over the 3 (seeded, so repeatable) builds.
    Shrinking moves a chart's big cells toward independence; with the bootstrap drawn around the
    shrunk estimate alone the bars missed more of that (3,329 of 3,468 held, 0.960; education_num ×
    age 0.82) than drawn partly toward least squares (`privacy.strategies.cuboids.BOOTSTRAP_CENTRE`:
    3,394, 0.979; its worst pair 0.86). On Adult-15 with the whole budget on the COUNT the gap is
    wider: 0.940 → 0.968 at ε = 1 (`bench/pair_bars.py`)."""
    names = [*ADULT_WIDE, *(d["name"] for d in ADULT_WIDE_NUMBERS)]
    expr = ADULT_WIDE_SQL
    held = total = 0
    for prima in adult_wide:
        for a, b in itertools.combinations(names, 2):
            truth = {
                tuple(r[:2]): r[2]
                for r in prima.db.run(
                    f"SELECT {expr.get(a, a)}, {expr.get(b, b)}, COUNT(*) FROM src.adult GROUP BY 1, 2"
                )
            }
            got = prima.query(f"SELECT {a}, {b}, COUNT(*) FROM adult GROUP BY {a}, {b}", AnswerOptions(clamp=False))
            for row, (lo, hi) in zip(got["rows"], (ci[2] for ci in got["ci95"])):
                want = truth.get(tuple(row[:2]), 0)
                if want >= 100:
                    total += 1
                    held += lo <= want <= hi
    print(f"\nAdult, 2-column groups of ≥ 100 rows: {held}/{total} held")
    assert total >= 1000 and held / total >= 0.97, (held, total)


def test_a_declared_three_column_group_by_on_a_wide_table_is_measured_not_modelled(tmp_path: Path) -> None:
    """The worst-case relation as a wide table with `SELECT a, b, c, COUNT(*) … GROUP BY a, b, c` in
    its workload: the build measures the triple (`engine.builds.workload.declared_cuboids`), so the
    answer is read from it — no model note, an exact bar over each group, the truth in it about 95 %
    of the time — where undeclared it is the model's, whose groups are off by the relation itself."""
    path = _table(tmp_path / "t.csv")
    sql = "SELECT a, b, c, COUNT(*) FROM t GROUP BY a, b, c"
    errors: dict[str, list[float]] = {"declared": [], "undeclared": []}
    held = total = 0
    for seed in range(3):
        for label, cube in (("declared", {"workload": [{"sql": sql}]}), ("undeclared", {})):
            spec = _spec(path, "cuboids", **cube)
            prima = Prima(tmp_path / f"{label}{seed}", seed=seed)
            preview = prima.register(spec)["preview"]
            if label == "declared":  # the preview states the measured triple's exact stddev
                assert np.isfinite(preview["workload"][0]["stddev"]["COUNT(*)"]), preview["workload"]
                assert any("measured as a cuboid" in n for n in preview["notes"]), preview["notes"]
            truth = {tuple(r[:3]): r[3] for r in prima.db.run(sql.replace("FROM t", "FROM src.t"))}
            got = prima.query(sql, AnswerOptions(clamp=False))
            modelled = any("answered by a model" in n for n in got["notes"])
            assert modelled == (label == "undeclared"), got["notes"]
            for row, ci in zip(got["rows"], got["ci95"]):
                want = truth.get(tuple(row[:3]), 0)
                errors[label].append(abs(row[3] - want))
                if label == "declared":
                    total += 1
                    held += ci[3][0] <= want <= ci[3][1]
            prima.close()
    print(f"\nheld {held}/{total}, MAE", {k: round(float(np.mean(v)), 1) for k, v in errors.items()})
    assert held >= 0.9 * total, (held, total)
    assert np.mean(errors["declared"]) < 0.25 * np.mean(errors["undeclared"]), {
        k: np.mean(v) for k, v in errors.items()
    }
