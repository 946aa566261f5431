"""The ``pairwise`` strategy: exact where it is linear, a faithful model fit, honest bootstrap bars."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.synopses.cube import Cube
from privacy.estimation import loglinear
from privacy.estimation.lattice import higher_order, lambdas, lattice_apply, marginal, reconstruct
from privacy.estimation.prefix import prefix_sums, selection_sums
from privacy.mechanisms.sampler import RandomSource
from privacy.strategies.marginals import default_shares, release_marginals
from privacy.strategies.pairwise import FIT_ITERATIONS, PairwiseStrategy, estimate, pairs

SHAPE = (9, 8, 7, 6)
LOW = [  # at most two constrained axes: the least-squares part alone answers these
    [((2, 6),), ((0, 7),), ((0, 6),), ((0, 5),)],
    [((2, 6),), ((1, 4),), ((0, 6),), ((0, 5),)],
    [((0, 8),), ((0, 7),), ((0, 1), (4, 6)), ((2, 2),)],
]
HIGH = [  # three or four constrained axes: the model's interactions are read too
    [((1, 5),), ((2, 6),), ((1, 4),), ((0, 5),)],
    [((0, 3),), ((2, 7),), ((3, 6),), ((1, 4),)],
    [((2, 8),), ((0, 4),), ((0, 2), (5, 6)), ((2, 5),)],
]


def _loglinear_truth(seed: int, scale: float = 40.0) -> np.ndarray:
    """A positive cube whose logarithm is a sum of pair terms: exactly what the model represents."""
    rng = np.random.default_rng(seed)
    log = np.zeros(SHAPE)
    for c in pairs(len(SHAPE)):
        log = log + rng.normal(0, 0.4, marginal(np.zeros(SHAPE), c).shape)
    return scale * np.exp(log)


def _noise_free(x: np.ndarray) -> tuple[list, list, list]:
    cuboids = list(pairs(x.ndim))
    weights = [1.0 / (2 * (30.0 / share) ** 2) for share in default_shares(x.shape, tuple(cuboids))]
    return cuboids, weights, [marginal(x, c) for c in cuboids]


def test_noise_free_fit_recovers_a_loglinear_cube() -> None:
    x = _loglinear_truth(0)
    estimate_, model, _ = estimate(SHAPE, *_noise_free(x), iterations=500)
    assert np.max(np.abs(model - x)) / np.max(x) < 1e-3
    assert np.max(np.abs(estimate_ - x)) / np.max(x) < 1e-3


def test_fit_reaches_the_minimiser_on_a_large_noisy_cube() -> None:
    """At 144,000 cells the build's fit (`FIT_ITERATIONS` steps) must be at the loss's
    minimiser, not on its way there. Plain L-BFGS from the uniform cube stopped, after 60 steps, with
    3–4-axis answers ~20× the noise away from the minimiser (so their bars covered ~15 %)."""
    shape = (10, 50, 36, 8)
    rng = np.random.default_rng(5)
    log = sum(rng.normal(0, 0.5, marginal(np.zeros(shape), c).shape) for c in pairs(4))
    x = 7.0 * np.exp(log)
    cuboids = list(pairs(4))
    _, weights, noisy = release_marginals(
        x, cuboids, default_shares(shape, tuple(cuboids)), 1.0, 1.0, RandomSource(seed=11), 1
    )
    built, _, _ = estimate(shape, cuboids, weights, noisy, FIT_ITERATIONS)
    converged, _, _ = estimate(shape, cuboids, weights, noisy, 1500)
    boxes = [
        [((1, 7),), ((5, 40),), ((3, 30),), ((0, 7),)],
        [((0, 4),), ((10, 49),), ((0, 17),), ((2, 5),)],
        [((2, 9),), ((0, 24),), ((12, 35),), ((1, 3),)],
        [((0, 9),), ((7, 31),), ((4, 20),), ((3, 6),)],
    ]
    gap = [abs(selection_sums(prefix_sums(built), b) - selection_sums(prefix_sums(converged), b)) for b in boxes]
    noise = [abs(selection_sums(prefix_sums(converged), b) - selection_sums(prefix_sums(x), b)) for b in boxes]
    assert max(gap) < 0.05 * np.sqrt(np.mean(np.square(noise))), (gap, noise)


@pytest.mark.parametrize("shape", [(4, 3, 3), (8, 6, 5, 3)])
def test_small_fits_through_the_incidence_matrix_reach_the_cube_paths_minimiser(
    shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Small fits evaluate the loss as matrix–vector products (`loglinear._small_loss`); the cube's
    marginal sums (large fits) must reach the same minimiser from the same noisy marginals, to the
    optimiser's tolerance, and the small path must be the one taken at these sizes."""
    rng = np.random.default_rng(8)
    x = rng.poisson(6.0, shape).astype(np.float64)
    cuboids = list(pairs(len(shape)))
    _, weights, noisy = release_marginals(
        x, cuboids, default_shares(shape, tuple(cuboids)), 1.0, 1.0, RandomSource(seed=4), 1
    )
    assert loglinear._small_loss(shape, cuboids, weights, noisy, 1.0) is not None
    small, _ = loglinear.fit_loglinear(shape, cuboids, weights, noisy, iterations=400)
    monkeypatch.setattr(loglinear, "_DENSE_ENTRIES", 0)
    assert loglinear._small_loss(shape, cuboids, weights, noisy, 1.0) is None
    cube, _ = loglinear.fit_loglinear(shape, cuboids, weights, noisy, iterations=400)
    assert np.max(np.abs(small - cube)) < 2e-3 * np.max(cube), np.max(np.abs(small - cube))


