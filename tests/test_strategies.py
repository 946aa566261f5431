"""Every measurement strategy: exact with noise off, noise at its stated scale, honest 95% intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.synopses.cube import Cube
from engine.synopses.wide import WideCube
from privacy.estimation.lattice import lambdas, lattice_apply, marginal, reconstruct
from privacy.estimation.prefix import prefix_sums
from privacy.mechanisms.sampler import GridLaplace, RandomSource
from privacy.strategies import STRATEGIES, Measurement, get_strategy
from privacy.strategies.cuboids import CuboidRelease, CuboidsStrategy
from privacy.strategies.dense_auto import PILOT_SHARE, SIGNAL_PER_CELL, DenseAutoStrategy
from privacy.strategies.marginals import (
    ALL_AXES_CAP,
    MarginalsStrategy,
    _group_ratios,
    default_shares,
    measured_cuboids,
)
from privacy.strategies.workload import workload_cuboids
from tests.conftest import select_total

SHAPE = (12, 10, 8, 6)
SELECTIONS = [  # per-axis runs: boxes, free axes, an IN-list, single cells
    [((2, 7),), ((0, 9),), ((0, 7),), ((0, 5),)],
    [((2, 7),), ((3, 5),), ((0, 7),), ((0, 5),)],
    [((0, 11),), ((0, 9),), ((1, 6),), ((2, 4),)],
    [((1, 4),), ((2, 8),), ((3, 5),), ((1, 3),)],
    [((0, 1), (5, 6), (9, 9)), ((0, 9),), ((0, 7),), ((4, 4),)],
    [((3, 3),), ((4, 4),), ((5, 5),), ((1, 1),)],
    [((0, 11),), ((0, 9),), ((0, 7),), ((0, 5),)],
]


DENSE = sorted(n for n in STRATEGIES if n != "hdpview")  # hdpview's p-view: tests/test_hdpview.py


def _cube(m: Measurement, label: str = "x") -> Cube | WideCube:
    """The answering object a build of ``m`` gives: a dense cube, or (cuboids) the wide synopsis."""
    if isinstance(m.noisy, CuboidRelease):
        return WideCube("t", label, SHAPE, releases={"v": m.noisy})
    return Cube("t", label, {"v": prefix_sums(m.noisy) if m.prefix is None else m.prefix}, {"v": m.error})


def _answerable(name: str, sel: list) -> bool:
    """Selections a strategy answers exactly: all, except pairwise/cuboids beyond two constrained
    axes (model answers, checked in their own tests)."""
    constrained = sum(len(r) > 1 or r[0] != (0, n - 1) for r, n in zip(sel, SHAPE))
    return name not in ("pairwise", "cuboids") or constrained <= 2


def _truth(rng: np.random.Generator) -> np.ndarray:
    return rng.poisson(2.0, SHAPE).astype(np.float64) * 7.5  # a SUM cuboid, measure clipped to [0, 30]


class NoiseOff(RandomSource):
    """Every word the same: the two geometrics of each discrete Laplace draw are equal, so every
    release is exactly its input on the grid (TEST-ONLY, to check the post-processing)."""

    def words(self, n: int) -> np.ndarray:
        return np.full(n, 2**62, dtype=np.uint64)


@pytest.mark.parametrize("name", DENSE)
def test_every_strategy_is_exact_with_noise_off(name: str) -> None:
    """Acceptance: with the noise switched off a strategy's cube answers every selection exactly
    (SCOPE's fitted prefix cube is an approximation by design: `prima` is checked on its signed
    path here and on its fit in tests/test_prima.py)."""
    x = _truth(np.random.default_rng(3))
    assert np.array_equal(GridLaplace(30.0, 1.0).release(x, NoiseOff()), x)  # the switch really is off
    assert not np.array_equal(GridLaplace(30.0, 1.0).release(x, RandomSource(seed=1)), x)
    nonnegative = name != "prima"
    strategy = CuboidsStrategy(estimator="least_squares") if name == "cuboids" else get_strategy(name)
    m = strategy.measure(x, 30.0, 1.0, NoiseOff(), nonnegative=nonnegative)
    cube = _cube(m)
    selections = [s for s in SELECTIONS if _answerable(name, s)]
    for sel in selections:
        assert cube.total("v", sel) == pytest.approx(select_total(prefix_sums(x), sel), rel=1e-9, abs=1e-6)
    assert len(selections) >= 4


def test_shrunk_cuboids_are_exact_on_one_column_and_bar_their_bias_with_noise_off() -> None:
    """`cuboids`' default estimator shrinks each pair toward independence (privacy.estimation.shrinkage): with the
    noise off its 1-column answers stay exact (a nonnegative margin with the right total is its own
    projection, privacy.estimation.nonnegative) with bars no smaller than least squares' exact ones, its
    2-column ones move toward independence (their bars' coverage: tests/test_shrinkage.py), and
    each bar says it is an estimate."""
    rng = np.random.default_rng(3)
    x = rng.poisson(2.0, SHAPE).astype(np.float64)
    x[:6, :5] *= 4  # an interaction between axes 0 and 1 that independence misses
    m = CuboidsStrategy().measure(x, 1.0, 1.0, NoiseOff(), nonnegative=True)
    assert m.noisy.estimator == "shrunk"
    cube = _cube(m)
    moved = 0
    for sel in SELECTIONS:
        constrained = sum(len(r) > 1 or r[0] != (0, n - 1) for r, n in zip(sel, SHAPE))
        truth, got = select_total(prefix_sums(x), sel), cube.total("v", sel)
        if constrained <= 1:
            assert got == pytest.approx(truth, rel=1e-9, abs=1e-6)
            assert cube.variance("v", sel) >= m.noisy.variance(sel) * (1 - 1e-12)  # at least the lattice bar
            projected = any("negative counts projected away" in n for n in cube.error_notes(sel))
            assert projected == (constrained == 1)  # the total alone is kept by the projection
        elif constrained == 2:
            moved += abs(got - truth) > 1e-3
            assert cube.variance("v", sel) > 0
            assert any("shrunk toward independence" in n for n in cube.error_notes(sel))
    assert moved  # the shrinkage did move a 2-column answer (else this test checks nothing)


def test_marginal_shares_are_data_independent_and_use_marginals_on_4d() -> None:
    shares = default_shares(SHAPE)
    assert sum(shares) == pytest.approx(1.0)
    assert shares[0] > 0.5 and sum(shares[1:]) > 0.1  # base plus real marginals
    assert default_shares(SHAPE) == shares  # a function of the shape only


def test_least_squares_is_exact_on_noise_free_measurements() -> None:
    x = _truth(np.random.default_rng(0))
    cuboids = measured_cuboids(4)
    estimate = reconstruct(SHAPE, cuboids, [1.0 + i for i in range(len(cuboids))], [marginal(x, c) for c in cuboids])
    assert np.max(np.abs(estimate - x)) < 1e-9


def test_least_squares_with_the_base_matches_the_full_lattice_split() -> None:
    """`reconstruct`'s shortcut with the base measured (the lower cuboids' corrections from marginal
    means) equals splitting the cube along every axis (`lattice_apply`) on noisy, inconsistent
    measurements — here a workload's cuboids with a class axis riding on each."""
    shape = (6, 5, 4, 3, 7)
    cuboids = list(workload_cuboids(4, base=True, ride=True))
    rng = np.random.default_rng(5)
    weights = list(rng.uniform(0.5, 2.0, len(cuboids)))
    ys = [marginal(rng.normal(size=shape), c) + rng.normal(size=marginal(np.zeros(shape), c).shape) for c in cuboids]
    z = sum(w * y for w, y in zip(weights, ys)) + np.zeros(shape)
    slow = lattice_apply(z, {t: 1.0 / v for t, v in lambdas(shape, cuboids, weights).items()})
    assert np.max(np.abs(reconstruct(shape, cuboids, weights, ys) - slow)) < 1e-10 * np.max(np.abs(slow))


