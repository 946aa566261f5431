"""Shrinking a wide table's 2-way interactions toward independence: empirical Bayes.

Why. The wide strategy measures every 2-way cuboid of a table with 10–30 columns, so each gets a
small share of the budget: on Adult-15 at ρ = 0.015 a 2-way cell's noise has σ ≈ 60, and a 2-column
range over 10 × 10 cells carries σ ≈ 170 of *interaction* noise (the 1-way margins are measured far
better). Most column pairs of real tables are close to independent, and most cells of a pair of
skewed columns (a country, a capital gain in bins) expect few rows, so for them that noise is nearly
all the error, while a few pairs (education × education_num, relationship × sex) carry interactions
far above it. AIM and MST win there by measuring few pairs and modelling the rest; a pair can also
be denoised after the fact — post-processing of released values, no budget.

Estimator. For a measured pair T = {i, j} let ŷ be its least-squares estimate (`privacy.estimation.cuboid_fit`,
Eq. 2) and x̂_i, x̂_j its margins. The target is independence, e = x̂_i ⊗ x̂_j / N̂ (margins clipped at
0 first: a COUNT's cells are ≥ 0). The residual R = C_T(ŷ − e) (C_T: centring along both axes) is
the released interaction component z_T minus a function of the 1-way estimates, so its noise is
z_T's: C_T applied to white noise of variance v_T (`CuboidLattice.v`) — per cell, variance
v_c = v_T(1 − 1/a)(1 − 1/b) on an a × b pair.

Prior. A count's deviation from independence scales with the count independence expects: in a
log-linear model x = e·exp(λ), x − e ≈ e·λ, and Poisson-like sampling gives var ∝ e. So each cell's
interaction is a priori N(0, s_ab) with s_ab = v_c·τ²·(e_ab/ē)^β — a cell where independence expects
a handful of rows cannot carry an interaction of hundreds, while the noise there is as large as
anywhere. τ² and β are fitted to the pair's own residual by maximum marginal likelihood, R_ab ~
N(0, s_ab + v_c) (type-II ML, the empirical-Bayes step of e.g. Johnstone & Silverman's wavelet
shrinkage), and each cell's residual is replaced by its posterior mean, re-centred so the margins
stay the measured ones:

    R̂ = C_T(f ⊙ R),      f_ab = s_ab / (s_ab + v_c).                                               (1)

A pair whose interaction is weak against the noise gets τ̂² ≈ 0 and becomes independence from its
(well measured) margins; a strong one keeps its populated cells almost untouched.

A second prior for smooth interactions. Eq. 1 treats cells as unrelated, so where an interaction
is smooth and moderate (two ordered columns, each cell's deviation near the noise) it shrinks every
cell of a range the same way and the range sums a coherent bias: on a 20 × 15 table with a smooth
log-linear interaction, 2-column ranges had 4–5× least squares' error. There the prior that fits is
one over the residual's orthonormal 2-D DCT coefficients c_ab (a, b ≥ 1, each with noise variance
v_T: they span the doubly-centred subspace), a power law N(0, τ²(ab)^(−γ)), shrunk the same way,

    ĉ_ab = c_ab · s_ab / (s_ab + v_T),      s_ab = τ̂²(ab)^(−γ̂).                                  (2)

Each pair takes the prior with the smaller Stein unbiased risk estimate of its interaction (the
residual's DCT coefficients, an orthonormal basis of the doubly-centred subspace; f held fixed, as
usual for SURE),

    Σ_ab [(d_ab − c_ab)² + 2 v_T ∂d_ab/∂c_ab],                                                     (3)

d being the estimate's coefficients (for Eq. 1 ∂d/∂c = (Q∘Q) f (Q∘Q)ᵀ, Q the DCT rows). Measured
on Adult-15 at ρ = 0.015 (bench/zcdp.py's queries, 2 builds × 400 per k, 35 % of the budget on the
1-way cuboids), 2-/3-/4-column MAE: least squares 148 / 100 / 54; Eq. 2 alone (session 19's
estimator, builds of which still load) 89 / 60 / 27; Eq. 1 alone 57 / 36 / 18; chosen by Eq. 3
59 / 37 / 18 — and on the smooth table no worse than least squares (0.84–0.95× on a 2-column range),
where Eq. 1 alone was 4–5× worse. Traffic at ε = 1 (bench/one_way_share.py, RMSE): 2-/3-/4-column
77 / 57 / 45 against Eq. 2's 108 / 169 / 78 (share 0.35). Tried and dropped: SURE weighted toward
low frequencies by (ab)^(−1) (65 / 40 / 21 against 61 / 39 / 21 unweighted at a 0.55 share; at
ε = 1 within 2 %) or (ab)^(−2) (66 / 42 / 20 at 0.35), a SURE-optimal blend of the two
estimates (within 1 % of the choice), Eq. 2 applied to what Eq. 1 removed (68 / 38 / 18), a weighted
re-centring that keeps the correction off shrunk cells (no gain), separate exponents for the two
margins in Eq. 1 (61 on 2 columns), a single James–Stein factor per pair, shrinking toward the
additive (ANOVA) model, and singular-value shrinkage of the residual's DCT coefficients (Gavish–Donoho's
optimal shrinker for known noise: 55.5 against Eq. 1's 49.8 on 2 columns, nonnegative step included;
the better of the two per pair, chosen with the truth, 49.4).

What it costs. The answer is no longer linear in the noise, so its bar is an estimate
(`privacy.estimation.error.ShrunkPairError`): the spread of shrunk refits of simulated releases plus the squared
bias the fitted prior expects. Only released values, the public shape and the public noise variance
enter; nothing here reads a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from privacy.estimation.lattice import centred

# The hyperparameters' grid: β (how the prior grows with the expected count; 0 = the same for every
# cell, James–Stein-like; fitted values on Adult-15 were 0–1.75, mostly ≈ 1 as Poisson suggests)
# and log τ² (from "no interaction" to far above the noise), searched coarse first, then finely.
CELL_POWERS = (0.0, 3.0)
# The DCT prior's decay: coefficient (a, b) ~ N(0, τ²(ab)^(−γ)), γ in this range (0 = white).
DCT_POWERS = (0.0, 4.0)
POWER_STEP = 0.25
LOG_TAU_RANGE, LOG_TAU_STEP = (-8.0, 12.0), 0.25
# τ²'s one-sided 90 % upper limit: where the profile log-likelihood has dropped by χ²₁(0.80)/2. (The
# 95 % limit, 1.353, covered 0.954–0.966 of Adult-15's 2-column GROUP BY answers where this one
# covers 0.947–0.956, with bars 1.06–1.09× wider, and made a synthetic table's bars wider than
# least squares'; `privacy.estimation.error.ShrunkPairError`.)
UPPER_DROP = 0.8212
COARSE = 4  # the coarse pass takes every 4th grid point on both axes
LOG_SCALE_BIN = 0.025  # cells (coefficients) pooled by log(e/ē) (−log ab) for the likelihood (`posterior_factors`)
EMPTY = 1e-6  # e/ē below this counts as this (log of 0); its prior is nil at any β > 0
# The bases a pair's factors live in (`CuboidRelease.priors`): its cells, or its 2-D DCT
# coefficients a, b ≥ 1 (`shrink_pair` chooses per pair).
CELLS, DCT = "cells", "dct"


def independence(pair: np.ndarray) -> np.ndarray | None:
    """N̂·p_i ⊗ p_j from the pair's own margins clipped at 0 (None: nothing positive to spread)."""
    total = float(pair.sum())
    rows, cols = np.maximum(pair.sum(axis=1), 0.0), np.maximum(pair.sum(axis=0), 0.0)
    if total <= 0 or rows.sum() <= 0 or cols.sum() <= 0:
        return None
    return np.outer(rows / rows.sum(), cols / cols.sum()) * total


