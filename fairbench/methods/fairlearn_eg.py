"""`fairlearn-eg`: the non-private fair reference, fairlearn's ExponentiatedGradient
(Agarwal et al. 2018) over scikit-learn's LogisticRegression.

Private-fair methods are judged against what fairness costs without privacy; this plugin
answers that with the reductions implementation most papers use, unmodified. It spends no
privacy budget and runs once per knob and seed, like `erm` and `sgda`.

- Knob `difference_bound`: the bound of fairlearn's constraint, `DemographicParity` for
  `demographic_parity`, `EqualizedOdds` for `equalized_odds`, `TruePositiveRateParity` for
  `false_negative_rate_parity` (equal TPRs are equal FNRs). fairlearn bounds each group's
  rate against the overall rate, while fairbench reports the largest pairwise gap, which can
  reach up to twice the bound (1.5x on Adult's 2:1 sex split). fairbench's
  `false_negative_rate` (an absolute FNR bound) has no fairlearn counterpart and is refused,
  as are declared constraint sets and non-binary tasks.
- `eps` (fairlearn's, which only sets the multiplier bound B = 1/eps) defaults to the knob,
  as the CGOO-vs-fairlearn test in tests/methods/test_cgoo.py does.
- Linear only: the base estimator is scikit-learn's LogisticRegression (`model: logistic`),
  the reference model class of the method papers, and each mixture component is exported as
  its linear rule (`LinearRule`). EG's reduction would accept any scikit-learn classifier that
  takes sample weights, but an MLP oracle would make this reference a different estimator
  from the one the papers compare against, so `model: mlp` is a ConfigError. The MLP
  comparison's non-private references are `erm` and `sgda` with `model: mlp`.
- Output: EG's randomized classifier, its predictors with nonzero weight and their (generally
  non-uniform) weights as `Fitted.components` / `Fitted.weights`, so the runner evaluates
  the mixture exactly. Each component decides in float64 like scikit-learn, so its decisions
  are the fitted estimator's own.
- Deterministic: lbfgs and EG use no randomness; the seed is passed to scikit-learn anyway.

Needs the optional extra: `pip install 'dp-fairbench[fairlearn]'` (scikit-learn is compiled
and ~50 MB, too heavy for the core dependencies).
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, field_validator
from torch import nn

from fairbench.errors import ConfigError
from fairbench.methods.base import Method
from fairbench.methods.engine import Outcome, TrainingProgram
from fairbench.methods.knob import Direction, Knob
from fairbench.methods.plan import DataShape, Plan, TrainingBudget
from fairbench.methods.trial import Device, FairnessSpec, Hparams, Trial
from fairbench.privacy import PrivacyBudget
from fairbench.task import Task

MOMENTS = {
    "demographic_parity": "DemographicParity",
    "equalized_odds": "EqualizedOdds",
    "false_negative_rate_parity": "TruePositiveRateParity",  # equal FNR is equal TPR
}
INSTALL = "pip install 'dp-fairbench[fairlearn]'"


class FairlearnEGHparams(Hparams):
    model: Literal["logistic"] = Field(
        "logistic", description="linear only: scikit-learn's LogisticRegression"
    )
    C: float = Field(1.0, gt=0, description="inverse l2 strength of LogisticRegression")
    lr_max_iter: int = Field(1000, ge=1, description="LogisticRegression's max_iter")
    eps: float | None = Field(None, gt=0, description="EG's eps (B = 1/eps); None: the knob")
    max_iter: int = Field(50, ge=1, description="EG iterations (fairlearn's default)")
    eta0: float = Field(2.0, gt=0, description="EG's initial learning rate")
    run_linprog_step: bool = Field(
        True, description="EG's final linear program over the iterates (fairlearn's option)"
    )

    @field_validator("model", mode="before")
    @classmethod
    def _linear_only(cls, value):
        if value != "logistic":
            raise ValueError(
                f"fairlearn-eg is linear-only (got model: {value}): its base learner is "
                "scikit-learn's LogisticRegression; use erm or sgda as the non-private mlp "
                "reference"
            )
        return value


class LinearRule(nn.Module):
    """One deterministic classifier of the mixture: class 1 where w.x + b > 0, in float64."""

    w: torch.Tensor
    b: torch.Tensor

    def __init__(self, w: np.ndarray, b: float) -> None:
        super().__init__()
        self.register_buffer("w", torch.as_tensor(np.asarray(w, dtype=np.float64)))
        self.register_buffer("b", torch.tensor(float(b), dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        score = x.double() @ self.w + self.b
        return torch.stack([torch.zeros_like(score), score], dim=1)


def as_rule(estimator: Any, n_features: int) -> LinearRule:
    """A fitted LogisticRegression, or fairlearn's constant DummyClassifier, as a module."""
    if hasattr(estimator, "coef_"):
        return LinearRule(estimator.coef_[0], float(estimator.intercept_[0]))
    return LinearRule(np.zeros(n_features), 30.0 if int(estimator.constant) == 1 else -30.0)


