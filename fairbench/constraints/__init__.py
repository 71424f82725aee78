"""Rate constraints, the one abstraction every method that reads group rates goes through:
generalized rate-constraint sets (builders, user-declared sets, held-out evaluation; trained on
by raco-dp and dp-erm-mitigation), their group-rate view (events, score, per-group rates and
group-vs-population gaps; read by pf-ld, dp-fermi and the Jagielski et al. methods), and the
group statistics CGOO optimises (`group_objectives`)."""

from __future__ import annotations

from typing import Any

from fairbench.constraints.builders import BUILDERS, CustomConstraintSet, custom
from fairbench.constraints.group_rates import DeviceEvents, GroupRates, group_rates
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


__all__ = [
    "BUILDERS",
    "CustomConstraintSet",
    "DeviceEvents",
    "GroupRates",
    "RateConstraintSet",
    "TorchRates",
    "build",
    "group_rates",
]
