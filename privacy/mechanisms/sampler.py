"""Floating-point-safe noise: a vectorized discrete Laplace sampler on a fixed grid.

Why this sampler
----------------------------------------------------
Textbook float Laplace (``x + numpy.random.laplace(b)``) leaks the input through the low-order bits
of its output (Mironov, "On significance of the least significant bits for differential privacy",
CCS 2012): the set of floats reachable from ``x`` depends on ``x``. Vetted libraries fix this
(OpenDP's samplers), but measured on this machine OpenDP 0.14 takes ~55 µs per cell for float
Laplace and 9–13 µs for integer Laplace: minutes for a 10^6-cell cube. We therefore release only
points of a fixed grid ``γ·ℤ`` that does not depend on the data:

    release = γ · (round(f(x)/γ) + Z),      Z ~ DiscreteLaplace(t)  (pmf ∝ exp(-|k|/t))

with ``γ`` a power of two (so ``k·γ`` is exact in float64) and Z = G1 − G2 for two i.i.d. geometric
variables G ~ Geom(1 − e^{-1/t}) (Inusah & Kozubowski 2006). Rounding ``f`` to the grid first
raises the sensitivity in grid units from Δ/γ to ``floor(Δ/γ) + 1`` for one coordinate
(|round(a) − round(b)| < |a − b| + 1; for vectors see below); we charge for that, and pick
γ ≤ min(Δ, Δ/ε)/1024 so it costs < 0.1 % extra noise
(and the rounding error ≤ γ/2 is below 1/2048 of the noise scale).
The discrete Laplace with scale t = Δ_grid/ε is exactly ε-DP for integer-valued f with L1
sensitivity Δ_grid (Ghosh, Roughgarden & Sundararajan 2009; Canonne, Kamath & Steinke 2020).

Vector releases: what one neighbour moves
-----------------------------------------
A release states two facts about its query f: the L1 sensitivity Δ (Σ_i |f_i(D) − f_i(D')| ≤ Δ)
and the number k of coordinates one neighbour can move at all (``coordinates``). Rounding acts per
coordinate, so each moved coordinate can gain up to one grid unit:

    Σ_i |rint(f_i(D)/γ) − rint(f_i(D')/γ)|  <  Σ_{i moved} (|f_i(D) − f_i(D')|/γ + 1)  ≤  Δ/γ + k,

and as the left side is an integer it is at most ceil(Δ/γ + k) − 1 ≤ floor(Δ/γ) + k. That is the
grid sensitivity we calibrate to. k = 1 for a cuboid (a row lands in one cell), for each marginal
released on its own, for a histogram; k = Π L_i for a Kronecker tree release (a cell lies in L_i
blocks per axis). Charging floor(Δ/γ) + 1 for a k-coordinate release would under-charge by up to
(k − 1)/(Δ/γ): the grid is therefore chosen as γ ≤ min(Δ, Δ/ε)/(1024·k), so the k extra units
still cost < 0.1 % extra noise.

How close the sampled distribution is to the ideal one
------------------------------------------------------
Each geometric is drawn by inversion, G = floor(ln U / ln q), q = e^{-1/t}, with U built from two
uniform 64-bit words (h, l) read in bulk from the OS CSPRNG (``os.urandom``):
U = (h + (l + ½)·2^-64)·2^-64 ∈ (0, 1]. Because float64 keeps 53 significant bits at every
magnitude, U has relative precision ≈ 2^-53 all the way down to 2^-128, so far tails are resolved
as finely as the bulk. The grid choice keeps t = Δ_grid/ε in [1024, 2^20] (enforced).

* Rounding in ln, ÷ and floor moves each boundary X = g of X = ln U/ln q ~ t·Exp(1) by at most
  |X|·4·2^-53 ≤ 90·2^20·2^-51 < 2^-24 grid units, so every output's probability is within a
  factor (1 ± η), η < 2^-23, of the ideal pmf: privacy loss at most ε + 2^-22 on those outputs.
* U ≥ 2^-129 truncates each geometric at ln(2^129)·t ≈ 89.4·t; the ideal mass beyond is
  e^{-89} < 3e-39.

So the mechanism is (ε + 2^-22, δ)-DP with δ < 1e-38 (2^-22 ≈ 2.4e-7) — documented here rather than claimed as
pure ε-DP. The float64 grid arithmetic itself is exact: γ is a power of two and |k| < 2^53.
`tests/test_sampler.py` checks moments, tail frequencies and a KS test against the exact pmf.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from privacy.accounting.zcdp import grid_laplace_rho

_TWO_POW_64 = float(2**64)
CHUNK = 1 << 18  # cells per sampling chunk (GridLaplace.release, the batched discrete Gaussian)
_MAX_SCALE_GRID = float(2**20)  # the η bound above is stated for t ≤ 2^20 grid units
_OBSERVERS: list[Callable[[GridLaplace, np.ndarray], None]] = []  # see observe_releases


class RandomSource:
    """Uniform 64-bit words from a CSPRNG, or from a seeded PRNG in tests only.

    ``seed=None`` (production) reads ``os.urandom``. A seed makes runs repeatable for tests and
    benchmarks; it uses numpy's PCG64 as a *bit source* only, never its float samplers.
    """

    def __init__(self, seed: int | None = None) -> None:
        self._rng = None if seed is None else np.random.Generator(np.random.PCG64(seed))

    @property
    def seeded(self) -> bool:
        return self._rng is not None

    def words(self, n: int) -> np.ndarray:
        """``n`` uniform uint64 words."""
        if self._rng is not None:  # the PCG64 stream's raw words: what integers(0, 2**64) returns, the
            # same words in the same order, without its ~4 µs per call of range handling
            return self._rng.bit_generator.random_raw(n)
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64)

    def uniform_open(self, n: int) -> np.ndarray:
        """``n`` floats U = (h + (l + ½)·2^-64)·2^-64 in (0, 1] with ~2^-53 relative precision."""
        words = self.words(2 * n).astype(np.float64)
        high, low = words[:n], words[n:]
        return (high + (low + 0.5) / _TWO_POW_64) / _TWO_POW_64


def _geometric(source: RandomSource, log_q: float, n: int) -> np.ndarray:
    """Failures before the first success, P[G ≥ g] = q^g, by inversion (see module docstring)."""
    return np.floor(np.log(source.uniform_open(n)) / log_q).astype(np.int64)


def discrete_laplace(source: RandomSource, scale: float, n: int) -> np.ndarray:
    """``n`` samples of Z with P[Z = k] ∝ exp(−|k|/scale), as int64 (Z = G1 − G2)."""
    if not scale > 0 or not math.isfinite(scale):
        raise ValueError("discrete Laplace scale must be a positive finite number")
    if scale > _MAX_SCALE_GRID:
        raise ValueError("scale in grid units exceeds 2^20: use a coarser grid (GridLaplace)")
    log_q = -1.0 / scale
    return _geometric(source, log_q, n) - _geometric(source, log_q, n)


def discrete_laplace_variance(scale: float) -> float:
    """Var Z = 2q/(1−q)² for q = e^{−1/scale} (exact, in grid units²)."""
    q = math.exp(-1.0 / scale)
    return 2.0 * q / (1.0 - q) ** 2


def grid_for(sensitivity: float, epsilon: float, coordinates: int = 1) -> float:
    """The largest power of two γ ≤ min(Δ, Δ/ε)/(1024·k) whose scale t = (floor(Δ/γ)+k)/ε ≤ 2^20.

    k = ``coordinates``, how many coordinates one neighbour can move (module docstring)."""
    if not (sensitivity > 0 and epsilon > 0):
        raise ValueError("sensitivity and epsilon must be positive")
    if coordinates < 1:
        raise ValueError("a release moves at least one coordinate")
    if (1.0 + coordinates) / epsilon > _MAX_SCALE_GRID:
        raise ValueError(f"epsilon={epsilon:g} is too small for the sampler (minimum {2 / _MAX_SCALE_GRID:g})")
    grid = 2.0 ** math.floor(math.log2(min(sensitivity, sensitivity / epsilon) / (1024.0 * coordinates)))
    while (math.floor(sensitivity / grid) + coordinates) / epsilon > _MAX_SCALE_GRID:
        grid *= 2.0  # only for ε·k⁻¹ < ~0.002: coarser grid, extra noise up to 0.4 % instead of 0.1 %
    return grid


@dataclass(frozen=True)
class GridLaplace:
    """The ε-DP release of a vector-valued query with L1 sensitivity ``sensitivity``.

    ``sensitivity`` (L1, over the whole vector) and ``coordinates`` (how many coordinates one
    neighbour can move, k) are stated by the caller — each mechanism states its own; this class
    derives the grid γ, the sensitivity in grid units floor(Δ/γ) + k (module docstring) and the
    exact noise variance.
    """

    sensitivity: float
    epsilon: float
    coordinates: int = 1

    def __post_init__(self) -> None:
        check_release(self.sensitivity, "epsilon", self.epsilon, self.coordinates)

    noise = "laplace"

    @property
    def grid(self) -> float:
        return grid_for(self.sensitivity, self.epsilon, self.coordinates)

    @property
    def rho(self) -> float:
        """The release's zCDP cost (`privacy.accounting.zcdp.grid_laplace_rho`; below ε²/2, e.g. 0.368 at ε = 1)."""
        return grid_laplace_rho(self.epsilon, self.grid_sensitivity)

    @property
    def grid_sensitivity(self) -> int:
        """floor(Δ/γ) + k: the L1 sensitivity of rint(f/γ) when one neighbour moves ≤ k coordinates."""
        return math.floor(self.sensitivity / self.grid) + self.coordinates

    @property
    def grid_scale(self) -> float:
        """Discrete Laplace scale t = Δ_grid/ε in grid units."""
        return self.grid_sensitivity / self.epsilon

    @property
    def scale(self) -> float:
        """The effective Laplace scale b in the query's own units (γ·t ≈ Δ/ε)."""
        return self.grid * self.grid_scale

    @property
    def variance(self) -> float:
        """Exact variance of one released coordinate's error (excluding the ≤ γ/2 rounding)."""
        return self.grid**2 * discrete_laplace_variance(self.grid_scale)

    def on_grid(self, values: np.ndarray) -> np.ndarray:
        """rint(f/γ): the integer vector the noise is added to (what the sensitivity is about)."""
        return to_grid(values, self.grid)

    def release(self, values: np.ndarray, source: RandomSource, *, public: bool = False) -> np.ndarray:
        """Noisy copy of ``values`` on the grid γ·ℤ (float64, same shape).

        ``public=True`` marks a release of already-public values (a bootstrap simulating noise on
        a fitted model): same distribution, but not part of any privacy analysis, so the release
        observer (`observe_releases`, the audit tests) does not record it.
        Works in chunks so the sampler's temporaries (four 64-bit words per cell) stay bounded.
        """
        scale = self.grid_scale
        return grid_release(self, values, lambda n: discrete_laplace(source, scale, n), public)


