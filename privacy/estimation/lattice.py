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

import functools
import itertools
import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

Axes = frozenset[int]
# Below this many cells one numpy reduction beats a product per axis: the time is call overhead, not
# memory (the privacy audit's 36-cell cubes, side by side: a pairwise build 0.70×, auto 0.72×, bench/audit_builds.py).
SMALL = 4096


def subsets(d: int, order: int | None = None) -> list[Axes]:
    """Every subset of the axes 0..d−1 (of at most ``order`` of them), by size."""
    top = d if order is None else min(order, d)
    return [frozenset(c) for k in range(top + 1) for c in itertools.combinations(range(d), k)]


def marginal(x: np.ndarray, keep: Axes) -> np.ndarray:
    """M_S x: the sums over the axes outside ``keep`` (kept as length-1 axes for broadcasting).

    On a contiguous float64 or float32 array each dropped axis is summed as a product with a vector of ones
    (largest axis first, so the later sums run on the smaller result): BLAS's gemv reads a middle
    axis at memory speed where numpy's reduction over it was 4–7× slower, and the log-linear fits
    take hundreds of marginals per build."""
    drop = [i for i in range(x.ndim) if i not in keep]
    if not drop:
        return x
    if x.size <= SMALL or x.dtype not in (np.float64, np.float32) or not x.flags.c_contiguous:
        return x.sum(axis=tuple(drop), keepdims=True)
    for axis in sorted(drop, key=lambda i: -x.shape[i]):
        x = _sum_axis(x, axis)
    return x


def marginals(x: np.ndarray, cliques: Sequence[Axes]) -> list[np.ndarray]:
    """[M_S x for S in cliques], sharing partial sums: each comes from the smallest sum already made
    that keeps its axes, so the pairs of a d-axis cube take about d − 1 passes over x instead of
    d(d − 1)/2 (the log-linear loss takes two such sets per evaluation)."""
    made: dict[Axes, np.ndarray] = {frozenset(range(x.ndim)): x}
    out = []
    for clique in cliques:
        kept = min((k for k in made if clique <= k), key=lambda k: made[k].size)
        part = made[kept]
        for axis in sorted(kept - clique, key=lambda i: -x.shape[i]):
            part = marginal(part, kept - {axis})
            kept = kept - {axis}
            made[kept] = part
        out.append(part)
    return out


def _sum_axis(x: np.ndarray, axis: int) -> np.ndarray:
    """``x.sum(axis, keepdims=True)`` of a C-contiguous array, as (a, n, b) · 1ₙ."""
    n = x.shape[axis]
    a, b = math.prod(x.shape[:axis]), math.prod(x.shape[axis + 1 :])
    ones = np.ones(n, x.dtype)
    if b == 1:
        out = x.reshape(a, n) @ ones
    elif a == 1:
        out = ones @ x.reshape(n, b)
    else:
        out = np.matmul(ones, x.reshape(a, n, b))
    return out.reshape(x.shape[:axis] + (1,) + x.shape[axis + 1 :])


def broadcast_sum(parts: Sequence[np.ndarray], shape: tuple[int, ...], out: np.ndarray | None = None) -> np.ndarray:
    """Σ parts over ``shape`` (each part has length-1 axes where it is constant), into ``out`` if given
    (a float array of ``shape``, reused across calls: a fresh 1 MB array per addition cost more in
    page faults than the addition), else into a new array.

    The parts are added smallest result first (`_addition_order`), so for the pairs of a 4-D cube
    only the last two additions run at full size instead of all six."""
    shape = tuple(shape)
    target = np.empty(shape) if out is None else out
    pending = [np.asarray(p, dtype=target.dtype) for p in parts]
    if len(pending) < 2:
        target[...] = pending[0] if pending else 0.0
        return target
    if target.size <= SMALL:  # call overhead, not memory: add in the given order, in place
        target[...] = pending[0]
        for part in pending[1:]:
            np.add(target, part, out=target)
        return target
    in_target = False
    for i, j in _addition_order(tuple(p.shape for p in pending)):
        a, b = pending[i], pending[j]
        full = np.broadcast_shapes(a.shape, b.shape) == shape
        if full and (a is target or b is target or not in_target):
            combined, in_target = np.add(a, b, out=target), True
        else:  # a partial sum, or a second full-size one (a tie in the order, rare): a new array
            combined = a + b
        pending = [p for k, p in enumerate(pending) if k not in (i, j)] + [combined]
    if pending[0] is not target:
        target[...] = pending[0]
    return target


