"""HDPView (Kato et al., VLDB 2022, ``../shared/papers/hdpview-vldb22.txt``): a data-aware p-view.

The count tensor X over the declared domains is split by recursive bisection into blocks whose
cells are nearly equal; each block's total is released with Laplace noise and spread evenly over
its cells. Works on the sparse non-zero cells only, so it fits tables of any width.

Algorithm 1 of the paper, step by step (ε_b = ε_r + ε_p; defaults from the paper and its
authors' script: ε_r/ε_b = 0.9, α = 1.6, β = 1.2, γ = 0.9):

* θ = 1/ε_p (line 6); κ = ⌈β·log₂ n̄⌉, n̄ the total domain size (line 4);
* λ = ((2α−1)/(α−1) + 1)·2/(γ·ε_r), δ = λ·ln α (lines 8–9; §5.4 Eq. 19);
* random converge (lines 15–16), the root included (the paper tests it; the authors' code does
  not): BAE(B) = max(θ + 2 − δ, AE(B) − k·δ) at depth k (root k = 1); stop if BAE + Lap(λ) ≤ θ.
  AE(B) = Σ_{x∈B} |x − S_B/|B|| (Eq. 6), L1 sensitivity 2(1 − 1/|B|) ≤ 2 (Thm. 3); the test's
  privacy loss over a whole root-to-leaf path is ≤ γ·ε_r (Eq. 19) — stated, not re-derived here;
* random cut (lines 20–25): for k ≤ κ the exponential mechanism over every (axis, cut point) that
  leaves both halves non-empty, quality Q = −(AE(B_L) + AE(B_R)) (Eq. 11), Δ_Q = 2·Δ_AE (§5.3),
  ε_cut = (1 − γ)·ε_r/κ per cut (Eq. 16: κ cuts per path at most); beyond κ a uniformly random
  cut (no budget, no data);
* perturbation (line 11): each block's total + Lap(1/ε_p) — the blocks are disjoint, so one row
  moves one block total by 1 (one coordinate, sensitivity 1): ε_p-DP by parallel composition.
  A measure's clipped SUM per block is released the same way with Lap(Δ/ε_m) on the same blocks.

Privacy (§5.4): each root-to-leaf path spends ≤ (1−γ)ε_r on cuts and ≤ γε_r on converge tests;
paths are disjoint (parallel composition), so the partition is ε_r-DP; perturbation adds ε_p.

Deviations from the authors' public code, on purpose: noise from the project's grid sampler and
the OS CSPRNG (not numpy's RandomState and float Laplace); the root is tested for convergence;
nothing un-noised (a block's true mean or AE) is kept with the view.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from privacy.estimation.prefix import Runs
from privacy.mechanisms.sampler import GridLaplace, RandomSource, exponential_mechanism

RATIO = 0.9  # ε_r / ε_b
ALPHA, BETA, GAMMA = 1.6, 1.2, 0.9
# The random converge test cannot stop an empty block with probability above 1/2 when its floor
# θ + 2 − δ sits well above θ (large ε: θ, λ, δ shrink as 1/ε, the "+2" does not), and uniformly
# random cuts beyond κ then branch without end on a large domain (supercritical: seen at ε = 10 on
# Traffic, 7 GB). We stop splitting once this many blocks exist (a deviation from Algorithm 1):
# the pending blocks are kept as they are. It only shortens root-to-leaf paths, so it spends no
# more than the paper's accounting, and it depends on released decisions only.
MAX_BLOCKS = 100_000


@dataclass(frozen=True)
class Parameters:
    """Algorithm 1's derived constants for one build (public: from ε and the shape only)."""

    epsilon_r: float
    epsilon_p: float
    kappa: int
    theta: float
    lam: float
    delta: float
    epsilon_cut: float

    @classmethod
    def of(
        cls,
        shape: Sequence[int],
        epsilon: float,
        ratio: float = RATIO,
        alpha: float = ALPHA,
        beta: float = BETA,
        gamma: float = GAMMA,
    ) -> Parameters:
        eps_r, eps_p = epsilon * ratio, epsilon * (1 - ratio)
        kappa = max(1, math.ceil(beta * sum(math.log2(n) for n in shape)))
        lam = ((2 * alpha - 1) / (alpha - 1) + 1) * (2 / (gamma * eps_r))
        return cls(eps_r, eps_p, kappa, 1 / eps_p, lam, lam * math.log(alpha), (1 - gamma) * eps_r / kappa)


