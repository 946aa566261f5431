"""HDPView (`privacy.hdpview`): the blocks tile the domain, the first cut follows the exponential
mechanism's stated probabilities exactly, the perturbation has its stated scale, answers follow Eq. 10."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privacy import hdpview
from privacy.sampler import RandomSource

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
        cover[lo[0]:hi[0] + 1, lo[1]:hi[1] + 1, lo[2]:hi[2] + 1] += 1
    assert np.all(cover == 1)  # disjoint and complete
    totals = hdpview.block_totals(part, counts.astype(float))
    assert totals.sum() == counts.sum()
    view = hdpview.PView(part.lo, part.hi, {"n": totals}, {"n": 0.0})
    full = [((0, n - 1),) for n in SHAPE]
    assert view.total("n", full) == pytest.approx(counts.sum())
    # Eq. 10 by hand for one box: each block contributes its total times the overlapping fraction
    box = [((0, 1),), ((1, 2),), ((0, 4),)]
    want = sum(t * np.prod([max(0, min(h, b) - max(l, a) + 1) / (h - l + 1)
                            for (l, h, ((a, b),)) in zip(lo, hi, box)])
               for lo, hi, t in zip(part.lo, part.hi, totals))
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
    """Issue #18: on a tiny tensor, for a table and its neighbour (one more row), the root's cut is
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
        axis, cut = hdpview._choose_cut(points, np.arange(len(counts)), counts, np.zeros(3, dtype=np.int64),
                                        np.array(SHAPE) - 1, float(math.prod(SHAPE)), 1, params, source)
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
