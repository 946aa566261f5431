"""A wide table's 1-way margins projected onto nonnegative counts of the measured total
(privacy.estimation.nonnegative): the projection itself, what it buys on a table with empty cells, that its
bars cover 1-column ranges and GROUP BY groups over many builds, and that builds before it load."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.synopses.wide import WideCube
from privacy.estimation.cuboid_fit import CuboidLattice, default_cuboids, true_marginals
from privacy.estimation.cuboid_fit import release as noisy_release
from privacy.estimation.nonnegative import fit_to_margins, simplex_projection
from privacy.mechanisms.sampler import RandomSource
from privacy.strategies.cuboids import CuboidRelease, CuboidsStrategy

SHAPE = (14, 9, 6, 5)


def test_the_projection_meets_its_optimality_conditions() -> None:
    """P(y) ≥ 0 sums to the total, and is the closest such point: y − P(y) is the same θ on every
    positive cell and at most θ on every zero one (the KKT conditions of Eq. 1)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        y = rng.normal(rng.uniform(-20, 40), rng.uniform(1, 60), int(rng.integers(1, 40)))
        total = float(rng.uniform(0, 500))
        p = simplex_projection(y, total)
        assert p.min() >= 0 and p.sum() == pytest.approx(total, rel=1e-12, abs=1e-9)
        theta = (y - p)[p > 0]
        assert np.ptp(theta) < 1e-9 and np.all(y[p == 0] <= theta[0] + 1e-9)
    feasible = np.array([0.0, 3.0, 7.0, 0.0, 5.0])
    assert np.array_equal(simplex_projection(feasible, 15.0), feasible)  # already inside: unchanged
    assert np.array_equal(simplex_projection(np.array([4.0, -1.0]), 0.0), np.zeros(2))
    with pytest.raises(ValueError):
        simplex_projection(np.ones(3), -1.0)


def test_a_pair_fitted_to_its_margins_is_nonnegative_and_keeps_them() -> None:
    """Eq. 3: clipped at 0 and fitted back by IPF, a pair keeps its margins and, nearly, its
    cross-product ratios where nothing was clipped; clipped cells stay near 0 (10⁻³ of independence)."""
    rng = np.random.default_rng(2)
    truth = np.outer(np.geomspace(400, 1, 12), np.geomspace(300, 3, 8)) / 50
    truth[:2, :2] *= 3
    noisy = truth + rng.normal(0, 4, truth.shape)
    noisy += (truth.sum(axis=1) - noisy.sum(axis=1))[:, None] / truth.shape[1]  # exact row sums, as a projected margin
    fit = fit_to_margins(noisy)
    independence = np.outer(noisy.sum(axis=1), noisy.sum(axis=0)) / noisy.sum()
    assert (noisy <= 0).any() and fit.min() >= 0 and np.all(fit[noisy <= 0] <= 0.01 * independence[noisy <= 0])
    assert np.allclose(fit.sum(axis=1), noisy.sum(axis=1), rtol=1e-8) and np.allclose(
        fit.sum(axis=0), noisy.sum(axis=0), rtol=1e-6
    )
    inside = noisy[:2, :2]
    assert fit[0, 0] * fit[1, 1] / (fit[0, 1] * fit[1, 0]) == pytest.approx(
        inside[0, 0] * inside[1, 1] / (inside[0, 1] * inside[1, 0]), rel=0.01
    )  # IPF keeps odds ratios
    assert np.abs(fit - truth).sum() < np.abs(noisy - truth).sum()


def _sparse_table(rng: np.random.Generator) -> np.ndarray:
    """~20,000 rows whose columns have a long tail of rare values and empty cells (out of domain,
    NULL, values nobody has) — a third of all 1-way cells, as on Adult-15 (83 of 267)."""
    profiles = [
        np.r_[np.geomspace(1, 1e-3, 10), np.zeros(4)],
        np.r_[np.geomspace(1, 0.01, 6), np.zeros(3)],
        np.r_[1.0, 0.5, 0.05, 0.01, 0.0, 0.0],
        np.r_[0.0, 1.0, 1.0, 0.3, 0.0],
    ]
    rate = np.einsum("i,j,k,l->ijkl", *profiles)
    rate[:3, :2] *= 5  # and a dependent pair
    return rng.poisson(rate * 20_000 / rate.sum()).astype(float)


def _one_column_queries(rng: np.random.Generator, n: int) -> list[list]:
    queries = []
    for _ in range(n):
        axis = int(rng.integers(len(SHAPE)))
        sel = [((0, m - 1),) for m in SHAPE]
        lo = int(rng.integers(SHAPE[axis]))
        hi = int(rng.integers(lo, SHAPE[axis]))
        if (lo, hi) == (0, SHAPE[axis] - 1):
            hi -= 1
        sel[axis] = ((lo, hi),)
        queries.append(sel)
    return queries


