"""Error models: the variance of a released selection's error, stated without spending budget.

An answer sums the noisy cells of a selection (a union of boxes given per axis as disjoint cell
runs). For mechanisms with independent noise of equal variance in every cell (``identity``), the
variance of the sum is exactly that variance times the number of selected cells; for least-squares
combinations of marginals (``marginals``) it follows from the marginal lattice (see that module).
Clipping bias is not part of it (see the README): only the noise is.
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


@dataclass(frozen=True)
class MarginalLatticeError:
    """Exact error variance of least-squares answers from base + marginal measurements."""

    shape: tuple[int, ...]
    inverse_lambdas: tuple[tuple[tuple[int, ...], float], ...]  # (T, 1/λ_T) for every subset T
    kind: str = "marginal_lattice"

    def variance(self, selection: Sequence[Sequence[tuple[int, int]]]) -> float:
        counts = [sum(hi - lo + 1 for lo, hi in runs) for runs in selection]
        inside = [L - L * L / n for L, n in zip(counts, self.shape)]
        outside = [L * L / n for L, n in zip(counts, self.shape)]
        total = 0.0
        for axes, inv in self.inverse_lambdas:
            term = inv
            for i in range(len(self.shape)):
                term *= inside[i] if i in axes else outside[i]
            total += term
        return total

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "shape": list(self.shape),
                "inverse_lambdas": [[list(t), v] for t, v in self.inverse_lambdas]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MarginalLatticeError:
        return cls(tuple(data["shape"]), tuple((tuple(t), float(v)) for t, v in data["inverse_lambdas"]))


ErrorModel = UniformCellError | MarginalLatticeError


def from_json(data: dict[str, Any]) -> ErrorModel:
    if data.get("kind") == "uniform_cell":
        return UniformCellError(float(data["cell_variance"]))
    if data.get("kind") == "marginal_lattice":
        return MarginalLatticeError.from_json(data)
    raise ValueError(f"unknown error model {data.get('kind')!r}")
