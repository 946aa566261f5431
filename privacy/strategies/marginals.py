"""``marginals``: measure the base cuboid and its low-dimensional marginals, combine by least squares.

Why: with per-cell noise (``identity``) a query that leaves k axes free sums the noise of every
cell along them — "noise aggregation" (PRIMA §5.5.3). A 2-D marginal measured on its own answers
such a query with one noisy value per marginal cell. Measuring both and combining them by
weighted least squares gives one consistent cube that is good at both kinds of query.

Mechanism. For each measured cuboid S (the base, every 2-D and every 1-D marginal when d ≥ 3)
we release y_S = M_S x + Lap(Δ/ε_S) per cell with the grid sampler, where M_S sums the base cuboid
x over the axes outside S. A row changes one cell of every cuboid by at most Δ, so each release
has L1 sensitivity Δ and is ε_S-DP; sequential composition gives Σ ε_S = ε (shares below).

Least squares, in closed form. The normal matrix A = Σ_S w_S M_Sᵀ M_S (w_S = 1/σ_S²) is a sum of
Kronecker products of I and J = 11ᵀ per axis. Each axis splits into its mean direction and the
orthogonal complement, on which I and J act as scalars, so A is diagonal on the 2^d subspaces
E_T (T = the axes on which a vector is mean-free) with eigenvalue
    λ_T = Σ_{S ⊇ T} w_S · Π_{i ∉ S} n_i ,
and the estimate is x̂ = Σ_T λ_T⁻¹ P_T (Σ_S w_S M_Sᵀ y_S) — no iterative solver, no big matrix
(the Kronecker/"marginal lattice" structure HDMM exploits; McKenna et al., VLDB 2018 §6).

Error, exactly. x̂ − x = A⁻¹ Σ_S w_S M_Sᵀ noise_S has covariance A⁻¹, so a selection with per-axis
indicator vectors q_i (|q_i| = L_i selected cells) has variance
    Σ_T λ_T⁻¹ Π_{i ∈ T} (L_i − L_i²/n_i) · Π_{i ∉ T} (L_i²/n_i),
an O(2^d) formula (`MarginalLatticeError`). With only the base measured this is L_1···L_d times
the cell variance: ``identity`` is the special case.

Shares. ε_S is chosen once per cube shape, from public information only, by minimising the
expected variance of a default dashboard workload (random ranges on every axis, and random
ranges on one or two axes with the others free, equally weighted) — see `default_shares`.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Sequence

import numpy as np
from scipy.optimize import minimize

from privacy.error import MarginalLatticeError
from privacy.sampler import GridLaplace, RandomSource
from privacy.strategies.base import Measurement, MeasurementStrategy

Axes = frozenset[int]
MIN_SHARE = 0.005  # below this share of ε a cuboid is left out (its information is negligible)


def measured_cuboids(d: int) -> list[Axes]:
    """The base cuboid, every 2-D marginal and every 1-D marginal (as far as d allows)."""
    every = range(d)
    out = [frozenset(every)]
    for k in (2, 1):
        if k < d:
            out += [frozenset(c) for c in itertools.combinations(every, k)]
    return out


def subsets(d: int) -> list[Axes]:
    return [frozenset(c) for k in range(d + 1) for c in itertools.combinations(range(d), k)]


def lambdas(shape: tuple[int, ...], cuboids: Sequence[Axes], weights: Sequence[float]) -> dict[Axes, float]:
    """λ_T = Σ_{S ⊇ T} w_S Π_{i ∉ S} n_i for every subset T (module docstring)."""
    d = len(shape)
    out = {}
    for t in subsets(d):
        out[t] = sum(w * math.prod(shape[i] for i in range(d) if i not in s) for s, w in zip(cuboids, weights) if t <= s)
    return out


@functools.lru_cache(maxsize=256)
def _range_moments(n: int) -> tuple[float, float]:
    """E[L − L²/n] and E[L²/n] for a uniformly random range [l, r] ⊆ [0, n)."""
    lengths = np.array([r - l + 1 for l in range(n) for r in range(l, n)], dtype=np.float64)
    return float(np.mean(lengths - lengths**2 / n)), float(np.mean(lengths**2 / n))


def _workload_variance(shape: tuple[int, ...], lam: dict[Axes, float]) -> float:
    """Expected variance (unit noise) of the default workload: ranges on all axes, on one, on two."""
    d = len(shape)
    moments = [_range_moments(n) for n in shape]
    patterns = [frozenset(range(d))] + [frozenset(c) for k in (1, 2) if k < d for c in itertools.combinations(range(d), k)]
    per_group = {k: [] for k in {len(p) for p in patterns}}
    for ranged in patterns:
        total = 0.0
        for t, value in lam.items():
            term = 1.0
            for i in range(d):
                if i in ranged:
                    term *= moments[i][0] if i in t else moments[i][1]
                else:  # a free axis: L = n, so L − L²/n = 0 and L²/n = n
                    term *= 0.0 if i in t else shape[i]
            if term:
                total += term / value
        per_group[len(ranged)].append(total)
    identity = {k: np.mean([_identity_variance(shape, p, moments) for p in patterns if len(p) == k]) for k in per_group}
    # Each group of query shapes counts equally, relative to what identity gives it.
    return float(np.mean([np.mean(v) / identity[k] for k, v in per_group.items()]))


def _identity_variance(shape: tuple[int, ...], ranged: Axes, moments: list[tuple[float, float]]) -> float:
    return math.prod(sum(moments[i]) if i in ranged else shape[i] for i in range(len(shape)))


@functools.lru_cache(maxsize=64)
def default_shares(shape: tuple[int, ...]) -> tuple[float, ...]:
    """ε shares of `measured_cuboids`, minimising the default workload's expected variance.

    Depends on the shape only (public), so choosing it costs no budget. Deterministic.
    """
    cuboids = measured_cuboids(len(shape))
    if len(cuboids) == 1:
        return (1.0,)

    def objective(z: np.ndarray) -> float:
        shares = _softmax(z)
        return _workload_variance(shape, lambdas(shape, cuboids, shares**2))

    start = np.array([2.0] + [0.0] * (len(cuboids) - 1))
    result = minimize(objective, start, method="L-BFGS-B")
    shares = _softmax(result.x)
    shares[shares < MIN_SHARE] = 0.0  # a marginal that gets almost nothing is not measured at all
    return tuple(float(s) for s in shares / shares.sum())


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - np.max(z))
    return e / e.sum()


def marginal(x: np.ndarray, keep: Axes) -> np.ndarray:
    """M_S x: the sums over the axes outside ``keep`` (kept as length-1 axes for broadcasting)."""
    drop = tuple(i for i in range(x.ndim) if i not in keep)
    return x.sum(axis=drop, keepdims=True) if drop else x


def reconstruct(shape: tuple[int, ...], cuboids: Sequence[Axes], weights: Sequence[float],
                measurements: Sequence[np.ndarray]) -> np.ndarray:
    """Weighted least-squares base cuboid from marginal measurements (closed form, see docstring)."""
    z = np.zeros(shape)
    for w, y in zip(weights, measurements):
        z += w * y  # M_Sᵀ y: broadcasting copies each marginal cell along the summed axes
    lam = lambdas(shape, cuboids, weights)
    out = np.zeros(shape)
    for t, value in lam.items():
        out += _project(z, t) / value
    return out


def _project(z: np.ndarray, mean_free: Axes) -> np.ndarray:
    """P_T z: mean along axes outside T, mean-free part along axes in T."""
    out = z
    for axis in range(z.ndim):
        mean = out.mean(axis=axis, keepdims=True)
        out = out - mean if axis in mean_free else np.broadcast_to(mean, out.shape)
    return np.ascontiguousarray(out)


class MarginalsStrategy(MeasurementStrategy):
    name = "marginals"

    def measure(self, true: np.ndarray, sensitivity: float, epsilon: float, source: RandomSource, *,
                nonnegative: bool = False) -> Measurement:
        shape = true.shape
        cuboids = measured_cuboids(len(shape))
        shares = default_shares(shape)
        weights, measurements = [], []
        cuboids = [c for c, share in zip(cuboids, shares) if share > 0]
        shares = tuple(share for share in shares if share > 0)
        for axes, share in zip(cuboids, shares):
            mechanism = GridLaplace(sensitivity=sensitivity, epsilon=epsilon * share)  # one release per cuboid
            measurements.append(mechanism.release(marginal(true, axes), source))
            weights.append(1.0 / mechanism.variance)
        estimate = reconstruct(shape, cuboids, weights, measurements)
        lam = lambdas(shape, cuboids, weights)
        error = MarginalLatticeError(shape, tuple((tuple(sorted(t)), 1.0 / v) for t, v in lam.items()))
        base = GridLaplace(sensitivity=sensitivity, epsilon=epsilon * shares[0])
        return Measurement(estimate, error, epsilon, sensitivity, base.scale)