def _size(lo: np.ndarray, hi: np.ndarray) -> float:
    return float(np.prod((hi - lo + 1).astype(np.float64)))


def absolute_error(values: np.ndarray, size: float) -> float:
    """AE(B) (Eq. 6) of a block of ``size`` cells whose non-zero cells hold ``values``."""
    if size <= 0:
        return 0.0
    mean = values.sum() / size
    return float(np.abs(values - mean).sum() + (size - len(values)) * mean)


def _cut_errors(coords: np.ndarray, values: np.ndarray, lo: int, hi: int, size: float) -> np.ndarray:
    """AE(B_L) + AE(B_R) for every cut j ∈ [lo, hi) on one axis (left = coordinates ≤ j)."""
    width = hi - lo + 1
    offset = coords - lo
    s = np.cumsum(np.bincount(offset, weights=values, minlength=width))[:-1]
    m = np.cumsum(np.bincount(offset, minlength=width))[:-1].astype(np.float64)
    size_l = size * np.arange(1, width) / width
    size_r = size - size_l
    s_r, m_r = values.sum() - s, len(values) - m
    mu_l, mu_r = s / size_l, s_r / size_r
    # With every non-zero count ≥ 1 ≥ the mean, Σ|x − μ| = S − mμ, so AE = 2(S − mμ) (exact).
    total = 2 * (s - m * mu_l) + 2 * (s_r - m_r * mu_r)
    exact = np.flatnonzero((mu_l > values.min(initial=np.inf)) | (mu_r > values.min(initial=np.inf)))
    for j in exact:  # small dense blocks: the mean exceeds some count, sum the deviations exactly
        left = offset <= j
        total[j] = absolute_error(values[left], size_l[j]) + absolute_error(values[~left], size_r[j])
    return total


@dataclass
class Partition:
    """The published blocks: inclusive cell ranges per axis (public once released)."""

    lo: np.ndarray  # (blocks, d)
    hi: np.ndarray  # (blocks, d)
    depths: list[int] = field(default_factory=list)
    members: list[np.ndarray] = field(default_factory=list, repr=False)  # which points: never released


def partition(
    points: np.ndarray, counts: np.ndarray, shape: Sequence[int], params: Parameters, source: RandomSource
) -> Partition:
    """Algorithm 1's RECURSIVEBISECTION from the root block, iteratively, breadth first (depth can
    exceed κ; the order of visits does not change any block's decisions).

    ``points`` (m, d): the non-zero cells' coordinates; ``counts``: their counts. Un-noised, read
    only here; what leaves is the block structure (ε_r-DP, module docstring).
    """
    d = len(shape)
    root = (np.zeros(d, dtype=np.int64), np.asarray(shape, dtype=np.int64) - 1, np.arange(len(counts)), 1)
    # breadth first: if the block cap is reached, the pending blocks are all of about one depth
    stack = collections.deque([root])
    out_lo: list[np.ndarray] = []
    out_hi: list[np.ndarray] = []
    depths: list[int] = []
    members: list[np.ndarray] = []
    converge = GridLaplace(sensitivity=2.0, epsilon=2.0 / params.lam)  # scale λ (BAE moves ≤ 2)
    while stack:
        lo, hi, idx, k = stack.popleft()
        size = _size(lo, hi)
        values = counts[idx].astype(np.float64)
        bae = max(params.theta + 2 - params.delta, absolute_error(values, size) - k * params.delta)
        widths = hi - lo + 1
        capped = len(out_lo) + len(stack) >= MAX_BLOCKS
        if capped or np.all(widths == 1) or converge.release(np.array([bae]), source)[0] <= params.theta:
            out_lo.append(lo)
            out_hi.append(hi)
            depths.append(k)
            members.append(idx)
            continue
        axis, cut = _choose_cut(points, idx, values, lo, hi, size, k, params, source)
        left = points[idx, axis] <= cut
        lo_r, hi_l = lo.copy(), hi.copy()
        hi_l[axis], lo_r[axis] = cut, cut + 1
        stack.append((lo, hi_l, idx[left], k + 1))
        stack.append((lo_r, hi, idx[~left], k + 1))
    return Partition(np.array(out_lo), np.array(out_hi), depths, members)


