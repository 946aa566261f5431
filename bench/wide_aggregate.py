"""A wide build's aggregate step: the engine's GROUPING SETS vs bincounts of the non-empty cells.

The shipped 16-column Bank example (`examples/bank.yaml`, 45,211 rows, `cuboids` with one selection
round per dimension, so every candidate triple is read) asks for 682 cuboids, 546 of them maximal.
This times `SourceEngine.marginal_cuboids` both ways on the same registered table (best of 3,
alternated): DuckDB's GROUPING SETS over every maximal cuboid, and the path taken above
`storage.engines.interface.MANY_SETS` maximal cuboids — the base cuboid's non-empty cells grouped once,
every cuboid bincounted from them — and checks that they agree.

Run:     .venv/bin/python bench/wide_aggregate.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    import numpy as np
    import yaml

    from engine.builds import steps
    from engine.service import Prima
    from privacy.estimation.cuboid_fit import Axes
    from storage import sources
    from storage.engines import interface
    from storage.schema import TableSpec
    from tests.test_examples import _csv

    with tempfile.TemporaryDirectory() as tmp:
        raw = yaml.safe_load((REPO / "examples" / "bank.yaml").read_text())
        raw["source"]["csv"] = str(_csv(raw, Path(tmp)))
        prima = Prima(Path(tmp) / "data", seed=1)
        prima.register(TableSpec.model_validate(raw))
        record = prima.record("bank")
        spec = record.spec
        cuboids: list[tuple[int, ...]] = list(steps.table_strategy(spec).inputs(spec.shape))  # type: ignore[attr-defined]
        bounds = {m.name: (float(m.lo), float(m.hi)) for m in spec.measures}
        maximal = interface._maximal(cuboids)

        def read(threshold: int) -> tuple[float, dict[str, dict[Axes, np.ndarray]]]:
            interface.MANY_SETS = threshold
            start = time.perf_counter()
            out = sources.marginal_cuboids(prima.db, spec.source, record.source_table, spec, bounds, cuboids)
            return time.perf_counter() - start, out

        times: dict[str, list[float]] = {"grouping sets": [], "cells": []}
        for _ in range(3):
            took, grouped = read(10**9)
            times["grouping sets"].append(took)
            took, cells = read(0)
            times["cells"].append(took)
        same = all(np.allclose(cells[k][s], grouped[k][s], rtol=1e-12, atol=1e-9) for k in grouped for s in grouped[k])
        prima.close()
    a, b = min(times["grouping sets"]), min(times["cells"])
    print(f"Bank: {len(cuboids)} cuboids, {len(maximal)} maximal; same values: {same}")
    print(f"  GROUPING SETS {a:.3f} s   cells + bincount {b:.3f} s   ratio {b / a:.2f}×")
    print("Reproduce: .venv/bin/python bench/wide_aggregate.py")


if __name__ == "__main__":
    main()
