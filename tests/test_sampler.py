"""The discrete Laplace sampler against its exact distribution, and the grid mechanism's scale."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy.mechanisms.sampler import (
    GridLaplace,
    RandomSource,
    discrete_laplace,
    discrete_laplace_variance,
    exponential_mechanism,
    grid_for,
)


def exact_cdf(k: np.ndarray, t: float) -> np.ndarray:
    """CDF of P[Z = k] = (1−q)/(1+q)·q^|k|, q = e^{−1/t}."""
    q = math.exp(-1.0 / t)
    k = np.asarray(k, dtype=np.float64)
    neg = q ** (-k) / (1 + q)  # k ≤ −1... P[Z ≤ k] = q^{-k}/(1+q) for k < 0
    pos = 1 - q ** (k + 1) / (1 + q)  # P[Z ≤ k] = 1 − q^{k+1}/(1+q) for k ≥ 0
    return np.where(k < 0, neg, pos)


@pytest.mark.parametrize("t", [0.7, 3.0, 1500.0])
def test_discrete_laplace_moments_and_ks(t: float) -> None:
    n = 400_000
    z = discrete_laplace(RandomSource(seed=1), t, n)
    assert z.dtype == np.int64
    var = discrete_laplace_variance(t)
    assert abs(z.mean()) < 5 * math.sqrt(var / n)
    assert z.var() == pytest.approx(var, rel=0.02)
    support = np.arange(z.min(), z.max() + 1)
    empirical = np.searchsorted(np.sort(z), support, side="right") / n
    d = np.max(np.abs(empirical - exact_cdf(support, t)))
    assert d < 1.63 / math.sqrt(n), f"KS distance {d:.5f} (1% critical value {1.63 / math.sqrt(n):.5f})"


def test_tail_frequencies_match_exact_pmf() -> None:
    t, n = 2.0, 1_000_000
    z = discrete_laplace(RandomSource(seed=2), t, n)
    q = math.exp(-1 / t)
    for k in (4, 8, 12):
        expected = 2 * q**k / (1 + q) * n  # P[|Z| ≥ k] = 2 q^k / (1+q)
        observed = int(np.sum(np.abs(z) >= k))
        assert abs(observed - expected) < 5 * math.sqrt(expected), (k, observed, expected)


def test_a_seeded_source_draws_the_words_it_always_drew() -> None:
    """Seeded builds repeat across versions: a seeded source's words are PCG64's stream as numpy's
    integers(0, 2**64) gives it (what `RandomSource.words` called before it read the raw words)."""
    for n in (0, 1, 7, 100_003):
        reference = np.random.Generator(np.random.PCG64(11)).integers(0, 2**64, size=n, dtype=np.uint64)
        assert np.array_equal(RandomSource(seed=11).words(n), reference)
    src, reference_rng = RandomSource(seed=12), np.random.Generator(np.random.PCG64(12))
    for n in (3, 5, 1000):  # successive calls continue the same stream
        assert np.array_equal(src.words(n), reference_rng.integers(0, 2**64, size=n, dtype=np.uint64))


def test_csprng_source_is_the_default_and_unbiased() -> None:
    src = RandomSource()
    assert not src.seeded
    u = src.uniform_open(200_000)
    assert u.min() > 0 and u.max() <= 1
    assert u.mean() == pytest.approx(0.5, abs=0.005)


def test_scale_guard() -> None:
    with pytest.raises(ValueError):
        discrete_laplace(RandomSource(seed=0), 2.0**21, 3)
    with pytest.raises(ValueError):
        discrete_laplace(RandomSource(seed=0), 0.0, 3)


@pytest.mark.parametrize("sensitivity,epsilon", [(1.0, 0.5), (250_000.0, 0.5), (30.0, 2.0), (1.0, 0.01), (5.0, 0.0005)])
def test_grid_laplace_noise_scale_matches_stated_scale(sensitivity: float, epsilon: float) -> None:
    """Privacy rule 5: the spread of many releases matches the stated Laplace scale Δ/ε."""
    mech = GridLaplace(sensitivity, epsilon)
    # The grid costs < 0.1 % extra noise for ε ≥ 0.002, < 0.4 % below (coarser grid, see sampler).
    assert mech.scale == pytest.approx(sensitivity / epsilon, rel=0.001 if epsilon >= 0.002 else 0.004)
    truth = np.full(300_000, 1234.5678)
    noise = mech.release(truth, RandomSource(seed=3)) - np.rint(truth / mech.grid) * mech.grid
    b = sensitivity / epsilon
    assert np.mean(np.abs(noise)) == pytest.approx(b, rel=0.02)  # E|Laplace(b)| = b
    assert np.std(noise) == pytest.approx(math.sqrt(2) * b, rel=0.02)
    assert np.var(noise) == pytest.approx(mech.variance, rel=0.02)


def test_releases_lie_on_a_data_independent_grid() -> None:
    mech = GridLaplace(10.0, 1.0)
    out = mech.release(np.array([0.1, 1e6 + 0.3, -7.77]), RandomSource(seed=4))
    assert np.all(np.mod(out, mech.grid) == 0)
    assert grid_for(10.0, 1.0) == 2.0**-7  # largest power of two ≤ 10/1024
    assert grid_for(10.0, 0.1) == 2.0**-7  # min(Δ, Δ/ε) = Δ for ε < 1


def test_exponential_mechanism_frequencies_follow_exp_eps_q_over_2_delta() -> None:
    """Rule 5 for the exponential mechanism: empirical choice frequencies = exp(ε·q/(2Δ)) / Z."""
    quality = np.array([0.0, -1.0, -2.5, -4.0, -0.5])
    eps, sens = 1.3, 0.8
    source = RandomSource(seed=4)
    draws = np.bincount([exponential_mechanism(quality, sens, eps, source) for _ in range(40_000)], minlength=5)
    p = np.exp(eps * quality / (2 * sens))
    p /= p.sum()
    chi2 = float(np.sum((draws - 40_000 * p) ** 2 / (40_000 * p)))
    assert chi2 < 18.5  # χ²(4) 99.9 % quantile
    with pytest.raises(ValueError):
        exponential_mechanism(quality, 0.0, eps, source)


@pytest.mark.parametrize("table", ["Z95_LAPLACE_SUM", "Z975_LAPLACE_SUM"])
def test_the_quantiles_of_laplace_sums_match_sampling(table: str) -> None:
    """The tabulated two-sided quantiles of a sum of n equal Laplace noises, in standard deviations
    (computed by numerical integration), against 400,000 sampled sums each (test randomness)."""
    from privacy.estimation import error

    level = 0.95 if table == "Z95_LAPLACE_SUM" else 0.975
    rng = np.random.default_rng(20261127)
    for n, z in getattr(error, table):
        if n not in (1, 2, 4, 16, 64):
            continue
        sums = rng.laplace(0.0, 1.0, size=(400_000, n)).sum(axis=1) / np.sqrt(2.0 * n)
        assert abs(np.quantile(np.abs(sums), level) - z) < 0.015, (n, z)
