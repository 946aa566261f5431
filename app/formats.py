"""Query results as CSV or Arrow IPC for spreadsheets and BI tools (JSON stays the default).

Both carry the same numbers as the JSON body: one column per output column, and for every
aggregate column ``<name>_stddev`` right after it (group-key columns have no error).
"""

from __future__ import annotations

import csv
import io
from typing import Any

import pyarrow as pa

CSV = "text/csv"
ARROW = "application/vnd.apache.arrow.stream"


def wanted(accept: str | None) -> str | None:
    """CSV or ARROW when the Accept header asks for one of them (and not JSON first), else None."""
    if not accept:
        return None
    for part in accept.split(","):
        kind = part.split(";")[0].strip().lower()
        if kind in (CSV, ARROW):
            return kind
        if kind in ("application/json", "*/*", "application/*"):
            return None
    return None


def _columns(result: dict[str, Any]) -> list[tuple[str, list[Any]]]:
    rows, sds, keys = result["rows"], result["stddev"], set(result.get("group_columns", []))
    out = []
    for j, name in enumerate(result["columns"]):
        out.append((name, [r[j] for r in rows]))
        if name not in keys:
            out.append((f"{name}_stddev", [s[j] for s in sds]))
    return out


def to_csv(result: dict[str, Any]) -> bytes:
    cols = _columns(result)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([name for name, _ in cols])
    for i in range(len(result["rows"])):
        writer.writerow(["" if values[i] is None else values[i] for _, values in cols])
    return buf.getvalue().encode()


def to_arrow(result: dict[str, Any]) -> bytes:
    table = pa.table({name: pa.array(values) for name, values in _columns(result)})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()