@pytest.mark.parametrize("name", DENSE)
def test_noise_variance_matches_the_error_model(name: str) -> None:
    """Privacy rule 5 for every strategy: empirical spread of answers = the stated variance."""
    x = _truth(np.random.default_rng(1))
    selections = [s for s in SELECTIONS if name != "cuboids" or _answerable(name, s)]
    truths = [select_total(prefix_sums(x), sel) for sel in selections]
    errors = np.empty((600, len(selections)))
    strategy = CuboidsStrategy(bootstrap=0) if name == "cuboids" else get_strategy(name)
    for k in range(600):
        m = strategy.measure(x, 30.0, 1.0, RandomSource(seed=10_000 + k))
        cube = _cube(m)
        errors[k] = [cube.total("v", sel) - t for sel, t in zip(selections, truths)]
    stated = np.array([m.error.variance(sel) for sel in selections])
    ratio = errors.var(axis=0) / stated
    print(f"\n{name}: empirical/stated variance per selection {np.round(ratio, 3)}")
    assert np.all(np.abs(ratio - 1) < 0.2)  # 600 draws: the variance estimate itself wobbles ~6-10 %
    assert np.all(np.abs(errors.mean(axis=0)) < 4 * np.sqrt(stated / 600))  # unbiased


@pytest.mark.parametrize("name", DENSE)
def test_95_percent_intervals_cover_93_to_97_percent(name: str) -> None:
    x = _truth(np.random.default_rng(2))
    cube_truth = Cube("t", "exact", {"v": prefix_sums(x)}, {})
    covered = trials = 0
    strategy = CuboidsStrategy(bootstrap=0) if name == "cuboids" else get_strategy(name)
    for k in range(240):
        m = strategy.measure(x, 30.0, 1.0, RandomSource(seed=50_000 + k))
        cube = _cube(m, str(k))
        for sel in SELECTIONS if name != "cuboids" else [s for s in SELECTIONS if _answerable(name, s)]:
            value, sd = cube.total("v", sel), math.sqrt(cube.variance("v", sel))
            covered += abs(value - cube_truth.total("v", sel)) <= 1.96 * sd
            trials += 1
    rate = covered / trials
    print(f"\n{name}: 95% intervals covered the truth in {covered}/{trials} = {rate:.3f}")
    assert 0.93 <= rate <= 0.97


