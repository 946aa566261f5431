"""A log-linear model fitted to noisy marginals: the estimation step of Private-PGM.

McKenna, Sheldon & Miklau, "Graphical-model based estimation and inference for differential
privacy" (ICML 2019), estimate a data distribution from noisy marginal measurements y_S by
minimising the measurement loss

    L(x) = Σ_S w_S ‖M_S x − y_S‖²,    w_S = 1/σ_S²                                     (their Eq. 2)

over distributions x that factor over the measured cliques: log x = Σ_S θ_S(x_S) (§4). For the
cube sizes Prima keeps in memory the full cuboid fits in an array, so we optimise the potentials
θ_S directly with L-BFGS instead of belief propagation; the minimiser is the same. x is positive
by construction, and where the marginals leave freedom (interactions among more than the measured
axes) it is the maximum-entropy completion (the exponential family of the cliques).

Pure post-processing of released values: no privacy cost, no raw data.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy.optimize import minimize

from privacy.lattice import Axes, broadcast_sum, marginal, marginals

_MAX_LOG = 700.0  # exp() overflows float64 above ~709


def _log_cuboid(shape: tuple[int, ...], potentials: Sequence[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    out = broadcast_sum(potentials, shape, out)  # each potential has length-1 axes outside its clique
    return np.minimum(out, _MAX_LOG, out=out)


def fit_loglinear(shape: tuple[int, ...], cuboids: Sequence[Axes], weights: Sequence[float],
                  measurements: Sequence[np.ndarray], *, iterations: int,
                  start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The positive cuboid x = exp(Σ_S θ_S) minimising L(x), and its flat potentials θ.

    ``start`` (potentials of an earlier fit) warm-starts the optimiser. The iteration cap bounds
    the build time; `tests/test_pairwise.py` checks that the fit recovers a log-linear truth.
    """
    shapes = [marginal(np.zeros(shape, dtype=np.int8), c).shape for c in cuboids]
    sizes = [math.prod(s) for s in shapes]
    offsets = np.cumsum([0] + sizes)
    normaliser = 1.0 / sum(w * y.size for w, y in zip(weights, measurements))  # L ≈ 1 at the truth

    def unpack(theta: np.ndarray) -> list[np.ndarray]:
        return [theta[a:b].reshape(s) for a, b, s in zip(offsets[:-1], offsets[1:], shapes)]

    # Reused by every evaluation (page faults cost more than the math), in float32: the cube-sized
    # passes are memory-bound, and the loss and gradient are summed in float64 below (issue #36).
    x, slope = np.empty(shape, np.float32), np.empty(shape, np.float32)

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        np.exp(_log_cuboid(shape, unpack(theta), x), out=x)
        value, slopes = 0.0, []
        for m, w, y in zip(marginals(x, cuboids), weights, measurements):
            r = m.astype(np.float64) - y
            value += w * float(np.sum(r * r))
            slopes.append(2.0 * w * r)  # ∂L/∂x, broadcast back along the summed axes
        np.multiply(x, broadcast_sum(slopes, shape, slope), out=x)  # chain rule through exp: ∂L/∂θ_S = M_S (x ⊙ ∂L/∂x)
        grad = np.concatenate([m.ravel() for m in marginals(x, cuboids)]).astype(np.float64)
        return value * normaliser, grad * normaliser

    if start is None:
        total = max(float(np.mean([y.sum() for y in measurements])), 1.0)  # noisy totals, all equal in expectation
        start = np.full(int(offsets[-1]), math.log(total / math.prod(shape)) / len(cuboids))
    result = minimize(loss, start, jac=True, method="L-BFGS-B", options={"maxiter": iterations, "maxcor": 20})
    return np.exp(_log_cuboid(shape, unpack(result.x))), result.x
