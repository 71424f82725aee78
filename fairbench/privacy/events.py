"""DpEvent builders for the mechanisms the methods run, and a JSON form for the ledger.

Events are dp-accounting `DpEvent` values, so any accountant that understands them can re-check
a trial; the JSON form lets a finished run's ledger be re-accounted later.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
from dp_accounting import dp_event

from fairbench.privacy.pld import SubstitutionSampledDpEvent


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
    gaussians: int = 1,
    substitution: bool = False,
    count_noise: float | None = None,
) -> dp_event.DpEvent:
    """`steps` rounds, each one Poisson batch on which `gaussians` Gaussian sums of noise
    multiplier `noise_multiplier` (and a Laplace histogram of `laplace_scale`, if given; the
    RaCO-DP pattern; and a Gaussian count vector of noise multiplier `count_noise`, if given,
    l2 sensitivity 1: the DPSGD-F pattern) are released. The releases share the batch, so the
    sampling wraps their composition, not each release: separately sampled events would model
    independent batches and under-report epsilon. `substitution`: neighbours differ in one
    sensitive attribute only (see `SubstitutionSampledDpEvent`)."""
    releases: list[dp_event.DpEvent] = [dp_event.GaussianDpEvent(noise_multiplier)] * gaussians
    if count_noise is not None:
        releases.append(dp_event.GaussianDpEvent(count_noise))
    if laplace_scale is not None:
        releases.append(dp_event.LaplaceDpEvent(laplace_scale))
    inner = releases[0] if len(releases) == 1 else dp_event.ComposedDpEvent(releases)
    sampled = SubstitutionSampledDpEvent if substitution else dp_event.PoissonSampledDpEvent
    return dp_event.SelfComposedDpEvent(sampled(sampling_rate, inner), steps)


def randomized_response(epsilon: float, k: int) -> dp_event.RandomizedResponseDpEvent:
    """k-ary randomized response that keeps a value with probability e^eps / (e^eps + k - 1)
    and otherwise reports one of the k - 1 others uniformly, in dp-accounting's form: with
    probability p = k / (e^eps + k - 1) a uniform draw over all k values (the true one
    included), else the true value. The same channel: keep = 1 - p + p / k."""
    if k < 2 or not 0 < epsilon < math.inf:
        raise ValueError(
            f"randomized response needs k >= 2 values and 0 < eps < inf, got {k}, {epsilon}"
        )
    return dp_event.RandomizedResponseDpEvent(k / (math.exp(epsilon) + k - 1), k)


def keep_probability(event: dp_event.RandomizedResponseDpEvent) -> float:
    """P(the reported value is the true one) = 1 - p + p / k."""
    p, k = event.noise_parameter, event.num_buckets
    return 1 - p + p / k


def randomized_response_epsilon(event: dp_event.RandomizedResponseDpEvent) -> float:
    """Its pure epsilon in closed form: the largest likelihood ratio of one output under two
    true values, keep / (p / k) = ln(1 + k (1 - p) / p) (the ratio is 1 for an output equal to
    neither). k such releases of one value compose to k times it (pure DP composition)."""
    p, k = event.noise_parameter, event.num_buckets
    return math.log1p(k * (1 - p) / p)


def not_accounted(event: dp_event.DpEvent) -> bool:
    """Whether `event` holds a `NonPrivateDpEvent`: a trial that declared itself not accounted
    (a parity run with an author's choice the suite cannot account, e.g. DP-FERMI's
    `parity_unaccounted`). Its epsilon is infinite, whatever else it composes."""
    if isinstance(event, dp_event.NonPrivateDpEvent):
        return True
    if isinstance(event, dp_event.ComposedDpEvent):
        return any(not_accounted(e) for e in event.events)
    inner = getattr(event, "event", None)  # self-composed and sampled events
    return isinstance(inner, dp_event.DpEvent) and not_accounted(inner)


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
    name = data.pop("type")
    custom = {"SubstitutionSampledDpEvent": SubstitutionSampledDpEvent}
    cls = custom[name] if name in custom else getattr(dp_event, name)
    return cls(**{k: decode(v) for k, v in data.items()})
