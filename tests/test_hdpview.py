"""HDPView (`privacy.mechanisms.hdpview_partition`): the blocks tile the domain, the first cut follows the exponential
mechanism's stated probabilities exactly, the perturbation has its stated scale, answers follow Eq. 10."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy.mechanisms import hdpview_partition as hdpview
from privacy.mechanisms.sampler import RandomSource

SHAPE = (4, 3, 5)


def _points(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    cells = np.stack([rng.integers(0, n, 300) for n in SHAPE], axis=1)
    cells[:150, 0] = 0  # a dense corner: the partition has something to find
    return np.unique(cells, axis=0, return_counts=True)


def test_blocks_tile_the_domain_and_totals_add_up() -> None:
    points, counts = _points(np.random.default_rng(0))
    params = hdpview.Parameters.of(SHAPE, 1.0)
    part = hdpview.partition(points, counts.astype(float), SHAPE, params, RandomSource(seed=1))
    cover = np.zeros(SHAPE, dtype=int)
    for lo, hi in zip(part.lo, part.hi):
        cover[lo[0] : hi[0] + 1, lo[1] : hi[1] + 1, lo[2] : hi[2] + 1] += 1
    assert np.all(cover == 1)  # disjoint and complete
    totals = hdpview.block_totals(part, counts.astype(float))
    assert totals.sum() == counts.sum()
    view = hdpview.PView(part.lo, part.hi, {"n": totals}, {"n": 0.0})
    full = [((0, n - 1),) for n in SHAPE]
    assert view.total("n", full) == pytest.approx(counts.sum())
    # Eq. 10 by hand for one box: each block contributes its total times the overlapping fraction
    box = [((0, 1),), ((1, 2),), ((0, 4),)]
    want = sum(
        t * np.prod([max(0, min(h, b) - max(l, a) + 1) / (h - l + 1) for (l, h, ((a, b),)) in zip(lo, hi, box)])
        for lo, hi, t in zip(part.lo, part.hi, totals)
    )
    assert view.total("n", box) == pytest.approx(want)


def _first_cut_probabilities(points: np.ndarray, counts: np.ndarray, params: hdpview.Parameters) -> np.ndarray:
    """The stated probabilities of every root cut: exp(ε_cut·Q/(2Δ_Q)), Q = −(AE_L + AE_R), brute force."""
    size = math.prod(SHAPE)
    dense = np.zeros(SHAPE)
    dense[tuple(points.T)] = counts
    quality = []
    for axis, n in enumerate(SHAPE):
        for j in range(n - 1):
            left = np.take(dense, range(j + 1), axis=axis)
            right = np.take(dense, range(j + 1, n), axis=axis)
            quality.append(-(np.abs(left - left.mean()).sum() + np.abs(right - right.mean()).sum()))
    logits = params.epsilon_cut * np.array(quality) / (2 * 4 * (1 - 1 / size))
    p = np.exp(logits - logits.max())
    return p / p.sum()


@pytest.mark.parametrize("extra_row", [False, True])
def test_the_first_cut_follows_the_exponential_mechanism_on_neighbours(extra_row: bool) -> None:
    """On a tiny tensor, for a table and its neighbour (one more row), the root's cut is
    drawn with exactly the stated probabilities (χ² over 6,000 builds); the converge test never
    stops the root here (its AE is far above θ), so every build cuts."""
    points, counts = _points(np.random.default_rng(2))
    counts = counts.astype(float)
    if extra_row:
        counts[0] += 1
    params = hdpview.Parameters.of(SHAPE, 20.0, ratio=0.99, gamma=0.5)  # a sharp mechanism: informative test
    expected = _first_cut_probabilities(points, counts, params)
    candidates = [(a, j) for a, n in enumerate(SHAPE) for j in range(n - 1)]
    seen = np.zeros(len(candidates))
    source = RandomSource(seed=3 + extra_row)
    for _ in range(6000):
        axis, cut = hdpview._choose_cut(
            points,
            np.arange(len(counts)),
            counts,
            np.zeros(3, dtype=np.int64),
            np.array(SHAPE) - 1,
            float(math.prod(SHAPE)),
            1,
            params,
            source,
        )
        seen[candidates.index((axis, cut))] += 1
    keep = expected * 6000 >= 5
    chi2 = float(np.sum((seen[keep] - 6000 * expected[keep]) ** 2 / (6000 * expected[keep])))
    assert expected.max() > 0.2  # the mechanism really prefers some cut
    assert chi2 < 30.0  # χ²(≤ 9) far tail


def test_perturbation_noise_has_its_stated_scale() -> None:
    totals = np.full(4000, 37.0)
    noisy, variance = hdpview.perturb(totals, 2.0, 0.5, RandomSource(seed=5))
    assert variance == pytest.approx(2 * (2.0 / 0.5) ** 2, rel=0.01)
    assert np.var(noisy - totals) == pytest.approx(variance, rel=0.08)


def test_parameters_follow_algorithm_1() -> None:
    p = hdpview.Parameters.of((8, 16, 4), 1.0)
    assert p.epsilon_r == pytest.approx(0.9) and p.epsilon_p == pytest.approx(0.1)
    assert p.kappa == math.ceil(1.2 * 9) and p.theta == pytest.approx(10.0)
    assert p.lam == pytest.approx(((2 * 1.6 - 1) / 0.6 + 1) * 2 / (0.9 * 0.9))
    assert p.delta == pytest.approx(p.lam * math.log(1.6))
    assert p.epsilon_cut == pytest.approx(0.1 * 0.9 / p.kappa)


# -- the strategy in the service ---------------------------------------------------------------

from pathlib import Path  # noqa: E402

from engine.service import Prima  # noqa: E402
from storage import cube_store  # noqa: E402
from storage.schema import TableSpec  # noqa: E402
from tests.conftest import dataset  # noqa: E402
from tests.test_wide import CUBOID_QUERIES, _clipped, _duck, _spec, _without_null_groups, _write  # noqa: E402


def test_the_exact_view_answers_like_duckdb(tmp_path: Path) -> None:
    """Noise off (the test-only view: every non-empty cell its own block), the p-view's answer path
    (Eq. 10, grouped by einsum) equals DuckDB on every kind of query, 4-column ones included."""
    csv_path = _write(tmp_path / "wide.csv")
    prima = Prima(tmp_path / "data")
    prima.register(_spec(csv_path, strategy="hdpview"))
    extra = [
        "SELECT d3, d0, COUNT(*), SUM(amount) FROM wide WHERE d1 < 2 AND d5 >= 1 AND d8 IN (0, 2) "
        "GROUP BY d3, d0 ORDER BY d3, d0"
    ]
    for sql in CUBOID_QUERIES + extra:
        got = prima.answer_with(sql, prima.exact_cube)
        want = _duck(csv_path, _clipped(sql))
        rows = _without_null_groups(sql, got["rows"])
        assert len(rows) == len(want), sql
        for row, expected in zip(rows, want):
            assert row == pytest.approx(list(expected), rel=1e-9, abs=1e-6), sql
    prima.close()


def test_adult_14_with_hdpview_charges_exactly_epsilon_persists_only_noisy_blocks_and_survives_restart(
    tmp_path: Path,
) -> None:
    import json

    import yaml

    raw = json.loads(
        json.dumps(
            yaml.safe_load((Path(__file__).resolve().parents[1] / "examples" / "adult.yaml").read_text()), default=str
        )
    )
    raw["source"]["csv"] = str(dataset("adult.data"))
    raw["cube"] = {"build": "on_first_query", "strategy": "hdpview"}
    prima = Prima(tmp_path / "data", seed=5)
    info = prima.register(TableSpec.model_validate(raw))
    assert info["preview"]["expected_errors"] is None and info["preview"]["warnings"]
    status, _ = prima.build("adult")
    assert status["strategy"] == "hdpview" and status["aggregates"]["COUNT(*)"]["hdpview"]["blocks"] > 1
    entries = prima.ledger_entries("adult")
    assert [e["purpose"].split(":")[0] for e in entries] == ["cube partition (hdpview)"] + [
        "cube measurement (hdpview)"
    ] * 3
    assert sum(e["epsilon"] for e in entries) == pytest.approx(1.0, abs=1e-12)
    assert entries[0]["epsilon"] == pytest.approx(0.2 * hdpview.RATIO)
    queries = [
        "SELECT sex, COUNT(*), AVG(hours_per_week) FROM adult GROUP BY sex",
        "SELECT COUNT(*) FROM adult WHERE age BETWEEN 30 AND 49 AND education = 'Bachelors' AND race = 'White'",
    ]
    before = [prima.query(q) for q in queries]
    assert all(any("perturbation noise only" in n for n in a["notes"]) for a in before)
    stored = cube_store.load(prima.db, tmp_path / "data" / "cubes", "adult")
    assert stored is not None
    assert {name.split("#")[1] for name in stored.arrays} == {"lo", "hi", "values"}  # released facts only
    assert set(stored.meta["errors"]["count"]) == {"kind", "block_variance", "blocks"}
    prima.close()
    again = Prima(tmp_path / "data", seed=5)
    after = [again.query(q) for q in queries]
    assert [a["rows"] for a in after] == [b["rows"] for b in before]
    again.close()