@pytest.mark.parametrize("shape,measured", [((6, 6, 6), [[0, 1, 2]]), ((10, 10, 10), [[0, 1, 2], [0]])])
def test_marginals_reports_which_cuboids_it_measured(shape: tuple[int, ...], measured: list[list[int]]) -> None:
    """Small cubes measure few cuboids (shares below MIN_SHARE drop out); the details say which."""
    m = get_strategy("marginals").measure(np.ones(shape), 1.0, 1.0, RandomSource(seed=0))
    assert m.details["marginals"]["measured"] == measured
    assert sum(m.details["marginals"]["shares"]) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("name", DENSE)
def test_the_error_preview_equals_the_built_error_model_on_one_and_two_axes(name: str) -> None:
    """Registration previews come from public facts only; they must be what a build then states."""
    x = _truth(np.random.default_rng(4))
    built = get_strategy(name).measure(x, 30.0, 1.0, RandomSource(seed=9), nonnegative=True)
    preview = get_strategy(name).expected_error(SHAPE, 30.0, 1.0, nonnegative=True)
    full = [((0, n - 1),) for n in SHAPE]
    for sel in [full, [((3, 3),)] + full[1:], [((3, 3),), ((2, 2),)] + full[2:], full[:3] + [((1, 1),)]]:
        want = built.error.variance(sel) if name != "prima" else IdentityPreview.variance(x, sel)
        assert preview.variance(sel) == pytest.approx(want, rel=1e-9), sel


class IdentityPreview:
    @staticmethod
    def variance(x: np.ndarray, sel: list) -> float:
        """prima's base-cuboid noise: identity's per-cell variance times the selected cells."""
        cells = math.prod(sum(hi - lo + 1 for lo, hi in runs) for runs in sel)
        return cells * GridLaplace(30.0, 1.0).variance


@pytest.mark.parametrize("scale,chosen", [(1.0, "pairwise"), (10.0, "marginals")])
def test_auto_picks_by_the_noisy_total_and_is_exact_with_noise_off(scale: float, chosen: str) -> None:
    """``auto`` on a dense cube: a noisy total decides; signal per cell here ε·T/(Δ·cells)
    ≈ 0.49 (pairwise) and ≈ 4.9 (marginals) against the threshold 4. With the noise off every
    selection the chosen strategy answers exactly is exact, and the whole ε is accounted for."""
    x = _truth(np.random.default_rng(3)) * scale
    strategy = DenseAutoStrategy()
    m = strategy.measure(x, 30.0, 1.0, NoiseOff(), nonnegative=True)
    facts = m.details["auto"]
    assert facts["chose"] == chosen and facts["noisy_total"] == pytest.approx(x.sum())
    assert facts["pilot_epsilon"] == pytest.approx(PILOT_SHARE) and m.epsilon == 1.0
    assert (facts["signal_per_cell"] >= SIGNAL_PER_CELL) == (chosen == "marginals")
    cube = _cube(m)
    for sel in SELECTIONS:
        if chosen == "marginals" or _answerable("pairwise", sel):
            assert cube.total("v", sel) == pytest.approx(select_total(prefix_sums(x), sel), rel=1e-9, abs=1e-6)
    preview = strategy.expected_error(SHAPE, 30.0, 1.0, nonnegative=True)
    full = [((0, n - 1),) for n in SHAPE]
    for sel in [full, [((3, 3),)] + full[1:], [((3, 3),), ((2, 2),)] + full[2:]]:
        assert preview.variance(sel) >= m.error.variance(sel) * (1 - 1e-9)  # the preview is the worse candidate


