"""The interface every measurement strategy implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

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


class MeasurementStrategy(ABC):
    name: ClassVar[str]

    @abstractmethod
    def measure(
        self, true: np.ndarray, sensitivity: float, epsilon: float, source: RandomSource
    ) -> Measurement:
        """ε-DP release of ``true`` whose L1 sensitivity (add/remove one row) is ``sensitivity``."""
