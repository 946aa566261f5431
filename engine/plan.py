"""The typed query plan the SQL front end produces and the cube answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Runs = tuple[tuple[int, int], ...]  # sorted, disjoint, non-adjacent inclusive cell runs on one axis


@dataclass(frozen=True)
class Aggregate:
    func: Literal["sum", "count", "avg"]
    measure: str | None  # None for COUNT(*)
    name: str  # output column name (alias or canonical text)


@dataclass(frozen=True)
class QueryPlan:
    table: str
    aggregates: tuple[Aggregate, ...]
    selection: tuple[Runs, ...]  # one entry per cube dimension, in cube order
    notes: tuple[str, ...] = field(default=())

    @property
    def columns(self) -> list[str]:
        return [a.name for a in self.aggregates]
