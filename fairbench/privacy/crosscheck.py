"""Independent re-accounting of a ledger, to bracket the epsilon the suite reports.

- `pld_optimistic`: the same PLD with every discretisation rounded the other way, a lower
  bound: the reported (pessimistic) epsilon must not fall below it. A Gaussian + Laplace on
  one batch has no optimistic form; either release alone gives a (looser) lower bound.
- `rdp`: Renyi DP, a different method and an upper bound: the reported epsilon must not
  exceed it. dp-accounting's RDP for Gaussians (those sharing a Poisson batch merged into the
  one Gaussian they equal); a Laplace sharing a batch with them goes through Zhu & Wang's
  general bound for Poisson-subsampled mechanisms. Releases RDP cannot express: None.
- `laplace_closed_form`: for unsampled Laplace releases only, sum count / scale (delta = 0).
None means the method does not apply to this ledger.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant
from scipy.special import gammaln, logsumexp

from fairbench.privacy import events, pld
from fairbench.privacy.accountant import REPORT_DISCRETISATION, epsilon
from fairbench.privacy.ledger import PrivacyLedger

RDP_TOLERANCE = 1e-3  # relative: the PLD must not exceed RDP by more than this
OPTIMISTIC_TOLERANCE = 1e-6


class _NotExpressible(Exception):
    """A release this module has no independent RDP form for."""


_DEFAULT_ORDERS = np.asarray(rdp_privacy_accountant.RdpAccountant().orders)
_INTEGER_ORDERS = np.arange(2, 257)


def _shared_pair(event: dp_event.DpEvent) -> tuple[float, float | None, float] | None:
    """(q, sigma, Laplace scale) when `event` is one Poisson batch with a Laplace among its
    releases (RaCO-DP's step), else None."""
    if isinstance(event, dp_event.PoissonSampledDpEvent) and isinstance(
        event.event, dp_event.ComposedDpEvent
    ):
        sigma, laplace = pld.one_batch(event.event)
        if laplace is not None:
            return event.sampling_probability, sigma, laplace
    return None


def _children(event: dp_event.DpEvent) -> list[dp_event.DpEvent]:
    if isinstance(event, dp_event.ComposedDpEvent):
        return list(event.events)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return [event.event]
    return []


def _has_shared_pair(event: dp_event.DpEvent) -> bool:
    return _shared_pair(event) is not None or any(map(_has_shared_pair, _children(event)))


def _laplace_rdp(scale: float, orders: np.ndarray) -> np.ndarray:
    """RDP of the Laplace mechanism, l1 sensitivity 1 (Mironov 2017, Table II)."""
    a, r = orders.astype(float), 1.0 / scale
    terms = np.logaddexp(
        np.log(a / (2 * a - 1)) + (a - 1) * r, np.log((a - 1) / (2 * a - 1)) - a * r
    )
    return terms / (a - 1)


def _poisson_rdp_upper(q: float, base: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """Zhu & Wang (2019), Theorem 6: an upper bound on the RDP of any mechanism with RDP
    `base` (at integer orders 2, 3, ...) run on a Poisson sample of rate q."""
    cgf = (orders - 1) * base  # (l - 1) eps(l) at l = orders
    out = np.empty(len(orders))
    for i, a in enumerate(orders.astype(int)):
        if q >= 1:
            out[i] = base[i]
            continue
        ls = np.arange(2, a + 1)
        log_binom = gammaln(a + 1) - gammaln(ls + 1) - gammaln(a - ls + 1)
        terms = log_binom + ls * math.log(q) + (a - ls) * math.log1p(-q) + cgf[ls - 2]
        terms[1:] += math.log(3.0)
        first = (a - 1) * math.log1p(-q) + math.log1p((a - 1) * q)
        out[i] = logsumexp(np.append(terms, first)) / (a - 1)
    return out


def _rdp(event: dp_event.DpEvent, orders: np.ndarray) -> np.ndarray:
    """The RDP curve of `event` at `orders`, composing what dp-accounting cannot express."""
    if isinstance(event, dp_event.NoOpDpEvent):
        return np.zeros(len(orders))
    if isinstance(event, dp_event.ComposedDpEvent):
        return sum((_rdp(e, orders) for e in event.events), np.zeros(len(orders)))
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return event.count * _rdp(event.event, orders)
    pair = _shared_pair(event)
    if pair is not None:
        q, sigma, laplace = pair
        base = _laplace_rdp(laplace, orders)
        if sigma is not None:
            base = base + orders / (2 * sigma**2)
        return _poisson_rdp_upper(q, base, orders)
    if isinstance(event, dp_event.PoissonSampledDpEvent) and isinstance(
        event.event, dp_event.ComposedDpEvent
    ):  # Gaussians sharing a batch are one Gaussian (an exact identity)
        sigma, _ = pld.one_batch(event.event)
        if sigma is None:  # nothing released on the batch: no Gaussian to stand for it
            raise _NotExpressible(f"no Gaussian on one batch: {event}")
        event = dp_event.PoissonSampledDpEvent(
            event.sampling_probability, dp_event.GaussianDpEvent(float(sigma))
        )
    accountant = rdp_privacy_accountant.RdpAccountant(orders=list(orders))
    try:
        accountant.compose(event)
    except Exception as exc:  # dp-accounting raises several kinds for unsupported events
        raise _NotExpressible(str(exc)) from exc
    return np.asarray(accountant.rdp)


def rdp_epsilon(event: dp_event.DpEvent, delta: float) -> float | None:
    """Epsilon by RDP, an upper bound independent of the PLD; None when inexpressible.
    Integer orders when a Laplace shares a Poisson batch (the general subsampling bound
    needs them), dp-accounting's default orders otherwise."""
    orders = _INTEGER_ORDERS if _has_shared_pair(event) else _DEFAULT_ORDERS
    absl = logging.getLogger("absl")  # RDP logs each order it drops as non-convergent
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        with np.errstate(over="ignore"):
            curve = _rdp(event, orders)
        return float(rdp_privacy_accountant.compute_epsilon(orders, curve, delta)[0])
    except _NotExpressible:
        return None
    finally:
        absl.setLevel(level)


def _without(event: dp_event.DpEvent, kind: type) -> dp_event.DpEvent:
    """`event` with every release of `kind` on a shared batch dropped: releasing less is
    post-processing, so its epsilon is a lower bound on the original's."""
    if isinstance(event, dp_event.ComposedDpEvent):
        return dp_event.ComposedDpEvent([_without(e, kind) for e in event.events])
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return dp_event.SelfComposedDpEvent(_without(event.event, kind), event.count)
    pair = _shared_pair(event)
    if pair is None:
        return event
    q, sigma, laplace = pair
    if kind is dp_event.GaussianDpEvent or sigma is None:
        return dp_event.PoissonSampledDpEvent(q, dp_event.LaplaceDpEvent(laplace))
    return dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma))


