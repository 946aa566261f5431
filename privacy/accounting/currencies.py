"""Budgets in two currencies — pure ε and ρ-zCDP — and the noise each one buys.

A table's id space is declared in one currency: ``epsilon`` (pure ε-DP, Laplace noise: today's
default) or ``rho`` (ρ-zCDP, discrete Gaussian noise; an (ε, δ) declaration is converted to ρ with
`privacy.accounting.zcdp.rho_for`). Both compose by addition, so a build splits its amount between its
steps the same way in either currency; what changes is the mechanism a share buys
(`mechanism`) and how its error and cost are stated. Every release is charged in both currencies
on the ledger: its ε (none for a Gaussian release) and its tight ρ.

Steps that only exist as pure-ε mechanisms (the clipping and rows-per-unit histograms' thresholds,
HDPView's partition) run inside a ρ budget at ε = √(2ρ_share) (`Budget.pure_epsilon`), which
costs exactly ρ_share (Bun & Steinke 2016, Prop. 1.4).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from privacy.accounting.zcdp import epsilon_for_rho, rho_for
from privacy.mechanisms.discrete_gaussian import GridGaussian, release_each
from privacy.mechanisms.sampler import GridLaplace, RandomSource

Currency = Literal["epsilon", "rho"]
CURRENCIES: tuple[str, ...] = ("epsilon", "rho")
Mechanism = GridLaplace | GridGaussian


@dataclass(frozen=True)
class Budget:
    """An amount of privacy budget in one currency. Scales and splits like a number (shares of a
    build, of an aggregate, of a cuboid), so strategies split it without knowing the currency."""

    amount: float
    currency: Currency = "epsilon"

    def __post_init__(self) -> None:
        if self.currency not in CURRENCIES:
            raise ValueError(f"unknown privacy currency {self.currency!r}; use one of {list(CURRENCIES)}")
        if not (self.amount > 0 and math.isfinite(self.amount)):
            raise ValueError(f"a budget must be positive and finite (got {self.currency}={self.amount:g})")

    def __mul__(self, share: float) -> Budget:
        return Budget(self.amount * float(share), self.currency)

    __rmul__ = __mul__

    def __truediv__(self, parts: float) -> Budget:
        return Budget(self.amount / float(parts), self.currency)

    def __sub__(self, other: Budget) -> Budget:
        if other.currency != self.currency:
            raise ValueError("budgets in different currencies do not subtract")
        return Budget(self.amount - other.amount, self.currency)

    @property
    def gaussian(self) -> bool:
        return self.currency == "rho"

    @property
    def pure_epsilon(self) -> float:
        """The ε a pure-ε-only step may spend from this budget (itself, or √(2ρ))."""
        return self.amount if self.currency == "epsilon" else epsilon_for_rho(self.amount)

    @property
    def variance_epsilon(self) -> float:
        """The ε whose Laplace noise has the variance this budget's noise has (2Δ²/ε² = Δ²/2ρ ⇔
        ε = 2√ρ): for formulas written for Laplace variance (the Qiu et al. clipping objective)."""
        return self.amount if self.currency == "epsilon" else 2.0 * math.sqrt(self.amount)


def as_budget(budget: float | Budget) -> Budget:
    """A plain number is a pure-ε amount (the library's and the tests' long-standing calling form)."""
    return budget if isinstance(budget, Budget) else Budget(float(budget), "epsilon")


def mechanism(
    sensitivity: float, budget: float | Budget, coordinates: int = 1, l2_sensitivity: float | None = None
) -> Mechanism:
    """The release a budget share buys for a query one neighbour moves by at most ``sensitivity`` in
    L1 over at most ``coordinates`` coordinates: discrete Laplace at ε (pure), or discrete Gaussian
    at ρ calibrated to the L2 sensitivity — ``l2_sensitivity`` when the caller can state a smaller
    one, else the L1 sensitivity, which always bounds it (‖v‖₂ ≤ ‖v‖₁, with equality when one
    neighbour's whole change lands in one coordinate: k rows of a privacy unit in one cell)."""
    b = as_budget(budget)
    if b.gaussian:
        return GridGaussian(sensitivity if l2_sensitivity is None else l2_sensitivity, b.amount, coordinates)
    return GridLaplace(sensitivity, b.amount, coordinates)


def release_all(
    mechanisms: Sequence[Mechanism], values: Sequence[np.ndarray], source: RandomSource, *, public: bool = False
) -> list[np.ndarray]:
    """``values[i]`` released by ``mechanisms[i]``: Gaussian ones all drawn in one batch of the exact
    sampler (`privacy.mechanisms.discrete_gaussian.release_each`: one pass instead of one per release), Laplace
    ones each by its own release. ``public``: a simulation of public values (a bootstrap)."""
    if mechanisms and all(isinstance(m, GridGaussian) for m in mechanisms):
        return release_each(mechanisms, values, source, public=public)  # type: ignore[arg-type]
    return [m.release(v, source, public=public) for m, v in zip(mechanisms, values)]


def declared_total(epsilon: float | None, rho: float | None, delta: float | None) -> Budget:
    """A registration's budget: pure ε, ρ, or (ε, δ) kept as the largest ρ implying it (CKS Cor. 13)."""
    if rho is not None:
        return Budget(rho, "rho")
    if epsilon is None:
        raise ValueError("a budget needs epsilon or rho")
    return Budget(epsilon, "epsilon") if delta is None else Budget(rho_for(epsilon, delta), "rho")
