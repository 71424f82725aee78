"""Generalized rate constraints: builders, user-declared sets, and held-out evaluation."""

from __future__ import annotations

from typing import Any

from fairbench.constraints.builders import BUILDERS, CustomConstraintSet, custom
from fairbench.constraints.rates import RateConstraintSet, TorchRates
from fairbench.errors import ConfigError


def build(
    name: str, definition: dict[str, Any] | None, n_classes: int, n_groups: int, gamma: float
) -> RateConstraintSet:
    """The constraint set a config names: a builder, or a declared `definition`."""
    if definition is not None:
        return custom(CustomConstraintSet.model_validate(definition), n_classes, n_groups, gamma)
    if name not in BUILDERS:
        raise ConfigError(f"unknown constraint {name!r}; known: {', '.join(BUILDERS)}")
    return BUILDERS[name](n_classes, n_groups, gamma)


__all__ = ["BUILDERS", "CustomConstraintSet", "RateConstraintSet", "TorchRates", "build"]
