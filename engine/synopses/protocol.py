"""The interface every in-memory synopsis implements, and what the non-dense ones share.

An answer (`engine.answers.assemble`) reads a synopsis only through `Synopsis`: totals and their
noise variances over a selection (one list of disjoint cell runs per axis), per group or not, and the
notes its error models attach. `engine.synopses.cube.Cube` (a dense prefix cube),
`engine.synopses.wide.WideCube` (measured cuboids), `engine.synopses.pview.PViewCube` (HDPView
blocks) and `engine.builds.growing.GrowingCube` (releases over periods) implement it; a test checks
each against it (tests/test_synopses.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from privacy.estimation.prefix import Runs

REMEMBERED_ANSWERS = 16_384  # answers memoized per synopsis before the memo starts over
REMEMBERED_ROWS = 1_000  # answers with more rows are not memoized


@runtime_checkable
class Synopsis(Protocol):
    """What answers read from a released synopsis (all of it public: noisy values and their errors)."""

    table: str
    build_id: str
    meta: dict[str, Any]  # the build's record (strategy, ε, clipping, error models' JSON)
    public: dict[str, Any]  # the build's public facts (cube status)
    answer_meta: dict[str, Any]  # the part every answer carries
    answers: dict[Any, bytes]  # plan → its answer as JSON

    def remember(self, plan: Any, result: Mapping[str, Any], encoded: bytes) -> None: ...

    def total(self, key: str, selection: Sequence[Runs]) -> float: ...

    def variance(self, key: str, selection: Sequence[Runs]) -> float | None: ...

    def grouped_totals(self, key: str, selection: Sequence[Runs], group_axes: Sequence[int]) -> np.ndarray: ...

    def grouped_variances(
        self, key: str, selection: Sequence[Runs], group_axes: Sequence[int]
    ) -> np.ndarray | None: ...

    def class_variance(self, key: str, selection: Sequence[Runs], normalised: bool = False) -> float | None: ...

    def error_notes(
        self,
        selection: Sequence[Runs],
        group_axes: Sequence[int] = (),
        reads: Sequence[tuple[str, Sequence[Runs]]] = (),
    ) -> list[str]: ...


def remember(answers: dict[Any, bytes], plan: Any, result: Mapping[str, Any], encoded: bytes) -> None:
    """Memoize a small answer as JSON (bounded; GROUP BY results over `REMEMBERED_ROWS` rows are not
    kept). Bytes, not dicts: the garbage collector never scans them, and a long-lived dict of answers
    made each full collection cost tens of ms (bench/distinct_queries.py)."""
    if len(result["rows"]) > REMEMBERED_ROWS:
        return
    if len(answers) >= REMEMBERED_ANSWERS:
        answers.clear()
    answers[plan] = encoded


@dataclass
class SynopsisBase:
    """What the non-dense synopses carry besides their releases: identity, public facts, memoized answers."""

    table: str
    build_id: str
    shape: tuple[int, ...]
    meta: dict[str, Any] = field(default_factory=dict)
    public: dict[str, Any] = field(default_factory=dict)
    answer_meta: dict[str, Any] = field(default_factory=dict)
    answers: dict[Any, bytes] = field(default_factory=dict, repr=False)

    def remember(self, plan: Any, result: Mapping[str, Any], encoded: bytes) -> None:
        remember(self.answers, plan, result, encoded)
