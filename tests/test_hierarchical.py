"""``hierarchical``: trees on long axes, Kronecker least squares, exact per-axis error bars.

The cube shape of tests/test_strategies.py is too short for trees to be chosen, so here the
branching is forced (a binary, a ternary and a 4-ary tree plus one identity axis)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.synopses.cube import Cube
from privacy.estimation import hierarchy
from privacy.estimation.error import KroneckerError, from_json
from privacy.estimation.prefix import prefix_sums
from privacy.mechanisms.sampler import RandomSource
from privacy.strategies.hierarchical import HierarchicalStrategy
from tests.conftest import select_total
from tests.test_strategies import SELECTIONS, SHAPE, NoiseOff

FORCED = (2, None, 3, 4)


def _counts(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).poisson(2.0, SHAPE).astype(np.float64)


@pytest.mark.parametrize("n,b", [(12, 2), (10, 3), (8, 4), (6, None), (1000, 4)])
def test_tree_has_l_ones_per_column_and_its_pseudo_inverse_undoes_it(n: int, b: int | None) -> None:
    a = hierarchy.tree_matrix(n, b)
    assert np.all(a.sum(axis=0) == hierarchy.levels(n, b))  # the sensitivity factor, the same for every value
    assert np.array_equal(a[:n], np.eye(n)) and (b is None or a[-1].sum() == n)  # leaves first, whole axis last
    (pinv,) = hierarchy.least_squares_matrices((n,), (b,)) if b is not None else [np.eye(n)]
    assert np.max(np.abs(pinv @ a - np.eye(n))) < 1e-9


def test_exact_with_noise_off() -> None:
    """Counts (sensitivity 1) keep every block sum on the sampler's grid, so the release is exact."""
    x = _counts(3)
    m = HierarchicalStrategy(FORCED).measure(x, 1.0, 1.0, NoiseOff())
    assert np.max(np.abs(m.noisy - x)) < 1e-9
    assert m.details["hierarchical"]["levels"] == [5, 1, 3, 3]  # 12 values: 1, 2, 4, 8, 16
    assert m.noise_scale == pytest.approx(45.0, rel=1e-3)  # Δ·Π L_i / ε


def test_noise_variance_matches_the_error_model_and_is_unbiased() -> None:
    """Privacy rule 5: the spread of 600 releases matches the stated scale through the model."""
    x = _counts(1)
    truths = [select_total(prefix_sums(x), sel) for sel in SELECTIONS]
    errors = np.empty((600, len(SELECTIONS)))
    strategy = HierarchicalStrategy(FORCED)
    for k in range(600):
        m = strategy.measure(x, 1.0, 1.0, RandomSource(seed=20_000 + k))
        errors[k] = [select_total(prefix_sums(m.noisy), sel) - t for sel, t in zip(SELECTIONS, truths)]
    stated = np.array([m.error.variance(sel) for sel in SELECTIONS])
    assert m.error.cell_variance == pytest.approx(2 * 45.0**2, rel=0.01)  # Laplace(b): variance ≈ 2b² (on the grid)
    ratio = errors.var(axis=0) / stated
    assert np.all(np.abs(ratio - 1) < 0.2), ratio
    assert np.all(np.abs(errors.mean(axis=0)) < 4 * np.sqrt(stated / 600))


def test_95_percent_intervals_cover_93_to_97_percent() -> None:
    x = _counts(2)
    truth = Cube("t", "exact", {"v": prefix_sums(x)}, {})
    strategy = HierarchicalStrategy(FORCED)
    covered = trials = 0
    for k in range(240):
        m = strategy.measure(x, 1.0, 1.0, RandomSource(seed=60_000 + k))
        cube = Cube("t", str(k), {"v": prefix_sums(m.noisy)}, {"v": m.error})
        for sel in SELECTIONS:
            covered += abs(cube.total("v", sel) - truth.total("v", sel)) <= 1.96 * math.sqrt(cube.variance("v", sel))
            trials += 1
    print(f"\nhierarchical: 95% intervals covered the truth in {covered}/{trials} = {covered / trials:.3f}")
    assert 0.93 <= covered / trials <= 0.97


def test_grouped_variance_equals_single_cell_variance_and_json_round_trips() -> None:
    model = KroneckerError(3.0, SHAPE, FORCED)
    sel = [((1, 9),), ((0, 1), (4, 6)), ((0, 7),), ((2, 4),)]
    grouped = model.grouped_variance(sel, [np.arange(1, 10), np.arange(2, 5)], [0, 3])
    single = [[model.variance([((i, i),), sel[1], sel[2], ((j, j),)]) for j in range(2, 5)] for i in range(1, 10)]
    assert grouped == pytest.approx(np.array(single))
    assert from_json(model.to_json()) == model
    identity_axes = KroneckerError(3.0, SHAPE, (None,) * 4)
    assert identity_axes.variance(sel) == pytest.approx(3.0 * 9 * 5 * 8 * 3)  # identity: σ² × cells


def test_branching_is_chosen_from_the_axis_length_and_pays_off_only_on_long_axes() -> None:
    assert [hierarchy.choose_branching(n) for n in (6, 30, 121)] == [None, None, None]
    for n in (365, 1000):
        b = hierarchy.choose_branching(n)
        assert b is not None and hierarchy.range_error(n, b) < 0.7  # ≥ 30 % less variance than identity
    assert hierarchy.choose_branching(hierarchy.MAX_TREE_AXIS + 1) is None  # dense per-axis matrices: capped
    assert HierarchicalStrategy().branchings((30, 365)) == (None, hierarchy.choose_branching(365))
    with pytest.raises(ValueError, match="does not match"):
        HierarchicalStrategy((2, 2)).branchings(SHAPE)
