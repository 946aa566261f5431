"""Error models: the variance of a released selection's error, stated without spending budget.

An answer sums the noisy cells of a selection (a union of boxes given per axis as disjoint cell
runs). For mechanisms with independent noise of equal variance in every cell (``identity``), the
variance of the sum is exactly that variance times the number of selected cells. Clipping bias
is not part of it (see the README): only the noise is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

Runs = Sequence[tuple[int, int]]  # disjoint inclusive cell runs on one axis


def selected_cells(selection: Sequence[Runs]) -> int:
    return math.prod(sum(hi - lo + 1 for lo, hi in runs) for runs in selection)


@dataclass(frozen=True)
class UniformCellError:
    """Independent noise with the same variance in every base cell (exact for Laplace per cell)."""

    cell_variance: float
    kind: str = "uniform_cell"

    def variance(self, selection: Sequence[Runs]) -> float:
        return self.cell_variance * selected_cells(selection)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "cell_variance": self.cell_variance}


def from_json(data: dict[str, Any]) -> UniformCellError:
    if data.get("kind") == "uniform_cell":
        return UniformCellError(float(data["cell_variance"]))
    raise ValueError(f"unknown error model {data.get('kind')!r}")
