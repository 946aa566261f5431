"""Shrinking a wide table's 2-way interactions toward independence (issue #34): empirical Bayes.

Why. The wide strategy measures every 2-way cuboid of a table with 10–30 columns, so each gets a
small share of the budget: on Adult-15 at ρ = 0.015 a 2-way cell's noise has σ ≈ 60, and a 2-column
range over 10 × 10 cells carries σ ≈ 170 of *interaction* noise (the 1-way margins are measured far
better). Most column pairs of real tables are close to independent, so for them that noise is nearly
all the error, while a few pairs (education × education_num, relationship × sex) carry interactions
far above it. AIM and MST win there by measuring few pairs and modelling the rest; a pair can also be
denoised after the fact — post-processing of released values, no budget.

Estimator. For a measured pair T = {i, j} let ŷ be its least-squares estimate (`privacy.cuboids`,
Eq. 2) and x̂_i, x̂_j its margins. The target is independence, m = x̂_i ⊗ x̂_j / N̂ (margins clipped at
0 first: a COUNT's cells are ≥ 0). The residual R = C_T(ŷ − m) (C_T: centring along both axes) is
the released interaction component z_T minus a function of the 1-way estimates, so its noise is
z_T's: variance v_T per coordinate of the doubly-centred subspace, white (`CuboidLattice.v`), and
nearly all of R's noise. In the orthonormal DCT-II basis along both axes that subspace is spanned by
the coefficients with frequencies a, b ≥ 1, each with noise variance v_T.

A range query is a smooth function of the cells, so it reads the low frequencies; real interactions
concentrate there too, the noise does not. The prior is therefore a power law, coefficient (a, b) ~
N(0, τ²·(a·b)^(−γ)), with τ² and γ fitted to the pair's own noisy coefficients by maximum marginal
likelihood, c_ab ~ N(0, τ²(ab)^(−γ) + v_T) (type-II ML, the empirical-Bayes step of e.g. Johnstone &
Silverman's wavelet shrinkage), and each coefficient is replaced by its posterior mean,

    ĉ_ab = c_ab · s_ab / (s_ab + v_T),      s_ab = τ̂²(ab)^(−γ̂).                                  (1)

A pair whose interaction is weak against the noise gets τ̂² ≈ 0 and becomes independence from its
(well measured) margins; a strong one keeps its low frequencies almost untouched. Measured on
Adult-15 (bench/zcdp.py): 2-/3-/4-column MAE 148 / 143 / 96 → 91 / 73 / 43 at ρ = 0.015. A single
James–Stein factor per pair (no frequencies) or shrinking toward the additive (ANOVA) model instead
of independence made 2-column answers worse: the first over-shrinks the smooth signal because the
high-frequency noise dominates the energy, the second is not a count model at all.

What it costs. The answer is no longer linear in the noise, so its bar is an estimate
(`privacy.error.ShrunkPairError`): the spread of shrunk refits of simulated releases plus the squared
bias the fitted prior expects. Only released values, the public shape and the public noise variance
enter; nothing here reads a row.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from scipy.fft import dctn, idctn

from privacy.lattice import centred

# The hyperparameters' grid: γ (the prior's decay; 0 = white, James–Stein-like) and log τ² − log v_T
# (from "no interaction" to far above the noise), searched coarse first, then finely around the best.
GAMMA_RANGE, GAMMA_STEP = (0.0, 4.0), 0.25
LOG_TAU_RANGE, LOG_TAU_STEP = (-8.0, 12.0), 0.25
COARSE = 4  # the coarse pass takes every 4th grid point on both axes
LOG_FREQ_BIN = 0.025  # coefficients pooled by log(a·b) for the likelihood (`posterior_factors`)


def independence(pair: np.ndarray) -> np.ndarray | None:
    """N̂·p_i ⊗ p_j from the pair's own margins clipped at 0 (None: nothing positive to spread)."""
    total = float(pair.sum())
    rows, cols = np.maximum(pair.sum(axis=1), 0.0), np.maximum(pair.sum(axis=0), 0.0)
    if total <= 0 or rows.sum() <= 0 or cols.sum() <= 0:
        return None
    return np.outer(rows / rows.sum(), cols / cols.sum()) * total


