"""Zero-concentrated DP (ρ-zCDP) arithmetic: the tight ρ of a discrete Laplace release and the
conversions between pure ε, ρ and (ε, δ). Pure math, no imports from the project.

ρ-zCDP (Bun & Steinke, TCC 2016, Def. 1.1): D_α(M(D) ‖ M(D')) ≤ ρ·α for every α > 1 and every
pair of neighbours, with D_α the Rényi divergence. ρ's compose by addition (their Lemma 2.3), so
the ledger can add them up the way it adds ε's.

Tight ρ of the discrete Laplace (`laplace_rho`)
-----------------------------------------------
A release of the project's grid Laplace (`privacy.mechanisms.sampler.GridLaplace`) adds Z with
P[Z = z] = C·q^|z|, q = e^{−1/t}, C = (1−q)/(1+q), to an integer vector whose L1 distance between
neighbours is at most s (the grid sensitivity); ε = s/t. For a shift of s on one coordinate,
Σ_z P(z)^α Q(z)^{1−α} (P centred at 0, Q at s) has three geometric pieces — z ≤ 0, 0 < z < s and
z ≥ s — which give, with ε = s/t and r = q^{2α−1} (derived here; the continuous analogue is
Mironov, "Rényi Differential Privacy", CSF 2017, Table II):

    M(α) = C·[ e^{(α−1)ε}/(1−q) + e^{(α−1)ε}·r(1 − r^{s−1})/(1−r) + e^{−(α−1)ε}·q^s/(1−q) ]
    D_α  = ln M(α) / (α − 1),        ρ = sup_{α>1} D_α / α.

A shift spread over several coordinates (Σ|s_i| ≤ s) is never worse: D_α of independent coordinates
adds, and D_α(s) is superadditive in the integer shift s (convex through 0; checked in
tests/test_zcdp.py), so concentrating the whole shift on one coordinate is the worst case. The
supremum is taken numerically over a log-spaced grid of α in (1, 10^4] and the α → 1 limit (the
KL divergence); the result is raised by `_SUP_SLACK` to cover the grid's gaps (D_α/α is smooth in α).
For ε = 1 this gives ρ ≈ 0.37 where the generic bound for any ε-DP mechanism is ε²/2 = 0.5.

Conversions
-----------
* pure ε ⇒ ρ = ε²/2 for any ε-DP mechanism (Bun & Steinke Prop. 1.4): `pure_rho`, used for steps
  that are not Laplace releases (the exponential mechanism, sparse vector).
* ρ ⇒ pure ε for a Laplace-only step run inside a ρ budget: ε = √(2ρ) (the same proposition read
  backwards; `epsilon_for_rho`).
* ρ ⇒ (ε, δ): δ = inf_{α>1} exp((α−1)(αρ − ε))/(α−1) · (1 − 1/α)^α (Canonne, Kamath & Steinke,
  "The Discrete Gaussian for Differential Privacy", NeurIPS 2020, Corollary 13) — tighter than
  Bun & Steinke's ε = ρ + 2√(ρ ln(1/δ)). (1, 10⁻⁹)-DP ⇔ ρ ≈ 0.01497; the ρ = 0.015 AIM and MST
  use is (1, 1.03·10⁻⁹)-DP.
"""

from __future__ import annotations

import functools
import math

import numpy as np

_ALPHAS = 1.0 + np.logspace(-6, 4, 400)  # α − 1 from 1e-6 to 1e4
_SUP_SLACK = 1.0 + 1e-4
_DELTA_ALPHAS = 1.0 + np.logspace(-4, 6, 20000)


def pure_rho(epsilon: float) -> float:
    """ρ = ε²/2: what any ε-DP step costs in zCDP (Bun & Steinke 2016, Prop. 1.4)."""
    return epsilon * epsilon / 2.0


def epsilon_for_rho(rho: float) -> float:
    """The pure ε a Laplace-only step may use inside a ρ budget: √(2ρ) (so that ε²/2 = ρ)."""
    return math.sqrt(2.0 * rho)


def laplace_renyi(s: int, t: float, alphas: np.ndarray) -> np.ndarray:
    """D_α of the discrete Laplace (scale t) against itself shifted by the integer s (docstring).

    Computed as ln(1 + (M − 1))/(α − 1) with M − 1 written as a sum of expm1 terms, because M is
    1 + O((α−1)ε²): summing M's three pieces directly loses every digit for small ε or α near 1.
    With a = α − 1 and the normalisation C·[1/(1−q) + Σ_{z=1}^{s−1} q^z + q^s/(1−q)] = 1:
        M − 1 = C·[expm1(aε)/(1−q) + Σ_{z=1}^{s−1} q^z·expm1(a(s−2z)/t) + expm1(−aε)·q^s/(1−q)].
    """
    alphas = np.asarray(alphas, dtype=np.float64)
    eps = s / t
    small = (alphas - 1.0) * eps <= 1.0
    out = np.empty(alphas.size)
    out[small] = _renyi_near_one(s, t, alphas[small])
    out[~small] = _renyi_log_space(s, t, alphas[~small])
    return out


