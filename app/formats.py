"""Query results as CSV or Arrow IPC for spreadsheets and BI tools (JSON stays the default).

Both carry the same numbers as the JSON body: one column per output column, and for every
aggregate column ``<name>_stddev``, ``<name>_ci95_lo``, ``<name>_ci95_hi`` and ``<name>_noisy``
right after it (group-key columns have no error; the interval is the JSON's ``ci95``, which is not
always value ± 1.96·stddev: clamped, truncated and Laplace-shaped answers have their own; ``noisy``
is the JSON's flag, `engine.answers.noise`). They carry
its words too: ``notes`` (why a value is withheld or clamped, what a bar leaves out) and the cube's
facts (strategy, ε, clipping bounds) — in Arrow as schema metadata (``prima.notes``,
``prima.cube``, ``prima.table``, JSON text); in CSV as a last column ``notes`` (every note, joined
by " | ", in the first row; empty below — plain CSV that every reader and spreadsheet takes), and
for both as response headers ``X-Prima-Notes`` / ``X-Prima-Cube`` (JSON, ASCII-escaped).
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

CSV = "text/csv"
NOTES_COLUMN = "notes"  # the CSV's last column: every note of the answer, in its first row
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


def _columns(result: dict[str, Any]) -> list[tuple[str, list[Any], str | None]]:
    """(name, values, "bool" or None to infer the type) of every column the file carries."""
    rows, sds, keys = result["rows"], result["stddev"], set(result.get("group_columns", []))
    blank = [[None] * len(result["columns"]) for _ in rows]
    cis, flags = result.get("ci95") or blank, result.get("noisy") or blank
    out: list[tuple[str, list[Any], str | None]] = []
    for j, name in enumerate(result["columns"]):
        out.append((name, [r[j] for r in rows], None))
        if name not in keys:
            out.append((f"{name}_stddev", [s[j] for s in sds], None))
            out.append((f"{name}_ci95_lo", [None if c[j] is None else c[j][0] for c in cis], None))
            out.append((f"{name}_ci95_hi", [None if c[j] is None else c[j][1] for c in cis], None))
            out.append((f"{name}_noisy", [f[j] for f in flags], "bool"))
    return out


def to_csv(result: dict[str, Any]) -> bytes:
    cols = [(name, values) for name, values, _ in _columns(result)]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([name for name, _ in cols] + [NOTES_COLUMN])
    notes = " | ".join(" ".join(str(n).split()) for n in result.get("notes", []))
    for i in range(len(result["rows"])):
        writer.writerow(["" if values[i] is None else values[i] for _, values in cols] + [notes if i == 0 else ""])
    if not result["rows"] and notes:
        writer.writerow([""] * len(cols) + [notes])
    return buf.getvalue().encode()


def headers(result: dict[str, Any]) -> dict[str, str]:
    """Notes and cube facts as HTTP headers (ASCII JSON), for CSV and Arrow answers alike."""
    return {
        "X-Prima-Notes": json.dumps(result.get("notes", [])),
        "X-Prima-Cube": json.dumps(result.get("cube", {}), sort_keys=True),
    }


def metadata(result: dict[str, Any]) -> dict[str, str]:
    """The words of an answer, as Arrow schema metadata."""
    return {
        "prima.notes": json.dumps(result.get("notes", []), ensure_ascii=False),
        "prima.cube": json.dumps(result.get("cube", {}), ensure_ascii=False, sort_keys=True),
        "prima.table": str(result.get("table", "")),
    }


def to_arrow(result: dict[str, Any]) -> bytes:
    import pyarrow as pa  # (not at the top: ~0.2 s of every server's start-up, for Arrow answers only)

    kinds = {"bool": pa.bool_()}
    table = pa.table({name: pa.array(values, type=kinds.get(kind or "")) for name, values, kind in _columns(result)})
    table = table.replace_schema_metadata(metadata(result))
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()