def test_auto_pilot_total_has_its_stated_noise_scale() -> None:
    """Privacy rule 5: the pilot total is Laplace with sensitivity Δ at PILOT_SHARE·ε (one coordinate)."""
    x = _truth(np.random.default_rng(5)) * 10.0
    errors = [
        DenseAutoStrategy()
        .measure(x, 30.0, 1.0, RandomSource(seed=70_000 + k), nonnegative=True)
        .details["auto"]["noisy_total"]
        - x.sum()
        for k in range(500)
    ]
    stated = GridLaplace(30.0, PILOT_SHARE).variance
    ratio = float(np.var(errors)) / stated
    print(f"\nauto pilot: empirical/stated variance {ratio:.3f}")
    assert abs(ratio - 1) < 0.2 and abs(np.mean(errors)) < 4 * math.sqrt(stated / 500)


@pytest.mark.parametrize(
    "shape", [(10, 10, 10), (12, 10, 8, 6), (24, 16, 10, 2, 5), (8, 8, 8, 8, 8, 8), (30, 30, 30, 30)]
)
def test_marginals_keep_ranges_on_every_axis_within_the_cap_of_identity(shape: tuple[int, ...]) -> None:
    """The base-measuring release never trades all-axis ranges for more than ALL_AXES_CAP of
    identity's stddev (uncapped, 10×10×10 drifted to 1.11×), and still gains on 1-axis ranges."""
    cuboids, shares = MarginalsStrategy().measured(shape)
    ratios = _group_ratios(shape, lambdas(shape, cuboids, [s**2 for s in shares]), True)
    assert math.sqrt(ratios[len(shape)]) <= ALL_AXES_CAP + 1e-6
    assert ratios[1] < 0.8 and sum(shares) == pytest.approx(1.0)


def test_auto_spends_no_pilot_where_pairwise_would_fall_back() -> None:
    """A signed SUM (or a class axis under a workload, or a cube past the model's size) is measured as
    ``marginals`` whatever the pilot says: ``auto`` gives marginals the whole share, exactly as
    ``marginals`` alone would release it (same mechanisms, same noise for the same seed)."""
    x = _truth(np.random.default_rng(4))
    auto, alone = DenseAutoStrategy(), MarginalsStrategy()
    assert auto.releases(SHAPE, 30.0, 1.0, nonnegative=False) == alone.releases(SHAPE, 30.0, 1.0)
    m = auto.measure(x, 30.0, 1.0, RandomSource(seed=9), nonnegative=False)
    same = alone.measure(x, 30.0, 1.0, RandomSource(seed=9))
    assert m.details["auto"]["chose"] == "marginals" and "signed" in m.details["auto"]["rule"]
    assert "noisy_total" not in m.details["auto"] and np.array_equal(m.noisy, same.noisy)
    full = [((0, n - 1),) for n in SHAPE]
    assert auto.expected_error(SHAPE, 30.0, 1.0).variance(full) == pytest.approx(m.error.variance(full))
    assert auto.releases(SHAPE, 30.0, 1.0, nonnegative=True) != alone.releases(SHAPE, 30.0, 1.0)  # a pilot there


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 40), (40, 3), (6, 1, 9), (5, 4, 3, 2, 12), (3, 4, 2, 3, 2, 3, 16)])
def test_prefix_sums_give_every_box_its_sum_by_the_corner_identity(shape: tuple[int, ...]) -> None:
    """P[c] = Σ of the cells below c on every axis, bit for bit as numpy's cumsum along each axis
    (the slab additions are the same additions in the same order), and any box's sum by 2^λ corners."""
    rng = np.random.default_rng(len(shape))  # test data, not noise
    cells = rng.normal(size=shape).astype(np.float32)
    prefix = prefix_sums(cells)
    expected = np.pad(cells.astype(np.float64), [(1, 0)] * len(shape))
    for axis in range(len(shape)):
        expected = np.cumsum(expected, axis=axis)
    assert np.array_equal(prefix, expected)
    for _ in range(20):
        box = [sorted(rng.integers(0, n, 2)) for n in shape]
        corners = 0.0
        for signs in np.ndindex(*(2,) * len(shape)):
            at = tuple(hi + 1 if s else lo for s, (lo, hi) in zip(signs, box))
            corners += (-1) ** (len(shape) - sum(signs)) * prefix[at]
        truth = cells[tuple(slice(lo, hi + 1) for lo, hi in box)].astype(np.float64).sum()
        assert corners == pytest.approx(truth, abs=1e-9 * cells.size)