def cell_noise(v: float, shape: Sequence[int]) -> float:
    """The noise variance of one cell of a pair's doubly-centred residual: v·(1 − 1/a)(1 − 1/b)."""
    return v * float(np.prod([1.0 - 1.0 / n for n in shape]))


def posterior_factors(
    residual: np.ndarray, log_scale: np.ndarray, v: float, power_range: tuple[float, float] = CELL_POWERS
) -> np.ndarray:
    """s/(s + v) per coordinate (Eq. 1, 2): `posterior_fit`'s factors."""
    return posterior_fit(residual, log_scale, v, power_range)[0]


def posterior_fit(
    residual: np.ndarray, log_scale: np.ndarray, v: float, power_range: tuple[float, float] = CELL_POWERS
) -> tuple[np.ndarray, float]:
    """s/(s + v) per coordinate (Eq. 1, 2) with s = v·τ²·exp(β·log_scale), τ² and β (γ) by maximum
    marginal likelihood on a grid: every `COARSE`-th point first, then every point within one
    coarse step of the best (a fraction of the full grid's cost; the likelihood is smooth in both,
    so the two agree but for ties). The likelihood sums over coordinates pooled by ``log_scale`` in
    bins of `LOG_SCALE_BIN` (count and ΣR² per bin: the prior varies by at most e^(β·bin) ≤ 1.11
    inside one); the factors use each coordinate's own scale.

    Also τ²'s upper confidence limit over τ̂² (≥ 1): the largest τ² on the grid, at β̂, whose
    log-likelihood is within `UPPER_DROP` of the maximum (one-sided 90 %, profile likelihood). A
    pair of few coordinates barely pins τ² down — a 27 × 2 table has 26 — and the bar allows
    the bias of the largest τ² its data do not rule out (`privacy.estimation.error.ShrunkPairError`)."""
    r2 = residual.ravel() ** 2
    x = log_scale.ravel()
    bins, inverse = np.unique(np.floor(x / LOG_SCALE_BIN), return_inverse=True)
    count = np.bincount(inverse, minlength=bins.size).astype(float)
    energy = np.bincount(inverse, weights=r2, minlength=bins.size)
    centre = np.bincount(inverse, weights=x, minlength=bins.size) / count

    powers = np.arange(power_range[0], power_range[1] + 1e-9, POWER_STEP)
    log_taus = np.arange(LOG_TAU_RANGE[0], LOG_TAU_RANGE[1] + 1e-9, LOG_TAU_STEP)
    # exp(log τ² + β·centre) = τ² · exp(β·centre): two small tables of exponentials over the whole
    # grid, which the coarse, fine and profile passes index (the same products as computing them per pass)
    taus = np.exp(np.minimum(log_taus, 350.0))
    slopes = np.exp(np.minimum(np.multiply.outer(powers, centre), 350.0))

    def loglik(p: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The marginal log-likelihood at powers[p] × log_taus[t] (index arrays)."""
        total = v * (taus[t][None, :, None] * slopes[p][:, None, :] + 1.0)
        return -0.5 * (np.log(total) @ count + (1.0 / total) @ energy)  # (β, τ)

    def best(p: np.ndarray, t: np.ndarray) -> tuple[int, int]:
        i, j = np.unravel_index(int(np.argmax(loglik(p, t))), (p.size, t.size))
        return int(p[i]), int(t[j])

    every_p, every_t = np.arange(powers.size), np.arange(log_taus.size)
    p_best, t_best = best(every_p[::COARSE], every_t[::COARSE])
    p_best, t_best = best(every_p[abs(every_p - p_best) <= COARSE], every_t[abs(every_t - t_best) <= COARSE])
    power, log_tau = float(powers[p_best]), float(log_taus[t_best])
    prior = np.exp(log_tau + power * x)  # s/v
    profile = loglik(np.array([p_best]), every_t)[0]
    upper = float(log_taus[profile >= profile.max() - UPPER_DROP].max())
    return (prior / (prior + 1.0)).reshape(residual.shape), float(np.exp(max(upper - log_tau, 0.0)))


class PairFit(NamedTuple):
    """A pair's shrunk estimate, its posterior factors (None: nothing was shrunk), their basis, and
    τ²'s upper confidence limit over the fitted τ² (`posterior_fit`)."""

    estimate: np.ndarray
    factors: np.ndarray | None
    basis: str
    upper: float = 1.0


def shrink_pair(pair: np.ndarray, v: float) -> PairFit:
    """The pair's estimate with its interaction around independence shrunk by Eq. 1 or Eq. 2 (same
    margins), whichever has the smaller risk estimate (Eq. 3). ``v``: the noise variance per
    coordinate of its interaction component (0: noiseless, unchanged)."""
    if v <= 0 or min(pair.shape) < 2:
        return PairFit(pair, None, CELLS)
    target = independence(pair)
    if target is None:
        return PairFit(pair, None, CELLS)
    residual = centred(pair - target)
    scale = np.maximum(target / target.mean(), EMPTY)
    cells_f, cells_upper = posterior_fit(residual, np.log(scale), cell_noise(v, pair.shape))
    by_cells = centred(residual * cells_f)
    coefficients = _dct(residual)
    frequency = np.outer(np.arange(1, pair.shape[0], dtype=float), np.arange(1, pair.shape[1], dtype=float))
    dct_f, dct_upper = posterior_fit(coefficients, -np.log(frequency), v, DCT_POWERS)
    # Eq. 3: Σ (d − c)² + 2v Σ ∂d/∂c, the coordinates' Jacobian diagonal being (Q∘Q) f (Q∘Q)ᵀ over cells
    risk_cells = np.sum((_dct(by_cells) - coefficients) ** 2 + 2 * v * _squared_dct(cells_f))
    risk_dct = np.sum(((dct_f - 1) * coefficients) ** 2 + 2 * v * dct_f)
    if risk_cells <= risk_dct:
        return PairFit(pair - residual + by_cells, cells_f, CELLS, cells_upper)
    kept = np.zeros(pair.shape)
    kept[1:, 1:] = coefficients * dct_f
    from scipy.fft import idctn  # (not at the top: scipy is ~0.35 s of every server's start-up)

    return PairFit(pair - residual + idctn(kept, type=2, norm="ortho"), dct_f, DCT, dct_upper)


def _dct(x: np.ndarray) -> np.ndarray:
    """The orthonormal 2-D DCT-II coefficients a, b ≥ 1 of x (Q x Qᵀ with Q `_rows`(n, DCT)), by FFT."""
    from scipy.fft import dctn  # (not at the top: scipy is ~0.35 s of every server's start-up)

    return dctn(x, type=2, norm="ortho")[1:, 1:]


def _squared_dct(f: np.ndarray) -> np.ndarray:
    """(Q∘Q) f (Q∘Q)ᵀ by FFT: Q_km² = (1 + cos(πk(2m + 1)/n))/n, and Σ_m cos(πk(2m + 1)/n) f_m is the
    real part of e^(iπk/n) Σ_m f_m e^(2πikm/n) — O(n log n) per line, where the matrices cost O(n²)."""
    out = f
    for axis in (0, 1):
        n = out.shape[axis]
        k = np.arange(1, n)
        spectrum = np.take(np.fft.ifft(out, axis=axis) * n, k, axis=axis)
        shape = [1, 1]
        shape[axis] = n - 1
        phase = np.exp(1j * np.pi * k / n).reshape(shape)
        out = (out.sum(axis=axis, keepdims=True) + np.real(phase * spectrum)) / n
    return out


def factor_shape(shape: Sequence[int], basis: str) -> tuple[int, ...]:
    """The shape of a pair's factors: its cells, or its DCT coefficients a, b ≥ 1."""
    return tuple(shape) if basis == CELLS else tuple(n - 1 for n in shape)


def _rows(n: int, basis: str) -> np.ndarray:
    """The basis' coordinates of a vector y along one axis of n cells are rows · y: the centring
    I − J/n (the residual is centred before it is weighted: Eq. 1), or rows 1..n−1 of the orthonormal
    DCT-II matrix."""
    if basis == CELLS:
        return np.eye(n) - 1.0 / n
    k, m = np.arange(1, n)[:, None], np.arange(n)[None, :]
    return np.sqrt(2.0 / n) * np.cos(np.pi * k * (2 * m + 1) / (2 * n))


def weighted_noise(
    weights: np.ndarray,
    v: float,
    selection: Sequence[Sequence[tuple[int, int]]],
    group_axes: Sequence[int] = (),
    basis: str = CELLS,
) -> float | np.ndarray:
    """v·Σ_ab q_a² r_b² weights_ab: the variance a selection on a pair reads from independent noise
    of variance v·weights_ab in the basis' coordinates (q ⊗ r: the selection's own coordinates,
    separable since a selection is a product of per-axis cell sets; centred indicators for
    ``CELLS``). Per group (cells of ``group_axes``, in that order) when grouped. ``weights`` = 1
    gives least squares' interaction term exactly in either basis (both are orthonormal or a
    projection on the doubly-centred subspace), f(1 − f) the prior's expected squared bias
    (`privacy.estimation.error`)."""
    forms = []
    for axis, runs in enumerate(selection):
        n = weights.shape[axis] + (0 if basis == CELLS else 1)
        rows = _rows(n, basis)
        cells = np.concatenate([np.arange(lo, hi + 1) for lo, hi in runs]) if runs else np.zeros(0, dtype=int)
        forms.append(rows[:, cells].T ** 2 if axis in group_axes else (rows[:, cells].sum(axis=1) ** 2)[None, :])
    out = v * (forms[0] @ weights @ forms[1].T)  # (groups of axis 0 or 1) × (groups of axis 1 or 1)
    if not group_axes:
        return float(out[0, 0])
    if len(group_axes) == 1:
        return out[:, 0] if group_axes[0] == 0 else out[0, :]
    return out if tuple(group_axes) == (0, 1) else out.T


SIGNAL_FACTOR = 0.5  # a picked triple whose 3-way part is less signal than noise is not taken as measured
SUPPORT_Z = 3.0  # a cell whose released 1-way COUNT is below 3 standard deviations of its noise holds no rows


def supported(margin: np.ndarray, sd: float) -> np.ndarray:
    """The cells of an axis rows are in, from its released (or fitted) 1-way COUNT and that count's
    noise sd: above `SUPPORT_Z`·sd. What a picked triple's 3-way interaction is shrunk over
    (`shrink_interaction`'s ``support``). Post-processing of released values."""
    return np.asarray(margin).reshape(-1) > SUPPORT_Z * sd


def mostly_signal(table: np.ndarray, v: float, model: np.ndarray) -> bool:
    """Whether a measured triple's 3-way interaction beyond ``model`` (what the pairs imply: the
    fitted model's table of the triple) is mostly signal: `interaction_factor` of the difference
    ≥ `SIGNAL_FACTOR`. E‖z‖² = ‖z_true‖² + df·v for z the difference's top-order part over the whole
    table, so the factor ≥ ½ says the model misses more (‖z_true‖²) than the measurement's noise
    adds to every cell (df·v): its least-squares 3-way part is then closer to the truth than the
    model's, and the triple is read as measured; otherwise the model's view is kept. Against no
    model (the additive one) counts' multiplicative structure passed for interaction (Adult-5 at
    ε = 1, over the populated cells: factors 0.26–0.99, four of five picks read as measured,
    3-column answers 2.6× worse; all five, 3.1×); over the populated cells only, the noise a read
    adds to the empty ones, where the model is right, went uncounted (at ρ = 0.227: 0.40–0.76,
    ranges inside the picks 1.6–2.4× worse)."""
    return interaction_factor(table - model, v) >= SIGNAL_FACTOR


def interaction_factor(table: np.ndarray, v: float, support: Sequence[np.ndarray] | None = None) -> float:
    """The positive-part James–Stein factor of ``table``'s top-order interaction (the component
    mean-free along every axis, noise variance ``v`` per coordinate; James & Stein 1961, Efron &
    Morris 1973): max(0, 1 − (df − 2)·v/‖z‖²) over its df = Π(n_i − 1) coordinates; 1 where there is
    nothing to shrink (no noise, no interaction). Below 3 coordinates, where James–Stein does not
    apply, the positive part of (‖z‖² − v)/‖z‖², the share of z's energy that is not noise (as for
    df = 3): a 2×2×2 triple's one coordinate is shrunk too.

    ``support`` (a boolean mask per axis) restricts it to the cells rows can be in. Empty cells form
    a block the top-order interaction counts as signal — a 2×2 table [[n, 0], [0, 0]] has interaction
    ±n/4 — so with a served table's outside cells (a category's other and NULL, mostly empty) every
    picked triple had a factor of 1, and its noise was never shrunk."""
    return _interaction(table, v, support)[0]


def _interaction(table: np.ndarray, v: float, support: Sequence[np.ndarray] | None = None) -> tuple[float, np.ndarray]:
    """(`interaction_factor`, the top-order interaction z itself, over ``support``'s cells)."""
    z = centred(table if support is None else table[np.ix_(*support)])
    df = int(np.prod([n - 1 for n in z.shape]))
    energy = float(np.sum(z * z))
    if v <= 0 or df == 0 or energy <= 0:
        return 1.0, z
    return max(0.0, 1.0 - max(df - 2, 1) * v / energy), z


def shrink_interaction(table: np.ndarray, v: float, support: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """``table`` with its top-order interaction shrunk toward none by `interaction_factor` (over
    ``support``'s cells; the others, where no rows are, keep their values). A 3-way
    cuboid picked with a small share of the budget (`privacy.strategies.cuboid_selection`) is mostly
    noise where the data has little 3-way structure (the draw can pick such a triple; a SUM's picks
    at ε = 1 on Adult-15 had factors 0–0.3), and a model matching it exactly would carry that noise
    into 4-column answers; a planted interaction of many times the noise keeps a factor near 1
    (Adult-15's COUNT picks: 0.83–0.99). Lower-order parts (what the pairs say) are unchanged:
    post-processing."""
    factor, z = _interaction(table, v, support)
    if factor == 1.0:
        return table
    if support is None:
        return table - (1.0 - factor) * z
    out = np.array(table, dtype=float)
    out[np.ix_(*support)] -= (1.0 - factor) * z
    return out
