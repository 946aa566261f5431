"""PRIMA's data-driven clipping (``sbs`` / ``clasp``), computed soundly from a DP histogram.

The PRIMA papers pick the clipping axis Φ and radius τ by reading raw measure values "on the
curator's side" (prima-clasp-scope.txt §5.2; prima-sbs-scope.txt §4.4.1 admits the leak). That
choice is data-dependent and is released through the cube's sensitivity, so here it is made from
a **noisy histogram** only:

1. `histogram_mechanism`: the measure's values, clipped to the public bounds [lo, hi], counted in
   the buckets of `histogram_edges` — geometric (4 per octave over 24 octaves from each public
   bound toward 0, so a range declared 10^5× wider than the data still resolves it; signed
   measures get both sides). One row changes one count by 1 (one coordinate): L1 sensitivity 1,
   released with the grid Laplace sampler at ε_h (its own ledger entry, default 10 % of the
   build's ε).
2. `significant_counts` (post-processing): only buckets between the lowest and the highest one
   whose noisy count clears ``ln(K/β)/ε_h`` (β = 1 %: with no data at all, every bucket stays
   below it with probability ≈ 99.5 %) keep their mass; negative counts inside are set to 0,
   everything outside to 0. Without this, clamping alone left ~b/2 pseudo-rows in *every* empty
   bucket (b = 1/ε_h): on a [0, 10^6] measure whose 2,000 values were ≤ 100 that was ~315 fake
   rows at a mean of 5·10^5, and Φ landed near 75,000. Each bucket's mass is
   placed at its midpoint v_k with weight c_k.
3. Φ = Σ c_k v_k / Σ c_k — Theorem 5 (Eq. 4), the mean, on noisy data.
4. τ minimises Eq. 8 exactly: Err(τ) = (1/n)[Σ_{v_k<Φ−τ} c_k(Φ−τ−v_k)² + Σ_{v_k>Φ+τ} c_k(Φ+τ−v_k)²]
   + 2·s(τ)²/ε_m², with n = Σ c_k, ε_m the SUM measurement's ε, and s(τ) the L1 sensitivity the
   clip range implies (max |bound| after capping at the public bounds; the paper's
   min(Φ+τ, dom(M)) for non-negative measures). Between consecutive breakpoints (the |v_k − Φ|
   and the points where Φ±τ meets a public bound) the sets below/above and s's linear form are
   fixed, so Err is one quadratic there: its stationary point is Theorem 6's closed form (Eq. 9)
   in the uncapped non-negative case; we keep stationary points inside their interval, add the
   interval ends, and take the overall minimum — no iteration, τ ≥ Φ and degenerate cases
   included.
5. ``clasp`` only — §5.3's lower threshold (SSVT): when Φ − τ falls below the public lower bound
   (one-sided clipping, biased low), the lower bound becomes the candidate t ∈ [lo, Φ] (bucket
   edges) whose clipped histogram sum best matches the unclipped histogram sum. Same noisy
   histogram, so no extra budget (the paper's own SSVT spends none either, but reads raw data).

The released bounds are [max(Φ−τ, lo) (or CLASP's t), min(Φ+τ, hi)]; the cube's SUM sensitivity
follows from them (`clipping.sum_sensitivity`). Everything here is a function of the noisy
histogram and public values only.

What Eq. 8 does by design: it weighs the *per-row* mean squared distortion against the variance
of one noisy SUM, so at ε ≲ 1 it nearly always picks τ ≈ 0 — every row is clipped to about the
mean Φ. Totals stay right (n·Φ), but range SUMs lose whatever correlates with the measure, and
few rows keep their value. That is the paper's method, kept faithfully. ``support`` clipping (not
in the paper) is the choice for a generous public range: the clip range is the noisy support of
the data, [bottom, top] of the significant buckets (the public lower bound kept for a
non-negative measure, where raising it cannot lower the sensitivity) — `support_bounds`.
bench/clipping.py measures all three against fixed clipping to the declared range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from privacy.mechanisms.sampler import GridLaplace, RandomSource

HISTOGRAM_BUCKETS = 64  # equal-width layout (`bucket_edges`), kept for the Eq. 8 unit tests
HISTOGRAM_SENSITIVITY = 1.0  # a row adds or removes one count in one bucket (one coordinate)
STEPS_PER_OCTAVE = 4  # geometric layout: bucket ratio 2^(1/4) ≈ 1.19
OCTAVES = 24  # per side: resolves values down to 2^-24 ≈ 6e-8 of the public bound (then one bucket to 0)
SIGNIFICANCE_BETA = 0.01  # chance that pure noise puts a bucket over the significance threshold


@dataclass(frozen=True)
class ClipChoice:
    lo: float
    hi: float
    phi: float
    tau: float
    noisy_counts: tuple[float, ...]  # the released histogram (public once charged)


def bucket_edges(lo: float, hi: float, buckets: int = HISTOGRAM_BUCKETS) -> np.ndarray:
    """K equal-width buckets over the public bounds; a constant measure gets one bucket."""
    if hi <= lo:
        return np.array([lo, lo])
    return np.linspace(lo, hi, buckets + 1)


def _geometric_side(far: float, near: float) -> np.ndarray:
    """Edges from ``near`` (excluded) to ``far`` (included), ratio 2^(1/STEPS) in |e − near|."""
    steps = STEPS_PER_OCTAVE * OCTAVES
    return near + (far - near) * 2.0 ** (-np.arange(steps, -1, -1) / STEPS_PER_OCTAVE)


def histogram_edges(lo: float, hi: float) -> np.ndarray:
    """Geometric bucket edges over the public bounds, anchored at them (public: no data read).

    [lo, hi] with lo ≥ 0: [lo, lo + w·2^-24], then 96 buckets of ratio 2^(1/4) up to hi (w = hi − lo).
    hi ≤ 0: the mirror image. lo < 0 < hi: both sides, each anchored at its own bound, meeting at 0.
    """
    if hi <= lo:
        return np.array([lo, lo])
    if lo >= 0:
        return np.concatenate([[lo], _geometric_side(hi, lo)])
    if hi <= 0:
        return np.concatenate([_geometric_side(lo, hi)[::-1], [hi]])
    return np.concatenate([_geometric_side(lo, 0.0)[::-1], [0.0], _geometric_side(hi, 0.0)])


def histogram_mechanism(true_counts: np.ndarray, epsilon: float, source: RandomSource) -> np.ndarray:
    """ε-DP histogram: one row moves one count by 1 (L1 sensitivity 1, one coordinate)."""
    return GridLaplace(HISTOGRAM_SENSITIVITY, epsilon, coordinates=1).release(true_counts, source)


def significance_threshold(buckets: int, epsilon: float) -> float:
    """ln(K/β)/ε: a bucket with no rows exceeds it with probability β/(2K) (Laplace tail ½e^{-εt})."""
    return math.log(max(buckets, 1) / SIGNIFICANCE_BETA) / epsilon


def significant_counts(noisy: np.ndarray, epsilon: float) -> np.ndarray:
    """Post-processing of the released histogram: zero outside the span of significant buckets,
    negatives clamped inside it (module docstring, step 2). Empty if nothing is significant."""
    noisy = np.asarray(noisy, dtype=np.float64)
    hits = np.flatnonzero(noisy >= significance_threshold(len(noisy), epsilon))
    out = np.zeros_like(noisy)
    if hits.size:
        inside = slice(int(hits[0]), int(hits[-1]) + 1)
        out[inside] = np.maximum(noisy[inside], 0.0)
    return out


def _midpoints(edges: np.ndarray) -> np.ndarray:
    return (edges[:-1] + edges[1:]) / 2


def clip_axis(values: np.ndarray, weights: np.ndarray) -> float:
    """Theorem 5 (Eq. 4): Φ is the (weighted) mean."""
    total = float(weights.sum())
    return float(np.dot(values, weights) / total) if total > 0 else float(np.mean(values))


def sensitivity_for(phi: float, tau: float, lo: float, hi: float) -> float:
    """max |bound| of the clip range [Φ−τ, Φ+τ] capped at the public bounds."""
    return max(abs(max(phi - tau, lo)), abs(min(phi + tau, hi)))


def eq8_objective(
    tau: float, phi: float, values: np.ndarray, weights: np.ndarray, epsilon: float, lo: float, hi: float
) -> float:
    """Eq. 8: data distortion (Eq. 7) plus Laplace variance 2·s(τ)²/ε² (Eq. 5)."""
    n = max(float(weights.sum()), 1.0)
    below, above = values < phi - tau, values > phi + tau
    distortion = (
        np.dot(weights[below], (phi - tau - values[below]) ** 2)
        + np.dot(weights[above], (phi + tau - values[above]) ** 2)
    ) / n
    return float(distortion + 2 * (sensitivity_for(phi, tau, lo, hi) / epsilon) ** 2)


def optimal_radius(phi: float, values: np.ndarray, weights: np.ndarray, epsilon: float, lo: float, hi: float) -> float:
    """τ ≥ 0 minimising Eq. 8 exactly (piecewise quadratic; see the module docstring)."""
    tau_max = max(hi - phi, phi - lo, 0.0)
    marks = {0.0, tau_max, hi - phi, phi - lo, phi + hi, -phi - lo, phi - hi, -phi + lo}
    marks |= set(np.abs(values - phi).tolist())
    points = sorted(t for t in marks if 0.0 <= t <= tau_max)
    n = max(float(weights.sum()), 1.0)
    candidates = list(points)
    for a, b in zip(points, points[1:]):
        if b - a <= 1e-12:
            continue
        mid = (a + b) / 2
        below, above = values < phi - mid, values > phi + mid
        wa, wb = float(weights[below].sum()), float(weights[above].sum())
        sa, sb = float(np.dot(weights[below], values[below])), float(np.dot(weights[above], values[above]))
        s_a, s_b = sensitivity_for(phi, a, lo, hi), sensitivity_for(phi, b, lo, hi)
        slope = (s_b - s_a) / (b - a)
        s0 = s_a - slope * a
        # Err(τ) on (a, b) = (1/n)[wa(Φ−τ)² − 2(Φ−τ)sa + wb(Φ+τ)² − 2(Φ+τ)sb] + 2(s0 + slope·τ)²/ε² + const
        quad = (wa + wb) / n + 2 * slope**2 / epsilon**2
        lin = (-2 * wa * phi + 2 * sa + 2 * wb * phi - 2 * sb) / n + 4 * s0 * slope / epsilon**2
        if quad > 0:
            stationary = -lin / (2 * quad)  # = Theorem 6 (Eq. 9) when s = Φ + τ
            if a < stationary < b:
                candidates.append(stationary)
    return min(candidates, key=lambda t: (eq8_objective(t, phi, values, weights, epsilon, lo, hi), t))


def theorem6_radius(phi: float, values: np.ndarray, weights: np.ndarray, epsilon: float, tau_hint: float) -> float:
    """Eq. 9 verbatim for the sets below/above Φ∓τ_hint (non-negative, uncapped case)."""
    n = float(weights.sum())
    below, above = values < phi - tau_hint, values > phi + tau_hint
    alpha, beta = float(weights[below].sum()), float(weights[above].sum())
    b = float(np.dot(weights[above], values[above]) - np.dot(weights[below], values[below]))
    return (epsilon**2 * b - (epsilon**2 * (beta - alpha) + 2 * n) * phi) / (epsilon**2 * (alpha + beta) + 2 * n)


def clasp_lower(values: np.ndarray, weights: np.ndarray, edges: np.ndarray, upper: float, phi: float) -> float:
    """§5.3's lower threshold: the t ∈ [lo, Φ] whose clipped sum best matches the unclipped sum."""
    target = float(np.dot(values, weights))
    candidates = [float(e) for e in edges if e <= phi] or [float(edges[0])]

    def gap(t: float) -> float:
        return abs(float(np.dot(np.clip(values, t, upper), weights)) - target)

    return min(candidates, key=lambda t: (gap(t), t))


