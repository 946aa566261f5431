"""Mapping WHERE literals onto cube cells through the declared domains.

Every dimension is viewed as an ordered space of integer *ordinals*: the integer value for ``int``
dimensions, the day number for ``date`` dimensions, the position in the list for ``category``.
A condition becomes a set of inclusive ordinal intervals; the intervals of all conditions on one
dimension are intersected (NOT / <> take the complement), then mapped to cell runs. A bin (an
``int`` bin wider than 1, or a month/year of a date) only partly covered by an interval is
answered between the bins wholly inside it and the covering bins (`engine.answers.misaligned`).
Dimensions that keep outside rows extend the ordinals past the declared domain
(`NEG`, `POS`, `NULL` below): a range reaches the below/above cells as SQL's ranges reach those
values, NOT and <> take their complement within the non-NULL values, and only IS NULL selects
the NULL cell. The ``column`` argument
names the condition in error messages (its ``str()``, built only when an error is raised).
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
import re
from collections.abc import Sequence
from typing import Any

from engine.errors import QueryError
from engine.plan import Runs
from storage.schema import CategoryDimension, DateDimension, IntDimension

Intervals = list[tuple[int, int]]
IntervalsIn = Sequence[tuple[int, int]]  # what the functions below accept: a list or a bound condition's tuple
Dim = IntDimension | CategoryDimension | DateDimension


# Ordinals past the declared domain, for dimensions that keep outside rows: every value
# below a number's or date's lo is in the bin [NEG, lo − 1], above hi in [hi + 1, POS]; a category's
# undeclared values are the bin [size, POS] (an undeclared literal is ordinal size + 1 — inside that
# bin, never all of it); NULL is its own ordinal past POS, reached only by IS NULL.
NEG, POS = -(2**62), 2**62
NULL = POS + 1


def full(dim: Dim) -> Intervals:
    """Every ordinal a condition can select on this dimension (NULL included, for IS NULL)."""
    return [ordinal_bounds(dim)] + ([(NULL, NULL)] if dim.outside == "keep" else [])


def declared_bounds(dim: Dim) -> tuple[int, int]:
    """The first and last ordinal of the declared domain."""
    if isinstance(dim, IntDimension):
        return dim.lo, dim.hi
    if isinstance(dim, DateDimension):
        return dim.lo.toordinal(), dim.hi.toordinal()
    return 0, dim.size - 1


def ordinal_bounds(dim: Dim) -> tuple[int, int]:
    """The ordinals non-NULL values can have: the declared domain, or past it where the dimension
    keeps outside rows."""
    lo, hi = declared_bounds(dim)
    if dim.outside == "exclude":
        return lo, hi
    return (lo if isinstance(dim, CategoryDimension) else NEG), POS


def _outside_bins(dim: Dim) -> list[tuple[int, int, int]]:
    """(first ordinal, last ordinal, cell) of each outside cell the dimension keeps."""
    if dim.outside == "exclude":
        return []
    lo, hi = declared_bounds(dim)
    null = (NULL, NULL, dim.kept_cell("null"))
    if isinstance(dim, CategoryDimension):
        return [(hi + 1, POS, dim.kept_cell("other")), null]
    return [(NEG, lo - 1, dim.kept_cell("below")), (hi + 1, POS, dim.kept_cell("above")), null]


def intersect(a: IntervalsIn, b: IntervalsIn) -> Intervals:
    out = []
    for lo1, hi1 in a:
        for lo2, hi2 in b:
            lo, hi = max(lo1, lo2), min(hi1, hi2)
            if lo <= hi:
                out.append((lo, hi))
    return normalize(out)


def complement(a: IntervalsIn, dim: Dim) -> Intervals:
    lo, hi = ordinal_bounds(dim)
    out, cursor = [], lo
    for x, y in normalize(a):
        if x > cursor:
            out.append((cursor, min(x - 1, hi)))
        cursor = max(cursor, y + 1)
    if cursor <= hi:
        out.append((cursor, hi))
    return intersect(out, full(dim))


def normalize(a: IntervalsIn) -> Intervals:
    """Sort and merge overlapping or adjacent intervals."""
    out: Intervals = []
    for lo, hi in sorted(a):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def point(dim: Dim, value: Any, column: object) -> Intervals:
    """The ordinals equal to ``value`` (empty when no domain value equals it)."""
    if isinstance(dim, CategoryDimension):
        i = dim.index(value)
        if i is None:  # among the other values when they are kept (a part of that cell), else nothing
            return [(dim.size + 1, dim.size + 1)] if dim.outside == "keep" else []
        return [(i, i)]
    if isinstance(dim, IntDimension):
        v = _number(dim, value, column)
        return [(int(v), int(v))] if float(v).is_integer() else []
    lo, hi = _date_span(dim, value, column)
    return [(lo, hi)]


def like(
    dim: Dim, pattern: str, escape: str | None, fold_case: bool, negated: bool, column: object
) -> tuple[Intervals, bool]:
    """`LIKE` / `ILIKE` (and NOT) on a category, matched against the declared (public) values; and
    whether values outside the list may match too — their rows are in the other cell, which the
    condition then cuts (an answer between the declared matches and those plus the other values)."""
    if not isinstance(dim, CategoryDimension):
        raise QueryError(
            f"{column}: LIKE works on category dimensions; {dim.name!r} is a "
            f"{'date' if isinstance(dim, DateDimension) else 'number'} range (compare with a range)"
        )
    regex = _like_regex(pattern, escape, fold_case)
    out = [(i, i) for i, v in enumerate(dim.values) if (regex.fullmatch(v) is not None) != negated]
    exact = not negated and not any(c in pattern for c in "%_") and any(v == pattern for v in dim.values)
    everything = negated and pattern.strip("%") == "" and pattern != ""  # NOT LIKE '%': nothing
    others = dim.outside == "keep" and not exact and not everything
    if others:
        out.append((dim.size + 1, dim.size + 1))
    return normalize(out), others


def _like_regex(pattern: str, escape: str | None, fold_case: bool) -> re.Pattern[str]:
    """SQL's LIKE pattern as a regular expression: % any run, _ one character, ``escape`` quotes."""
    parts, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if escape and c == escape and i + 1 < len(pattern):
            parts.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        parts.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.compile("".join(parts), re.DOTALL | (re.IGNORECASE if fold_case else 0))


