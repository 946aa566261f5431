"""SCOPE: prefix sums from a fitted distribution of a noisy sum vector (PRIMA §5.4, Alg. 3, Eq. 10–14).

Everything here is post-processing of an already released noisy cuboid: no data, no budget.

Per axis (the paper specifies 1-D only):
1. The noisy marginal sums x_1..x_n of that axis, read as the weights of a synthetic sample in
   which value i occurs x_i times (Alg. 3). We never expand that sample: every family is fitted by
   maximising the *weighted* log-likelihood of its pmf discretised to the cells of the domain and
   normalised on it (cell i covers (i − ½, i + ½]), which is what fitting the expanded sample would
   do, at the cost of n terms instead of Σx_i points. Negative noisy weights count as 0.
2. Hypothesis selection (Eq. 10–13): the family with the smallest Kolmogorov–Smirnov statistic
   D = max_i |F_fit(i) − F_obs(i)|. The paper picks the largest p-value 2e^{−D²n}, a decreasing
   function of D, so it is the same choice; the p-values themselves underflow to 0 at these sample
   sizes, which is why we compare D.
3. Eq. 14: P(i) = x_i / f(i) · F(i).

For d axes we use the product of the per-axis fits, P(i_1..i_d) = x_{i_1..i_d} · Π_k F_k(i_k)/f_k(i_k)
(our extension; the paper gives only the 1-D rule), then consistency: clamp into [0, noisy total]
and isotonic regression along every axis in turn. Isotonic regression is order-preserving (y ≤ y'
⇒ iso(y) ≤ iso(y')), so monotonicity along the axes already treated survives the later ones.

Structural limit, stated plainly: one noisy cell scaled by F/f carries variance (F/f)²·2b², so
P(i) for a cell with little mass (small f) is far noisier than a plain prefix sum of i cells; SCOPE
only helps when the fitted shape is right and the ratio F/f stays small. bench/prima_experiments.py
decides where it wins.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from privacy.estimation.lattice import marginal

FAMILIES = ("norm", "uniform", "expon", "weibull_min", "lognorm", "gamma")
_TINY = 1e-300
_MIN_PMF = 1e-12  # floor of f(i) in Eq. 14, so an empty tail cell cannot divide by zero


@dataclass(frozen=True)
class AxisFit:
    """The selected distribution of one axis: family, scipy parameters, discretised pmf/cdf, KS D."""

    family: str
    params: tuple[float, ...]
    pmf: np.ndarray  # f(i), i = 1..n, sums to 1 on the domain
    cdf: np.ndarray  # F(i) = Σ_{j ≤ i} f(j), F(n) = 1
    ks: float

    @property
    def ratio(self) -> np.ndarray:
        """F(i)/f(i): the factor Eq. 14 multiplies the noisy cell x_i by."""
        return self.cdf / np.maximum(self.pmf, _MIN_PMF)


def _positive(z: np.ndarray) -> np.ndarray:
    return np.maximum(z, 0.0)


# Each family's CDF as scipy.stats computes it, written with the same special functions but without
# its per-call argument machinery (~0.2 ms a call, 80 % of a SCOPE fit: Nelder–Mead calls it ~140
# times per family and axis). Parameters as `_families` maps them: (loc, scale) or (shape, loc, scale).
@functools.cache
def _cdfs() -> dict[str, Callable[..., np.ndarray]]:
    from scipy import special  # (not at the top: scipy is ~0.35 s of every server's start-up)

    return {
        "norm": lambda x, loc, scale: special.ndtr((x - loc) / scale),
        "uniform": lambda x, loc, scale: np.clip((x - loc) / scale, 0.0, 1.0),
        "expon": lambda x, loc, scale: -np.expm1(-_positive((x - loc) / scale)),
        "weibull_min": lambda x, c, loc, scale: -np.expm1(-(_positive((x - loc) / scale) ** c)),
        "lognorm": lambda x, s, loc, scale: special.ndtr(np.log(_positive((x - loc) / scale)) / s),
        "gamma": lambda x, a, loc, scale: special.gammainc(a, _positive((x - loc) / scale)),
    }


def _cdf(family: str, x: np.ndarray, params: tuple[float, ...]) -> np.ndarray:
    """scipy.stats' CDF of ``family`` (NaN for invalid parameters, as scipy gives)."""
    scale, shapes = params[-1], params[:-2]
    if not scale > 0 or any(not a > 0 for a in shapes):
        return np.full_like(x, np.nan)
    return _cdfs()[family](x, *params)


