"""The exact discrete Gaussian sampler, stage by stage, against exact pmfs.

Each stage of `privacy.mechanisms.discrete_gaussian` is tested on its own with a chi-square or binomial test
against its exact distribution, in the style of OpenDP's sampler tests (their exact sampler shipped
biased until a pmf test caught a wrong bignum division). Every test also shows it can fail: the
same statistic computed against a slightly wrong pmf must reject.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from privacy.mechanisms.discrete_gaussian import (
    GridGaussian,
    bernoulli_exp,
    bernoulli_exp_fraction,
    bernoulli_ratio,
    discrete_gaussian,
    discrete_gaussian_each,
    discrete_laplace_exact,
    gaussian_grid_for,
    gaussian_parameters,
    release_each,
    uniform_below,
)
from privacy.mechanisms.sampler import RandomSource, observe_releases

ALPHA = 1e-4  # per test; every stage is tested at several parameters


def chi_square_p(observed: np.ndarray, expected_p: np.ndarray) -> float:
    """p-value of a chi-square goodness-of-fit test, pooling cells with < 5 expected counts."""
    n = observed.sum()
    expected = expected_p / expected_p.sum() * n
    keep = expected >= 5
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] < 5:  # fold a thin pooled tail into the last real cell
        obs[-2] += obs[-1]
        exp[-2] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def binomial_ok(hits: int, n: int, p: float, z: float = 4.5) -> bool:
    return abs(hits - n * p) <= z * math.sqrt(n * p * (1 - p)) + 1


@pytest.mark.parametrize("m", [1, 2, 7, 1000, 3 * 2**40 + 5])
def test_uniform_below_is_uniform(m: int) -> None:
    n = 300_000
    u = uniform_below(RandomSource(seed=m % 97), np.full(n, m, dtype=np.int64))
    assert u.dtype == np.int64 and u.min() >= 0 and u.max() < m
    buckets = min(m, 50)
    counts = np.bincount((u * buckets // m) if m < 2**40 else (u // -(-m // buckets)), minlength=buckets)
    if buckets > 1:
        sizes = np.array(
            [len(range(b * m // buckets, (b + 1) * m // buckets)) for b in range(buckets)]
            if m < 2**40
            else [min(-(-m // buckets), m - b * -(-m // buckets)) for b in range(buckets)],
            dtype=float,
        )
        assert chi_square_p(counts, sizes) > ALPHA


@pytest.mark.parametrize("num,den", [(0, 5), (1, 3), (2, 3), (5, 5), (12345, 2**41 + 1)])
def test_bernoulli_ratio_frequencies(num: int, den: int) -> None:
    n = 400_000
    hits = int(bernoulli_ratio(RandomSource(seed=num + 1), np.full(n, num), np.full(n, den)).sum())
    assert binomial_ok(hits, n, num / den), (hits, n * num / den)


@pytest.mark.parametrize("num,den", [(0, 1), (1, 10), (3, 10), (1, 1), (999_999, 1_000_000)])
def test_bernoulli_exp_fraction_frequencies(num: int, den: int) -> None:
    n = 400_000
    hits = int(bernoulli_exp_fraction(RandomSource(seed=num + 2), np.full(n, num), np.full(n, den)).sum())
    assert binomial_ok(hits, n, math.exp(-num / den)), (hits, n * math.exp(-num / den))


@pytest.mark.parametrize("num,den", [(5, 2), (7, 3), (40, 10), (1, 7)])
def test_bernoulli_exp_frequencies(num: int, den: int) -> None:
    n = 600_000
    hits = int(bernoulli_exp(RandomSource(seed=num), np.full(n, num), np.full(n, den)).sum())
    assert binomial_ok(hits, n, math.exp(-num / den)), (hits, n * math.exp(-num / den))


def test_bernoulli_tests_have_power() -> None:
    """The binomial check rejects a Bernoulli off by 1 % (so the tests above can fail)."""
    n = 600_000
    hits = int(bernoulli_exp(RandomSource(seed=3), np.full(n, 5), np.full(n, 2)).sum())
    assert not binomial_ok(hits, n, math.exp(-2.5) * 1.05)


def laplace_pmf(support: np.ndarray, t: float) -> np.ndarray:
    return np.exp(-np.abs(support) / t)


def gaussian_pmf(support: np.ndarray, sigma2: float) -> np.ndarray:
    return np.exp(-(support.astype(float) ** 2) / (2 * sigma2))


def histogram(z: np.ndarray, reach: int) -> tuple[np.ndarray, np.ndarray]:
    support = np.arange(-reach, reach + 1)
    clipped = np.clip(z, -reach, reach)  # the end cells hold the tails; compared with the tail mass
    return support, np.bincount(clipped + reach, minlength=support.size)


def tail_pmf(pmf: np.ndarray, support: np.ndarray, reach: int, wide: np.ndarray, far: np.ndarray) -> np.ndarray:
    """pmf over `support` with the mass beyond ±reach (``far``, the pmf on ``wide``) folded into the ends."""
    p = pmf.copy()
    p[0] += far[wide < -reach].sum()
    p[-1] += far[wide > reach].sum()
    return p


@pytest.mark.parametrize("t", [1, 3, 40])
def test_discrete_laplace_exact_pmf(t: int) -> None:
    n = 300_000
    z = discrete_laplace_exact(RandomSource(seed=t), t, n)
    reach = 8 * t
    support, counts = histogram(z, reach)
    wide = np.arange(-60 * t, 60 * t + 1)
    p = tail_pmf(laplace_pmf(support, t), support, reach, wide, laplace_pmf(wide, t) * (np.abs(wide) > reach))
    assert chi_square_p(counts, p) > ALPHA
    assert (
        chi_square_p(
            counts,
            tail_pmf(
                laplace_pmf(support, t * 1.03),
                support,
                reach,
                wide,
                laplace_pmf(wide, t * 1.03) * (np.abs(wide) > reach),
            ),
        )
        < ALPHA
    )


@pytest.mark.parametrize("sigma", [0.6, 1.5, 4.2, 30.0])
def test_discrete_gaussian_pmf_small_sigma(sigma: float) -> None:
    t, c = gaussian_parameters(sigma)
    sigma2 = t * c
    assert sigma2 >= sigma**2
    n = 300_000
    z = discrete_gaussian(RandomSource(seed=int(sigma * 10)), t, c, n)
    reach = int(5 * math.sqrt(sigma2)) + 1
    support, counts = histogram(z, reach)
    wide = np.arange(-12 * reach, 12 * reach + 1)
    far = gaussian_pmf(wide, sigma2) * (np.abs(wide) > reach)
    assert chi_square_p(counts, tail_pmf(gaussian_pmf(support, sigma2), support, reach, wide, far)) > ALPHA
    wrong = sigma2 * 1.04  # a 2 % error in σ must be caught
    far_wrong = gaussian_pmf(wide, wrong) * (np.abs(wide) > reach)
    assert chi_square_p(counts, tail_pmf(gaussian_pmf(support, wrong), support, reach, wide, far_wrong)) < ALPHA


def test_discrete_gaussian_large_sigma_cdf_and_tails() -> None:
    """At σ ≈ 10^3 and 7·10^4 grid units (what releases use): KS against the exact CDF, exact tails."""
    for sigma, seed in ((1024.3, 5), (70_000.0, 6)):
        t, c = gaussian_parameters(sigma)
        s = math.sqrt(t * c)
        n = 400_000
        z = discrete_gaussian(RandomSource(seed=seed), t, c, n)
        # The discrete Gaussian at σ ≥ 1000 equals the rounded normal to within e^{-2π²σ²}: the exact
        # CDF at the half-integers is the normal's (CKS Fact 18 / Poisson summation).
        ks = stats.kstest(z + 0.5 - np.random.default_rng(seed).random(n), stats.norm(scale=s).cdf)
        assert ks.pvalue > ALPHA
        for k in (2.0, 3.0, 4.0):
            p = 2 * stats.norm.sf(k)
            assert binomial_ok(int(np.sum(np.abs(z) >= k * s)), n, p), k
        assert z.var() == pytest.approx(t * c, rel=0.015)


@pytest.mark.parametrize(
    "l2,rho,k", [(1.0, 1e-4, 1), (1.0, 0.5, 1), (250_000.0, 0.01, 1), (30.0, 0.002, 9), (1.0, 1e-7, 1)]
)
def test_grid_gaussian_noise_scale_matches_stated_sigma(l2: float, rho: float, k: int) -> None:
    """Privacy rule 5: the spread of many releases matches σ = Δ₂/√(2ρ) (+ ≤ 0.2 % for the grid, 0.5 % at ρ/k < 1e-6)."""
    mech = GridGaussian(l2, rho, coordinates=k)
    ideal = l2 / math.sqrt(2 * rho)
    assert ideal <= mech.sigma <= ideal * (1.002 if rho / k > 1e-6 else 1.005)
    assert mech.grid_sensitivity == pytest.approx(l2 / mech.grid + math.sqrt(k))
    truth = np.full(200_000, 1234.5678)
    noise = mech.release(truth, RandomSource(seed=9)) - np.rint(truth / mech.grid) * mech.grid
    assert np.std(noise) == pytest.approx(mech.sigma, rel=0.01)
    assert np.var(noise) <= mech.variance * 1.02
    assert math.isinf(mech.epsilon)


def test_discrete_gaussian_each_draws_every_element_from_its_own_sigma() -> None:
    """The batched sampler (one pass over many releases with different σ): interleaved elements of
    three parameter sets each follow their own exact pmf (chi-square), and would not follow a
    neighbour's — the per-element bookkeeping of every stage is what this checks."""
    sigmas = (0.9, 3.7, 12.0)
    params = [gaussian_parameters(s) for s in sigmas]
    n = 150_000
    which = np.arange(3 * n) % 3  # interleaved, so an index mix-up anywhere shows
    t = np.array([params[i][0] for i in which], dtype=np.int64)
    c = np.array([params[i][1] for i in which], dtype=np.int64)
    z = discrete_gaussian_each(RandomSource(seed=41), t, c)
    for i, (ti, ci) in enumerate(params):
        sigma2, other = ti * ci, math.prod(params[(i + 1) % 3])
        reach = int(5 * math.sqrt(max(sigma2, other))) + 1
        support, counts = histogram(z[which == i], reach)
        wide = np.arange(-12 * reach, 12 * reach + 1)
        for s2, ok in ((sigma2, True), (other, False)):
            far = gaussian_pmf(wide, s2) * (np.abs(wide) > reach)
            p = chi_square_p(counts, tail_pmf(gaussian_pmf(support, s2), support, reach, wide, far))
            assert (p > ALPHA) == ok, (sigmas[i], s2)
    with pytest.raises(ValueError):
        discrete_gaussian_each(RandomSource(seed=0), np.array([3, 0]), np.array([1, 1]))


