"""DpEvent builders for the mechanisms the methods run, and a JSON form for the ledger.

Events are dp-accounting `DpEvent` values, so any accountant that understands them can re-check
a trial; the JSON form lets a finished run's ledger be re-accounted later.
"""

from __future__ import annotations

from typing import Any

import attrs
from dp_accounting import dp_event


def poisson_gaussian(sampling_rate: float, noise_multiplier: float) -> dp_event.DpEvent:
    """One Gaussian sum of clipped contributions (sensitivity 1 in units of the clip norm)
    over a Poisson-sampled batch."""
    return dp_event.PoissonSampledDpEvent(sampling_rate, dp_event.GaussianDpEvent(noise_multiplier))


def poisson_laplace(sampling_rate: float, scale: float) -> dp_event.DpEvent:
    """One Laplace-noised count (l1 sensitivity 1, noise scale `scale`) over a Poisson batch."""
    return dp_event.PoissonSampledDpEvent(sampling_rate, dp_event.LaplaceDpEvent(scale))


def sgd_steps(
    sampling_rate: float,
    noise_multiplier: float,
    steps: int,
    laplace_scale: float | None = None,
) -> dp_event.DpEvent:
    """`steps` rounds of a Poisson-sampled Gaussian, each optionally composed with a
    Poisson-sampled Laplace on the same batch (the RaCO-DP pattern)."""
    step: dp_event.DpEvent = poisson_gaussian(sampling_rate, noise_multiplier)
    if laplace_scale is not None:
        step = dp_event.ComposedDpEvent([step, poisson_laplace(sampling_rate, laplace_scale)])
    return dp_event.SelfComposedDpEvent(step, steps)


def to_dict(event: dp_event.DpEvent) -> dict[str, Any]:
    """A JSON-ready form: the class name under "type" plus the event's fields, recursively."""

    def encode(value: Any) -> Any:
        if isinstance(value, dp_event.DpEvent):
            return to_dict(value)
        if isinstance(value, list | tuple):
            return [encode(v) for v in value]
        return value

    fields = {f.name: encode(getattr(event, f.name)) for f in attrs.fields(type(event))}
    return {"type": type(event).__name__, **fields}


def from_dict(data: dict[str, Any]) -> dp_event.DpEvent:
    """Inverse of `to_dict`."""

    def decode(value: Any) -> Any:
        if isinstance(value, dict) and "type" in value:
            return from_dict(value)
        if isinstance(value, list):
            return [decode(v) for v in value]
        return value

    data = dict(data)
    cls = getattr(dp_event, data.pop("type"))
    return cls(**{k: decode(v) for k, v in data.items()})
