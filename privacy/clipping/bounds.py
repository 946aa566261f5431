"""Contribution bounding: the clipping bounds of each measure and the sensitivities they imply.

Strategy ``fixed`` (the only one so far) clips every value to the measure's declared public bounds
[lo, hi]. The clip itself runs inside the source engine (``storage.sources`` applies
``LEAST(GREATEST(v, lo), hi)`` in SQL) so raw values never reach Python; this module decides the
bounds and states what they imply for the mechanisms.

Sensitivities under add/remove-one-row: a row lands in at most one cell, so
* COUNT cuboid: L1 sensitivity 1;
* SUM cuboid of a measure clipped to [lo, hi]: L1 sensitivity max(|lo|, |hi|) — the most one
  clipped value can add to or remove from a single cell.
"""

from __future__ import annotations

import numpy as np

COUNT_SENSITIVITY = 1.0


def fixed_bounds(lo: float, hi: float) -> tuple[float, float]:
    """The declared bounds, unchanged: no data is read, so no budget is spent."""
    if not lo <= hi:
        raise ValueError("clipping bounds need lo <= hi")
    return float(lo), float(hi)


def sum_sensitivity(lo: float, hi: float) -> float:
    """L1 sensitivity of a SUM cuboid after clipping to [lo, hi] (see module docstring)."""
    return max(abs(lo), abs(hi))


def clip(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """The same clip as the SQL one, for benchmarks and tests over arrays."""
    return np.clip(values, lo, hi)