def to_grid(values: np.ndarray, grid: float) -> np.ndarray:
    """rint(f/γ) as int64: what every grid release adds its integer noise to."""
    return np.rint(np.asarray(values, dtype=np.float64) / grid).astype(np.int64)


def check_release(sensitivity: float, currency: str, amount: float, coordinates: int) -> None:
    """What every grid release needs: a positive finite sensitivity and budget, k ≥ 1 coordinates."""
    if not (sensitivity > 0 and math.isfinite(sensitivity)):
        raise ValueError("sensitivity must be positive and finite")
    if not (amount > 0 and math.isfinite(amount)):
        raise ValueError(f"{currency} must be positive and finite")
    if not (isinstance(coordinates, int) and coordinates >= 1):
        raise ValueError("coordinates (how many one neighbour can move) must be a positive integer")


def grid_release(mechanism: Any, values: np.ndarray, noise: Callable[[int], np.ndarray], public: bool) -> np.ndarray:
    """γ·(rint(values/γ) + integer noise) for a grid mechanism (Laplace or Gaussian), in chunks so the
    sampler's temporaries stay bounded; non-public releases are shown to the audit's observers."""
    grid = mechanism.grid
    flat = np.asarray(values, dtype=np.float64).ravel()
    show_release(mechanism, flat, public)
    out = np.empty_like(flat)
    for start in range(0, flat.size, CHUNK):
        part = flat[start : start + CHUNK]
        noisy = mechanism.on_grid(part) + noise(part.size)
        np.multiply(noisy, grid, out=out[start : start + CHUNK], casting="unsafe")
    return out.reshape(np.shape(values))


