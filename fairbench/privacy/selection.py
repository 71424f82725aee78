"""Private selection with a random number of candidates, accounted as one event.

Papernot and Steinke (2022), "Hyperparameter tuning with Renyi differential privacy": run a
candidate mechanism Q (train one configuration, score it privately) K times with K drawn from
a known law, independently of the data, and release only the best run and its score. The
whole procedure's RDP is bounded from Q's RDP alone, whatever K turned out to be, so the
privacy of tuning is paid once, not K times. dp-accounting represents it as
`RepeatAndSelectDpEvent(Q, mean, shape)` and only its RDP accountant supports that event:
the suite's PLD accountant cannot represent it, so private selection is accounted by RDP
(an upper bound like the PLD's, usually a looser one) and every output says so. Q's curve is
the suite's own (`privacy.rdp`: exact at integer orders, Poisson amplification kept for a
Laplace sharing the batch, which dp-accounting's accountant cannot compute); the
repeat-and-select formula and the conversion to (epsilon, delta) are dp-accounting's.

The bound needs the K runs to be independent repetitions (the caller gives every candidate
its own noise). Candidates may run different mechanisms: see `selection_curve`.

Two laws for K (Papernot and Steinke, Section 2): Poisson(mean) (K may be 0: nothing is
released) and the truncated negative binomial (eta, gamma), P(K = k) proportional to
C(k + eta - 1, k) (1 - gamma)^k for k >= 1 (eta = 0: the logarithmic law, proportional to
(1 - gamma)^k / k; eta = 1: the geometric law).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Literal

import numpy as np
from dp_accounting import dp_event
from dp_accounting.rdp.rdp_privacy_accountant import _compute_rdp_repeat_and_select
from pydantic import BaseModel, ConfigDict, Field
from scipy.special import gammaln

from fairbench.errors import CalibrationError
from fairbench.privacy import rdp

ACCOUNTANT = "rdp"  # the suite's RDP curves (`privacy.rdp`), dp-accounting's formula and conversion
PLD_NOTE = (
    "accounted by RDP (exact sampled curves at integer orders, the pointwise maximum over the "
    "candidates' mechanisms): the suite's PLD accountant cannot represent a "
    "RepeatAndSelectDpEvent"
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


def selection_curve(candidates: list[dp_event.DpEvent], law: CountLaw) -> np.ndarray:
    """RDP curve (at `rdp.ORDERS`) of a private selection whose candidates run the mechanisms
    `candidates` (one per distinct mechanism; several methods, or spaces that change the batch,
    the epochs or a Laplace scale). Each repetition picks its mechanism independently of the
    data, so its output is a mixture of theirs, and Renyi divergence is quasi-convex: the
    mixture's curve lies below the pointwise maximum of theirs. The repeat-and-select bound
    (Papernot and Steinke 2022, Theorems 2 and 6) is applied to that maximum with
    dp-accounting's formula (`_compute_rdp_repeat_and_select`, module-private: a test pins it
    to the accountant's own result for one candidate)."""
    worst = np.max([rdp.rdp_curve(event) for event in candidates], axis=0)
    orders = np.asarray(rdp.ORDERS, dtype=float)
    return np.asarray(_compute_rdp_repeat_and_select(orders, worst, law.expected, law.shape))


def selection_epsilon(candidates: list[dp_event.DpEvent], law: CountLaw, delta: float) -> float:
    """Epsilon at `delta` of the private selection over `candidates` (`selection_curve`);
    no candidate (every draw runs nothing) releases nothing and spends nothing."""
    if not candidates:
        return 0.0
    return rdp.epsilon(selection_curve(candidates, law), delta)


def calibrate_candidate(
    target: float,
    delta: float,
    law: CountLaw,
    candidates: Callable[[float], list[dp_event.DpEvent]],
    rel_tol: float = 5e-3,
) -> tuple[float, float]:
    """The largest per-candidate budget b (to `rel_tol`) whose selection meets the target:
    (b, total epsilon at b). `candidates(b)` is the list of the distinct candidate mechanisms
    at budget b (`selection_epsilon`; it raises `CalibrationError` where none can be
    calibrated); the total grows with b, so b is bracketed by doubling or halving from
    `target`, then the bracket is narrowed to `rel_tol`: each round places a bracket of that
    width around the secant root of log total against log b (smooth, nearly linear), and
    keeps it when it straddles the target, else the half it lies in. Each evaluation
    calibrates every candidate's own noise, so few evaluations matter: about six where a
    bisection needs twelve."""

    def total(budget: float) -> float:
        return selection_epsilon(candidates(budget), law, delta)

    def fails(budget: float, why: str) -> CalibrationError:
        return CalibrationError(
            f"private selection cannot meet epsilon {target:g} with {law.expected:.3g} expected "
            f"candidates: a candidate's budget would be {budget:.3g} or less ({why}); lower "
            "the count law's mean, raise epsilon, or give the method more noise"
        )

    low = high = target
    known: dict[float, float] = {}

    def at(budget: float) -> float:
        if budget not in known:
            known[budget] = total(budget)
        return known[budget]

    try:
        while at(high) <= target:
            low, high = high, high * 2
        while at(low) > target:
            low, high = low / 2, low
            if low < target * 1e-4:
                raise fails(low, "no budget that small calibrates")
    except CalibrationError as exc:
        raise fails(low, str(exc)) from None
    # feasible at `low`: calibration only gets easier above it, so no bracket point fails
    step = math.log1p(rel_tol) / 2
    secant = True  # a round whose bracket missed the target bisects next: halving is assured
    while math.log(high / low) > 2 * step * (1 + 1e-6):  # (floating error: no round is idle)
        x_lo, x_hi = math.log(low), math.log(high)
        with np.errstate(divide="ignore", invalid="ignore"):
            f_lo, f_hi = np.log(at(low) / target), np.log(at(high) / target)
            root = x_hi - f_hi * (x_hi - x_lo) / (f_hi - f_lo)
        if not (secant and math.isfinite(root)):
            root = (x_lo + x_hi) / 2
        root = min(max(root, x_lo + step), x_hi - step)
        below, above = math.exp(root - step), math.exp(root + step)
        if at(below) > target:
            high, secant = below, False
        elif at(above) <= target:
            low, secant = above, False
        else:
            low, high = below, above
    return low, at(low)
