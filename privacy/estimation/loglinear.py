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

Convergence. From the uniform cube, plain L-BFGS on θ needed hundreds of steps: the
curvature of L along θ_S(c) is about 2·w_S·(M_S x)(c)², which spans orders of magnitude between a
marginal's full and sparse cells. After 60 steps the 3–4-axis answers of a 144,000-cell cube were
still 20× further from the minimiser than the noise (`bench/bootstrap_replicates.py`), and their
bars, which count only the noise, covered 15–45 %. Two classical remedies fix it:

1. a start from iterative proportional fitting (Deming & Stephan, 1940): a few sweeps of
   θ_S += log(y_S⁺ / M_S x), the maximum-likelihood fit of the same log-linear family to the
   (floored) noisy marginals, which lands near the least-squares minimiser;
2. diagonal preconditioning (Nocedal & Wright, *Numerical Optimization* §7.2): L-BFGS runs on
   φ = D^½ θ with D the Gauss–Newton diagonal 2·w_S·(M_S x)(c)² at the start point.

Together they reach the minimiser to within a few hundredths of the noise in ~30 steps.

Pure post-processing of released values: no privacy cost, no raw data.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from privacy.estimation.lattice import Axes, broadcast_sum, marginal, marginals

# The fit runs on the measurements divided by their mean cell (`fit_loglinear`), where a cell of
# the answer is at most the cube's size (≤ 2·10⁶ = e^14.5). Capping log x at 30 keeps every float32
# pass finite even at a line search's wildest trial point: x ≤ 1.1·10¹³, a marginal ≤ 2.2·10¹⁹, a
# slope ≤ 4.4·10¹⁹ (weights ≤ 1), x·slope ≤ 4.8·10³² < float32's 3.4·10³⁸.
_MAX_LOG = 30.0
IPF_SWEEPS = 3  # proportional-fitting sweeps before L-BFGS, from the uniform cube (not for warm starts)
_IPF_FLOOR = 0.01  # of a marginal's mean cell: IPF needs positive targets, noisy marginals can be ≤ 0
_CURVATURE_FLOOR = 1e-3  # of the mean Gauss–Newton diagonal: empty cells keep a finite scale
_DENSE_ENTRIES = 1 << 18  # (potential cells) × (cube cells) up to which `_small_loss` evaluates the loss: 2 MB;
# one fit of 720 cells 6.3 ms against 10.3 ms, of 1,920 cells 14.8 against 8.8 ms


