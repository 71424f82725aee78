"""Independent re-accounting of a ledger, to bracket the epsilon the suite reports.

- `pld_optimistic`: the same PLD with every discretisation rounded the other way, a lower
  bound: the reported (pessimistic) epsilon must not fall below it.
- `rdp`: dp-accounting's RDP accountant, a different method and an upper bound: the reported
  epsilon must not exceed it. Gaussians sharing a Poisson batch are first merged into the one
  Gaussian they equal; releases RDP cannot express are left out (None).
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

from fairbench.privacy import pld
from fairbench.privacy.accountant import REPORT_DISCRETISATION, epsilon
from fairbench.privacy.ledger import PrivacyLedger

RDP_TOLERANCE = 1e-3  # relative: the PLD must not exceed RDP by more than this
OPTIMISTIC_TOLERANCE = 1e-6


def _for_rdp(event: dp_event.DpEvent) -> dp_event.DpEvent:
    """`event` with Gaussians sharing a Poisson batch merged (an exact identity)."""
    if isinstance(event, dp_event.ComposedDpEvent):
        return dp_event.ComposedDpEvent([_for_rdp(e) for e in event.events])
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return dp_event.SelfComposedDpEvent(_for_rdp(event.event), event.count)
    if isinstance(event, dp_event.PoissonSampledDpEvent) and isinstance(
        event.event, dp_event.ComposedDpEvent
    ):
        sigma, laplace = pld.one_batch(event.event)
        if laplace is None:
            return dp_event.PoissonSampledDpEvent(
                event.sampling_probability, dp_event.GaussianDpEvent(sigma)
            )
    return event


def rdp_epsilon(event: dp_event.DpEvent, delta: float) -> float | None:
    accountant = rdp_privacy_accountant.RdpAccountant()
    absl = logging.getLogger("absl")  # RDP logs each order it drops as non-convergent
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        accountant.compose(_for_rdp(event))
        return float(accountant.get_epsilon(delta))
    except Exception:  # dp-accounting raises several kinds for unsupported events
        return None
    finally:
        absl.setLevel(level)


def laplace_closed_form(event: dp_event.DpEvent) -> float | None:
    if isinstance(event, dp_event.NoOpDpEvent):
        return 0.0
    if isinstance(event, dp_event.LaplaceDpEvent):
        return 1.0 / event.noise_multiplier
    if isinstance(event, dp_event.SelfComposedDpEvent):
        inner = laplace_closed_form(event.event)
        return None if inner is None else event.count * inner
    if isinstance(event, dp_event.ComposedDpEvent):
        parts = [laplace_closed_form(e) for e in event.events]
        return None if any(p is None for p in parts) else sum(parts)
    return None


def cross_check(event: dp_event.DpEvent, delta: float, reported: float) -> dict[str, Any]:
    """The independent figures for `event` and whether `reported` sits within them."""
    try:
        with np.errstate(over="ignore", divide="ignore"):
            low = pld.build(event, REPORT_DISCRETISATION, pessimistic=False)
            optimistic = float(low.get_epsilon_for_delta(delta))
    except pld.NoOptimisticBound:
        optimistic = None
    rdp = rdp_epsilon(event, delta)
    closed = laplace_closed_form(event)
    problems = []
    if optimistic is not None and reported < optimistic - OPTIMISTIC_TOLERANCE:
        problems.append(f"below the optimistic PLD {optimistic:.6g}")
    for name, bound in (("RDP", rdp), ("Laplace closed form", closed)):
        if bound is not None and math.isfinite(bound) and reported > bound * (1 + RDP_TOLERANCE):
            problems.append(f"above the {name} upper bound {bound:.6g}")
    return {"pld_optimistic": optimistic, "rdp": rdp, "laplace_closed_form": closed,
            "problems": problems}  # fmt: skip


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
