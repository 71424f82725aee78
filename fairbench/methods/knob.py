"""A method's fairness knob as a typed contract: its name, valid range, meaning and direction.

A method with a knob declares it once (`knob = Knob("gamma", ...)`); the config expansion
checks every listed value against it before a run directory exists, and reports read its
name. Stored rows keep the name alone, as the string column `knob_name`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from fairbench.errors import ConfigError


class Direction(Enum):
    """What a larger knob value does to the fairness constraint."""

    STRICTER = "stricter"  # e.g. a penalty weight: more weight, less disparity allowed
    LOOSER = "looser"  # e.g. an allowed disparity: a larger one admits more unfairness


@dataclass(frozen=True)
class Knob:
    """A fairness knob: `name` as configs and reports write it, the valid range (a None bound
    is unbounded on that side; `*_inclusive` says whether the bound itself is valid), one line
    of `meaning`, and the `direction` a larger value moves the constraint."""

    name: str
    meaning: str
    direction: Direction
    low: float | None = None
    high: float | None = None
    low_inclusive: bool = True
    high_inclusive: bool = True
    # True: the knob bounds a gap between rates (each in [0, 1]), so a value >= 1 never binds
    rate_tolerance: bool = False
    # False: a trial may leave it unset (the method then has a meaning for None)
    required: bool = True
    # a value to run with where none is given (`fairbench bench`, the conformance kit)
    typical: float | None = None

    @property
    def range_text(self) -> str:
        """The valid range in interval notation, e.g. `[0, inf)` or `(0, 1]`."""
        low = "(-inf" if self.low is None else "[("[not self.low_inclusive] + f"{self.low:g}"
        high = "inf)" if self.high is None else f"{self.high:g}" + "])"[not self.high_inclusive]
        return f"{low}, {high}"

    def contains(self, value: float) -> bool:
        """Whether `value` is a finite number inside the valid range."""
        above = self.low is None or value > self.low or (self.low_inclusive and value == self.low)
        below = (
            self.high is None or value < self.high or (self.high_inclusive and value == self.high)
        )
        return math.isfinite(value) and above and below

    def validate(self, value: float | None, *, method: str) -> None:
        """One-line ConfigError naming `method`, the knob, the value and the valid range when
        `value` is outside it. None (no value given) passes: whether a method can train
        without its knob is the method's to say."""
        if value is None or self.contains(float(value)):
            return
        raise ConfigError(
            f"method {method}: knob {self.name} = {float(value):g} is outside its valid range "
            f"{self.range_text} ({self.meaning}; larger is {self.direction.value})"
        )