@pytest.mark.parametrize("shape", [(3, 4, 5), (10, 5, 6, 8), (2, 3, 4, 5, 3)])
def test_low_order_paths_from_marginal_means_equal_the_axis_walk(shape: tuple[int, ...]) -> None:
    """`higher_order(x, 2)` and `reconstruct` from pairs (with or without the 1-way
    marginals) read x's marginal means instead of walking its 2^d ANOVA leaves — the same numbers."""
    rng = np.random.default_rng(len(shape))
    x = rng.normal(size=shape)
    assert np.allclose(higher_order(x, 2), lattice_apply(x, lambda t: 1.0 if len(t) > 2 else 0.0), rtol=0, atol=1e-12)
    for cuboids in (list(pairs(len(shape))), [frozenset({i}) for i in range(len(shape))] + list(pairs(len(shape)))):
        weights = list(rng.uniform(0.5, 2.0, len(cuboids)))
        measured = [marginal(x, c) + rng.normal(size=marginal(x, c).shape) for c in cuboids]
        z = sum(w * y for w, y in zip(weights, measured)) + np.zeros(shape)
        walked = lattice_apply(z, {t: (1.0 / v if v > 0 else 0.0) for t, v in lambdas(shape, cuboids, weights).items()})
        assert np.allclose(reconstruct(shape, cuboids, weights, measured), walked, rtol=0, atol=1e-12)


def test_noise_free_answers_on_two_axes_are_exact_on_any_data() -> None:
    x = np.random.default_rng(1).poisson(1.5, SHAPE).astype(np.float64) * 7.5  # not log-linear
    estimate_, _, _ = estimate(SHAPE, *_noise_free(x), iterations=60)
    for sel in LOW:
        assert selection_sums(prefix_sums(estimate_), sel) == pytest.approx(
            selection_sums(prefix_sums(x), sel), abs=1e-6
        )


def test_estimate_keeps_least_squares_marginals_and_model_interactions() -> None:
    """x̂ = x_ls + Σ_{|T|≥3} P_T x_m: its 2-D marginals are the least-squares ones exactly."""
    x = np.random.default_rng(2).poisson(1.5, SHAPE).astype(np.float64) * 7.5
    cuboids, weights, clean = _noise_free(x)
    rng = np.random.default_rng(3)
    noisy = [m + rng.normal(0, 20, m.shape) for m in clean]
    estimate_, model, _ = estimate(SHAPE, cuboids, weights, noisy, iterations=60)
    lam = lambdas(SHAPE, cuboids, weights)
    assert all(v > 0 for t, v in lam.items() if len(t) <= 2)
    assert np.allclose(higher_order(estimate_, 2), higher_order(model, 2))


