"""How one request wants its answer shown: the REST body's and the wire session's switches."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from engine.plan import QueryPlan

OutsideGroups = Literal["measured", "all"]
Noisy = Literal["flag", "null"]


@dataclass(frozen=True)
class AnswerOptions:
    """``clamp``: values and intervals moved into what the aggregate can be (False: raw, additive);
    ``truncate``, ``outside_groups`` and ``noisy`` override the table's ``answers`` defaults (None
    keeps them): class-axis SUMs truncated, (other)/NULL groups always shown, noisy values NULL."""

    clamp: bool = True
    truncate: bool | None = None
    outside_groups: OutsideGroups | None = None
    noisy: Noisy | None = None

    @property
    def default(self) -> bool:
        """Whether the answer is the one remembered for the plan (the fast paths serve only these)."""
        return self == DEFAULT

    def applied(self, plan: QueryPlan) -> QueryPlan:
        """The plan answered the way these options ask."""
        return dataclasses.replace(
            plan,
            truncate=plan.truncate if self.truncate is None else self.truncate,
            all_groups=plan.all_groups if self.outside_groups is None else self.outside_groups == "all",
            suppress_noisy=plan.suppress_noisy if self.noisy is None else self.noisy == "null",
        )


DEFAULT = AnswerOptions()
