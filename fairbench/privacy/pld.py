"""Privacy loss distributions for every DpEvent the suite's methods record.

dp-accounting builds PLDs for Gaussian and Laplace releases, plain or Poisson-sampled. Two
mechanisms the methods run are not among them, and both are built here from their exact
hockey-stick curves with dp-accounting's pessimistic connect-the-dots discretisation (an upper
bound on epsilon, like dp-accounting's own PLDs):

- Several releases on *one* Poisson batch, `PoissonSampledDpEvent(q, ComposedDpEvent([...]))`
  (RaCO-DP's Laplace histogram and Gaussian gradient sum; DP-FERMI's two Gaussian sums).
  Composing separately sampled events instead would be wrong: it models independent batches,
  and under-reports epsilon (e.g. 1.34 instead of 1.39 for two sigma=4 Gaussians, q=0.04,
  600 steps). Gaussians on one batch are one Gaussian of noise multiplier
  (sum sigma_j^-2)^(-1/2); a Gaussian with one Laplace is handled by `_gauss_laplace_curves`.
- `SubstitutionSampledDpEvent`: a Poisson-sampled release under neighbours that differ in one
  record's sensitive attribute while the record's other data are public (DP-FERMI's
  sensitive-attribute mode). See that class.

`RandomizedResponseDpEvent` (one value released by k-ary randomized response, the local-DP
notion's one mechanism) is dp-accounting's PLD for neighbours that substitute the value. It is
built here, not through dp-accounting's `PLDAccountant`: dp-accounting 0.6.0's accountant
drops the count of a self-composed randomized response (it composes one release whatever the
count), while `build` self-composes every event by its count.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeAlias

import attrs
import numpy as np
from dp_accounting import dp_event
from dp_accounting.pld import pld_pmf
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy.special import log_ndtr

from fairbench.errors import ConfigError
from fairbench.privacy import pld_vectorised

PLD: TypeAlias = pld_lib.PrivacyLossDistribution
NEGLIGIBLE_DELTA = 1e-22  # hockey-stick mass left at +infinity (dp-accounting's: e^-50)
MAX_GRID_POINTS = 2_000_000  # beyond, the remaining mass goes to +infinity (pessimistic)
SMALLEST_INTERVAL = 1e-4
_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(16)
MAX_CACHED_PLDS = 16  # per process; a calibration uses two (search, report); a few MB each


@attrs.frozen
class SubstitutionSampledDpEvent(dp_event.DpEvent):
    """A Poisson-sampled `event` under *substitution of one record's sensitive attribute*, where
    everything else about the record (its features, label, and so its non-sensitive gradient)
    is public, and the released sum's sensitive part is bounded per record by the event's
    sensitivity.

    The public part can be arbitrarily large, so an adversary may see whether the record was
    sampled: the worst case is the pair ((1-q) R + q N(0, s^2), (1-q) R + q N(1, s^2)) with R
    disjoint from both Gaussians. Sampling then scales delta by q but does not shrink epsilon,
    unlike add/remove amplification (advanced joint convexity: delta'(eps) <= q delta(eps)
    for eps >= 0, attained by that pair). `event` is a Gaussian (or Gaussians composed on the
    same batch) in units where the sensitive part of one substitution moves the sum by 1.
    """

    sampling_probability: float
    event: dp_event.DpEvent


def gaussian_delta(eps: np.ndarray, sigma: float) -> np.ndarray:
    """Hockey-stick divergence of N(0, sigma^2) vs N(1, sigma^2) at each eps (log-space)."""
    a = sigma * eps - 0.5 / sigma
    return np.exp(log_ndtr(-a)) - np.exp(eps + log_ndtr(-(a + 1.0 / sigma)))


def _laplace_loss_law(scale: float, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """Privacy-loss values l and weights w of Laplace(scale) at sensitivity 1 (the lower
    distribution's law): atoms at -1/b (1/2) and +1/b (e^-1/b / 2), and a density
    e^(-l/2 - 1/(2b)) / 4 on (-1/b, 1/b), integrated by composite Gauss-Legendre with panels
    narrow enough (<= 1/(4 sigma)) for the Gaussian's curve to be smooth on each."""
    half = 1.0 / scale
    panels = min(4000, max(1, math.ceil(2 * half * 4 * sigma)))
    edges = np.linspace(-half, half, panels + 1)
    mid, rad = (edges[1:] + edges[:-1]) / 2, (edges[1:] - edges[:-1]) / 2
    nodes = (mid[:, None] + rad[:, None] * _GL_NODES[None, :]).ravel()
    weights = (rad[:, None] * _GL_WEIGHTS[None, :]).ravel()
    density = np.exp(-nodes / 2 - half / 2) / 4
    values = np.concatenate([[-half, half], nodes])
    return values, np.concatenate([[0.5, math.exp(-half) / 2], weights * density])


def _gauss_laplace_curves(
    q: float, sigma: float, scale: float
) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
    """Hockey-stick curves (remove, add) of a Gaussian(sigma) and a Laplace(scale) release of
    one Poisson batch, both at sensitivity 1. With L the unsampled privacy loss (a Gaussian
    loss plus an independent Laplace loss l), conditioning on l leaves a Gaussian:
      remove: delta(eps) = q sum_l w(l) e^l delta_G(ln c - l),  c = (e^eps - 1 + q) / q
      add:    delta(eps) = a sum_l w(l) delta_G(eps + ln q - ln a + l),  a = 1 - e^eps (1 - q)
    """
    values, weights = _laplace_loss_law(scale, sigma)

    def remove(eps: np.ndarray) -> np.ndarray:
        out = -np.expm1(eps)
        live = np.exp(eps) > 1 - q
        log_c = np.log((np.expm1(eps[live]) + q) / q)
        inner = gaussian_delta(log_c[:, None] - values[None, :], sigma)
        out[live] = q * (inner * (weights * np.exp(values))[None, :]).sum(axis=1)
        return np.clip(out, 0.0, 1.0)

    def add(eps: np.ndarray) -> np.ndarray:
        out = np.zeros_like(eps)
        a = 1 - np.exp(eps) * (1 - q)
        live = a > 0
        shift = eps[live] + math.log(q) - np.log(a[live])
        inner = gaussian_delta(shift[:, None] + values[None, :], sigma)
        out[live] = a[live] * (inner * weights[None, :]).sum(axis=1)
        return np.clip(out, 0.0, 1.0)

    return remove, add


def _upper_end(curve: Callable[[np.ndarray], np.ndarray]) -> float:
    """A loss value beyond which the curve's delta is negligible (or the grid's limit, where
    connect-the-dots puts the rest at +infinity: still an upper bound)."""
    hi, limit = 0.5, MAX_GRID_POINTS * SMALLEST_INTERVAL
    with np.errstate(over="ignore"):
        while hi < limit and curve(np.array([hi]))[0] > NEGLIGIBLE_DELTA:
            hi *= 2
    return hi


def _connect_dots(
    curve: Callable[[np.ndarray], np.ndarray], lo: float, hi: float, interval: float
) -> pld_pmf.PLDPmf:
    """Pessimistic PLD pmf from a hockey-stick curve sampled on multiples of `interval`."""
    top = min(math.ceil(hi / interval), math.floor(lo / interval) + MAX_GRID_POINTS)
    grid = np.arange(math.floor(lo / interval), top + 1)
    chunks = np.array_split(grid, 1 + len(grid) // 4096)
    with np.errstate(over="ignore"):  # e^eps overflows where delta is 0 anyway
        deltas = np.concatenate([curve(chunk * interval) for chunk in chunks])
    return pld_pmf.create_pmf_pessimistic_connect_dots(interval, grid, deltas)


def _shared_gauss_laplace(q: float, sigma: float, scale: float, interval: float) -> PLD:
    remove, add = _gauss_laplace_curves(q, sigma, scale)
    hi = _upper_end(remove)
    lo = math.log1p(-q) if q < 1 else -hi
    pmf_remove = _connect_dots(remove, lo, hi, interval)
    if q == 1:
        return PLD(pmf_remove)
    return PLD(pmf_remove, _connect_dots(add, -hi, -math.log1p(-q), interval))


def _substitution_gaussian(q: float, sigma: float, interval: float) -> PLD:
    def curve(eps: np.ndarray) -> np.ndarray:
        below = (1 - q) * np.maximum(-np.expm1(eps), 0.0)
        return np.clip(below + q * gaussian_delta(eps, sigma), 0.0, 1.0)

    hi = _upper_end(lambda e: gaussian_delta(e, sigma))
    return PLD(_connect_dots(curve, -hi, hi, interval))


def one_batch(event: dp_event.DpEvent) -> tuple[float | None, float | None]:
    """(noise multiplier of all Gaussians combined, Laplace scale) of releases on one batch."""
    parts = event.events if isinstance(event, dp_event.ComposedDpEvent) else [event]
    gaussians = [p.noise_multiplier for p in parts if isinstance(p, dp_event.GaussianDpEvent)]
    laplaces = [p.noise_multiplier for p in parts if isinstance(p, dp_event.LaplaceDpEvent)]
    if len(gaussians) + len(laplaces) != len(parts) or len(laplaces) > 1:
        raise ConfigError(f"cannot account releases on one batch: {event}")
    sigma = sum(s**-2 for s in gaussians) ** -0.5 if gaussians else None
    return sigma, (laplaces[0] if laplaces else None)


class NoOptimisticBound(ValueError):
    """The event holds a release this module discretises only pessimistically."""


def _gaussian_precision(event: dp_event.DpEvent) -> float | None:
    """sum 1/sigma^2 when `event` composes only unsampled Gaussians (else None): their privacy
    losses are Gaussian and add, so the composition *is* one Gaussian of noise multiplier
    precision^-1/2. Building that one PLD is exact and avoids the discretisation error (and
    time) of composing many (DPSE's stage 1 and its per-group rounds)."""
    if isinstance(event, dp_event.GaussianDpEvent):
        return float(event.noise_multiplier) ** -2
    if isinstance(event, dp_event.SelfComposedDpEvent):
        inner = _gaussian_precision(event.event)
        return None if inner is None else event.count * inner
    if isinstance(event, dp_event.ComposedDpEvent) and event.events:
        total = 0.0
        for part in event.events:
            if (inner := _gaussian_precision(part)) is None:
                return None
            total += inner
        return total
    return None


def build(event: dp_event.DpEvent, interval: float, pessimistic: bool = True) -> PLD:
    """The PLD (add/remove-one neighbours unless the event says otherwise) of `event`.
    `pessimistic=False` rounds the other way, giving a lower bound on epsilon (for
    cross-checks); the two custom releases have no such form and raise NoOptimisticBound.

    Compositions are built from their parts' PLDs, and each part that is built from scratch
    (one release, sampled or not, or unsampled Gaussians merged into one) comes from a cache
    (`_cached`): a step-count calibration's probes then only self-compose one PLD. The result
    may be a cached object: treat it as immutable (dp-accounting's compose, self_compose and
    epsilon/delta queries return new objects and never modify their operands)."""
    if _gaussian_precision(event) is None:
        if isinstance(event, dp_event.ComposedDpEvent):
            result = pld_lib.identity(interval, pessimistic)
            for part in event.events:
                result = result.compose(build(part, interval, pessimistic))
            return result
        if isinstance(event, dp_event.SelfComposedDpEvent):
            return build(event.event, interval, pessimistic).self_compose(event.count)
    return _cached(event, interval, pessimistic)


_cache: OrderedDict[Hashable, PLD] = OrderedDict()
_cache_lock = threading.Lock()


def event_key(value: Any) -> Hashable | None:
    """An exact hashable form of a DpEvent (attrs classes; `ComposedDpEvent` holds a list, so
    events are not hashable themselves): class, then each field, scalars as (type, repr).
    `repr` round-trips floats exactly and tells -0.0 from 0.0. None (do not cache) if a field
    holds anything else, e.g. an array, whose repr may elide values."""
    if isinstance(value, dp_event.DpEvent) and attrs.has(type(value)):
        fields = [event_key(getattr(value, f.name)) for f in attrs.fields(type(value))]
        return None if None in fields else (type(value), *fields)
    if isinstance(value, list | tuple):
        items = [event_key(v) for v in value]
        return None if None in items else (type(value), *items)
    if value is None or type(value) in (bool, int, float, str):
        return type(value), repr(value)
    return None


def _cached(event: dp_event.DpEvent, interval: float, pessimistic: bool) -> PLD:
    """`_build_one(event, ...)`, built once per distinct (event, interval, pessimistic) and
    kept in a least-recently-used cache of `MAX_CACHED_PLDS`. A hit is the PLD the miss built,
    so its epsilons are identical to the last digit."""
    key = event_key(event)
    if key is None:
        return _build_one(event, interval, pessimistic)
    full_key = (key, type(interval), repr(interval), bool(pessimistic))
    with _cache_lock:
        if (hit := _cache.get(full_key)) is not None:
            _cache.move_to_end(full_key)
            return hit
    built = _build_one(event, interval, pessimistic)
    with _cache_lock:
        _cache[full_key] = built
        while len(_cache) > MAX_CACHED_PLDS:
            _cache.popitem(last=False)
    return built


def clear_cache() -> None:
    """Empty the one-step PLD cache (tests compare cached and freshly built PLDs)."""
    with _cache_lock:
        _cache.clear()


def _build_one(event: dp_event.DpEvent, interval: float, pessimistic: bool) -> PLD:
    """The PLD of one release (or unsampled Gaussians, merged), built from scratch."""
    if isinstance(event, dp_event.NoOpDpEvent):
        return pld_lib.identity(interval, pessimistic)
    if (precision := _gaussian_precision(event)) is not None:  # one Gaussian, exactly
        return pld_vectorised.gaussian(precision**-0.5, interval, pessimistic=pessimistic)
    if isinstance(event, dp_event.RandomizedResponseDpEvent):
        return pld_lib.from_randomized_response(
            event.noise_parameter,
            event.num_buckets,
            pessimistic_estimate=pessimistic,
            value_discretization_interval=interval,
        )
    if not pessimistic and isinstance(event, SubstitutionSampledDpEvent):
        raise NoOptimisticBound("substitution-sampled release")
    if isinstance(event, SubstitutionSampledDpEvent):
        sigma, laplace = one_batch(event.event)
        if laplace is not None:
            raise ConfigError("substitution-sampled Laplace releases are not supported")
        if sigma is None:
            raise ConfigError(f"substitution-sampled release without a Gaussian: {event}")
        return _substitution_gaussian(event.sampling_probability, sigma, interval)
    q = 1.0
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        q, event = event.sampling_probability, event.event
    sigma, laplace = one_batch(event)
    if sigma is None and laplace is None:
        raise ConfigError(f"a sampled event that releases nothing: {event}")
    if laplace is None:
        assert sigma is not None
        return pld_vectorised.gaussian(sigma, interval, q, pessimistic)
    if sigma is None:
        return pld_vectorised.laplace(laplace, interval, q, pessimistic)
    if not pessimistic:
        raise NoOptimisticBound("Gaussian and Laplace releases on one batch")
    return _shared_gauss_laplace(q, sigma, laplace, interval)
