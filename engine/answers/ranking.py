"""How settled a ranked answer is: `ORDER BY <aggregate> … LIMIT n` over noisy groups.

A top 5 by noisy count once listed a group whose true count was 28 (answer 834 ± 385), and ranked a
carrier with one of the best records first. When the bars overlap, the order shown is one draw of
the noise. The probability that the n rows shown are the true top n is estimated from the released
values and their stated standard deviations only (post-processing: no data, no budget) — by
simulating each group's value as its estimate plus normal noise of its stddev, with a fixed seed,
so the same answer always carries the same figure.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine.plan import Aggregate, QueryPlan

DRAWS = 2000  # fewer for many groups: at most DRAW_CELLS values simulated per answer
DRAW_CELLS = 2_000_000
SETTLED = 0.95  # below this, the answer carries a note
MAX_GROUPS = 10_000


def ranking(plan: QueryPlan, rows: list[list[Any]], sds: list[list[Any]]) -> dict[str, Any] | None:
    """{"column", "limit", "p_top_n"} for a LIMIT over groups ordered by an aggregate, else None."""
    if plan.limit is None or not plan.order_by or len(rows) > MAX_GROUPS:
        return None
    key = plan.order_by[0]
    out = plan.outputs[key.output]
    n = plan.offset + plan.limit
    if not isinstance(out, Aggregate) or n <= 0 or n >= len(rows):
        return None
    values = np.array([np.nan if r[key.output] is None else r[key.output] for r in rows], dtype=float)
    spread = np.array([0.0 if s[key.output] is None else s[key.output] for s in sds], dtype=float)
    known = ~np.isnan(values)
    if known.sum() <= n or not spread[known].any():
        return None
    sign = -1.0 if key.descending else 1.0
    v, s = sign * values[known], spread[known]
    shown = set(np.argsort(v, kind="stable")[:n].tolist())
    count = max(200, min(DRAWS, DRAW_CELLS // v.size))
    draws = v + s * np.random.default_rng(0).standard_normal((count, v.size))
    tops = np.argpartition(draws, n - 1, axis=1)[:, :n]
    same = np.fromiter((set(t.tolist()) == shown for t in tops), dtype=bool, count=count)
    return {"column": out.name, "limit": n, "p_top_n": round(float(same.mean()), 3)}


def note(facts: dict[str, Any]) -> str | None:
    """The note of an unsettled ranking, or None."""
    if facts["p_top_n"] >= SETTLED:
        return None
    return (
        f"ORDER BY {facts['column']} … LIMIT {facts['limit']}: the error bars do not settle which groups are "
        f"the top {facts['limit']}; the rows shown are the true top {facts['limit']} with probability about "
        f"{facts['p_top_n']:.2f} (estimated from the released values and their bars: `ranking`)"
    )
