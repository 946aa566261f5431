"""Budget rules: how one build's ε is split between the cube's aggregates (sequential composition).

A cube releases one COUNT cuboid and one SUM cuboid per measure, each computed on the same rows,
so their ε's add up (SPEC §1). Weights are relative; the default gives every aggregate an equal
share. The split is data-independent: it depends only on the declared configuration.
"""

from __future__ import annotations

import math


def split(epsilon: float, keys: list[str], weights: dict[str, float] | None = None) -> dict[str, float]:
    """ε per aggregate key, proportional to ``weights`` (missing keys weigh 1); sums to ``epsilon``."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError("epsilon must be positive and finite")
    weights = weights or {}
    unknown = set(weights) - set(keys)
    if unknown:
        raise ValueError(f"weights name unknown aggregates {sorted(unknown)}; known: {keys}")
    w = {k: float(weights.get(k, 1.0)) for k in keys}
    if any(not (v > 0 and math.isfinite(v)) for v in w.values()):
        raise ValueError("weights must be positive and finite")
    total = sum(w.values())
    shares = {k: epsilon * v / total for k, v in w.items()}
    # Put the float remainder on the last share so the parts add up to ε exactly as recorded.
    last = keys[-1]
    shares[last] = epsilon - sum(v for k, v in shares.items() if k != last)
    return shares
