"""Prefix sums of a (noisy) cuboid: SPEC §2 step 5, the cube the 2^λ-corner identity reads.

P has one extra leading zero slice on every axis, so for cell ranges [l_i, r_i] (inclusive)
    Σ_{x ∈ box} C[x] = Σ_{s ∈ {0,1}^λ} (−1)^{λ−|s|} P[c(s)],  c_i = r_i + 1 if s_i else l_i
(the inclusion–exclusion identity of prefix-sum cubes, Ho et al. 1997, used by PRIMA §3).
Pure post-processing of released values: no privacy cost.
"""

from __future__ import annotations

import numpy as np


def prefix_sums(cuboid: np.ndarray) -> np.ndarray:
    """Zero-padded cumulative sums along every axis (float64)."""
    padded = np.zeros(tuple(n + 1 for n in cuboid.shape), dtype=np.float64)
    padded[tuple(slice(1, None) for _ in cuboid.shape)] = cuboid
    for axis in range(cuboid.ndim):
        np.cumsum(padded, axis=axis, out=padded)
    return padded