def _renyi_log_space(s: int, t: float, alphas: np.ndarray) -> np.ndarray:
    """The three geometric pieces of M summed in log space (no overflow at large α·ε)."""
    eps, a1, log_q = s / t, alphas - 1.0, -1.0 / t
    log_one_minus_q = math.log(-math.expm1(log_q))
    log_c = log_one_minus_q - math.log1p(math.exp(log_q))
    terms = [a1 * eps - log_one_minus_q, -a1 * eps + s * log_q - log_one_minus_q]
    if s > 1:  # Σ_{z=1}^{s−1} r^z = r(1 − r^{s−1})/(1 − r), r = q^{2α−1}
        log_r = (2.0 * alphas - 1.0) * log_q
        terms.append(a1 * eps + log_r + np.log(-np.expm1((s - 1) * log_r)) - np.log(-np.expm1(log_r)))
    stacked = np.vstack(terms)
    top = np.max(stacked, axis=0)
    return (log_c + top + np.log(np.sum(np.exp(stacked - top), axis=0))) / a1


def _renyi_near_one(s: int, t: float, alphas: np.ndarray) -> np.ndarray:
    a = alphas[:, None] - 1.0
    eps = s / t
    q = math.exp(-1.0 / t)
    one_minus_q = -math.expm1(-1.0 / t)
    c = one_minus_q / (1.0 + q)
    z = np.arange(1, s, dtype=np.float64)[None, :]
    middle = np.sum(np.exp(-z / t) * np.expm1(a * (s - 2.0 * z) / t), axis=1) if s > 1 else 0.0
    ends = np.expm1(a[:, 0] * eps) / one_minus_q + np.expm1(-a[:, 0] * eps) * q**s / one_minus_q
    return np.log1p(c * (ends + middle)) / a[:, 0]


def laplace_kl(s: int, t: float) -> float:
    """KL divergence (the α → 1 limit of D_α) in closed form: the privacy loss (|z−s| − |z|)/t is ε
    for z ≤ 0, −ε for z ≥ s and (s − 2z)/t between."""
    q = math.exp(-1.0 / t)
    c = (1.0 - q) / (1.0 + q)
    eps = s / t
    z = np.arange(1, s, dtype=np.float64)
    middle = float(np.sum(c * q**z * (s - 2.0 * z) / t)) if s > 1 else 0.0
    return eps * (1.0 - q**s) / (1.0 + q) + middle


REFERENCE_GRID = 1025  # the smallest grid sensitivity of a release on an uncoarsened grid (privacy.mechanisms.sampler)


@functools.lru_cache(maxsize=4096)
def laplace_rho(s: int, t: float) -> float:
    """The tight zCDP ρ of one discrete Laplace release: grid sensitivity s (L1), scale t (docstring)."""
    if not (s >= 1 and t > 0):
        raise ValueError("a Laplace release needs s ≥ 1 and t > 0")
    ratios = laplace_renyi(int(s), float(t), _ALPHAS) / _ALPHAS
    return float(max(np.max(ratios), laplace_kl(int(s), float(t)))) * _SUP_SLACK


def grid_laplace_rho(epsilon: float, s: int) -> float:
    """The ρ the ledger charges a grid Laplace release at ε with grid sensitivity s: the tight ρ at
    `REFERENCE_GRID` for every s ≥ 1025 (ρ falls as the grid gets finer, towards the continuous
    Laplace's — tests/test_zcdp.py — so this bounds any release whose Δ or k a build only learns
    later), else the tight ρ at s itself."""
    s = min(int(s), REFERENCE_GRID)
    return min(laplace_rho(s, s / epsilon), pure_rho(epsilon) * _SUP_SLACK)


def delta_of(rho: float, epsilon: float) -> float:
    """The δ at which ρ-zCDP implies (ε, δ)-DP (Canonne, Kamath & Steinke 2020, Corollary 13)."""
    if rho <= 0:
        return 0.0
    alpha = _DELTA_ALPHAS  # any α > 1 gives a valid δ; the grid's best is kept
    log_delta = (alpha - 1.0) * (alpha * rho - epsilon) + alpha * np.log1p(-1.0 / alpha) - np.log(alpha - 1.0)
    return float(min(1.0, math.exp(float(np.min(log_delta)))))


def rho_for(epsilon: float, delta: float) -> float:
    """The largest ρ whose (ε, δ) conversion (`delta_of`) is within δ: an (ε, δ) budget in ρ."""
    if not (epsilon > 0 and 0 < delta < 1):
        raise ValueError("(ε, δ) needs ε > 0 and 0 < δ < 1")
    lo, hi = 0.0, epsilon + 1.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if delta_of(mid, epsilon) <= delta else (lo, mid)
    return lo


def epsilon_for(rho: float, delta: float) -> float:
    """The smallest ε with ρ-zCDP ⇒ (ε, δ)-DP (for showing a ρ as an (ε, δ))."""
    lo, hi = 0.0, rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta)) + 1e-12  # Bun & Steinke's bound
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (lo, mid) if delta_of(rho, mid) <= delta else (mid, hi)
    return hi
