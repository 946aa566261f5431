"""What the build-outcome and registration tests share: a small table of persons with a privacy
unit, written as CSV (with or without one neighbour's extra row), its spec, and a TestClient on an
empty data dir."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from tests.conftest import ADMIN_TOKEN

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
BOUND = 1e13  # with ~50 rows, |bound| × rows stays inside 2^53 (the registration's refusal beyond)


def table_rows() -> list[list[Any]]:
    """Twenty persons with one to four events each; amounts are ordinary numbers."""
    return [
        [pid, ["a", "b", "c"][(pid + e) % 3], 1 + (pid * 7 + e) % 9, 10.5 * (pid + e)]
        for pid in range(20)
        for e in range(1 + pid % 4)
    ]


def write_table(path: Path, extra: str | None, tag: int = 0) -> Path:
    """The base rows (plus, for ``tag``, one row outside every domain: files of different bytes, so
    each pair of neighbours has a budget of its own), and the neighbour's extra row."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["pid", "kind", "score", "amount"])
        w.writerows(table_rows())
        if tag:
            w.writerow([1000 + tag, "zz", 99, 1])
        if extra is not None:  # the neighbour: one more row, of person 3, holding the extreme value
            w.writerow([3, "a", 2, extra])
    return path


def unit_spec(name: str, source: dict[str, Any], max_rows: int | str) -> dict[str, Any]:
    return {
        "name": name,
        "source": source,
        "epsilon": 1.0,
        "dimensions": [
            {"name": "kind", "type": "category", "values": ["a", "b", "c"]},
            {"name": "score", "type": "int", "lo": 1, "hi": 9},
        ],
        "measures": [{"name": "amount", "lo": -BOUND, "hi": BOUND}],
        "privacy_unit": {"column": "pid", "max_rows": max_rows},
        "cube": {"strategy": "identity", "build": "on_first_query"},
    }
