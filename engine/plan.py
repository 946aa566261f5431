"""The typed query plan the SQL front end produces and the cube answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Union

Runs = tuple[tuple[int, int], ...]  # sorted, disjoint, non-adjacent inclusive cell runs on one axis


@dataclass(frozen=True)
class Aggregate:
    func: Literal["sum", "count", "avg"]
    measure: str | None  # None for COUNT(*)
    name: str  # output column name (alias or canonical text)


@dataclass(frozen=True)
class GroupKey:
    """A GROUP BY dimension shown in the output: one value per group (its cell's label)."""

    axis: int
    name: str


Output = Union[Aggregate, GroupKey]


@dataclass(frozen=True)
class OrderKey:
    output: int  # index into QueryPlan.outputs
    descending: bool = False


@dataclass(frozen=True)
class QueryPlan:
    table: str
    outputs: tuple[Output, ...]
    selection: tuple[Runs, ...]  # one entry per cube dimension, in cube order
    group_axes: tuple[int, ...] = ()  # cube axes grouped on, in GROUP BY order
    order_by: tuple[OrderKey, ...] = ()
    limit: int | None = None
    offset: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def columns(self) -> list[str]:
        return [o.name for o in self.outputs]

    @property
    def aggregates(self) -> list[Aggregate]:
        return [o for o in self.outputs if isinstance(o, Aggregate)]