@functools.lru_cache(maxsize=256)
def _addition_order(shapes: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, int], ...]:
    """The pairs (i, j) to add, in turn, for `broadcast_sum`: always the two whose broadcast sum is
    smallest (positions refer to the list after the previous additions, the sum appended last).
    Planned once per list of shapes: the fits call it hundreds of times with the same shapes."""
    pending, order = list(shapes), []
    while len(pending) > 1:
        _, i, j = min(
            (math.prod(np.broadcast_shapes(pending[i], pending[j])), i, j)
            for i in range(len(pending))
            for j in range(i + 1, len(pending))
        )
        combined = np.broadcast_shapes(pending[i], pending[j])
        pending = [p for k, p in enumerate(pending) if k not in (i, j)] + [combined]
        order.append((i, j))
    return tuple(order)


def lambdas(
    shape: tuple[int, ...], cuboids: Sequence[Axes], weights: Sequence[float] | np.ndarray
) -> dict[Axes, float]:
    """λ_T of Eq. (1) for every subset T."""
    d = len(shape)
    out = {}
    for t in subsets(d):
        out[t] = sum(
            w * math.prod(shape[i] for i in range(d) if i not in s) for s, w in zip(cuboids, weights) if t <= s
        )
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


def centred(a: np.ndarray) -> np.ndarray:
    """Mean-free along every axis (the ANOVA projection onto E_T for an array over T's axes)."""
    for axis in range(a.ndim):
        a = a - a.mean(axis=axis, keepdims=True)
    return a


def reconstruct(
    shape: tuple[int, ...], cuboids: Sequence[Axes], weights: Sequence[float], measurements: Sequence[np.ndarray]
) -> np.ndarray:
    """Weighted least-squares cuboid from marginal measurements (closed form; unidentified E_T → 0)."""
    parts = least_squares_parts(shape, cuboids, weights, measurements)
    if parts is not None:
        return broadcast_sum(parts, shape)
    z = np.zeros(shape)
    for w, y in zip(weights, measurements):
        z += w * y  # M_Sᵀ y: broadcasting copies each marginal cell along the summed axes
    coefficients = _inverse_lambdas(shape, cuboids, weights)
    every = frozenset(range(len(shape)))
    low = [c for c in cuboids if c != every]
    if len(shape) > 3 and every in cuboids and max(map(len, low), default=0) < len(shape) - 1:
        # with the base measured, λ_T = λ_all for every T no lower cuboid covers: x̂ = z/λ_all plus the
        # covered T's corrections (1/λ_T − 1/λ_all)·P_T z, from z's marginal means (`_from_means`) —
        # on a 5.7 M-cell 7-D class cube 2× faster (0.7 s) than splitting z along every axis (`lattice_apply`)
        full = coefficients[every]
        covered = {t: c - full for t, c in coefficients.items() if any(t <= s for s in low) and c != full}
        return full * z + _from_means(z, covered)
    return lattice_apply(z, coefficients)


def least_squares_parts(
    shape: tuple[int, ...], cuboids: Sequence[Axes], weights: Sequence[float], measurements: Sequence[np.ndarray]
) -> list[np.ndarray] | None:
    """`reconstruct`'s estimate as small arrays whose broadcast sum it is, when every cuboid has at most
    three axes and none is the whole cube (of more than two axes); None otherwise.

    x̂ = Σ_T λ_T⁻¹ P_T z with z = Σ_S w_S M_Sᵀ y_S lives on the T inside measured cuboids (pairs, and
    the triples a dense build picks: `privacy.strategies.pairwise`), so it is Σ_U a_U A_U(z)
    (`_from_means`), and each mean A_U(z) — z averaged over the axes outside U — comes from the
    measurements themselves: M_Sᵀ y_S is constant along the axes outside S, so its mean over the
    axes outside U is y_S averaged over S ∖ U. No cube-sized z is formed (for the pairs of a
    267,696-cell cube: 1.6 ms → 0.3 ms before the final sum, which the caller may fold into its own)."""
    widest = max(len(c) for c in cuboids)
    if len(shape) <= 2 or widest > 3 or widest >= len(shape):
        return None
    coefficients = {t: c for t, c in _inverse_lambdas(shape, cuboids, weights).items() if c}
    parts = []
    for u, a in _mean_weights(coefficients).items():
        means = [
            w * np.mean(y, axis=tuple(sorted(s - u)), keepdims=True) if s - u else w * np.asarray(y)
            for s, w, y in zip(cuboids, weights, measurements)
        ]
        parts.append(a * functools.reduce(np.add, means))
    return parts