def optimistic_epsilon(event: dp_event.DpEvent, delta: float) -> float | None:
    """A lower bound: the optimistic PLD of `event`; where a Gaussian and a Laplace share a
    batch (no optimistic form), the larger optimistic PLD of either release alone."""

    def low(e: dp_event.DpEvent) -> float:
        with np.errstate(over="ignore", divide="ignore"):
            built = pld.build(e, REPORT_DISCRETISATION, pessimistic=False)
            return float(built.get_epsilon_for_delta(delta))

    try:
        if not _has_shared_pair(event):
            return low(event)
        kinds = (dp_event.GaussianDpEvent, dp_event.LaplaceDpEvent)
        return max(low(_without(event, kind)) for kind in kinds)
    except pld.NoOptimisticBound:
        return None


def laplace_closed_form(event: dp_event.DpEvent) -> float | None:
    if isinstance(event, dp_event.NoOpDpEvent):
        return 0.0
    if isinstance(event, dp_event.LaplaceDpEvent):
        return 1.0 / event.noise_multiplier
    if isinstance(event, dp_event.SelfComposedDpEvent):
        inner = laplace_closed_form(event.event)
        return None if inner is None else event.count * inner
    if isinstance(event, dp_event.ComposedDpEvent):
        total = 0.0
        for part in event.events:
            if (inner := laplace_closed_form(part)) is None:
                return None
            total += inner
        return total
    return None


def cross_check(event: dp_event.DpEvent, delta: float, reported: float) -> dict[str, Any]:
    """The independent figures for `event` and whether `reported` sits within them (none for
    an event declared not accounted: its epsilon is infinite by declaration)."""
    if events.not_accounted(event):
        return {"pld_optimistic": None, "rdp": None, "laplace_closed_form": None, "problems": []}
    optimistic = optimistic_epsilon(event, delta)
    rdp = rdp_epsilon(event, delta)
    closed = laplace_closed_form(event)
    problems = []
    if optimistic is not None and reported < optimistic - OPTIMISTIC_TOLERANCE:
        problems.append(f"below the optimistic PLD {optimistic:.6g}")
    for name, bound in (("RDP", rdp), ("Laplace closed form", closed)):
        if bound is not None and math.isfinite(bound) and reported > bound * (1 + RDP_TOLERANCE):
            problems.append(f"above the {name} upper bound {bound:.6g}")
    return {
        "pld_optimistic": optimistic,
        "rdp": rdp,
        "laplace_closed_form": closed,
        "problems": problems,
    }


def check_ledger(ledger: PrivacyLedger, delta: float, reported: float) -> dict[str, Any]:
    """Cross-check a ledger's reported epsilon (the worst group's, under parallel
    composition)."""
    if not ledger.entries:  # nothing was released: nothing to check
        return {"pld_optimistic": None, "rdp": None, "laplace_closed_form": None, "problems": []}
    event = ledger.event
    if ledger.parallel_groups and ledger.groups:
        worst = max(ledger.groups, key=lambda g: epsilon(ledger.group_event(g), delta))
        event = ledger.group_event(worst)
    return cross_check(event, delta, reported)