class FairlearnEG(Method):
    name = "fairlearn-eg"
    description = "fairlearn ExponentiatedGradient + logistic regression (non-private fair ref)"
    private = False
    paper = (
        "Agarwal, Beygelzimer, Dudik, Langford, Wallach (2018): A Reductions Approach to "
        "Fair Classification. ICML 2018 (fairlearn's ExponentiatedGradient)"
    )
    constraints = tuple(MOMENTS)
    knob = Knob(
        "difference_bound",
        "allowed gap of each group's rate to the overall rate",
        Direction.LOOSER,
        low=0.0,
        low_inclusive=False,
        rate_tolerance=True,
        typical=0.05,
    )
    Hparams = FairlearnEGHparams
    hparams: FairlearnEGHparams

    def __init__(self, **hparams: Any) -> None:
        super().__init__(**hparams)
        if not all(importlib.util.find_spec(m) for m in ("fairlearn", "sklearn")):
            raise ConfigError(f"method {self.name} needs fairlearn and scikit-learn: {INSTALL}")

    def _estimator(self, seed: int):
        from sklearn.linear_model import LogisticRegression

        hp = self.hparams
        return LogisticRegression(C=hp.C, max_iter=hp.lr_max_iter, random_state=seed)

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """Nothing released; a fit of its own (no batches): fairlearn's reduction."""
        if shape.n_classes != 2:
            raise ConfigError(f"method {self.name} handles binary classification tasks only")
        return Plan()

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        (trial,) = trials
        fitted: list[Outcome] = []
        return TrainingProgram(
            [], run=lambda: fitted.append(self._fit(trial)), outcomes=lambda: fitted
        )

    def _fit(self, trial: Trial) -> Outcome:
        from fairlearn import reductions

        bound = trial.fairness.knob_value
        moment = getattr(reductions, MOMENTS[trial.fairness.constraint])(difference_bound=bound)
        return self.fit_eg(trial, moment, trial.task.train.s)

    def fit_eg(self, trial: Trial, moment: Any, groups: np.ndarray, **info: Any) -> Outcome:
        """EG against `moment` on the training features and labels, with `groups` as the
        sensitive feature; its weighted mixture as the trial's outcome (`info` added to
        the row's)."""
        from fairlearn import reductions

        task, session = trial.task, trial.session
        hp, bound = self.hparams, trial.fairness.knob_value
        eg = reductions.ExponentiatedGradient(
            self._estimator(session.seed),
            moment,
            eps=hp.eps or bound,
            max_iter=hp.max_iter,
            eta0=hp.eta0,
            run_linprog_step=hp.run_linprog_step,
        )
        with warnings.catch_warnings():  # fairlearn's pandas deprecations, once per oracle call
            for category in (DeprecationWarning, FutureWarning):
                warnings.filterwarnings("ignore", module=r"fairlearn\.", category=category)
            eg.fit(task.train.X, task.train.y, sensitive_features=groups)
        kept = [i for i in eg.weights_.index if eg.weights_[i] > 0]
        rules = [as_rule(eg.predictors_[i], task.n_features) for i in kept]
        weights = np.array([eg.weights_[i] for i in kept], dtype=np.float64)
        weights /= weights.sum()
        info = {
            "steps": int(eg.n_oracle_calls_),
            "iterations": int(eg.last_iter_) + 1,
            "best_gap": float(eg.best_gap_),
            "difference_bound": bound,
            "eps": float(hp.eps or bound),
            "weights": weights.tolist(),
            **info,
        }
        dev = session.device
        components: list[nn.Module] = [r.to(dev) for r in rules]
        # a step here is one oracle call: a full-data logistic-regression fit
        budget = TrainingBudget(int(eg.n_oracle_calls_))
        if len(rules) == 1:  # a one-component mixture is a deterministic classifier
            return Outcome(info, components[0], budget=budget)
        return Outcome(
            info, components[-1], components=components, weights=weights.tolist(), budget=budget
        )

    def stepper(
        self, task: Task, privacy: PrivacyBudget | None, seed: int, device: Device = "cpu"
    ) -> Callable[[], None]:
        """One oracle call: a logistic-regression fit (EG's first, with all multipliers 0)."""
        estimator = self._estimator(seed)
        return lambda: estimator.fit(task.train.X, task.train.y)
