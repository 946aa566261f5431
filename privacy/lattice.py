"""The marginal lattice: least squares from marginal measurements, without forming any big matrix.

A cuboid x over axes 0..d−1 is measured through marginals M_S x (the sums over the axes outside
S). With weights w_S the normal matrix A = Σ_S w_S M_Sᵀ M_S is a sum of Kronecker products of I
and J = 11ᵀ per axis. Each axis splits into its mean direction and the mean-free complement, on
which I and J act as scalars, so A is diagonal on the 2^d subspaces E_T (T = the axes along which
a vector is mean-free) with eigenvalue

    λ_T = Σ_{S ⊇ T} w_S · Π_{i ∉ S} n_i                                                 (1)

and the least-squares estimate is x̂ = Σ_T λ_T⁻¹ P_T (Σ_S w_S M_Sᵀ y_S) — the "marginal lattice"
structure HDMM exploits (McKenna et al., VLDB 2018 §6). A component E_T with λ_T = 0 is measured
by no marginal (T ⊄ every S): it is *not identified* and the estimate leaves it at zero; the
``pairwise`` strategy fills it from a model instead.

P_T v is the ANOVA component of v: for each axis, its mean along the axis (i ∉ T) or what is left
after removing that mean (i ∈ T). `lattice_apply` computes Σ_T c_T P_T v for any coefficients
with one mean/mean-free split per axis and level (O(d) passes over v, not 2^d).
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Mapping, Sequence

import numpy as np

Axes = frozenset[int]


def subsets(d: int) -> list[Axes]:
    """Every subset of the axes 0..d−1, by size."""
    return [frozenset(c) for k in range(d + 1) for c in itertools.combinations(range(d), k)]


def marginal(x: np.ndarray, keep: Axes) -> np.ndarray:
    """M_S x: the sums over the axes outside ``keep`` (kept as length-1 axes for broadcasting)."""
    drop = tuple(i for i in range(x.ndim) if i not in keep)
    return x.sum(axis=drop, keepdims=True) if drop else x


def lambdas(shape: tuple[int, ...], cuboids: Sequence[Axes], weights: Sequence[float]) -> dict[Axes, float]:
    """λ_T of Eq. (1) for every subset T."""
    d = len(shape)
    out = {}
    for t in subsets(d):
        out[t] = sum(w * math.prod(shape[i] for i in range(d) if i not in s) for s, w in zip(cuboids, weights) if t <= s)
    return out


def lattice_apply(v: np.ndarray, coefficient: Callable[[Axes], float] | Mapping[Axes, float]) -> np.ndarray:
    """Σ_T c_T P_T v: split v per axis into mean and mean-free parts, scale each leaf by c_T.

    Mean parts keep a length-1 axis, so the branches with few mean-free axes stay small and the
    recombination is by broadcasting.
    """
    coef = coefficient if callable(coefficient) else coefficient.__getitem__

    def walk(part: np.ndarray, axis: int, t: frozenset[int]) -> np.ndarray | float:
        if axis == part.ndim:
            c = coef(t)
            return part * c if c else 0.0
        mean = part.mean(axis=axis, keepdims=True)
        return walk(mean, axis + 1, t) + walk(part - mean, axis + 1, t | {axis})

    return np.broadcast_to(walk(np.asarray(v, dtype=np.float64), 0, frozenset()), v.shape).copy()


def reconstruct(shape: tuple[int, ...], cuboids: Sequence[Axes], weights: Sequence[float],
                measurements: Sequence[np.ndarray]) -> np.ndarray:
    """Weighted least-squares cuboid from marginal measurements (closed form; unidentified E_T → 0)."""
    z = np.zeros(shape)
    for w, y in zip(weights, measurements):
        z += w * y  # M_Sᵀ y: broadcasting copies each marginal cell along the summed axes
    lam = lambdas(shape, cuboids, weights)
    return lattice_apply(z, {t: (1.0 / v if v > 0 else 0.0) for t, v in lam.items()})


def higher_order(x: np.ndarray, order: int) -> np.ndarray:
    """Σ_{|T| > order} P_T x: the interactions among more than ``order`` axes (ANOVA)."""
    return lattice_apply(x, lambda t: 1.0 if len(t) > order else 0.0)
