"""Answers ``pairwise`` fills in from its model hold the truth in their interval whatever the data's
higher-order interactions (`engine/answers/model_bounds.py`).

The table is the pairwise model's worst case: c = (a + b) mod 6 on every row, so each 2-D marginal
of (a, b, c) is uniform and the maximum-entropy model spreads each (a, b) pair over every c — a box
that follows the relation holds 6× what the model says, one that avoids it holds nothing."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from engine.answers.options import AnswerOptions
from engine.service import Prima
from storage.schema import TableSpec

ROWS = 36_000
QUERIES = [
    "a BETWEEN 0 AND 2 AND b BETWEEN 0 AND 2 AND c BETWEEN 0 AND 2",  # the relation puts most rows here
    "a BETWEEN 0 AND 2 AND b BETWEEN 0 AND 2 AND c BETWEEN 5 AND 5",  # and none here
    "a BETWEEN 1 AND 3 AND b BETWEEN 2 AND 4 AND c BETWEEN 3 AND 5 AND d BETWEEN 0 AND 3",
    "a IN (0, 4) AND b <= 1 AND c = 4 AND d >= 2",
]


def _table(path: Path) -> Path:
    rng = np.random.default_rng(5)  # test data, not noise
    a, b, d = rng.integers(0, 6, ROWS), rng.integers(0, 6, ROWS), rng.integers(0, 6, ROWS)
    m = rng.uniform(0, 100, ROWS) * (1 + a)  # a SUM whose values follow a
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["a", "b", "c", "d", "m"])
        w.writerows(zip(a.tolist(), b.tolist(), ((a + b) % 6).tolist(), d.tolist(), np.round(m, 2).tolist()))
    return path


def _spec(path: Path) -> TableSpec:
    dims = [{"name": n, "type": "int", "lo": 0, "hi": 5, "outside": "exclude"} for n in "abcd"]
    return TableSpec.model_validate(
        {
            "name": "t",
            "source": {"csv": str(path)},
            "epsilon": 1.0,
            "dimensions": dims,
            "measures": [{"name": "m", "lo": 0, "hi": 600, "nullable": False}],
            "cube": {"strategy": "pairwise", "build": "on_first_query"},
        }
    )


def test_model_answers_hold_the_truth_the_model_cannot_represent(tmp_path: Path) -> None:
    path = _table(tmp_path / "t.csv")
    held, total, missed_by_noise_bar = 0, 0, 0
    for seed in range(4):
        prima = Prima(tmp_path / f"data{seed}", seed=seed)
        prima.register(_spec(path))
        for where in QUERIES:
            truth = prima.db.run(f"SELECT COUNT(*), SUM(m), AVG(m) FROM src.t WHERE {where}")[0]
            r = prima.query(f"SELECT COUNT(*), SUM(m), AVG(m) FROM t WHERE {where}", AnswerOptions(clamp=False))
            assert any("2-D marginals" in n for n in r["notes"]), r["notes"]
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