def _log_cuboid(shape: tuple[int, ...], potentials: Sequence[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """Σ_S θ_S over the cube, capped at `_MAX_LOG`. The cap is a pass over the cube (one of a loss
    evaluation's ~11), taken only where a cell could exceed it: no cell is above Σ_S max θ_S."""
    out = broadcast_sum(potentials, shape, out)  # each potential has length-1 axes outside its clique
    if math.fsum(float(np.max(p)) for p in potentials) > _MAX_LOG:
        np.minimum(out, _MAX_LOG, out=out)
    return out


def fit_loglinear(
    shape: tuple[int, ...],
    cuboids: Sequence[Axes],
    weights: Sequence[float],
    measurements: Sequence[np.ndarray],
    *,
    iterations: int,
    start: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The positive cuboid x = exp(Σ_S θ_S) minimising L(x), and its flat potentials θ.

    ``start`` (potentials of an earlier fit of the same shape and cliques) warm-starts the
    optimiser; without it the fit starts from `IPF_SWEEPS` sweeps of proportional fitting. The
    iteration cap bounds the build time; `tests/test_pairwise.py` checks that the fit recovers a
    log-linear truth and reaches the minimiser.

    Inside, the axes run shortest first: numpy's broadcast additions and sums have the longest axis
    as their inner loop then, 1.2–2.2× faster per evaluation at 10×50×36×8. The
    potentials are laid out in that order; the cube comes back in the caller's.
    """
    order = tuple(sorted(range(len(shape)), key=lambda i: shape[i]))  # internal axis j = caller's order[j]
    inner = {axis: j for j, axis in enumerate(order)}
    kept = [tuple(1 if i not in c else n for i, n in enumerate(shape)) for c in cuboids]
    model, potentials = _fit(
        tuple(shape[i] for i in order),
        [frozenset(inner[i] for i in c) for c in cuboids],
        weights,
        [np.transpose(np.reshape(y, k), order) for y, k in zip(measurements, kept)],
        iterations,
        start,
    )
    return np.ascontiguousarray(np.transpose(model, [inner[i] for i in range(len(shape))])), potentials


def _fit(
    shape: tuple[int, ...],
    cuboids: Sequence[Axes],
    weights: Sequence[float],
    measurements: Sequence[np.ndarray],
    iterations: int,
    start: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """`fit_loglinear` in its internal axis order."""
    shapes = [tuple(n if i in c else 1 for i, n in enumerate(shape)) for c in cuboids]
    sizes = [math.prod(s) for s in shapes]
    offsets = np.cumsum([0] + sizes)
    # Units: the measurements over their mean cell and the weights over their largest, so the fit's
    # float32 passes see values near 1 whatever the aggregate (a SUM's cells can be 10¹²). The
    # minimiser is the same up to these factors; potentials go in and out in the caller's units.
    total = max(float(np.mean([y.sum() for y in measurements])), 1.0)  # noisy totals, all equal in expectation
    scale = total / math.prod(shape)
    shift = math.log(scale) / len(cuboids)  # per potential: exp(Σ(θ_S − shift)) = x / scale
    w_top = max(weights)
    weights = [w / w_top for w in weights]
    measurements = [y / scale for y in measurements]
    normaliser = 1.0 / sum(w * y.size for w, y in zip(weights, measurements))  # L ≈ 1 at the truth

    def unpack(theta: np.ndarray) -> list[np.ndarray]:
        return [theta[a:b].reshape(s) for a, b, s in zip(offsets[:-1], offsets[1:], shapes)]

    # Reused by every evaluation (page faults cost more than the math), in float32: the cube-sized
    # passes are memory-bound, and the loss and gradient are summed in float64 below.
    x, slope = np.empty(shape, np.float32), np.empty(shape, np.float32)

    def cube_loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        np.exp(_log_cuboid(shape, unpack(theta), x), out=x)
        value, slopes = 0.0, []
        for m, w, y in zip(marginals(x, cuboids), weights, measurements):
            r = m.astype(np.float64) - y
            value += w * float(np.sum(r * r))
            slopes.append(2.0 * w * r)  # ∂L/∂x, broadcast back along the summed axes
        np.multiply(x, broadcast_sum(slopes, shape, slope), out=x)  # chain rule through exp: ∂L/∂θ_S = M_S (x ⊙ ∂L/∂x)
        grad = np.concatenate([m.ravel() for m in marginals(x, cuboids)]).astype(np.float64)
        return value * normaliser, grad * normaliser

    loss = _small_loss(shape, cuboids, weights, measurements, normaliser) or cube_loss

    if start is None:
        first = _proportional_fit(shape, cuboids, measurements, unpack(np.zeros(int(offsets[-1]))), x)
    else:
        first = np.asarray(start, dtype=np.float64) - shift
    root_d = _root_curvature(shape, cuboids, weights, unpack(first), x) * math.sqrt(normaliser)

    def preconditioned(phi: np.ndarray) -> tuple[float, np.ndarray]:  # L(θ) at θ = φ / √D
        value, grad = loss(phi / root_d)
        return value, grad / root_d

    from scipy.optimize import minimize  # (not at the top: scipy is ~0.35 s of every server's start-up)

    result = minimize(
        preconditioned, first * root_d, jac=True, method="L-BFGS-B", options={"maxiter": iterations, "maxcor": 20}
    )
    theta = result.x / root_d
    return scale * np.exp(_log_cuboid(shape, unpack(theta))), theta + shift


def _small_loss(
    shape: tuple[int, ...],
    cuboids: Sequence[Axes],
    weights: Sequence[float],
    measurements: Sequence[np.ndarray],
    normaliser: float,
) -> Callable[[np.ndarray], tuple[float, np.ndarray]] | None:
    """The same loss and gradient as `_fit`'s ``cube_loss`` through the incidence matrix M (one row
    per potential cell in θ's flat layout, one column per cube cell, M[r, c] = 1 when cell c falls in
    r), when M is small (`_DENSE_ENTRIES`): log x = Mᵀθ, the marginals are Mx, and ∂L/∂θ =
    M(x ⊙ Mᵀ(2w ⊙ r)), three matrix–vector products in float64. On small cubes the loss is
    ~100 numpy calls of call overhead (the privacy audit's 36-cell fits: ~100 µs an evaluation);
    this is a few. None when M would be large: there the marginals' shared partial sums win."""
    cells = math.prod(shape)
    rows = sum(math.prod(shape[i] for i in c) for c in cuboids)
    if rows * cells > _DENSE_ENTRIES:
        return None
    coords = np.indices(shape).reshape(len(shape), cells)
    incidence, offset = np.zeros((rows, cells)), 0
    for clique in cuboids:
        axes = sorted(clique)
        row = np.ravel_multi_index(tuple(coords[axes]), [shape[i] for i in axes]) if axes else np.zeros(cells, int)
        incidence[offset + row, np.arange(cells)] = 1.0
        offset += math.prod(shape[i] for i in axes)
    transposed = np.ascontiguousarray(incidence.T)
    y = np.concatenate([np.ravel(m) for m in measurements]).astype(np.float64)
    w = np.concatenate([np.full(np.size(m), wt) for m, wt in zip(measurements, weights)])

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        x = np.exp(np.minimum(transposed @ theta, _MAX_LOG))
        r = incidence @ x - y
        value = float(np.dot(w * r, r))
        grad = incidence @ (x * (transposed @ (2.0 * w * r)))
        return value * normaliser, grad * normaliser

    return loss


def _proportional_fit(
    shape: tuple[int, ...],
    cuboids: Sequence[Axes],
    measurements: Sequence[np.ndarray],
    potentials: list[np.ndarray],
    x: np.ndarray,
) -> np.ndarray:
    """`IPF_SWEEPS` sweeps of θ_S += log(y_S⁺ / M_S x) (Deming & Stephan's proportional fitting), in
    place on ``potentials`` (views of one flat vector, returned). Targets are floored at `_IPF_FLOOR`
    of their mean cell: a start, not an estimate — L-BFGS then minimises the true loss."""
    targets = [np.maximum(y, _IPF_FLOOR * max(float(y.mean()), 1e-9)) for y in measurements]
    for _ in range(IPF_SWEEPS):
        for potential, clique, target in zip(potentials, cuboids, targets):
            np.exp(_log_cuboid(shape, potentials, x), out=x)
            potential += np.log(target / np.maximum(marginal(x, clique).astype(np.float64), 1e-12))
    return np.concatenate([p.ravel() for p in potentials])


def _root_curvature(
    shape: tuple[int, ...],
    cuboids: Sequence[Axes],
    weights: Sequence[float],
    potentials: list[np.ndarray],
    x: np.ndarray,
) -> np.ndarray:
    """√D, D = 2·w_S·(M_S x)(c)² per potential cell at ``potentials``: the Gauss–Newton diagonal of
    L's own-clique term (floored at `_CURVATURE_FLOOR` of its mean so empty cells keep a scale)."""
    np.exp(_log_cuboid(shape, potentials, x), out=x)
    d = np.concatenate(
        [(2.0 * w * np.square(m.astype(np.float64))).ravel() for m, w in zip(marginals(x, cuboids), weights)]
    )
    return np.sqrt(np.maximum(d, max(_CURVATURE_FLOOR * float(d.mean()), 1e-300)))  # (all-empty: still finite)