def no_match_note(dim: Dim, value: Any) -> str:
    """Why an equality matched no cell, from the declared (public) domain: a near-miss category
    ("did you mean"), the list of a short domain, or a non-integer for an int dimension. The
    analyst's literal itself is not echoed (answers and logs never carry SQL literals)."""
    if isinstance(dim, CategoryDimension):
        text = str(value)
        near = [v for v in dim.values if v.lower() == text.strip().lower()]
        if not near:
            near = difflib.get_close_matches(text, dim.values, n=1, cutoff=0.75)
        hint = (
            f"; did you mean {near[0]!r}?"
            if near
            else (
                f"; its values are {dim.values}" if len(dim.values) <= 12 else f" ({len(dim.values)} declared values)"
            )
        )
        if dim.outside == "keep":
            return (
                f"a value compared with {dim.name!r} is not one of its declared values: rows holding it are "
                f"among its other values, so the answer lies between 0 and theirs{hint}"
            )
        return f"a value compared with {dim.name!r} is not one of its declared values, so it matches no row{hint}"
    if isinstance(dim, IntDimension):
        return f"a value compared with {dim.name!r} is not a whole number ({dim.name!r} holds whole numbers only), so it matches no row"
    return f"a value compared with {dim.name!r} is outside its declared range, so it matches no row"


def lower(dim: Dim, value: Any, strict: bool, column: object) -> Intervals:
    """Ordinals ≥ value (> value when ``strict``). A category's order is its declared list's, so
    its undeclared values are in no range."""
    top = (declared_bounds if isinstance(dim, CategoryDimension) else ordinal_bounds)(dim)[1]
    if isinstance(dim, IntDimension):
        v = _number(dim, value, column)
        start = math.floor(v) + 1 if strict else math.ceil(v)
    elif isinstance(dim, DateDimension):
        lo, hi = _date_span(dim, value, column)
        start = hi + 1 if strict else lo
    else:
        start = _category_position(dim, value, column) + (1 if strict else 0)
    return [(start, top)] if start <= top else []


def upper(dim: Dim, value: Any, strict: bool, column: object) -> Intervals:
    """Ordinals ≤ value (< value when ``strict``)."""
    bottom = ordinal_bounds(dim)[0]
    if isinstance(dim, IntDimension):
        v = _number(dim, value, column)
        end = math.ceil(v) - 1 if strict else math.floor(v)
    elif isinstance(dim, DateDimension):
        lo, hi = _date_span(dim, value, column)
        end = lo - 1 if strict else hi
    else:
        end = _category_position(dim, value, column) - (1 if strict else 0)
    return [(bottom, end)] if end >= bottom else []


def to_cell_runs(dim: Dim, intervals: IntervalsIn) -> tuple[Runs, bool]:
    """Cell runs covering the intervals, and whether every interval was exactly bin-aligned."""
    runs, aligned = [], True
    d_lo, d_hi = declared_bounds(dim)
    for lo, hi in normalize(intervals):
        for b_lo, b_hi, cell in _outside_bins(dim):
            a, b = max(lo, b_lo), min(hi, b_hi)
            if a <= b:
                runs.append((cell, cell))
                aligned &= (a, b) == (b_lo, b_hi)
        lo, hi = max(lo, d_lo), min(hi, d_hi)
        if lo > hi:
            continue
        c_lo, c_hi = _cell(dim, lo), _cell(dim, hi)
        aligned &= _cell_start(dim, c_lo) == lo and _cell_end(dim, c_hi) == hi
        runs.append((c_lo, c_hi))
    return tuple(normalize(runs)), aligned


