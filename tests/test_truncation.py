"""The paper's truncation baselines (bench-only): SVT's threshold search and R2T, with their noise scales."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy.clipping import truncation
from privacy.mechanisms.sampler import RandomSource


def _laplace_sum_survival(d: float, a: float, b: float) -> float:
    """P[X + Y > d] for independent Laplace(a), Laplace(b), d ≥ 0, a ≠ b."""
    return (a * a * math.exp(-d / a) - b * b * math.exp(-d / b)) / (2 * (a * a - b * b))


def test_svt_stops_with_the_probability_its_noise_scales_imply() -> None:
    """Privacy rule 5: threshold noise 2/ε and query noise 4/ε, checked through the stop rate."""
    eps, threshold = 0.5, 100.0
    gap = 4 / eps  # the query sits one query-noise scale above the threshold
    stops = sum(
        truncation.svt_first_below(np.array([threshold + gap]), threshold, eps, RandomSource(seed=k)) == 0
        for k in range(20_000)
    )
    expected = _laplace_sum_survival(gap, 4 / eps, 2 / eps)
    assert stops / 20_000 == pytest.approx(expected, abs=0.01)


def test_svt_threshold_walks_bottom_up() -> None:
    candidates = np.arange(1.0, 11.0)
    big = np.full(10, 1e6) * candidates
    assert truncation.svt_threshold(big, candidates, 50.0, 1.0, RandomSource(seed=1)) == 10.0  # never below
    small = big.copy()
    small[3:] = 0.0
    assert truncation.svt_threshold(small, candidates, 50.0, 1.0, RandomSource(seed=1)) == 4.0  # first sparse


def test_r2t_noise_scale_and_shift() -> None:
    taus = truncation.r2t_thresholds(30.0)
    assert list(taus) == [2, 4, 8, 16, 32]
    eps, cells = 2.0, 100_000
    truncated = np.full((len(taus), cells), 500.0)
    source = RandomSource(seed=2)
    out = [truncation.r2t_candidate(truncated[k], tau, len(taus), eps, source) for k, tau in enumerate(taus)]
    eps_j = eps / len(taus)
    for k, tau in enumerate(taus):
        shift = math.log(len(taus) / truncation.R2T_BETA) * tau / eps_j
        assert np.mean(out[k]) == pytest.approx(500.0 - shift, abs=4 * math.sqrt(2) * tau / eps_j / math.sqrt(cells))
        assert np.std(out[k]) == pytest.approx(math.sqrt(2) * tau / eps_j, rel=0.02)


def test_r2t_release_is_the_floored_maximum() -> None:
    taus = truncation.r2t_thresholds(8.0)
    truncated = np.array([[0.0, 1e6], [0.0, 1e6], [0.0, 1e6]])
    out = truncation.r2t_release(truncated, taus, 1.0, RandomSource(seed=3))
    assert out[0] >= 0.0 and out[1] > 0.9e6