def discretised_pmf(family: str, params: tuple[float, ...], n: int) -> np.ndarray | None:
    """pmf of ``family(*params)`` on cells 1..n (cell i = (i − ½, i + ½]), normalised; None if no mass."""
    with np.errstate(all="ignore"):
        return _pmf_on(family, params, _edges(n))


def _edges(n: int) -> np.ndarray:
    return np.arange(n + 1, dtype=np.float64) + 0.5


def _pmf_on(family: str, params: tuple[float, ...], edges: np.ndarray) -> np.ndarray | None:
    """`discretised_pmf` on precomputed cell edges, under the caller's ``np.errstate``: Nelder–Mead
    calls it ~140 times per family and axis, where a context manager, np.all and np.diff a call were
    a third of a SCOPE fit."""
    cdf = _cdf(family, edges, params)
    total = cdf[-1] - cdf[0]
    if not math.isfinite(float(cdf.sum())) or not total > 1e-12:  # (CDF values are ≤ 1: the sum overflows never)
        return None
    mass = cdf[1:] - cdf[:-1]
    return np.maximum(mass, 0.0, out=mass) / total


def _weighted_moments(w: np.ndarray) -> tuple[float, float]:
    i = np.arange(1, len(w) + 1, dtype=np.float64)
    mean = float(np.dot(w, i))
    var = float(np.dot(w, (i - mean) ** 2))
    return mean, max(var, 1.0 / 12.0)


def _families(mean: float, var: float, n: int) -> dict[str, tuple[np.ndarray, Callable[[np.ndarray], tuple]]]:
    """Per family: an initial unconstrained θ (from weighted moments) and θ → scipy parameters.

    Location is fixed at 0 for the one-sided families (the cells start at 1), as is usual for
    positive data; fitting a free location makes these families unidentifiable on 30 cells.
    """
    sd, cv2 = np.sqrt(var), var / mean**2
    s_ln = np.sqrt(np.log1p(cv2))
    return {
        "norm": (np.array([mean, np.log(sd)]), lambda t: (t[0], np.exp(t[1]))),
        "uniform": (np.array([0.5, np.log(n)]), lambda t: (t[0], np.exp(t[1]))),
        "expon": (np.array([np.log(mean)]), lambda t: (0.0, np.exp(t[0]))),
        "weibull_min": (
            np.array([np.log(max(1.0 / np.sqrt(cv2), 0.2)), np.log(mean)]),
            lambda t: (np.exp(t[0]), 0.0, np.exp(t[1])),
        ),
        "lognorm": (np.array([np.log(s_ln), np.log(mean) - s_ln**2 / 2]), lambda t: (np.exp(t[0]), 0.0, np.exp(t[1]))),
        "gamma": (np.array([np.log(1.0 / cv2), np.log(var / mean)]), lambda t: (np.exp(t[0]), 0.0, np.exp(t[1]))),
    }


def fit_family(family: str, weights: np.ndarray) -> tuple[tuple[float, ...], np.ndarray] | None:
    """Weighted maximum-likelihood fit of one family's discretised pmf to normalised weights."""
    n = len(weights)
    mean, var = _weighted_moments(weights)
    theta0, to_params = _families(mean, var, n)[family]

    edges = _edges(n)

    def nll(theta: np.ndarray) -> float:
        pmf = _pmf_on(family, to_params(theta), edges)
        if pmf is None:
            return 1e300
        return float(-np.dot(weights, np.log(np.maximum(pmf, _TINY, out=pmf), out=pmf)))

    if family == "uniform":  # closed form: the smallest interval holding all the positive weight
        support = np.flatnonzero(weights > 0)
        params: tuple[float, ...] = (support[0] + 0.5, float(support[-1] - support[0] + 1))
    else:
        from scipy import optimize  # (not at the top: scipy is ~0.35 s of every server's start-up)

        with np.errstate(all="ignore"):
            res = optimize.minimize(nll, theta0, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-10})
        params = tuple(float(p) for p in to_params(res.x))
    pmf = discretised_pmf(family, params, n)
    return None if pmf is None else (params, pmf)


