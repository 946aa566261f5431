"""Saying when a value is noise: a flag per answer cell, and NULL in its place when asked.

A released value is *noisy* when its 95 % interval reaches further than ``NOISY_FRACTION`` of the
value from it — half its width exceeds half of |value| — so the value is not known to within ±50 %
(for a normal bar: stddev > 0.255·|value|; an interval spanning zero always is). Charts drop the
stddev columns, so a dashboard showed noise as fact (AVG wage by region 1,646 / 1,598 / 27 / 0.0
against a truth near 600). The flag reads released values only (post-processing, no privacy cost).

``noisy`` is a list per row like ``stddev``: True / False per aggregate cell, None for group keys
and cells without a value or interval; a note counts the flagged values (the wire sends it as a
NOTICE). Suppression (REST ``"noisy": "null"``, wire ``SET prima.noisy = null``, or the table's
``answers.noisy``) shows a flagged value as NULL — a chart draws no bar rather than noise — keeping
its stddev and interval.
"""

from __future__ import annotations

from typing import Any

NOISY_FRACTION = 0.5  # a value is noise when its 95 % interval's half-width exceeds this share of |value|


def flags(result: dict[str, Any]) -> list[list[bool | None]]:
    """Per row, per column: whether the cell's value is noise (None for group keys and unknowns)."""
    keys = set(result.get("group_columns", []))
    grouped = [name in keys for name in result["columns"]]
    return [
        [None if key else _noisy(value, interval) for key, value, interval in zip(grouped, row, cis)]
        for row, cis in zip(result["rows"], result["ci95"])
    ]


def _noisy(value: Any, interval: Any) -> bool | None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not interval:
        return None
    lo, hi = interval
    if lo is None or hi is None:
        return None
    return (float(hi) - float(lo)) / 2 > NOISY_FRACTION * abs(float(value))


def flagged(result: dict[str, Any], suppress: bool) -> dict[str, Any]:
    """The answer with its ``noisy`` flags and a note counting the flagged values; with ``suppress``,
    those values NULL (their stddev and interval kept)."""
    marks = flags(result)
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
