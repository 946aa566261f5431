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
                    m.axis.kind,
                    m.lo,
                    m.hi,
                    classes=m.axis.classes,
                    edges=m.axis.edges,
                    per_octave=m.axis.per_octave,
                    zero=bool(m.axis.zero),
                )
            except ValueError as exc:
                raise ValueError(f"measure {m.name!r}: {exc}") from None
    return out


def settled(spec: TableSpec) -> TableSpec:
    """``spec`` with the axis defaults a registration records: a linear axis over lo ≤ 0 ≤ hi gets
    its zero class unless it said ``"zero": false`` (or has no room for one more class). Recorded, so a
    stored spec keeps meaning the classes its cubes were built with."""
    measures = []
    for m in spec.measures:
        axis = m.axis
        if axis is not None and axis.kind == "linear" and axis.zero is None:
            room = (axis.classes or 16) + (m.lo < 0 < m.hi) < measure_axis.MAX_CLASSES
            axis = axis.model_copy(update={"zero": m.lo <= 0 <= m.hi and room})
        measures.append(m if axis is m.axis else m.model_copy(update={"axis": axis}))
    return spec.model_copy(update={"measures": measures})