def posterior_factors(coefficients: np.ndarray, frequency: np.ndarray, v: float) -> np.ndarray:
    """s/(s + v) per coefficient (Eq. 1), τ² and γ by maximum marginal likelihood on a grid: every
    `COARSE`-th point first, then every point within one coarse step of the best (a fraction of the
    full grid's cost; the likelihood is smooth in both, so the two agree but for ties). The
    likelihood sums over coefficients pooled by log-frequency in bins of `LOG_FREQ_BIN` (count and
    Σc² per bin: the prior varies by at most e^(γ·bin) ≤ 1.11 inside one), the factors use each
    coefficient's own frequency."""
    c2 = coefficients.ravel() ** 2
    log_f = np.log(frequency.ravel())
    bins, inverse = np.unique(np.floor(log_f / LOG_FREQ_BIN), return_inverse=True)
    count = np.bincount(inverse, minlength=bins.size).astype(float)
    energy = np.bincount(inverse, weights=c2, minlength=bins.size)
    centre = np.bincount(inverse, weights=log_f, minlength=bins.size) / count

    def best(gammas: np.ndarray, log_taus: np.ndarray) -> tuple[float, float]:
        total = v * (np.exp(log_taus[None, :, None] - gammas[:, None, None] * centre[None, None, :]) + 1.0)
        loglik = -0.5 * np.sum(count * np.log(total) + energy / total, axis=2)  # (γ, τ)
        g, t = np.unravel_index(int(np.argmax(loglik)), loglik.shape)
        return float(gammas[g]), float(log_taus[t])

    gammas = np.arange(GAMMA_RANGE[0], GAMMA_RANGE[1] + 1e-9, GAMMA_STEP)
    log_taus = np.arange(LOG_TAU_RANGE[0], LOG_TAU_RANGE[1] + 1e-9, LOG_TAU_STEP)
    gamma, log_tau = best(gammas[::COARSE], log_taus[::COARSE])
    near = COARSE * (1 + 1e-9)
    gamma, log_tau = best(gammas[np.abs(gammas - gamma) <= near * GAMMA_STEP],
                          log_taus[np.abs(log_taus - log_tau) <= near * LOG_TAU_STEP])
    prior = np.exp(np.log(v) + log_tau - gamma * log_f)
    return (prior / (prior + v)).reshape(coefficients.shape)


def shrink_pair(pair: np.ndarray, v: float) -> tuple[np.ndarray, np.ndarray | None]:
    """The pair's estimate with its interaction around independence shrunk by Eq. 1 (same margins),
    and the factors s/(s + v) over the DCT coefficients (a, b ≥ 1; None: nothing was shrunk).
    ``v``: the noise variance per coordinate of its interaction component (0: noiseless, unchanged)."""
    if v <= 0 or min(pair.shape) < 2:
        return pair, None
    target = independence(pair)
    if target is None:
        return pair, None
    residual = centred(pair - target)
    coefficients = dctn(residual, type=2, norm="ortho")[1:, 1:]
    a, b = np.arange(1, pair.shape[0], dtype=float), np.arange(1, pair.shape[1], dtype=float)
    factors = posterior_factors(coefficients, np.outer(a, b), v)
    kept = np.zeros(pair.shape)
    kept[1:, 1:] = coefficients * factors
    return pair - residual + idctn(kept, type=2, norm="ortho"), factors


def _dct_rows(n: int) -> np.ndarray:
    """Rows 1..n−1 of the orthonormal DCT-II matrix: coefficient a of a vector y is row a · y."""
    k, m = np.arange(1, n)[:, None], np.arange(n)[None, :]
    return np.sqrt(2.0 / n) * np.cos(np.pi * k * (2 * m + 1) / (2 * n))


def weighted_noise(weights: np.ndarray, v: float, selection: Sequence[Sequence[tuple[int, int]]],
                   group_axes: Sequence[int] = ()) -> float | np.ndarray:
    """v·Σ_ab q_a² r_b² weights_ab: the variance a selection on a pair reads from white noise of
    variance v·weights_ab in its DCT coefficients a, b ≥ 1 (q ⊗ r: the selection's own coefficients,
    separable since a selection is a product of per-axis cell sets). Per group (cells of
    ``group_axes``, in that order) when grouped. ``weights`` = 1 gives least squares' interaction
    term; f² the shrunk noise's, f(1 − f) the prior's expected squared bias (`privacy.error`)."""
    forms = []
    for axis, runs in enumerate(selection):
        rows = _dct_rows(weights.shape[axis] + 1)
        cells = np.concatenate([np.arange(lo, hi + 1) for lo, hi in runs]) if runs else np.zeros(0, dtype=int)
        forms.append(rows[:, cells].T ** 2 if axis in group_axes else (rows[:, cells].sum(axis=1) ** 2)[None, :])
    out = v * (forms[0] @ weights @ forms[1].T)  # (groups of axis 0 or 1) × (groups of axis 1 or 1)
    if not group_axes:
        return float(out[0, 0])
    if len(group_axes) == 1:
        return out[:, 0] if group_axes[0] == 0 else out[0, :]
    return out if tuple(group_axes) == (0, 1) else out.T
