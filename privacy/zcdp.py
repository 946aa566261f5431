"""Zero-concentrated DP (ρ-zCDP) arithmetic: the tight ρ of a discrete Laplace release and the
conversions between pure ε, ρ and (ε, δ) (issue #34). Pure math, no imports from the project.

ρ-zCDP (Bun & Steinke, TCC 2016, Def. 1.1): D_α(M(D) ‖ M(D')) ≤ ρ·α for every α > 1 and every
pair of neighbours, with D_α the Rényi divergence. ρ's compose by addition (their Lemma 2.3), so
the ledger can add them up the way it adds ε's.

Tight ρ of the discrete Laplace (`laplace_rho`)
-----------------------------------------------
A release of the project's grid Laplace (`privacy.sampler.GridLaplace`) adds Z with
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
  Bun & Steinke's ε = ρ + 2√(ρ ln(1/δ)). (1, 10⁻⁹)-DP ⇔ ρ ≈ 0.0149: the figure AIM and MST use.
"""

from __future__ import annotations

import functools
import math

import numpy as np

_ALPHAS = 1.0 + np.logspace(-6, 4, 2000)  # α − 1 from 1e-6 to 1e4
_SUP_SLACK = 1.0 + 1e-4
_DELTA_ALPHAS = 1.0 + np.logspace(-4, 6, 20000)


def pure_rho(epsilon: float) -> float:
    """ρ = ε²/2: what any ε-DP step costs in zCDP (Bun & Steinke 2016, Prop. 1.4)."""
    return epsilon * epsilon / 2.0


def epsilon_for_rho(rho: float) -> float:
    """The pure ε a Laplace-only step may use inside a ρ budget: √(2ρ) (so that ε²/2 = ρ)."""
    return math.sqrt(2.0 * rho)


def _log_sum(terms: list[np.ndarray]) -> np.ndarray:
    stacked = np.vstack(terms)
    top = np.max(stacked, axis=0)
    return top + np.log(np.sum(np.exp(stacked - top), axis=0))


def laplace_renyi(s: int, t: float, alphas: np.ndarray) -> np.ndarray:
    """D_α of the discrete Laplace (scale t) against itself shifted by the integer s (docstring)."""
    eps = s / t
    a1 = alphas - 1.0
    log_q = -1.0 / t
    log_one_minus_q = math.log(-math.expm1(log_q))
    log_c = log_one_minus_q - math.log1p(math.exp(log_q))
    terms = [a1 * eps - log_one_minus_q, -a1 * eps + s * log_q - log_one_minus_q]
    if s > 1:  # 0 < z < s: Σ_{z=1}^{s−1} r^z = r(1 − r^{s−1})/(1 − r), r = q^{2α−1}
        log_r = (2.0 * alphas - 1.0) * log_q
        middle = log_r + np.log(-np.expm1((s - 1) * log_r)) - np.log(-np.expm1(log_r))
        terms.append(a1 * eps + middle)
    return (log_c + _log_sum(terms)) / a1


def laplace_kl(s: int, t: float) -> float:
    """KL divergence (the α → 1 limit of D_α): E_P[ln P/Q] with P at 0, Q at s."""
    q = math.exp(-1.0 / t)
    c = (1.0 - q) / (1.0 + q)
    z = np.arange(-int(60 * t) - s, int(60 * t) + 2 * s + 1, dtype=np.float64)
    p = c * q ** np.abs(z)
    loss = (np.abs(z - s) - np.abs(z)) / t
    return float(np.sum(p * loss))


@functools.lru_cache(maxsize=4096)
def laplace_rho(s: int, t: float) -> float:
    """The tight zCDP ρ of one discrete Laplace release: grid sensitivity s (L1), scale t (docstring)."""
    if not (s >= 1 and t > 0):
        raise ValueError("a Laplace release needs s ≥ 1 and t > 0")
    ratios = laplace_renyi(int(s), float(t), _ALPHAS) / _ALPHAS
    at_one = laplace_kl(int(s), float(t)) if t <= 1e5 else -math.inf  # (KL needs the pmf summed; large t: the grid's α − 1 = 1e-6 is the limit)
    return float(max(np.max(ratios), at_one)) * _SUP_SLACK


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
