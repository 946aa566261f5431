"""The HTTP API's request bodies, error body and OpenAPI examples: what `/docs` shows a client."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.answers.options import AnswerOptions

MAX_BATCH = 10_000


class ErrorDetail(BaseModel):
    """Every error body; validation errors (422) carry a list of {type, loc, msg}."""

    detail: str | list[dict[str, Any]] = Field(examples=["unknown column 'wage' at line 1, column 12"])


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    text = {
        400: "query outside the SQL surface",
        401: "missing bearer token",
        403: "wrong or insufficient token",
        404: "unknown table",
        409: "budget or state conflict",
        413: "over a limit",
        422: "invalid request",
        429: "rate limit exceeded",
        503: "timed out (work it started continues)",
    }
    return {c: {"model": ErrorDetail, "description": text[c]} for c in codes}


def ok(example: Any, code: int = 200, text: str = "OK") -> dict[int | str, dict[str, Any]]:
    return {code: {"description": text, "content": {"application/json": {"example": example}}}}


BUDGET_EXAMPLE = {
    "currency": "epsilon",
    "total": 1.0,
    "spent": 1.0,
    "remaining": 0.0,
    "epsilon_total": 1.0,
    "epsilon_spent": 1.0,
    "epsilon_remaining": 0.0,
    "rho_spent": 0.0123,
}
CUBE_EXAMPLE = {
    "status": "ready",
    "strategy": "pairwise",
    "epsilon": 1.0,
    "built_at": "2026-11-22T00:56:00+00:00",
    "build_id": "6830c1df4d634047b01441950629abe9",
    "aggregates": {"COUNT(*)": {"epsilon": 0.2, "sensitivity": 1.0, "noise_scale": 5.0}},
    "clipping": {"salary": {"strategy": "fixed", "lo": 0.0, "hi": 250000.0}},
}
LEDGER_EXAMPLE = {
    "entries": [
        {
            "id": 1,
            "at": "2026-11-22T00:56:00Z",
            "epsilon": 0.2,
            "status": "done",
            "purpose": "cube measurement (pairwise): COUNT(*)",
            "build_id": "6830c1df",
        }
    ]
}
TABLE_EXAMPLE = {
    "name": "people",
    "dimensions": [{"name": "age", "type": "int", "lo": 18, "hi": 90, "bin": 1}],
    "measures": [{"name": "salary", "lo": 0.0, "hi": 250000.0, "clipping": "fixed"}],
    "cells": 17520,
    "cube": {"status": "none"},
    "budget": BUDGET_EXAMPLE,
}
ANSWER_EXAMPLE = {
    "columns": ["education", "n"],
    "rows": [["hs", 24316.6], ["bsc", 21096.7]],
    "stddev": [[None, 109.4], [None, 109.4]],
    "ci95": [[None, [24102.2, 24531.1]], [None, [20882.3, 21311.1]]],
    "noisy": [[None, False], [None, False]],
    "group_columns": ["education"],
    "notes": [],
    "table": "people",
    "cube": {"strategy": "pairwise", "epsilon": 1.0, "built_at": "2026-11-22T00:56:00+00:00"},
}


class _StrictBody(BaseModel):
    """A request body that refuses unknown fields (422): `{"epsilon": 0.1}` on a build once answered
    201 and spent the whole budget with the defaults, the field silently ignored."""

    model_config = ConfigDict(extra="forbid")


class QueryRequest(_StrictBody):
    sql: str = Field(max_length=20_000, examples=["SELECT SUM(salary) FROM people WHERE age BETWEEN 30 AND 40"])
    clamp: bool = Field(
        default=True,
        description="clamp values and intervals into their possible range (COUNT ≥ 0, "
        "AVG within the measure's bounds); false: the raw, unbiased values that add up across groups",
    )
    truncate: bool | None = Field(
        default=None,
        description="truncate SUMs of a measure with a class axis to the classes "
        "that hold significant mass in the query's region (less noise, biased low where upper classes "
        "hold mass the noise hides; asymmetric interval); false: the unbiased, additive answer; "
        "default: the table's answers.truncate (false unless declared)",
    )
    outside_groups: Literal["measured", "all"] | None = Field(
        default=None,
        description="GROUP BY: show a (other) or NULL group only when its noisy count clears the level an "
        'empty group\'s noise passes in 0.1 % of builds ("measured"), or always ("all"); default: the '
        "table's answers.outside_groups",
    )
    noisy: Literal["flag", "null"] | None = Field(
        default=None,
        description="values whose 95 % interval is wider than ±50 % of the value: flagged in `noisy` "
        '("flag") or also shown as null ("null"); default: the table\'s answers.noisy',
    )

    @property
    def options(self) -> AnswerOptions:
        return AnswerOptions(self.clamp, self.truncate, self.outside_groups, self.noisy)


class BatchRequest(_StrictBody):
    queries: list[str] = Field(
        max_length=MAX_BATCH,
        examples=[
            ["SELECT COUNT(*) FROM people WHERE age < 30", "SELECT region, SUM(salary) FROM people GROUP BY region"]
        ],
    )


class BudgetRequest(_StrictBody):
    """The new total, in the currency the table's id space is budgeted in."""

    epsilon: float | None = Field(default=None, gt=0, le=100, examples=[2.0])
    rho: float | None = Field(default=None, gt=0, le=100)
    delta: float | None = Field(
        default=None, gt=0, lt=1, description="with epsilon: an (ε, δ) total for a table budgeted in ρ"
    )


class BuildRequest(_StrictBody):
    force: bool = Field(
        default=False, description="rebuild even if a cube exists or the last build failed; spends again"
    )
    background: bool = Field(default=False, description="answer 202 at once and build on a worker; poll the status URL")


class AppendRequest(_StrictBody):
    """Which closed periods of a growing table to measure: by default every closed one."""

    period: str | None = Field(
        default=None,
        max_length=32,
        description="exactly this period (it must be the next "
        "one), written as the period dimension's labels, e.g. '2025-01-03' or '2025-01'",
    )
    through: dt.date | None = Field(default=None, description="the closed periods ending on or before this date")
    limit: int | None = Field(default=None, ge=1, description="at most this many periods (1: the next one)")
    remeasure: bool = Field(
        default=False,
        description="measure the measured `period` again from its rows as they are "
        "now (late or corrected rows): charged again; flat releases only",
    )


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI description of a JSON body for endpoints that decode it themselves."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}
