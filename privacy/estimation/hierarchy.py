"""Per-axis hierarchical measurement matrices and their Kronecker least squares.

A b-ary tree over an axis of n values (Hay, Rastogi, Miklau & Suciu, "Boosting the accuracy of
differentially private histograms through consistency", VLDB 2010) measures every block of every
level: the n leaves, blocks of b, of b², …, up to the whole axis. Its matrix A (rows = blocks) has
exactly L ones in every column, L the number of levels, so it multiplies the L1 sensitivity by L.
Over a cube the strategy is the Kronecker product A_1 ⊗ … ⊗ A_d (HDMM: McKenna, Miklau, Hay &
Machanavajjhala, VLDB 2018, §4), with sensitivity Π L_i times the cuboid's; its least-squares
inverse is A_1⁺ ⊗ … ⊗ A_d⁺ with A⁺ = (AᵀA)⁻¹Aᵀ, applied one axis at a time (never the big matrix),
and the error covariance is σ²·(A_1ᵀA_1)⁻¹ ⊗ … ⊗ (A_dᵀA_d)⁻¹, so a box query's variance is a
product of one term per axis.

Branching per axis is chosen from the domain size alone (public): the b (or plain identity,
``None``) minimising L²·tr(WᵀW (AᵀA)⁻¹), the expected error of a uniformly random range on that
axis (HDMM's objective for a fixed strategy). Because the variance of a box is a product over
axes, minimising each axis' factor minimises the whole. Trees pay off only on long axes: uniform
level budgets beat identity from about 200 values (0.92× variance at 200, 0.67× at 365, 0.41× at
1,000); below that, and above `MAX_TREE_AXIS`, an axis stays identity.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

Branching = int | None  # None: identity (the leaves only)
CANDIDATES: tuple[int, ...] = (2, 3, 4, 8, 16, 32)
# The per-axis matrices are dense (n × n): longer axes stay identity rather than take ~100 MB each
# and seconds of O(n³) search per candidate.
MAX_TREE_AXIS = 2048


def _frozen(a: np.ndarray) -> np.ndarray:
    """Cached arrays are shared: make them read-only so no caller can change them for the next."""
    a.setflags(write=False)
    return a


@functools.lru_cache(maxsize=64)
def tree_matrix(n: int, branching: Branching) -> np.ndarray:
    """Rows: the blocks of every level (leaves first, whole axis last); the identity for ``None``."""
    if branching is None:
        return _frozen(np.eye(n))
    rows, size = [], 1
    while True:
        for start in range(0, n, size):
            row = np.zeros(n)
            row[start : start + size] = 1.0
            rows.append(row)
        if size >= n:
            return _frozen(np.array(rows))
        size *= branching


def levels(n: int, branching: Branching) -> int:
    """Ones per column of `tree_matrix`: how many releases each row of data touches on this axis."""
    return int(tree_matrix(n, branching)[:, 0].sum())


@functools.lru_cache(maxsize=64)
def inverse_gram(n: int, branching: Branching) -> np.ndarray:
    """(AᵀA)⁻¹: the per-axis factor of the error covariance (up to the noise variance)."""
    a = tree_matrix(n, branching)
    return _frozen(np.linalg.inv(a.T @ a))


@functools.lru_cache(maxsize=64)
def inverse_gram_prefix(n: int, branching: Branching) -> np.ndarray:
    """2-D prefix sums of (AᵀA)⁻¹ (zero-padded), so any block of it sums in O(1)."""
    out = np.zeros((n + 1, n + 1))
    out[1:, 1:] = inverse_gram(n, branching).cumsum(0).cumsum(1)
    return _frozen(out)


def all_ranges_gram(n: int) -> np.ndarray:
    """WᵀW for W = every range [i, j] over n values, without forming W: (WᵀW)_kl = #ranges ∋ k, l."""
    k = np.arange(n)
    lo, hi = np.minimum.outer(k, k), np.maximum.outer(k, k)
    return ((lo + 1) * (n - hi)).astype(float)


def range_error(n: int, branching: Branching) -> float:
    """Expected variance of a random range on this axis relative to identity's (same ε)."""
    gram = all_ranges_gram(n)
    return levels(n, branching) ** 2 * float(np.sum(gram * inverse_gram(n, branching))) / float(np.trace(gram))


@functools.lru_cache(maxsize=256)
def choose_branching(n: int) -> Branching:
    """The branching with the lowest `range_error` for an axis of n values (a function of n only)."""
    if n > MAX_TREE_AXIS:
        return None
    options: list[Branching] = [None, *(b for b in CANDIDATES if b < n)]
    return min(options, key=lambda b: range_error(n, b) if b is not None else 1.0)


def apply_per_axis(x: np.ndarray, matrices: Sequence[np.ndarray | None]) -> np.ndarray:
    """x ×_1 M_1 ×_2 … ×_d M_d (mode products; ``None`` leaves an axis as it is)."""
    for axis, m in enumerate(matrices):
        if m is not None:
            x = np.moveaxis(np.tensordot(m, x, axes=([1], [axis])), 0, axis)
    return x


def measure_matrices(shape: Sequence[int], branching: Sequence[Branching]) -> list[np.ndarray | None]:
    return [None if b is None else tree_matrix(n, b) for n, b in zip(shape, branching)]


def least_squares_matrices(shape: Sequence[int], branching: Sequence[Branching]) -> list[np.ndarray | None]:
    """A_i⁺ = (A_iᵀA_i)⁻¹A_iᵀ per axis (A_i has full column rank: the leaves are measured)."""
    return [None if b is None else inverse_gram(n, b) @ tree_matrix(n, b).T for n, b in zip(shape, branching)]
