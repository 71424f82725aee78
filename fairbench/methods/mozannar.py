"""`mozannar`: fair learning with a locally private sensitive attribute (Mozannar, Ohannessian
and Srebro, ICML 2020): each record's group is released once by k-ary randomized response at
epsilon_A, the features and labels are public, and fairlearn's ExponentiatedGradient (as in
`fairlearn-eg`) is trained against the privatized groups with its constraint corrected for the
response's known flip probabilities.

1. Release (`PrivacySession.randomized_response`): Z = A with probability
   pi = e^eps / (e^eps + k - 1), else one of the other k - 1 groups uniformly (the paper's
   mechanism Q, Sec. 3). Pure epsilon_A-DP for each record's attribute with no curator (local
   DP); the trial's row says `local-dp-attribute`, and no report mixes it with whole-record
   DP. epsilon_A is the trial's target epsilon, lowered (by at most one discretisation
   interval) where the suite's pessimistic PLD would report more at the target's delta
   (`accountant.calibrate_randomized_response`); the row's `epsilon_A` is the value run.
2. Corrected constraint (the paper's Sec. 4: with Yhat = h(X), P(Yhat = 1 | Z = z, Y = y) =
   sum_a P(A = a | Z = z, Y = y) P(Yhat = 1 | A = a, Y = y), so the rates given A are
   recovered from those given Z through the known channel). With Q[z, a] = P(Z = z | A = a),
   w_i(a) = Q^-1[a, Z_i] = (1[a = Z_i] - off) / (pi - off), off = (1 - pi) / (k - 1), has
   expectation 1[A_i = a] over the response. Every group indicator in fairlearn's moment
   (`DemographicParity`, `EqualizedOdds`: each group's rate against the overall rate) is
   replaced by w_i(a), and each P(A = a, event) by its estimate sum_i w_i(a) 1[event_i] / n
   (the authors' `compute_pya` inversion). The corrected rates are linear in h, so EG's
   reduction to cost-sensitive classification is unchanged; for two groups the corrected gap
   is the gap on Z divided by the paper's factor P(A=0 | Z=0, y) - P(A=0 | Z=1, y) (tested).
   The knob is the corrected constraint's `difference_bound`, as for `fairlearn-eg`.

Choices where the paper or the authors' code is loose (and why):
- The authors' notebook trains step 1 with plain EG on Z (and their two-step method adds a
  post-processing that reads Z at test time); the corrected moment follows the paper's
  analysis, not their code (`reconstructed`). The post-processing step is not implemented:
  this plugin needs no attribute at test time.
- Estimated P(A = a, event) can be <= 0 at small epsilon_A (the inversion of noisy counts);
  it is floored at 1/n (public), and the row's `floored_cells` counts how often.
- Linear only, as `fairlearn-eg` (its docstring says why); binary labels; any k >= 2 groups.
- Deterministic given Z: the randomness is the response, drawn from the trial's session stream
  "noise/<label>" (seeded per trial), or OpenDP's exact sampler with `secure_noise`.

Needs the optional extra: `pip install 'dp-fairbench[fairlearn]'`.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Literal

import numpy as np
from dp_accounting import dp_event
from pydantic import Field, field_validator

from fairbench import constraints
from fairbench.errors import ConfigError
from fairbench.methods.engine import Outcome, TrainingProgram
from fairbench.methods.fairlearn_eg import MOMENTS, FairlearnEG, FairlearnEGHparams
from fairbench.methods.plan import DataShape, Plan
from fairbench.methods.trial import FairnessSpec, Trial
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.accountant import calibrate_randomized_response
from fairbench.privacy.events import keep_probability, randomized_response
from fairbench.privacy.session import Guarantee, PrivacyNotion

RELEASE = "mozannar: randomized response of the sensitive attribute"


class MozannarHparams(FairlearnEGHparams):
    privacy_notion: Literal["local-dp-attribute"] = Field(
        "local-dp-attribute", description="the only one: local DP of each record's attribute"
    )

    @field_validator("model", mode="before")
    @classmethod
    def _linear_only(cls, value):
        if value != "logistic":
            raise ValueError(
                f"mozannar is linear-only (got model: {value}): its base learner is "
                "scikit-learn's LogisticRegression, as fairlearn-eg's"
            )
        return value


def channel_inverse(event: dp_event.RandomizedResponseDpEvent) -> np.ndarray:
    """Q^-1 for Q[z, a] = P(Z = z | A = a): (1[a = z] - off) / (pi - off), since
    Q = (pi - off) I + off 1 1^T and pi + (k - 1) off = 1."""
    k, keep = event.num_buckets, keep_probability(event)
    off = (1 - keep) / (k - 1)
    return (np.eye(k) - off) / (keep - off)


def corrected_indicators(z: np.ndarray, event: dp_event.RandomizedResponseDpEvent) -> np.ndarray:
    """(n, k): w[i, a] = Q^-1[a, z_i], whose expectation over the response is 1[A_i = a]."""
    return channel_inverse(event)[:, np.asarray(z, dtype=np.int64)].T


def correct(moment: Any, event: dp_event.RandomizedResponseDpEvent) -> None:
    """Rewrite a loaded fairlearn `UtilityParity` moment (difference form, fairlearn 0.15's
    `U` matrix: gamma = -U^T h / n, signed weights = U lambda) on privatized groups so that
    each group's indicator is its unbiased estimate `corrected_indicators` and each
    P(group, event) its estimate from them, floored at 1/n (`floored_cells` counts them)."""
    tags, n, k = moment.tags, moment.total_samples, event.num_buckets
    z = tags["group_id"].to_numpy().astype(np.int64)
    weights = corrected_indicators(z, event)
    present = set(moment.prob_group_event.index)
    for e in moment.prob_event.index:
        missing = [g for g in range(k) if (e, g) not in present]
        if missing:
            raise ConfigError(
                f"mozannar: no record of event {e} reports group {missing[0]} after the "
                "randomized response; the corrected constraint needs every group there"
            )
    for e, g in moment.prob_group_event.index:
        in_event = (tags["event"] == e).to_numpy().astype(np.float64)
        mine = in_event * weights[:, int(g)]
        share = mine.sum() / n
        share = max(share, 1 / n)
        moment.prob_group_event.loc[(e, g)] = share
        overall = in_event / moment.prob_event[e]
        moment.U["+", e, g] = overall - mine / share
        moment.U["-", e, g] = mine / share - overall


def floored_cells(
    z: np.ndarray, y: np.ndarray, constraint: str, event: dp_event.RandomizedResponseDpEvent
) -> int:
    """How many estimated P(group, event) `correct` floors (it works on EG's own copy of the
    moment): events are all records (demographic parity) or each label (equalized odds)."""
    weights = corrected_indicators(z, event)
    view = constraints.group_rates(constraint, 2, weights.shape[1])
    cells = [np.isin(y, labels) for labels in view.events]
    return sum(int((weights[cell].sum(axis=0) < 1).sum()) for cell in cells)


@functools.cache
def _corrected_class(name: str) -> type:
    """fairlearn's moment `name` on privatized groups (fairlearn is imported only here)."""
    from fairlearn import reductions

    class Corrected(getattr(reductions, name)):  # type: ignore[misc]
        def __init__(
            self, *, difference_bound: float, event: dp_event.RandomizedResponseDpEvent
        ) -> None:
            super().__init__(difference_bound=difference_bound)
            self.event = event

        def load_data(self, X, y, *, sensitive_features, control_features=None) -> None:
            super().load_data(
                X, y, sensitive_features=sensitive_features, control_features=control_features
            )
            correct(self, self.event)

    Corrected.__name__ = Corrected.__qualname__ = f"Corrected{name}"
    return Corrected


