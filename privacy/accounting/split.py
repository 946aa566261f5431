"""Budget rules: how one build's ε is split between the cube's aggregates (sequential composition).

A cube releases one COUNT cuboid and one SUM cuboid per measure, each computed on the same rows,
so their ε's add up. Weights are relative. Without weights, COUNT gets
`DEFAULT_COUNT_SHARE` and the SUMs share the rest equally (why: below). The split is
data-independent: it depends only on the declared configuration.
"""

from __future__ import annotations

import math

# COUNT's share of the aggregates' ε when a table declares no "weights". bench/weights.py measures
# SUM-and-AVG dashboards (median relative error of SUM and of AVG = SUM/COUNT on random boxes, results
# in bench/results/weights.md): SUM 80% / COUNT 20% had the lowest mean score over the Normal,
# income-like and Adult tables (0.75× the equal split's) and stayed within 12% of every table's own
# best split. Why SUM wants more: at equal ε a clipped SUM's relative noise is hi/mean times COUNT's,
# and AVG's error is dominated by whichever is larger. The same share serves a ρ budget (the split is
# of ρ then): a Gaussian release's sd goes as 1/√share, not 1/share, which flattens the curve without
# moving its minimum — `bench/weights.py --rho 0.015` (bench/results/weights_rho.md) scores SUM 80 %
# 0.844× the equal split and 90 % 0.843×, within 6 % of each table's own best.
DEFAULT_COUNT_SHARE = 0.2


# The present counts' share (COUNT(m) of nullable measures, SQL's AVG denominator), split
# between them, taken from the SUMs' part: a present count only divides, and at an AVG's usual
# group sizes the SUM's noise dominates the ratio's (docs/privacy-model.md "NULL measures").
DEFAULT_PRESENT_SHARE = 0.1


def default_weights(keys: list[str], count_key: str, present: list[str] | None = None) -> dict[str, float]:
    """Weights giving ``count_key`` `DEFAULT_COUNT_SHARE`, the ``present`` keys together
    `DEFAULT_PRESENT_SHARE`, and every other key an equal part of the rest."""
    present = [k for k in present or [] if k in keys]
    sums = [k for k in keys if k != count_key and k not in present]
    if count_key not in keys or not sums:
        return {}
    rest = 1.0 - DEFAULT_COUNT_SHARE - (DEFAULT_PRESENT_SHARE if present else 0.0)
    per_sum = rest / len(sums)
    return (
        {count_key: DEFAULT_COUNT_SHARE / per_sum}
        | {k: 1.0 for k in sums}
        | {k: DEFAULT_PRESENT_SHARE / len(present) / per_sum for k in present}
    )


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
