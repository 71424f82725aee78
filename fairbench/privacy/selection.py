"""Private selection with a random number of candidates, accounted as one event.

Papernot and Steinke (2022), "Hyperparameter tuning with Renyi differential privacy": run a
candidate mechanism Q (train one configuration, score it privately) K times with K drawn from
a known law, independently of the data, and release only the best run and its score. The
whole procedure's RDP is bounded from Q's RDP alone, whatever K turned out to be, so the
privacy of tuning is paid once, not K times. dp-accounting represents it as
`RepeatAndSelectDpEvent(Q, mean, shape)` and only its RDP accountant supports that event:
the suite's PLD accountant cannot represent it, so private selection is accounted by RDP
(an upper bound like the PLD's, usually a looser one) and every output says so.

The bound needs the K runs to be independent repetitions of one mechanism: the caller gives
every candidate its own noise and checks that every candidate runs the same accounted
mechanism (`RepeatAndSelectDpEvent` takes one event).

Two laws for K (Papernot and Steinke, Section 2): Poisson(mean) (K may be 0: nothing is
released) and the truncated negative binomial (eta, gamma), P(K = k) proportional to
C(k + eta - 1, k) (1 - gamma)^k for k >= 1 (eta = 0: the logarithmic law, proportional to
(1 - gamma)^k / k; eta = 1: the geometric law).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Annotated, Literal

import numpy as np
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant
from pydantic import BaseModel, ConfigDict, Field
from scipy.special import gammaln

from fairbench.errors import CalibrationError, ConfigError
from fairbench.privacy.pld import SubstitutionSampledDpEvent

ACCOUNTANT = "rdp"  # dp-accounting's RdpAccountant, default orders, add/remove-one neighbours
PLD_NOTE = (
    "accounted by dp-accounting's RDP accountant: the suite's PLD accountant cannot represent "
    "a RepeatAndSelectDpEvent"
)
RELAXED_NOTE = (
    "Poisson-sampled releases of {n} kind(s) whose RDP dp-accounting cannot compute (a "
    "Laplace on the batch) are accounted as if run on the whole data (amplification by "
    "sampling ignored: an upper bound)"
)


class _Law(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PoissonCount(_Law):
    """K ~ Poisson(mean); K = 0 releases nothing."""

    law: Literal["poisson"]
    mean: float = Field(ge=1, description="expected number of candidates (>= 1)")

    @property
    def shape(self) -> float:
        return math.inf  # dp-accounting's shape for the Poisson law

    @property
    def expected(self) -> float:
        return self.mean

    def sample(self, rng: np.random.Generator) -> int:
        return int(rng.poisson(self.mean))

    def pmf(self, k: int) -> float:
        return math.exp(k * math.log(self.mean) - self.mean - math.lgamma(k + 1))


class TruncatedNegativeBinomialCount(_Law):
    """K >= 1 with P(K = k) proportional to C(k + eta - 1, k) (1 - gamma)^k."""

    law: Literal["truncated_negative_binomial"]
    eta: float = Field(ge=0, description="shape: 0 logarithmic, 1 geometric")
    gamma: float = Field(gt=0, lt=1, description="success probability")

    @property
    def shape(self) -> float:
        return self.eta

    @property
    def expected(self) -> float:
        """eta (1 - gamma) / (gamma (1 - gamma^eta)); (1 - gamma) / (gamma ln(1/gamma)) at eta 0."""
        g, eta = self.gamma, self.eta
        if eta == 0:
            return (1 - g) / (g * math.log(1 / g))
        return eta * (1 - g) / (g * -math.expm1(eta * math.log(g)))

    def sample(self, rng: np.random.Generator) -> int:
        if self.eta == 0:
            return int(rng.logseries(1 - self.gamma))
        while True:  # the negative binomial conditioned on K >= 1, by rejection
            k = int(rng.negative_binomial(self.eta, self.gamma))
            if k >= 1:
                return k

    def pmf(self, k: int) -> float:
        if k < 1:
            return 0.0
        g, eta = self.gamma, self.eta
        if eta == 0:
            return (1 - g) ** k / (k * math.log(1 / g))
        log_nb = gammaln(k + eta) - gammaln(eta) - gammaln(k + 1) + eta * math.log(g)
        return float(math.exp(log_nb + k * math.log1p(-g)) / -math.expm1(eta * math.log(g)))


CountLaw = Annotated[PoissonCount | TruncatedNegativeBinomialCount, Field(discriminator="law")]


def repeat_and_select(candidate: dp_event.DpEvent, law: CountLaw) -> dp_event.DpEvent:
    """The whole selection as one event (the law enters through its mean and shape)."""
    return dp_event.RepeatAndSelectDpEvent(candidate, law.expected, law.shape)


def selection_epsilon(event: dp_event.DpEvent, delta: float) -> float:
    """Epsilon at `delta` of `event` by dp-accounting's RDP accountant (default orders). Its
    warnings (a fractional order whose series did not converge is left out; the bound takes
    the minimum over the others, still an upper bound) are silenced: calibration evaluates
    this dozens of times."""
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        return float(RdpAccountant().compose(event).get_epsilon(delta))
    finally:
        absl.setLevel(level)


def rdp_form(event: dp_event.DpEvent) -> tuple[dp_event.DpEvent, int]:
    """`event` in a form the RDP accountant supports, and how many releases were relaxed.

    A Poisson-sampled release whose inner event is not Gaussian (RaCO-DP's and PF-LD's
    Laplace on the batch) has no RDP formula in dp-accounting; it is replaced by its inner
    event run on the whole data. That is an upper bound: under add/remove neighbours the
    sampled mechanism's output is a mixture (1 - q) P + q Q against P, and Renyi divergence
    is jointly quasi-convex, so neither direction exceeds the unsampled pair's divergence.
    A sensitive-attribute-only release (`SubstitutionSampledDpEvent`) is refused: private
    selection is stated for the whole record."""
    if isinstance(event, SubstitutionSampledDpEvent):
        raise ConfigError(
            "private selection accounts whole-record DP; a sensitive-attribute-only release "
            "cannot be accounted: run the method in the full privacy notion"
        )
    if isinstance(event, dp_event.ComposedDpEvent):
        parts = [rdp_form(e) for e in event.events]
        return dp_event.ComposedDpEvent([e for e, _ in parts]), sum(n for _, n in parts)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        inner, relaxed = rdp_form(event.event)
        return dp_event.SelfComposedDpEvent(inner, event.count), relaxed
    if RdpAccountant().supports(event):
        return event, 0
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        inner, relaxed = rdp_form(event.event)
        return inner, relaxed + 1
    raise ConfigError(f"the RDP accountant cannot account {type(event).__name__}")


def candidates_epsilon(candidates: list[dp_event.DpEvent], law: CountLaw, delta: float) -> float:
    """Epsilon at `delta` of a private selection whose candidates run different mechanisms
    (several methods, or spaces that change the batch or the epochs): each repetition picks
    its mechanism independently of the data, so its output is a mixture of theirs, and
    Renyi divergence is quasi-convex: the mixture's RDP curve lies below the pointwise
    maximum of theirs. The repeat-and-select bound is applied to that maximum, with
    dp-accounting's own formula (`_compute_rdp_repeat_and_select`, module-private: pinned by
    a test to equal the accountant's result for one candidate) and conversion."""
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    if not candidates:  # every candidate runs nothing: nothing is released or spent
        return 0.0
    absl = logging.getLogger("absl")
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        curves = []
        for event in candidates:
            accountant = RdpAccountant()
            accountant.compose(event)
            curves.append(accountant._rdp)
        orders = RdpAccountant()._orders
        worst = np.max(np.asarray(curves), axis=0)
        curve = rdp._compute_rdp_repeat_and_select(orders, worst, law.expected, law.shape)
        return float(rdp.compute_epsilon(orders, curve, delta)[0])
    finally:
        absl.setLevel(level)