def corrected_moment(
    constraint: str, difference_bound: float, event: dp_event.RandomizedResponseDpEvent
) -> Any:
    """The fairlearn moment of `constraint`, corrected for the response `event`."""
    return _corrected_class(MOMENTS[constraint])(difference_bound=difference_bound, event=event)


class Mozannar(FairlearnEG):
    name = "mozannar"
    description = (
        "Mozannar et al. 2020: the attribute released by randomized response (local DP), then "
        "fairlearn EG with the constraint corrected for the known flips"
    )
    private = True
    paper = (
        "Mozannar, Ohannessian, Srebro (2020): Fair Learning with Private Demographic Data. "
        "ICML 2020"
    )
    reconstructed = (
        "the corrected moment follows the paper's analysis; the authors' notebook runs plain "
        "EG on the privatized attribute"
    )
    constraints = ("demographic_parity", "equalized_odds")
    Hparams: ClassVar[type[FairlearnEGHparams]] = MozannarHparams
    hparams: MozannarHparams

    def guarantee(self) -> Guarantee:
        """Local DP of each record's attribute, features and labels public: no setting of
        this method is whole-record DP (`privacy_notion` has one value, for the catalog)."""
        return Guarantee(PrivacyNotion.LOCAL_ATTRIBUTE)

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """One randomized response of every record's group at epsilon_A (the target's,
        `calibrate_randomized_response`); then a fit of its own, which releases nothing."""
        target = self.required_target(target)
        if shape.n_classes != 2:
            raise ConfigError(f"method {self.name} handles binary classification tasks only")
        if shape.n_groups < 2:
            raise ConfigError(f"method {self.name} needs at least two groups")
        pure = calibrate_randomized_response(target.epsilon, target.delta, shape.n_groups)
        event = randomized_response(pure, shape.n_groups)
        info = {"epsilon_A": pure, "keep_probability": keep_probability(event)}
        return Plan(PrivacyLedger.of((RELEASE, event)), info=info)

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        (trial,) = trials
        (entry,) = plan.ledger.entries
        fitted: list[Outcome] = []

        def run() -> None:
            z = trial.session.randomized_response(RELEASE, entry.event)(trial.task.train.s)
            fairness = trial.fairness
            moment = corrected_moment(fairness.constraint, fairness.knob_value, entry.event)
            floored = floored_cells(z, trial.task.train.y, fairness.constraint, entry.event)
            fitted.append(self.fit_eg(trial, moment, z, floored_cells=floored))

        return TrainingProgram([], run=run, outcomes=lambda: fitted)