def test_projected_margins_beat_least_squares_and_their_bars_cover() -> None:
    """Over 40 seeded builds (ε = 0.5, Laplace): 1-column ranges and GROUP BY groups are closer to the
    truth than least squares' margins (the same release, unprojected), and ±1.96 of the stated bar
    covers 94–99.5 % of both (the bar is the larger of least squares' and the bootstrap's)."""
    rng = np.random.default_rng(11)
    x = _sparse_table(rng)
    true = true_marginals(x, default_cuboids(len(SHAPE)))
    queries = _one_column_queries(rng, 30)
    truths = np.array([x[tuple(slice(r[0][0], r[0][1] + 1) for r in q)].sum() for q in queries])
    full = [((0, m - 1),) for m in SHAPE]
    groups = [x.sum(axis=tuple(i for i in range(len(SHAPE)) if i != a)) for a in range(len(SHAPE))]
    errs, ls_errs, group_errs, ls_group_errs, covered, group_covered = [], [], [], [], 0, 0
    builds = 40
    for seed in range(builds):
        release = (
            CuboidsStrategy(bootstrap=16).measure(true, 1.0, 0.5, RandomSource(seed=900 + seed), nonnegative=True).noisy
        )
        assert release.projected
        cube = WideCube("t", str(seed), SHAPE, releases={"v": release})
        lattice = CuboidLattice(SHAPE, release.cuboids, release.variances)
        for s in release.pairs():  # nonnegative pairs (their cells clipped, fitted back to their margins)
            assert release.estimates[s].min() >= -1e-9 * release.estimates[s].sum()
        for a in range(len(SHAPE)):  # nonnegative margins of one total
            margin = release.estimates[(a,)]
            assert margin.min() >= 0 and margin.sum() == pytest.approx(release.estimates[(0,)].sum())
        for q, t in zip(queries, truths):
            got = cube.total("v", q)
            errs.append(got - t)
            covered += abs(got - t) <= 1.959964 * math.sqrt(cube.variance("v", q))
            assert cube.variance("v", q) >= lattice.error(_axis(q)).variance([q[_axis(q)[0]]]) * (1 - 1e-12)
        for a, truth in enumerate(groups):
            got = cube.grouped_totals("v", full, (a,))
            sd = np.sqrt(cube.grouped_variances("v", full, (a,)))
            group_errs.extend(got - truth)
            group_covered += int(np.sum(np.abs(got - truth) <= 1.959964 * sd))
        # the same noise, least squares' margins: the release's unprojected components
        plain = _least_squares(release, true, seed)
        ls_errs.extend(_range_total(plain, q) - t for q, t in zip(queries, truths))
        for a, truth in enumerate(groups):
            ls_group_errs.extend(plain[(a,)] - truth)
    range_cover = covered / (builds * len(queries))
    group_cover = group_covered / len(group_errs)
    mae, ls_mae = np.mean(np.abs(errs)), np.mean(np.abs(ls_errs))
    gmae, ls_gmae = np.mean(np.abs(group_errs)), np.mean(np.abs(ls_group_errs))
    print(
        f"\nprojected margins: 1-column MAE {mae:.1f} vs least squares {ls_mae:.1f}, groups {gmae:.1f} vs "
        f"{ls_gmae:.1f}; coverage ranges {range_cover:.3f}, groups {group_cover:.3f}"
    )
    assert mae < 0.95 * ls_mae and gmae < 0.85 * ls_gmae
    assert 0.94 <= range_cover <= 0.995 and 0.94 <= group_cover <= 0.995


def _axis(q: list) -> tuple[int, ...]:
    return tuple(a for a, ((lo, hi),) in enumerate(q) if (lo, hi) != (0, SHAPE[a] - 1))


def _range_total(margins: dict, q: list) -> float:
    (a,) = _axis(q)
    ((lo, hi),) = q[a]
    return float(margins[(a,)][lo : hi + 1].sum())


def _least_squares(release: CuboidRelease, true: dict, seed: int) -> dict:
    """Least squares' 1-way margins of the same seeded release (the estimator before the projection)."""
    mechs = CuboidsStrategy().releases(SHAPE, 1.0, 0.5, nonnegative=True)
    lattice = CuboidLattice(SHAPE, release.cuboids, release.variances)
    z = lattice.components_of(noisy_release(true, release.cuboids, mechs, RandomSource(seed=900 + seed)))
    return lattice.assemble(z, [(a,) for a in range(len(SHAPE))])


def test_a_projected_release_persists_and_an_earlier_shrunk_one_keeps_exact_margin_bars() -> None:
    rng = np.random.default_rng(5)
    true = true_marginals(_sparse_table(rng), default_cuboids(len(SHAPE)))
    release = CuboidsStrategy(bootstrap=4).measure(true, 1.0, 1.0, RandomSource(seed=9), nonnegative=True).noisy
    assert release.to_json()["one_way"] == "projected"
    back = CuboidRelease.from_arrays(release.to_json(), release.arrays())
    assert back.projected
    q = [((2, 8),)] + [((0, n - 1),) for n in SHAPE[1:]]
    before = WideCube("t", "b", SHAPE, releases={"v": release})
    after = WideCube("t", "b", SHAPE, releases={"v": back})
    assert after.total("v", q) == before.total("v", q) and after.variance("v", q) == before.variance("v", q)
    assert any("projected away" in n for n in after.error_notes(q))
    earlier = release.to_json()
    del earlier["one_way"]  # a shrunk build of sessions 19–20: least squares' margins, exact bars
    old = WideCube("t", "old", SHAPE, releases={"v": CuboidRelease.from_arrays(earlier, release.arrays())})
    lattice = CuboidLattice(SHAPE, release.cuboids, release.variances)
    assert old.variance("v", q) == pytest.approx(lattice.error((0,)).variance(q[:1]))
    assert not old.error_notes(q)
    total = [((0, n - 1),) for n in SHAPE]  # the total: kept by the projection, least squares' exact bar
    assert before.variance("v", total) == pytest.approx(lattice.error((0,)).variance(total[:1]))
    assert not before.error_notes(total)