def show_release(mechanism: Any, flat: np.ndarray, public: bool) -> None:
    """Show a non-public release's on-grid values to the audit's observers (`observe_releases`)."""
    if _OBSERVERS and not public:
        for observer in _OBSERVERS:
            observer(mechanism, mechanism.on_grid(flat))


def exponential_mechanism(quality: np.ndarray, sensitivity: float, epsilon: float, source: RandomSource) -> int:
    """Index i drawn with probability ∝ exp(ε·q_i / (2Δ)) (McSherry & Talwar 2007): ε-DP when one
    neighbour moves every quality by at most Δ.

    Inversion of the normalised CDF with a CSPRNG uniform. Privacy, stated honestly: the
    draw is (ε, δ)-DP with δ ≈ K·2⁻⁵² for K candidates, not pure ε. Each index is drawn when a
    float64 uniform on a 2⁻⁵³ grid falls in its slice [cdf_{i−1}, cdf_i) of the float64 cumulative
    sum, so a probability is realised only to within a few units of 2⁻⁵³ of the total — an additive
    error (exp, cumsum and the grid each add ≲ 2⁻⁵³ per slice): a candidate whose exact
    probability is below that grain may be drawn with probability 0 or 2⁻⁵³, where no ratio bound
    holds. With K ≤ 10⁴ that is δ < 3·10⁻¹², far below any δ a (ε, δ) accountant would use. The
    output is an index (no value), so no low-order bits of a value leak.
    """
    if not (sensitivity > 0 and epsilon > 0):
        raise ValueError("the exponential mechanism needs a positive sensitivity and ε")
    logits = epsilon * np.asarray(quality, dtype=np.float64) / (2.0 * sensitivity)
    weights = np.exp(logits - logits.max())
    cdf = np.cumsum(weights)
    u = float(source.uniform_open(1)[0]) * cdf[-1]
    return int(min(np.searchsorted(cdf, u, side="left"), len(cdf) - 1))


@contextlib.contextmanager
def observe_releases() -> Iterator[list[tuple[GridLaplace, np.ndarray]]]:
    """TEST/AUDIT hook: collect (mechanism, rint(f/γ)) of every non-public release in the block.

    Lets a test check, for any strategy, that neighbouring inputs move each release's integer
    vector by at most the grid sensitivity it was calibrated to (rule 3). Never used by the service.
    """
    seen: list[tuple[GridLaplace, np.ndarray]] = []

    def record(mechanism: GridLaplace, on_grid: np.ndarray) -> None:
        seen.append((mechanism, on_grid.copy()))

    _OBSERVERS.append(record)
    try:
        yield seen
    finally:
        _OBSERVERS.remove(record)
