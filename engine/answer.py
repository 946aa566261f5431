"""The answer the engine hands every face (REST, the wire, CSV, Arrow, the CLI, the console).

Typed fields for what every answer has; ``facts`` for what only some carry (``ranking`` under an
``ORDER BY … LIMIT``, ``truncation`` of a class-axis SUM, ``groups_truncated``, a growing table's
``growth``…). It reads like the JSON it becomes (``answer["rows"]``, ``"ranking" in answer``), so a
face that serialises it and a face that walks it see the same keys in the same order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import orjson

CORE = ("columns", "rows", "stddev", "ci95", "noisy", "group_columns", "notes")


@dataclass(frozen=True, eq=False)
class Answer(Mapping[str, Any]):
    """One query's released answer: values, their noise standard deviations, 95 % intervals and noise
    flags per cell (None for group keys and exact cells), notes on what the values estimate, and the cube they
    were read from. Compares equal to a dict with the same keys and values (`Mapping` equality)."""

    columns: list[str]
    rows: list[list[Any]]
    stddev: list[list[Any]]
    ci95: list[list[Any]]
    noisy: list[list[Any]]  # per cell: True when the value is noise (`engine.answers.noise`), None for keys
    group_columns: list[str]
    notes: list[str]
    facts: dict[str, Any] = field(default_factory=dict)
    table: str | None = None
    cube: dict[str, Any] | None = None

    @classmethod
    def of(cls, result: Mapping[str, Any]) -> Answer:
        """An answer from its JSON form (the answer assembly's dict, or a memoized answer decoded)."""
        core = {k: result[k] for k in CORE}
        facts = {k: v for k, v in result.items() if k not in CORE and k not in ("table", "cube")}
        return cls(**core, facts=facts, table=result.get("table"), cube=result.get("cube"))

    @cached_property
    def _json(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k) for k in CORE} | self.facts
        if self.table is not None:
            out["table"] = self.table
        if self.cube is not None:
            out["cube"] = self.cube
        return out

    def as_dict(self) -> dict[str, Any]:
        """The JSON object every face shows (a copy: changing it changes no answer)."""
        return dict(self._json)

    def to_json(self) -> bytes:
        return orjson.dumps(self._json)

    def with_notes(self, notes: list[str]) -> Answer:
        return dataclasses.replace(self, notes=notes)

    def __or__(self, other: Mapping[str, Any]) -> dict[str, Any]:
        """``answer | {...}``: its JSON object with more keys, as with the dict answers once were."""
        return self.as_dict() | dict(other)

    def __ror__(self, other: Mapping[str, Any]) -> dict[str, Any]:
        return dict(other) | self.as_dict()

    def __getitem__(self, key: str) -> Any:
        return self._json[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._json)

    def __len__(self) -> int:
        return len(self._json)