def _runs(x: np.ndarray, builds: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Errors and stated variances of LOW + HIGH over ``builds`` seeded builds (ε = 1, Δ = 30)."""
    truths = [selection_sums(prefix_sums(x), s) for s in LOW + HIGH]
    errors, stated = np.empty((builds, len(truths))), np.empty((builds, len(truths)))
    for k in range(builds):
        m = PairwiseStrategy(replicates=8).measure(x, 30.0, 1.0, RandomSource(seed=seed + k), nonnegative=True)
        cube = Cube("t", str(k), {"v": prefix_sums(m.noisy)}, {"v": m.error})
        errors[k] = [cube.total("v", s) - t for s, t in zip(LOW + HIGH, truths)]
        stated[k] = [cube.variance("v", s) for s in LOW + HIGH]
    return errors, stated


def test_noise_scale_and_bootstrap_error_bars() -> None:
    """Privacy rule 5: the spread of many releases matches the stated variance — exactly where the
    answer is linear, and within bootstrap accuracy where the model is read (log-linear truth)."""
    errors, stated = _runs(_loglinear_truth(4), builds=200, seed=70_000)
    low, high = slice(0, len(LOW)), slice(len(LOW), None)
    ratio_low = errors[:, low].var(axis=0) / stated[:, low].mean(axis=0)
    assert np.all(np.abs(ratio_low - 1) < 0.25), ratio_low  # exact model; 200 draws wobble ~10 %
    assert np.all(np.abs(errors[:, low].mean(axis=0)) < 4 * np.sqrt(stated[:, low].mean(axis=0) / 200))
    ratio_high = np.mean(errors[:, high] ** 2, axis=0) / stated[:, high].mean(axis=0)
    print(f"\nempirical/stated: linear {np.round(ratio_low, 3)}, bootstrap {np.round(ratio_high, 3)}")
    assert np.all((ratio_high > 0.6) & (ratio_high < 1.6)), ratio_high
    covered = np.abs(errors) <= 1.96 * np.sqrt(stated)
    print(f"95% intervals covered: linear {covered[:, low].mean():.3f}, bootstrap {covered[:, high].mean():.3f}")
    assert 0.92 <= covered[:, low].mean() <= 0.98
    assert covered[:, high].mean() >= 0.91  # K/(K−2) in the stated variance (t with K = 8 df)


def test_grouped_variances_match_single_selections() -> None:
    x = _loglinear_truth(5)
    m = PairwiseStrategy(replicates=4).measure(x, 30.0, 1.0, RandomSource(seed=1), nonnegative=True)
    cube = Cube("t", "b", {"v": prefix_sums(m.noisy)}, {"v": m.error})
    for sel, group in [(HIGH[0], [2]), (LOW[1], [2]), (LOW[0], [1])]:
        grouped = cube.grouped_variances("v", sel, group)
        singles = [
            cube.variance("v", [((c, c),) if a == group[0] else runs for a, runs in enumerate(sel)])
            for c in range(sel[group[0]][0][0], sel[group[0]][0][1] + 1)
        ]
        assert np.allclose(grouped.ravel(), singles)


def test_public_fallbacks_use_marginals() -> None:
    x = _loglinear_truth(6)
    signed = PairwiseStrategy().measure(x, 30.0, 1.0, RandomSource(seed=2), nonnegative=False)
    assert "signed clip range" in signed.details["pairwise"] and signed.error.kind == "marginal_lattice"
    flat = PairwiseStrategy().measure(x.sum(axis=(2, 3)), 30.0, 1.0, RandomSource(seed=2), nonnegative=True)
    assert "fewer than 3" in flat.details["pairwise"]


def test_stored_bytes_count_the_bootstrap_replicates() -> None:
    assert PairwiseStrategy(replicates=16).stored_bytes_per_cell((30, 30, 30, 30)) == 8 + 64
    assert PairwiseStrategy(replicates=16).stored_bytes_per_cell((30, 30)) == 8
    assert math.prod((200, 200, 100)) > 2_000_000 and PairwiseStrategy().stored_bytes_per_cell((200, 200, 100)) == 8
