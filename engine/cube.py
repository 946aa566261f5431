"""A built cube in memory: noisy prefix arrays per aggregate, read with the 2^λ-corner identity.

A selection is one list of disjoint cell runs per axis; its total is the prefix array contracted
with one sparse ±1 vector per axis (+1 at r+1, −1 at l for every run [l, r]). For a single box that
is exactly the inclusion–exclusion sum over the 2^λ corners (`privacy.prefix` docstring); for
IN-lists it is the sum over all boxes of the runs' cross product, computed with one gather.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from privacy.error import UniformCellError

Runs = Sequence[tuple[int, int]]


@dataclass
class Cube:
    table: str
    build_id: str
    prefix: dict[str, np.ndarray]  # aggregate key → zero-padded prefix array
    errors: dict[str, UniformCellError]  # aggregate key → error model (None: exact, tests only)
    meta: dict[str, Any] = field(default_factory=dict)

    def total(self, key: str, selection: Sequence[Runs]) -> float:
        """Σ of the (noisy) cells in the selection."""
        if any(len(runs) == 0 for runs in selection):
            return 0.0
        axes = [_corner_weights(runs) for runs in selection]
        block = self.prefix[key][np.ix_(*(idx for idx, _ in axes))]
        for _, weights in axes:
            block = np.tensordot(weights, block, axes=(0, 0))
        return float(block)

    def variance(self, key: str, selection: Sequence[Runs]) -> float | None:
        """Variance of the total's noise, as the mechanism states it (None when exact)."""
        model = self.errors.get(key)
        if model is None:
            return None
        return model.variance(selection)


def _corner_weights(runs: Runs) -> tuple[np.ndarray, np.ndarray]:
    idx = np.empty(2 * len(runs), dtype=np.intp)
    weights = np.empty(2 * len(runs), dtype=np.float64)
    idx[0::2] = [lo for lo, _ in runs]
    idx[1::2] = [hi + 1 for _, hi in runs]
    weights[0::2] = -1.0
    weights[1::2] = 1.0
    return idx, weights
