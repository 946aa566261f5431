"""A table's measure axes: the magnitude classes of every measure declared with an ``axis``.

Read by the builds (the class axis a SUM is released over) and by the SQL binder (conditions on a
measure select classes), so it lives apart from both (public bounds only).
"""

from __future__ import annotations

from privacy.clipping import measure_axis
from privacy.clipping.measure_axis import MeasureClasses
from storage.schema import TableSpec


def measure_classes(spec: TableSpec) -> dict[str, MeasureClasses]:
    """The classes of every measure declared with an axis (public bounds only); ValueError if invalid."""
    out = {}
    for m in spec.measures:
        if m.axis is not None:
            try:
                out[m.name] = measure_axis.classes_of(
                    m.axis.kind, m.lo, m.hi, classes=m.axis.classes, edges=m.axis.edges, per_octave=m.axis.per_octave
                )
            except ValueError as exc:
                raise ValueError(f"measure {m.name!r}: {exc}") from None
    return out