def _inverse_lambdas(shape: tuple[int, ...], cuboids: Sequence[Axes], weights: Sequence[float]) -> dict[Axes, float]:
    """λ_T⁻¹ of Eq. (1), 0 where λ_T = 0 (T not identified)."""
    return {t: (1.0 / v if v > 0 else 0.0) for t, v in lambdas(shape, cuboids, weights).items()}


def higher_order(x: np.ndarray, order: int) -> np.ndarray:
    """Σ_{|T| > order} P_T x: the interactions among more than ``order`` axes (ANOVA)."""
    if order <= 2 < x.ndim:  # x minus its low-order part, from marginal means (`_from_means`)
        return x - broadcast_sum(low_order_parts(x, order), x.shape)
    return lattice_apply(x, lambda t: 1.0 if len(t) > order else 0.0)


def low_order_parts(x: np.ndarray, order: int) -> list[np.ndarray]:
    """Small arrays whose broadcast sum is Σ_{|T| ≤ order} P_T x (`_from_means`)."""
    return component_parts(x, [t for t in subsets(x.ndim) if len(t) <= order])


def component_parts(x: np.ndarray, components: Sequence[Axes]) -> list[np.ndarray]:
    """Small arrays whose broadcast sum is Σ_{T ∈ components} P_T x (`_from_means`)."""
    return _mean_parts(x, {t: 1.0 for t in components})


def identified(cuboids: Sequence[Axes]) -> list[Axes]:
    """The components T least squares estimates from measured ``cuboids``: every subset of one (λ_T > 0
    wherever some measured cuboid holds T and its weight is positive)."""
    found = {frozenset(t) for c in cuboids for k in range(len(c) + 1) for t in itertools.combinations(sorted(c), k)}
    return sorted(found, key=lambda t: (len(t), sorted(t)))


def _from_means(x: np.ndarray, coefficients: Mapping[Axes, float]) -> np.ndarray:
    """Σ_T c_T P_T x over few small T, without splitting x axis by axis (`lattice_apply`'s 2^d-leaf
    walk): a broadcast sum of x's marginal means (`_mean_weights`), one pass over x for the
    marginals and one for the sum."""
    parts = _mean_parts(x, coefficients)
    return broadcast_sum(parts, x.shape) if parts else np.zeros(x.shape)


def _mean_parts(x: np.ndarray, coefficients: Mapping[Axes, float]) -> list[np.ndarray]:
    """The terms a_U A_U(x) of `_from_means`, unsummed."""
    weights = _mean_weights(coefficients)
    cells = math.prod(x.shape)
    means = marginals(np.ascontiguousarray(x, dtype=np.float64), list(weights))
    return [a * m / (cells / math.prod(x.shape[i] for i in u)) for (u, a), m in zip(weights.items(), means)]


def _mean_weights(coefficients: Mapping[Axes, float]) -> dict[Axes, float]:
    """Σ_T c_T P_T = Σ_U a_U A_U with A_U the mean over the axes outside U: P_T x = Σ_{U ⊆ T}
    (−1)^{|T∖U|} A_U x (inclusion–exclusion of the ANOVA decomposition), so a_U = Σ_{T ⊇ U} c_T
    (−1)^{|T∖U|}. For the pairs of a 4-D cube: 11 terms. Zero terms are left out."""
    weights: dict[Axes, float] = {}
    for t, c in coefficients.items():
        for k in range(len(t) + 1):
            for u in itertools.combinations(sorted(t), k):
                weights[frozenset(u)] = weights.get(frozenset(u), 0.0) + c * (-1.0) ** (len(t) - k)
    return {u: a for u, a in weights.items() if a != 0.0}
