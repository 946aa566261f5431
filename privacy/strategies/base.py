"""The interface every measurement strategy implements."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from privacy.error import ErrorModel
from privacy.sampler import RandomSource


@dataclass(frozen=True)
class Measurement:
    """A noisy estimate of one base cuboid, with what it cost and how wrong it may be."""

    noisy: np.ndarray
    error: ErrorModel
    epsilon: float
    sensitivity: float
    noise_scale: float
    prefix: np.ndarray | None = None  # a strategy's own prefix cube (SCOPE); None: prefix sums of `noisy`
    details: dict[str, Any] = field(default_factory=dict)  # public facts derived from the noisy release


@dataclass(frozen=True)
class NonzeroCells:
    """One aggregate's non-empty base cells: coordinates (m, d) and values (m,) (the "cells" input)."""

    shape: tuple[int, ...]
    coords: np.ndarray
    values: np.ndarray


class MeasurementStrategy(ABC):
    """A way to release a table's aggregates. Besides `measure`, a strategy states what the build
    feeds it and what serves its release, so that a new one plugs in with one registry line
    (`privacy.strategies.STRATEGIES`) and nothing in the engine (issue #33):

    * ``reads`` — the true aggregates it measures, per aggregate: ``"base"`` (the dense base cuboid
      over the table's shape, plus a measure's class axis), ``"cuboids"`` (the cuboids
      `cuboids(shape)` names, as a dict) or ``"cells"`` (the base cuboid's non-empty cells,
      `NonzeroCells`);
    * ``synopsis`` — what answers from its releases: ``"dense"`` (prefix sums of a dense array and
      an error model), or a release with its own ``arrays()`` served by ``"cuboids"``
      (measured cuboids and tree models) or ``"blocks"`` (HDPView's p-view);
    * `ledger_parts` — the ledger entries one aggregate's ε share is charged as;
    * ``axis_refusal`` / ``signed_axis_needs_counts`` — whether it releases a measure's class axis.
    """

    name: ClassVar[str]
    reads: ClassVar[str] = "base"
    synopsis: ClassVar[str] = "dense"
    axis_refusal: ClassVar[str | None] = None  # why a measure's class axis cannot be released (None: it can)
    signed_axis_needs_counts: ClassVar[bool] = False  # model answers shift class sums by the counts per class

    def ledger_parts(self, what: str, epsilon: float) -> list[tuple[float, str]]:
        """(ε, purpose) entries for the release of aggregate ``what`` (e.g. "SUM(salary)")."""
        return [(epsilon, f"cube measurement ({self.name}): {what}")]

    def stored_bytes_per_cell(self, shape: tuple[int, ...]) -> int:
        """Bytes a built cube keeps per prefix cell and aggregate (the float64 prefix array, plus
        whatever the error model persists): what the cube-size limit is checked against."""
        return 8

    def stored_bytes(self, shape: tuple[int, ...], aggregates: int) -> int:
        """Bytes a build of this shape stores for ``aggregates`` aggregates (the size-limit check)."""
        return math.prod(n + 1 for n in shape) * aggregates * self.stored_bytes_per_cell(shape)

    def expected_error(self, shape: tuple[int, ...], sensitivity: float, epsilon: float, *,
                       nonnegative: bool = False, coordinates: int = 1) -> ErrorModel:
        """The error model of the noise a build of this shape would have — from public facts only
        (registration previews). Exact for linear strategies; for model-based ones, the part the
        measured marginals determine (queries on ≤ 2 dimensions)."""
        raise NotImplementedError(f"{self.name} has no error preview")

    @abstractmethod
    def measure(
        self, true: np.ndarray, sensitivity: float, epsilon: float, source: RandomSource, *, nonnegative: bool = False,
        coordinates: int = 1,
    ) -> Measurement:
        """ε-DP release of ``true`` whose L1 sensitivity (add/remove one unit of privacy) is ``sensitivity``.

        ``coordinates``: how many cells of each measured cuboid one neighbour can move — 1 for a row
        (it lands in one cell), k for a privacy unit of at most k rows (issue #20); the sampler's
        grid accounting needs it (`privacy.sampler.GridLaplace`).

        ``nonnegative`` is public knowledge (a COUNT, or a SUM whose clip range is ≥ 0) that
        post-processing may use; it never comes from the data.
        """
