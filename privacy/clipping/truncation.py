"""The PRIMA paper's truncation baselines (§4.2 SVTC, §4.3 R2TC), as pure mechanisms over aggregates.

Both *delete* rows whose |measure| exceeds a threshold τ (truncation), where PRIMA clips. They are
bench-only (bench/prima_experiments.py): the service offers `fixed`/`sbs`/`clasp` clipping. The
Noise Control Framework the paper pairs them with is not implemented: here both feed a plain
per-cell cube, so the comparison isolates the choice of threshold.

- SVT threshold (PrivateSQL-style, §4.2): walk the candidates b_1 < b_2 < … bottom-up; the i-th
  query is the increment of the truncated total, Δ_i = Σ_{b_{i−1} < |M| ≤ b_i} |M|, divided by b_i
  so every query has sensitivity 1 (a row lands in one increment and adds at most b_i to it). It is
  AboveThreshold (Dwork & Roth, Alg. 1) run on "below": threshold noise Lap(2/ε), query noise
  Lap(4/ε); the first i whose noisy query falls below the noisy threshold τ_s gives τ = b_i. ε-DP
  for the one index it outputs. τ_s is the "manually assigned parameter" the paper criticises.
- R2T per cell (Dong et al. SIGMOD 2022; PRIMA Eq. 3): for τ_j = 2^j, j = 1..⌈log₂ GS⌉, release
  Q(T^{τ_j}) + Lap(τ_j/ε′) − ln(J/β)·τ_j/ε′ with ε′ = ε/J and output the maximum over j, floored at
  0 (R2T's Q(∅); only meaningful for non-negative measures). Sensitivity of Q(T^{τ_j}): τ_j. Cells
  hold disjoint rows, so releasing every base cell this way is ε-DP by parallel composition.
"""

from __future__ import annotations

import math

import numpy as np

from privacy.mechanisms.sampler import GridLaplace, RandomSource

SVT_THRESHOLD_NOISE = 2.0  # Lap(2Δ/ε) on the threshold, Δ = 1 (normalised queries)
SVT_QUERY_NOISE = 4.0  # Lap(4Δ/ε) on each query
R2T_BETA = 0.1  # R2T's failure probability β (Dong et al. use 0.1)


def svt_first_below(queries: np.ndarray, threshold: float, epsilon: float, source: RandomSource) -> int:
    """Index of the first query whose noisy value is below the noisy threshold (len if none)."""
    rho = GridLaplace(SVT_THRESHOLD_NOISE, epsilon).release(np.array([threshold]), source)[0]
    noisy = GridLaplace(SVT_QUERY_NOISE, epsilon).release(np.asarray(queries, dtype=np.float64), source)
    below = np.flatnonzero(noisy < rho)
    return int(below[0]) if below.size else len(queries)


def svt_threshold(
    increments: np.ndarray, candidates: np.ndarray, threshold: float, epsilon: float, source: RandomSource
) -> float:
    """SVTC's truncation threshold τ from the per-candidate increments Δ_i (see module docstring)."""
    candidates = np.asarray(candidates, dtype=np.float64)
    i = svt_first_below(np.asarray(increments) / candidates, threshold, epsilon, source)
    return float(candidates[min(i, len(candidates) - 1)])


def r2t_thresholds(global_sensitivity: float) -> np.ndarray:
    """τ_j = 2^j for j = 1..⌈log₂ GS⌉ (at least one)."""
    return 2.0 ** np.arange(1, max(1, math.ceil(math.log2(global_sensitivity))) + 1)


def r2t_candidate(
    truncated: np.ndarray, tau: float, candidates: int, epsilon: float, source: RandomSource, beta: float = R2T_BETA
) -> np.ndarray:
    """Eq. 3 for one τ_j on every cell: Q(T^{τ_j}) + Lap(τ_j/ε′) − ln(J/β)·τ_j/ε′, ε′ = ε/J, J = ``candidates``.

    Sensitivity τ_j (truncation keeps only rows with |M| ≤ τ_j); ε′ per candidate, J candidates.
    """
    eps_j = epsilon / candidates
    return GridLaplace(float(tau), eps_j).release(truncated, source) - math.log(candidates / beta) * tau / eps_j


def r2t_release(
    truncated: np.ndarray,
    taus: np.ndarray,
    epsilon: float,
    source: RandomSource,
    beta: float = R2T_BETA,
    floor: bool = True,
) -> np.ndarray:
    """R2T's answer per cell: max over j of Eq. 3, floored at 0 (Q(∅)) unless the measure is signed.

    ``truncated[j]`` = Q(T^{τ_j}) per cell.
    """
    best = np.full(np.shape(truncated[0]), -np.inf)
    for k, tau in enumerate(taus):
        np.maximum(best, r2t_candidate(truncated[k], float(tau), len(taus), epsilon, source, beta), out=best)
    return np.maximum(best, 0.0) if floor else best
