"""zCDP arithmetic: the discrete Laplace's Rényi divergences against brute force, the
facts the ledger's tight ρ rests on, and the (ε, δ) conversions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy.accounting.currencies import Budget, as_budget, declared_total, mechanism
from privacy.accounting.zcdp import (
    delta_of,
    epsilon_for,
    grid_laplace_rho,
    laplace_kl,
    laplace_renyi,
    laplace_rho,
    pure_rho,
    rho_for,
)
from privacy.mechanisms.discrete_gaussian import GridGaussian
from privacy.mechanisms.sampler import GridLaplace


def brute_renyi(s: int, t: float, alpha: float) -> float:
    """D_α(P‖Q) = ln Σ P^α Q^{1−α} / (α − 1), P = DLap(0, t), Q = DLap(s, t), summed over a wide support."""
    z = np.arange(-int(80 * t) - s, int(80 * t) + 2 * s + 1, dtype=np.float64)
    q = math.exp(-1 / t)
    c = (1 - q) / (1 + q)
    log_p = math.log(c) - np.abs(z) / t
    log_q = math.log(c) - np.abs(z - s) / t
    terms = alpha * log_p + (1 - alpha) * log_q
    top = terms.max()
    return float((top + math.log(np.exp(terms - top).sum())) / (alpha - 1))


@pytest.mark.parametrize("s,t", [(1, 0.8), (3, 2.5), (7, 6.0), (40, 30.0)])
@pytest.mark.parametrize("alpha", [1.01, 1.5, 2.0, 4.0, 20.0])
def test_laplace_renyi_matches_brute_force(s: int, t: float, alpha: float) -> None:
    assert laplace_renyi(s, t, np.array([alpha]))[0] == pytest.approx(brute_renyi(s, t, alpha), rel=1e-9, abs=1e-13)


@pytest.mark.parametrize("s,t", [(1, 0.8), (3, 2.5), (40, 30.0)])
def test_laplace_kl_matches_brute_force(s: int, t: float) -> None:
    z = np.arange(-int(80 * t) - s, int(80 * t) + 2 * s + 1, dtype=np.float64)
    q = math.exp(-1 / t)
    p = (1 - q) / (1 + q) * q ** np.abs(z)
    assert laplace_kl(s, t) == pytest.approx(float(np.sum(p * (np.abs(z - s) - np.abs(z)) / t)), rel=1e-10)


def test_renyi_is_superadditive_in_the_shift() -> None:
    """A shift spread over coordinates is never worse than the whole shift on one (the ledger's
    worst case for a vector release): D_α(a + b) ≥ D_α(a) + D_α(b) at every α."""
    alphas = 1.0 + np.logspace(-3, 2, 50)
    for t in (0.7, 5.0, 40.0):
        for a, b in ((1, 1), (2, 5), (10, 30)):
            assert np.all(
                laplace_renyi(a + b, t, alphas) >= laplace_renyi(a, t, alphas) + laplace_renyi(b, t, alphas) - 1e-12
            )


@pytest.mark.parametrize("eps", [0.01, 0.1, 0.5, 1.0, 3.0])
def test_rho_falls_as_the_grid_gets_finer(eps: float) -> None:
    """The ledger charges every release on an uncoarsened grid (s ≥ 1025) the ρ at s = 1025."""
    values = [laplace_rho(s, s / eps) for s in (1025, 1300, 2049, 4097, 9000)]
    assert all(a >= b * (1 - 1e-9) for a, b in zip(values, values[1:]))
    assert grid_laplace_rho(eps, 5000) >= values[-1]
    assert grid_laplace_rho(eps, 5000) <= pure_rho(eps) * (1 + 1e-4)


def test_tight_rho_of_laplace_is_below_the_generic_bound() -> None:
    """ε = 1: ρ ≈ 0.368 (the KL divergence ε + e^{−ε} − 1 in the continuous limit), not ε²/2 = 0.5."""
    assert laplace_rho(1025, 1025.0) == pytest.approx(1 + math.exp(-1) - 1, rel=2e-4)
    mech = GridLaplace(1.0, 1.0)
    assert 0.3678 < mech.rho < 0.3681
    # 120 releases of ε/120 each (the wide strategy's shape): ρ ≈ ε²/240, far below one ε = 1 release
    assert sum(GridLaplace(1.0, 1 / 120).rho for _ in range(120)) == pytest.approx(1 / 240, rel=0.01)


def test_epsilon_delta_conversions() -> None:
    rho = rho_for(1.0, 1e-9)
    assert rho == pytest.approx(0.01497, abs=5e-5)  # AIM's and MST's figure for (1, 1e-9)-DP
    assert delta_of(rho, 1.0) <= 1e-9
    assert delta_of(rho * 1.01, 1.0) > 1e-9  # the largest such ρ (to 1 %)
    assert epsilon_for(rho, 1e-9) == pytest.approx(1.0, rel=1e-3)
    for r in (0.001, 0.05, 0.5):  # tighter than Bun & Steinke's ρ + 2√(ρ ln 1/δ)
        assert epsilon_for(r, 1e-6) < r + 2 * math.sqrt(r * math.log(1e6))


def test_budget_arithmetic_and_mechanisms() -> None:
    b = Budget(0.04, "rho")
    assert (b * 0.25).amount == pytest.approx(0.01) and (0.25 * b).currency == "rho"
    assert (b - Budget(0.01, "rho")).amount == pytest.approx(0.03)
    assert b.pure_epsilon == pytest.approx(math.sqrt(0.08))
    assert b.variance_epsilon == pytest.approx(0.4)  # Laplace at ε = 2√ρ has the Gaussian's variance
    assert isinstance(mechanism(2.0, b), GridGaussian) and isinstance(mechanism(2.0, 0.5), GridLaplace)
    assert mechanism(2.0, b).sigma == pytest.approx(2.0 / math.sqrt(0.08), rel=2e-3)
    assert GridLaplace(2.0, 0.5).variance == pytest.approx(2 * (2.0 / 0.5) ** 2, rel=2e-3)
    assert as_budget(0.3) == Budget(0.3, "epsilon")
    assert declared_total(1.0, None, 1e-9) == Budget(rho_for(1.0, 1e-9), "rho")
    with pytest.raises(ValueError):
        Budget(0.1, "euro")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        b - Budget(0.01, "epsilon")