def test_release_each_matches_each_mechanisms_release() -> None:
    """A batch of releases (`release_each`: a wide table's cuboids under ρ) has each release's own
    σ, keeps shapes, is shown to the audit's observers once per release (not public ones)."""
    mechs = [GridGaussian(1.0, 0.02), GridGaussian(168.0, 0.004), GridGaussian(1.0, 0.3)]
    values = [np.full((200, 300), 17.25), np.full(40_000, 5000.0), np.full((3, 4), 2.0)]
    with observe_releases() as seen:
        out = release_each(mechs, values, RandomSource(seed=3))
        release_each(mechs, values, RandomSource(seed=4), public=True)
    assert [np.shape(o) for o in out] == [np.shape(v) for v in values]
    assert [m for m, _ in seen] == mechs
    for m, v, o in zip(mechs[:2], values, out):
        noise = o - np.rint(v / m.grid) * m.grid
        assert np.allclose(noise / m.grid, np.rint(noise / m.grid))  # on the grid
        assert np.std(noise) == pytest.approx(m.sigma, rel=0.02)


def test_grid_gaussian_guards() -> None:
    with pytest.raises(ValueError):
        GridGaussian(1.0, 0.0)
    with pytest.raises(ValueError):
        gaussian_grid_for(1.0, 1e-14)
    with pytest.raises(ValueError):
        discrete_laplace_exact(RandomSource(seed=0), 0, 3)