def inner_cell_runs(dim: Dim, intervals: IntervalsIn) -> Runs:
    """The cells wholly inside the intervals (`to_cell_runs` covers them; these are the cells a
    misaligned condition surely keeps)."""
    runs = []
    d_lo, d_hi = declared_bounds(dim)
    for lo, hi in normalize(intervals):
        runs += [(cell, cell) for b_lo, b_hi, cell in _outside_bins(dim) if lo <= b_lo and b_hi <= hi]
        lo, hi = max(lo, d_lo), min(hi, d_hi)
        if lo > hi:
            continue
        c_lo, c_hi = _cell(dim, lo), _cell(dim, hi)
        c_lo += _cell_start(dim, c_lo) != lo
        c_hi -= _cell_end(dim, c_hi) != hi
        if c_lo <= c_hi:
            runs.append((c_lo, c_hi))
    return tuple(normalize(runs))


def ordinals(dim: Dim, runs: Runs) -> int:
    """How many declared ordinals (values, days) the cell runs stand for (outside cells: none)."""
    clipped = [(a, min(b, dim.size - 1)) for a, b in runs if a < dim.size]
    return sum(_cell_end(dim, b) - _cell_start(dim, a) + 1 for a, b in clipped)


def declared_ordinals(dim: Dim, intervals: IntervalsIn) -> int:
    """How many declared ordinals the intervals hold."""
    return sum(hi - lo + 1 for lo, hi in intersect(intervals, [declared_bounds(dim)]))


def _cell(dim: Dim, ordinal: int) -> int:
    if isinstance(dim, IntDimension):
        return (ordinal - dim.lo) // dim.bin
    if isinstance(dim, DateDimension):
        return dim.cell_of(dt.date.fromordinal(ordinal))
    return ordinal


def _cell_start(dim: Dim, cell: int) -> int:
    if isinstance(dim, IntDimension):
        return max(dim.lo + cell * dim.bin, dim.lo)
    if isinstance(dim, DateDimension):
        return max(_cell_date(dim, cell).toordinal(), dim.lo.toordinal())
    return cell


def _cell_end(dim: Dim, cell: int) -> int:
    if isinstance(dim, IntDimension):
        return min(dim.lo + (cell + 1) * dim.bin - 1, dim.hi)
    if isinstance(dim, DateDimension):
        return min(_period_end(dim, _cell_date(dim, cell)).toordinal(), dim.hi.toordinal())
    return cell


def _cell_date(dim: DateDimension, cell: int) -> dt.date:
    if dim.granularity == "day":
        return dt.date.fromordinal(dim.lo.toordinal() + cell)
    if dim.granularity == "month":
        k = dim.lo.year * 12 + dim.lo.month - 1 + cell
        return dt.date(k // 12, k % 12 + 1, 1)
    return dt.date(dim.lo.year + cell, 1, 1)


def _period_end(dim: DateDimension, d: dt.date) -> dt.date:
    if dim.granularity == "day":
        return d
    if dim.granularity == "month":
        return _month_end(d)
    return dt.date(d.year, 12, 31)


def _number(dim: IntDimension, value: Any, column: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise QueryError(f"{column}: dimension {dim.name!r} is an integer range; {_show(value)} is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise QueryError(f"{column}: {_show(value)} is not a finite number")
    return value


# A date with a time-zone offset after it: PostgreSQL's date input reads the date and ignores the zone.
_ZONED_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})\s*(?:[+-]\d{1,2}(?::?\d{2})?|Z|UTC)", re.I)


def _date_span(dim: DateDimension, value: Any, column: object) -> tuple[int, int]:
    """The day ordinals a date literal denotes: a day, or a whole 'YYYY-MM' month / 'YYYY' year."""
    if isinstance(value, dt.date):
        return value.toordinal(), value.toordinal()
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    try:
        if text is not None and len(text) == 4 and text.isdigit():
            return dt.date(int(text), 1, 1).toordinal(), dt.date(int(text), 12, 31).toordinal()
        if text is not None and len(text) == 7 and text[4] == "-":
            first = dt.date(int(text[:4]), int(text[5:]), 1)
            return first.toordinal(), _month_end(first).toordinal()
        if text is not None:
            zoned = _ZONED_DATE.fullmatch(text.strip())  # pgjdbc's setDate: '2021-01-01 +00'
            d = dt.date.fromisoformat(zoned.group(1) if zoned else text)
            return d.toordinal(), d.toordinal()
    except ValueError:
        pass
    raise QueryError(
        f"{column}: dimension {dim.name!r} is a date range; {_show(value)} is not a date "
        "('YYYY-MM-DD', 'YYYY-MM' or 'YYYY')"
    )


def _month_end(d: dt.date) -> dt.date:
    return dt.date(d.year + d.month // 12, d.month % 12 + 1, 1) - dt.timedelta(days=1)


def _category_position(dim: CategoryDimension, value: Any, column: object) -> int:
    i = dim.index(value)
    if i is None:
        raise QueryError(
            f"{column}: {_show(value)} is not a declared value of {dim.name!r}, so it has no "
            "position in the ordered categories"
        )
    return i


def _show(value: Any) -> str:
    """A literal from the query, echoed back (it is the analyst's own text, not data)."""
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."
