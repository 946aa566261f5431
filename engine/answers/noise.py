"""Saying when a value is noise: a flag per answer cell, and NULL in its place when asked.

A released value is *noisy* when its 95 % interval reaches further than ``NOISY_FRACTION`` of the
value from it — half its width exceeds half of |value| — so the value is not known to within ±50 %
(for a normal bar: stddev > 0.255·|value|; an interval spanning zero always is), or when it sits at
an end of what is possible (a COUNT clamped to 0, an AVG to its bound). Charts drop the
stddev columns, so a dashboard showed noise as fact (AVG wage by region 1,646 / 1,598 / 27 / 0.0
against a truth near 600). The flag reads released values only (post-processing, no privacy cost).

``noisy`` is a list per row like ``stddev``: True / False per aggregate cell, None for group keys
and cells without a value or interval; a note counts the flagged values (the wire sends it as a
NOTICE). Suppression (REST ``"noisy": "null"``, wire ``SET prima.noisy = null``, or the table's
``answers.noisy``) shows a flagged value as NULL — a chart draws no bar rather than noise — keeping
its stddev and interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

NOISY_FRACTION = 0.5  # a value is noise when its 95 % interval's half-width exceeds this share of |value|
Range = tuple[float, float]


def flags(result: dict[str, Any], ranges: Sequence[Range | None] = ()) -> list[list[bool | None]]:
    """Per row, per column: whether the cell's value is noise (None for group keys and unknowns).
    ``ranges``: per column, where its true value must lie (`assemble.possible_range`), or None."""
    keys = set(result.get("group_columns", []))
    bounds = list(ranges) or [None] * len(result["columns"])
    grouped = [name in keys for name in result["columns"]]
    return [
        [None if key else _noisy(v, ci, r) for key, v, ci, r in zip(grouped, row, cis, bounds)]
        for row, cis in zip(result["rows"], result["ci95"])
    ]


def _noisy(value: Any, interval: Any, possible: Range | None) -> bool | None:
    """Noise: the interval's half-width exceeds `NOISY_FRACTION` of |value|; or the value sits at (or
    beyond) an end of its possible range with an interval of some width — moved there by the clamp
    (an AVG of wages whose noisy SUM put it past its bound showed 20,000, its interval the whole
    range, unflagged), or left outside it raw."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not interval:
        return None
    lo, hi = interval
    if lo is None or hi is None:
        return None
    width = float(hi) - float(lo)
    if possible is not None and width > 0 and not possible[0] < value < possible[1]:
        return True
    return width / 2 > NOISY_FRACTION * abs(float(value))


def flagged(result: dict[str, Any], suppress: bool, ranges: Sequence[Range | None] = ()) -> dict[str, Any]:
    """The answer with its ``noisy`` flags and a note counting the flagged values; with ``suppress``,
    those values NULL (their stddev and interval kept). ``ranges``: as `flags`."""
    marks = flags(result, ranges)
    n = sum(bool(f) for row in marks for f in row)
    if n == 0:
        return result | {"noisy": marks}
    if suppress:
        rows = [[None if f else v for v, f in zip(row, m)] for row, m in zip(result["rows"], marks)]
        note = (
            f"{n} value(s) shown as NULL: their 95 % interval is wider than ±{NOISY_FRACTION:.0%} of the value "
            '(noise); their stddev and ci95 are kept; "noisy": "flag" (REST) or SET prima.noisy = flag shows them'
        )
        return result | {"rows": rows, "noisy": marks, "notes": [*result["notes"], note]}
    total = sum(f is not None for row in marks for f in row)
    note = (
        f"{n} of {total} values are noise (flagged in noisy): their 95 % interval is wider than "
        f'±{NOISY_FRACTION:.0%} of the value; "noisy": "null" (REST) or SET prima.noisy = null shows them as NULL'
    )
    return result | {"noisy": marks, "notes": [*result["notes"], note]}
