"""The suite's accountant: PLD (privacy loss distributions, dp-accounting) for add/remove-one
neighbours, and calibration of a noise multiplier or a step count to a target epsilon.

Reported epsilons use dp-accounting's default PLD discretisation (pessimistic, so an upper
bound). Calibration searches with a 10x coarser discretisation (also pessimistic, ~10x faster),
then checks the result with the reporting accountant and tightens it until the reported
epsilon is within the target: a calibrated mechanism never reports more than it was asked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from dp_accounting import dp_event

from fairbench.errors import CalibrationError, ConfigError
from fairbench.privacy import events, pld

REPORT_DISCRETISATION = 1e-4  # dp-accounting's default
SEARCH_DISCRETISATION = 1e-3
MAX_NOISE_MULTIPLIER = 1e4
MAX_STEPS = 10_000_000
MIN_NOISE_MULTIPLIER = 1e-3  # the noise search stops here: any less noise also meets the target


def at_search_bound(steps: int, noise_multiplier: float) -> bool:
    """True when a calibration stopped at a search limit instead of at the target epsilon:
    the target is met with room to spare, so the budget was not what bound the method."""
    return steps >= MAX_STEPS or noise_multiplier <= MIN_NOISE_MULTIPLIER * 1.01


def epsilon(
    event: dp_event.DpEvent, delta: float, *, _interval: float = REPORT_DISCRETISATION
) -> float:
    """Epsilon of `event` at `delta` by the suite's PLD accountant (inf if it cannot be met)."""
    with np.errstate(over="ignore", divide="ignore"):  # dp-accounting's log-sum-exp at +inf
        return float(pld.build(event, _interval).get_epsilon_for_delta(delta))


def _sgd_epsilon(
    q: float,
    sigma: float,
    steps: int,
    laplace: float | None,
    delta: float,
    interval: float,
    shape: StepShape,
) -> float:
    event = events.sgd_steps(q, sigma, steps, laplace, shape.gaussians, shape.substitution)
    if shape.extra is not None:
        event = dp_event.ComposedDpEvent([event, shape.extra])
    return epsilon(event, delta, _interval=interval)


@dataclass(frozen=True)
class StepShape:
    """What a calibrated schedule releases besides its Gaussian sums: how many Gaussian sums
    share each batch, whether neighbours are sensitive-attribute substitutions, and one fixed
    event run once (e.g. private group counts) that the budget must also cover."""

    gaussians: int = 1
    substitution: bool = False
    extra: dp_event.DpEvent | None = None


PLAIN = StepShape()


def validate(
    *,
    sampling_rate: float | None = None,
    target_epsilon: float | None = None,
    delta: float | None = None,
    steps: int | None = None,
    noise_multiplier: float | None = None,
    laplace_scale: float | None = None,
) -> None:
    """Raise a one-line `ConfigError` for any given argument outside its valid range."""
    problems = [
        (sampling_rate, lambda v: 0 < v <= 1, "sampling rate must lie in (0, 1]"),
        (target_epsilon, lambda v: 0 < v < math.inf, "target epsilon must be a finite number > 0"),
        (delta, lambda v: 0 < v < 1, "delta must lie strictly between 0 and 1"),
        (steps, lambda v: v >= 1, "steps must be >= 1"),
        (noise_multiplier, lambda v: v > 0, "noise multiplier must be > 0"),
        (laplace_scale, lambda v: v > 0, "Laplace scale must be > 0"),
    ]
    for value, ok, message in problems:
        if value is not None and not ok(value):
            raise ConfigError(f"{message}, got {value}")


def _check_extra(shape: StepShape, target_epsilon: float, delta: float) -> None:
    if shape.extra is not None and epsilon(shape.extra, delta) >= target_epsilon:
        raise CalibrationError(
            f"the one-off releases alone ({shape.extra}) exceed epsilon={target_epsilon}; "
            "give them more noise or raise epsilon"
        )


@lru_cache(maxsize=256)
def calibrate_noise_multiplier(
    sampling_rate: float,
    steps: int,
    target_epsilon: float,
    delta: float,
    laplace_scale: float | None = None,
    shape: StepShape = PLAIN,
    rel_tol: float = 1e-3,
) -> float:
    """Smallest noise multiplier (to `rel_tol`) whose `steps` Poisson-sampled rounds (Gaussian
    sums, with a Laplace of `laplace_scale` if given, shaped by `shape`) meet the target."""
    validate(
        sampling_rate=sampling_rate,
        target_epsilon=target_epsilon,
        delta=delta,
        steps=steps,
        laplace_scale=laplace_scale,
    )
    _check_extra(shape, target_epsilon, delta)

    def eps(sigma: float, interval: float = SEARCH_DISCRETISATION) -> float:
        return _sgd_epsilon(sampling_rate, sigma, steps, laplace_scale, delta, interval, shape)

    if laplace_scale is not None:  # no Gaussian noise can make up for the Laplace part alone
        laplace_only = dp_event.SelfComposedDpEvent(
            events.poisson_laplace(sampling_rate, laplace_scale), steps
        )
        if epsilon(laplace_only, delta, _interval=SEARCH_DISCRETISATION) >= target_epsilon:
            raise CalibrationError(
                f"the Laplace releases alone (scale {laplace_scale}, {steps} steps) exceed "
                f"epsilon={target_epsilon}; raise the Laplace scale or epsilon, or lower the steps"
            )
    hi = 1.0
    while eps(hi) > target_epsilon:
        hi *= 2
        if hi > MAX_NOISE_MULTIPLIER:
            raise CalibrationError(
                f"cannot reach epsilon={target_epsilon} with {steps} steps at sampling rate "
                f"{sampling_rate:.4g}" + "; raise epsilon or lower the steps"
            )
    lo = hi / 2
    while lo > MIN_NOISE_MULTIPLIER and eps(lo) <= target_epsilon:
        hi, lo = lo, lo / 2
    while hi / lo > 1 + rel_tol:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if eps(mid) <= target_epsilon else (mid, hi)
    while eps(hi, REPORT_DISCRETISATION) > target_epsilon:
        hi *= 1 + rel_tol
    return hi


@lru_cache(maxsize=256)
def calibrate_steps(
    sampling_rate: float,
    noise_multiplier: float,
    target_epsilon: float,
    delta: float,
    laplace_scale: float | None = None,
    shape: StepShape = PLAIN,
) -> int:
    """Largest number of steps whose composition meets (target_epsilon, delta)."""
    validate(
        sampling_rate=sampling_rate,
        target_epsilon=target_epsilon,
        delta=delta,
        noise_multiplier=noise_multiplier,
        laplace_scale=laplace_scale,
    )
    _check_extra(shape, target_epsilon, delta)

    def eps(steps: int, interval: float = SEARCH_DISCRETISATION) -> float:
        return _sgd_epsilon(
            sampling_rate, noise_multiplier, steps, laplace_scale, delta, interval, shape
        )

    if eps(1, REPORT_DISCRETISATION) > target_epsilon:
        raise CalibrationError(
            f"even one step exceeds epsilon={target_epsilon} at noise multiplier "
            f"{noise_multiplier}; raise the noise multiplier (or the Laplace scale)"
        )
    lo, hi = 1, 2
    while eps(hi) <= target_epsilon:
        lo, hi = hi, hi * 2
        if hi > MAX_STEPS:
            return MAX_STEPS
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if eps(mid) <= target_epsilon else (lo, mid)
    while eps(lo, REPORT_DISCRETISATION) > target_epsilon:
        lo = max(1, math.floor(lo * 0.999))
    return lo