def calibrate_candidate(
    target: float,
    delta: float,
    law: CountLaw,
    candidate: Callable[[float], dp_event.DpEvent | list[dp_event.DpEvent]],
    rel_tol: float = 5e-3,
) -> tuple[float, float]:
    """The largest per-candidate budget b (to `rel_tol`) whose selection meets the target:
    (b, total epsilon at b). `candidate(b)` is the candidate's event at budget b in RDP form
    (or the list of the distinct candidates' events: `candidates_epsilon`)
    (it raises `CalibrationError` where the method cannot be calibrated); the total grows with
    b, so b is bracketed by doubling or halving from `target`, then bisected geometrically.
    """

    def total(budget: float) -> float:
        events = candidate(budget)
        if isinstance(events, list):
            return candidates_epsilon(events, law, delta)
        return selection_epsilon(repeat_and_select(events, law), delta)

    def fails(budget: float, why: str) -> CalibrationError:
        return CalibrationError(
            f"private selection cannot meet epsilon {target:g} with {law.expected:.3g} expected "
            f"candidates: a candidate's budget would be {budget:.3g} or less ({why}); lower "
            "the count law's mean, raise epsilon, or give the method more noise"
        )

    low = high = target
    try:
        while total(high) <= target:
            low, high = high, high * 2
        while total(low) > target:
            low, high = low / 2, low
            if low < target * 1e-4:
                raise fails(low, "no budget that small calibrates")
    except CalibrationError as exc:
        raise fails(low, str(exc)) from None
    while high / low > 1 + rel_tol:
        mid = math.sqrt(low * high)  # feasible: calibration only gets easier above `low`
        low, high = (mid, high) if total(mid) <= target else (low, mid)
    return low, total(low)