def choose_bounds(
    noisy_counts: np.ndarray,
    lo: float,
    hi: float,
    epsilon_measure: float,
    method: str,
    edges: np.ndarray | None = None,
    epsilon_histogram: float | None = None,
) -> ClipChoice:
    """The clip range from a released histogram: ``sbs``/``clasp`` (Φ, τ by Eq. 8) or ``support``.

    ``edges`` default to equal-width buckets over [lo, hi]; with ``epsilon_histogram`` the counts are
    first reduced to their significant span (`significant_counts`), as the service does.
    """
    edges = bucket_edges(lo, hi, len(noisy_counts)) if edges is None else np.asarray(edges, dtype=np.float64)
    released = tuple(float(c) for c in noisy_counts)
    weights = np.asarray(noisy_counts, dtype=np.float64)
    weights = significant_counts(weights, epsilon_histogram) if epsilon_histogram else np.maximum(weights, 0.0)
    values = _midpoints(edges)
    if weights.sum() <= 0:  # nothing to learn from: keep the public bounds
        return ClipChoice(lo, hi, (lo + hi) / 2, (hi - lo) / 2, released)
    if method == "support":
        lower, upper = support_bounds(weights, edges, lo)
        return ClipChoice(lower, upper, (lower + upper) / 2, (upper - lower) / 2, released)
    phi = clip_axis(values, weights)
    tau = optimal_radius(phi, values, weights, epsilon_measure, lo, hi)
    lower, upper = max(phi - tau, lo), min(phi + tau, hi)
    if method == "clasp" and phi - tau < lo:
        lower = max(clasp_lower(values, weights, edges, upper, phi), lo)
    if upper <= lower:  # a degenerate range (one bucket): widen to the bucket so Δ > 0
        upper = lower + (edges[1] - edges[0]) if hi > lo else lower
    return ClipChoice(float(lower), float(upper), phi, float(tau), released)


def support_bounds(weights: np.ndarray, edges: np.ndarray, lo: float) -> tuple[float, float]:
    """[bottom, top] edges of the buckets holding mass, keeping the public bound nearest 0 (for a
    non-negative measure lo: raising it could only add bias, the sensitivity max(|lo'|, |hi'|) is
    hi' either way; a signed declaration keeps 0 inside the range)."""
    held = np.flatnonzero(weights > 0)
    bottom, top = float(edges[held[0]]), float(edges[held[-1] + 1])
    hi = float(edges[-1])
    if lo >= 0:
        bottom = float(lo)
    elif hi > 0:
        bottom, top = min(bottom, 0.0), max(top, 0.0)
    else:
        top = hi
    return bottom, top
