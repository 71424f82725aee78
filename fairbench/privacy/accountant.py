"""The suite's accountant: PLD (privacy loss distributions, dp-accounting) for add/remove-one
neighbours, and calibration of a noise multiplier or a step count to a target epsilon.

Reported epsilons use dp-accounting's default PLD discretisation (pessimistic, so an upper
bound). Calibration searches with a 10x coarser discretisation (also pessimistic, ~10x faster),
then checks the result with the reporting accountant and tightens it until the reported
epsilon is within the target: a calibrated mechanism never reports more than it was asked.
A step-count search's probes differ only in the count, so they share one cached one-step PLD
(`pld.build`) and each costs a self-composition.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from dp_accounting import dp_event

from fairbench.errors import CalibrationError, ConfigError
from fairbench.privacy import events, pld, rdp

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
    """Epsilon of `event` at `delta` by the suite's PLD accountant (inf if it cannot be met,
    or if the event declares a release not accounted: `events.not_accounted`)."""
    if events.not_accounted(event):
        return math.inf
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
    event = events.sgd_steps(
        q, sigma, steps, laplace, shape.gaussians, shape.substitution, shape.count_noise
    )
    if shape.extra is not None:
        event = dp_event.ComposedDpEvent([event, shape.extra])
    return epsilon(event, delta, _interval=interval)


@dataclass(frozen=True)
class StepShape:
    """What a calibrated schedule releases besides its Gaussian sums: how many Gaussian sums
    share each batch, whether neighbours are sensitive-attribute substitutions, the noise
    multiplier of a Gaussian count vector (l2 sensitivity 1) released on every batch beside
    them (`count_noise`, fixed: calibration solves the sums' noise), and one fixed event run
    once (e.g. private group counts) that the budget must also cover."""

    gaussians: int = 1
    substitution: bool = False
    extra: dp_event.DpEvent | None = None
    count_noise: float | None = None


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


def _solve_monotone(
    epsilon_of: Callable[[float, float], float],
    target: float,
    *,
    increasing: bool,
    start: float,
    limits: tuple[float, float],
    integer: bool = False,
    rel_tol: float = 1e-3,
    start_meets: bool = False,
    cap: bool = False,
    infeasible: str = "no value within the search limits meets the target",
) -> float:
    """The boundary value of a parameter that `epsilon_of(value, discretisation)` is monotone
    in, where it crosses `target`: the smallest noise meeting it (`increasing=False`) or the
    largest step count (`increasing=True`). One search for every calibration, as dp-accounting's
    `calibrate_dp_mechanism` is generic over its parameter, but keeping the suite's two
    discretisations: search with the coarse one, then tighten until the reporting one agrees.

    From `start` (already checked by the caller if `start_meets`) it doubles towards privacy
    until the target is met (`CalibrationError(infeasible)` past `limits`), doubles away while
    it still is, and bisects (geometrically to `rel_tol`, or to adjacent integers). Doubling
    away past `limits` returns that limit if `cap`, else bisects up to the first value past it,
    unevaluated. Last, it steps towards privacy by a factor `rel_tol` until the reported
    epsilon meets the target. With `integer` (and int `start` and `limits`) every value it
    tries, and the one it returns, is an int.
    """
    lower, upper = limits

    def eps(value: float, interval: float = SEARCH_DISCRETISATION) -> float:
        return epsilon_of(value, interval)

    def double(value: float, away: bool) -> float:  # away: towards less privacy
        if away == increasing:
            return value * 2
        return value // 2 if integer else value / 2

    inner = start  # meets the target once the next loop is done
    while not start_meets and eps(inner) > target:
        inner = double(inner, away=False)
        if not lower <= inner <= upper:
            raise CalibrationError(infeasible)
    outer = double(inner, away=True)
    while lower < outer <= upper and eps(outer) <= target:
        inner, outer = outer, double(outer, away=True)
    if cap and not lower < outer <= upper:
        return upper if increasing else lower
    lo, hi = sorted((inner, outer))
    while (hi - lo > 1) if integer else (hi / lo > 1 + rel_tol):
        mid = (lo + hi) // 2 if integer else math.sqrt(lo * hi)
        lo, hi = (mid, hi) if (eps(mid) <= target) == increasing else (lo, mid)
    found, factor = (lo, 1 - rel_tol) if increasing else (hi, 1 + rel_tol)
    while eps(found, REPORT_DISCRETISATION) > target:
        found = found * factor
        if integer:
            found = max(lower, math.floor(found)) if increasing else min(upper, math.ceil(found))
    return found


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

    def eps(sigma: float, interval: float) -> float:
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
    if shape.count_noise is not None:  # nor for the count releases alone
        counts_only = events.sgd_steps(sampling_rate, shape.count_noise, steps)
        if epsilon(counts_only, delta, _interval=SEARCH_DISCRETISATION) >= target_epsilon:
            raise CalibrationError(
                f"the count releases alone (noise multiplier {shape.count_noise}, {steps} "
                f"steps) exceed epsilon={target_epsilon}; raise their noise or epsilon, or "
                "lower the steps"
            )
    return _solve_monotone(
        eps,
        target_epsilon,
        increasing=False,
        start=1.0,
        limits=(MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER),
        rel_tol=rel_tol,
        infeasible=f"cannot reach epsilon={target_epsilon} with {steps} steps at sampling rate "
        f"{sampling_rate:.4g}; raise epsilon or lower the steps",
    )


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

    def eps(steps: float, interval: float) -> float:  # an int: the search is `integer`
        return _sgd_epsilon(
            sampling_rate, noise_multiplier, int(steps), laplace_scale, delta, interval, shape
        )

    if eps(1, REPORT_DISCRETISATION) > target_epsilon:
        raise CalibrationError(
            f"even one step exceeds epsilon={target_epsilon} at noise multiplier "
            f"{noise_multiplier}; raise the noise multiplier (or the Laplace scale)"
        )
    start = _rdp_start(sampling_rate, noise_multiplier, laplace_scale, delta, target_epsilon, shape)
    if start > 1 and eps(start, SEARCH_DISCRETISATION) > target_epsilon:
        start = 1
    return int(
        _solve_monotone(
            eps,
            target_epsilon,
            increasing=True,
            start=start,
            limits=(1, MAX_STEPS),
            integer=True,
            start_meets=True,
            cap=True,
        )
    )


def _rdp_start(
    q: float, sigma: float, laplace: float | None, delta: float, target: float, shape: StepShape
) -> int:
    """The largest power of two of steps whose RDP epsilon meets `target` (1 if RDP cannot
    account the schedule). The step search doubles from 1 through the powers of two, so
    starting it here, where the PLD meets the target too, skips only probes that meet it
    (epsilon grows with the steps): the search then probes, and returns, exactly as before."""
    one = events.sgd_steps(
        q, sigma, 1, laplace, shape.gaussians, shape.substitution, shape.count_noise
    ).event
    try:
        step = rdp.rdp_curve(one)
        extra = np.zeros_like(step) if shape.extra is None else rdp.rdp_curve(shape.extra)
    except ConfigError:  # substitution neighbours: no RDP curve
        return 1
    start = 1
    while start * 2 <= MAX_STEPS and rdp.epsilon(start * 2 * step + extra, delta) <= target:
        start *= 2
    return start


@lru_cache(maxsize=256)
def calibrate_laplace_scale(target_epsilon: float, delta: float) -> float:
    """Smallest scale (in units of the l1 sensitivity) of one Laplace release meeting the
    target: at most 1/epsilon (pure DP), a little less at delta > 0."""
    validate(target_epsilon=target_epsilon, delta=delta)

    def eps(scale: float, interval: float) -> float:
        return epsilon(dp_event.LaplaceDpEvent(scale), delta, _interval=interval)

    return _solve_monotone(
        eps,
        target_epsilon,
        increasing=False,
        start=1.0 / target_epsilon,
        limits=(MIN_NOISE_MULTIPLIER, MAX_NOISE_MULTIPLIER),
    )


@lru_cache(maxsize=256)
def calibrate_randomized_response(target_epsilon: float, delta: float, k: int) -> float:
    """The pure epsilon of one k-ary randomized response whose reported epsilon at `delta`
    meets the target: the target itself, lowered where the pessimistic discretisation rounds
    the release's privacy loss up past it (by at most one discretisation interval)."""
    validate(target_epsilon=target_epsilon, delta=delta)
    pure = target_epsilon
    while (excess := epsilon(events.randomized_response(pure, k), delta) - target_epsilon) > 0:
        pure -= max(excess, pure * 1e-6)
    return pure