def fit_axis(noisy_sums: np.ndarray, families: tuple[str, ...] = FAMILIES) -> AxisFit:
    """Fit every family to one axis' noisy sum vector; keep the smallest KS statistic (Eq. 12)."""
    w = np.maximum(np.asarray(noisy_sums, dtype=np.float64), 0.0)
    n = len(w)
    if w.sum() <= 0:  # nothing positive to fit: the uniform shape, stated as such
        pmf = np.full(n, 1.0 / n)
        return AxisFit("uniform", (0.5, float(n)), pmf, np.cumsum(pmf), 1.0)
    w = w / w.sum()
    observed = np.cumsum(w)
    best: AxisFit | None = None
    for family in families:
        fitted = fit_family(family, w)
        if fitted is None:
            continue
        params, pmf = fitted
        cdf = np.cumsum(pmf)
        ks = float(np.max(np.abs(cdf - observed)))
        if best is None or ks < best.ks:
            best = AxisFit(family, params, pmf, cdf, ks)
    assert best is not None  # "uniform" always fits
    return best


def isotonic_along(values: np.ndarray, axis: int) -> np.ndarray:
    """Least-squares non-decreasing fit of every 1-D fibre along ``axis`` (scipy's PAVA)."""
    from scipy import optimize  # (not at the top: scipy is ~0.35 s of every server's start-up)

    moved = np.moveaxis(values, axis, -1)
    flat = moved.reshape(-1, moved.shape[-1])
    out = np.empty_like(flat)
    for k, fibre in enumerate(flat):
        out[k] = optimize.isotonic_regression(fibre).x
    return np.moveaxis(out.reshape(moved.shape), -1, axis)


def consistent(prefix: np.ndarray, total: float) -> np.ndarray:
    """§5.4's consistency: 0 ≤ P non-decreasing along every axis ≤ total (noisy total sum)."""
    out = np.clip(prefix, 0.0, max(total, 0.0))
    for axis in range(out.ndim):
        out = isotonic_along(out, axis)
    return out


def axis_sums(noisy: np.ndarray, axis: int) -> np.ndarray:
    """The noisy marginal sum vector of one axis (post-processing of the released cuboid)."""
    return marginal(noisy, frozenset({axis})).ravel()


def fit_axes(noisy: np.ndarray) -> list[AxisFit]:
    """One `fit_axis` per axis, on that axis' noisy marginal sums."""
    return [fit_axis(axis_sums(noisy, a)) for a in range(noisy.ndim)]


def eq14(noisy: np.ndarray, fits: list[AxisFit]) -> np.ndarray:
    """Eq. 14 with the product of the per-axis fits: x · Π_k F_k/f_k, zero-padded on every axis."""
    raw = np.zeros(tuple(n + 1 for n in noisy.shape), dtype=np.float64)
    inner = raw[tuple(slice(1, None) for _ in noisy.shape)]
    inner[...] = noisy
    for axis, fit in enumerate(fits):
        shape = [1] * noisy.ndim
        shape[axis] = -1
        inner *= fit.ratio.reshape(shape)
    return raw


def scope_prefix(noisy: np.ndarray, fits: list[AxisFit] | None = None) -> tuple[np.ndarray, list[AxisFit]]:
    """Zero-padded SCOPE prefix cube of a noisy non-negative cuboid, and the per-axis fits used.

    Eq. 14, then consistency against the noisy total on the inner cells (the padded zero slices
    stay exactly 0, below every consistent value).
    """
    fits = fits or fit_axes(noisy)
    out = eq14(noisy, fits)
    inner = tuple(slice(1, None) for _ in noisy.shape)
    out[inner] = consistent(out[inner], float(noisy.sum()))
    return out, fits