def _choose_cut(
    points: np.ndarray,
    idx: np.ndarray,
    values: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    size: float,
    k: int,
    params: Parameters,
    source: RandomSource,
) -> tuple[int, int]:
    """Random cut: the exponential mechanism over all (axis, point) for k ≤ κ, else uniform."""
    if k > params.kappa:  # no budget, no data: a uniform axis (of width ≥ 2), then a uniform point
        axes = [a for a in range(len(lo)) if hi[a] > lo[a]]
        words = source.words(2)
        axis = axes[int(words[0] % np.uint64(len(axes)))]
        return axis, int(lo[axis]) + int(words[1] % np.uint64(int(hi[axis] - lo[axis])))
    candidates = [(a, j) for a in range(len(lo)) for j in range(int(lo[a]), int(hi[a]))]
    quality = np.concatenate(
        [-_cut_errors(points[idx, a], values, int(lo[a]), int(hi[a]), size) for a in range(len(lo)) if hi[a] > lo[a]]
    )
    sensitivity = 2 * 2 * (1 - 1 / size)  # Δ_Q = 2·Δ_AE, Thm. 3
    return candidates[exponential_mechanism(quality, sensitivity, params.epsilon_cut, source)]


def overlap(lo: np.ndarray, hi: np.ndarray, selection: Sequence[Runs], skip: Sequence[int] = ()) -> np.ndarray:
    """|q ∩ B| / |B| for every block (q: a union of runs per axis), over the axes not in ``skip``."""
    w = np.ones(len(lo))
    for axis, runs in enumerate(selection):
        if axis in skip:
            continue
        b_lo, b_hi = lo[:, axis], hi[:, axis]
        inside = np.zeros(len(b_lo))
        for a, b in runs:
            inside += np.maximum(0, np.minimum(b_hi, b) - np.maximum(b_lo, a) + 1)
        w *= inside / (b_hi - b_lo + 1)
    return w


@dataclass
class PView:
    """Blocks and their noisy totals per aggregate: answers Σ_B |q ∩ B|/|B| · value_B (Eq. 10)."""

    lo: np.ndarray
    hi: np.ndarray
    values: dict[str, np.ndarray]
    variances: dict[str, float]  # the perturbation's noise variance per block total

    def weights(self, selection: Sequence[Runs]) -> np.ndarray:
        return overlap(self.lo, self.hi, selection)

    def total(self, key: str, selection: Sequence[Runs]) -> float:
        return float(self.weights(selection) @ self.values[key])

    def variance(self, key: str, selection: Sequence[Runs]) -> float:
        """The perturbation's part of the error only (Σ w_B² · Var); uniformity error is not in it."""
        w = self.weights(selection)
        return float(w @ w * self.variances[key])


def perturb(totals: np.ndarray, sensitivity: float, epsilon: float, source: RandomSource) -> tuple[np.ndarray, float]:
    """Block totals + Lap(Δ/ε): disjoint blocks, so one row moves one coordinate by ≤ Δ (ε-DP)."""
    mechanism = GridLaplace(sensitivity=sensitivity, epsilon=epsilon, coordinates=1)
    return mechanism.release(totals, source), mechanism.variance


def block_totals(part: Partition, weights: np.ndarray) -> np.ndarray:
    """Σ of ``weights`` (per non-zero cell) inside each block (un-noised: straight to `perturb`)."""
    return np.array([weights[idx].sum() for idx in part.members])
