"""The privacy budget a trial must meet."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fairbench.errors import ConfigError

DEFAULT_DELTA = 1e-5


@dataclass(frozen=True)
class PrivacyBudget:
    """Target (epsilon, delta)-DP under add/remove-one neighbouring datasets, whole record."""

    epsilon: float
    delta: float = DEFAULT_DELTA

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ConfigError(
                f"epsilon must be a finite number > 0, got {self.epsilon}; use a positive "
                "epsilon, or list the method as non-private"
            )
        if not 0 < self.delta < 1:
            raise ConfigError(
                f"delta must lie strictly between 0 and 1, got {self.delta}; "
                f"the suite's default is {DEFAULT_DELTA}"
            )
