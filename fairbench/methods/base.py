"""The method interface every plugin implements, built-in or third-party.

A method is configured with explicit, validated hyperparameters (scikit-learn style) and
`fit` receives the task, the privacy budget (None for a non-private method), the fairness
spec, a seed and a device. A plugin declares its `plan` (from public inputs) and its
`program` (the step the engine runs, `fairbench.methods.engine`), whose releases and batches
come from a privacy session (`fairbench.privacy.session`): its only source of noise and
Poisson batches. The session records every release as it is drawn; that record is the
trial's ledger, and the epsilon a trial reports is computed from it by the suite's
accountant. `fit` checks it against the plan the engine submitted.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from torch import nn

from fairbench.errors import ConfigError
from fairbench.methods.knob import Knob
from fairbench.methods.plan import Budget, DataShape, Plan
from fairbench.models import ModelKind
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.session import (
    Guarantee,
    PrivacyContractError,
    PrivacyNotion,
    PrivacySession,
    check_plan,
)
from fairbench.task import Task

Device = Literal["cpu", "cuda", "auto"]


class Hparams(BaseModel):
    """Base for method hyperparameters: typed, with defaults; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class TrainingHparams(Hparams):
    """What every gradient-trained method shares: the model class and the optimiser basics."""

    model: ModelKind = Field(
        "logistic", description="logistic (multinomial) regression or a one-hidden-layer mlp"
    )
    hidden: int = Field(
        32, ge=1, description="width of the mlp's one hidden layer; ignored by logistic"
    )
    lr: float = Field(0.5, gt=0, description="step size of the (primal) descent")
    batch_size: int = Field(256, ge=1, description="(expected) mini-batch size")
    epochs: float = Field(
        20.0, gt=0, description="passes over the training set (expected, with Poisson batches)"
    )


class CalibratedHparams(TrainingHparams):
    """A DP-SGD-style method's one free quantity: the noise, for the steps `epochs` gives
    (`calibrate: noise`), or the steps, for a fixed `noise_multiplier` (`calibrate: steps`)."""

    calibrate: Literal["noise", "steps"] = Field(
        "noise",
        description="noise: solve sigma (steps from epochs); steps: fix sigma, solve the steps",
    )
    noise_multiplier: float | None = Field(
        None, gt=0, description="Gaussian noise multiplier sigma; set only with calibrate: steps"
    )

    @model_validator(mode="after")
    def _one_free_quantity(self):
        if self.calibrate == "steps" and self.noise_multiplier is None:
            raise ValueError("calibrate: steps needs noise_multiplier")
        if self.calibrate == "noise" and self.noise_multiplier is not None:
            raise ValueError("noise_multiplier is calibrated; set calibrate: steps to fix it")
        return self


@dataclass(frozen=True)
class FairnessSpec:
    """Which constraint a trial is evaluated (and, for fair methods, trained) against, and the
    value of the method's fairness knob (None for methods without one)."""

    constraint: str
    knob: float | None = None
    definition: dict[str, Any] | None = None  # a user-declared rate-constraint set, if any


@dataclass(frozen=True)
class Trial:
    """One trial to train: its task, fairness spec (with the knob) and privacy session."""

    task: Task
    fairness: FairnessSpec
    session: PrivacySession


@dataclass
class Fitted:
    """A trained predictor plus what training spent and did: one deterministic classifier
    (`model`), or, when `components` is set, the randomized classifier that answers each query
    with a component drawn uniformly, or with probabilities `weights` where set (reductions
    such as fairlearn's ExponentiatedGradient output non-uniform mixtures); `model` is then
    the last component."""

    model: nn.Module
    device: torch.device
    ledger: PrivacyLedger = field(default_factory=PrivacyLedger)  # set by `fit` from the session
    privacy_notion: str | None = None  # None: the session's notion; a method may qualify it
    info: dict[str, Any] = field(default_factory=dict)  # steps, noise multiplier, ...
    # which analysis the noise was calibrated by: `suite` (the ledger's epsilon meets the
    # target) or a paper's own, explicitly opted into (the ledger then reports the truth)
    target_accounting: str = "suite"
    components: list[nn.Module] = field(default_factory=list)
    weights: list[float] | None = None  # per-component probabilities; None: uniform
    budget: Budget | None = None
    plan: PrivacyLedger | None = None  # what the method declared before drawing noise
    # a group-aware derived predictor (Hardt et al. 2016): P(output 1 | model's hard
    # prediction, group), shape (2, groups); set, predictions read the sensitive attribute
    derived: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.weights is not None:
            w = np.asarray(self.weights, dtype=np.float64)
            if len(w) != len(self.components) or (w < 0).any() or abs(w.sum() - 1) > 1e-9:
                raise ValueError("mixture weights: one probability >= 0 per component, sum 1")
        if self.derived is not None:
            table = np.asarray(self.derived, dtype=np.float64)
            if table.ndim != 2 or table.shape[0] != 2 or ((table < 0) | (table > 1)).any():
                raise ValueError("derived predictor: P(1 | prediction, group) of shape (2, groups)")
            if self.components:
                raise ValueError("a derived predictor post-processes one model, not a mixture")

    @property
    def randomized(self) -> bool:
        return bool(self.components) or self.derived is not None

    @property
    def sensitive_at_test(self) -> bool:
        """Whether predictions need each record's group (`s`)."""
        return self.derived is not None

    @torch.no_grad()
    def _softmax(self, model: nn.Module, X: np.ndarray) -> np.ndarray:
        model.eval()
        x = torch.as_tensor(X, dtype=torch.float32, device=self.device)
        return torch.softmax(model(x), dim=1).cpu().numpy()

    def component_probabilities(self, X: np.ndarray) -> np.ndarray:
        """(components, records, classes): each component's class probabilities (one
        component if deterministic)."""
        return np.stack([self._softmax(m, X) for m in self.components or [self.model]])

    def component_predictions(self, X: np.ndarray) -> np.ndarray:
        """(components, records): each component's hard predictions."""
        return self.component_probabilities(X).argmax(axis=2)

    def predict_proba(self, X: np.ndarray, s: np.ndarray | None = None) -> np.ndarray:
        """Class probabilities; for a randomized classifier, the probability that it outputs
        each class (the weighted share of components predicting it, or the derived
        predictor's flip probability of the record's group `s`, which it then requires)."""
        if self.derived is not None:
            if s is None:
                raise ValueError("this classifier reads the sensitive attribute: pass s")
            base = self._softmax(self.model, X).argmax(axis=1)
            one = np.asarray(self.derived, dtype=np.float64)[base, np.asarray(s)]
            return np.stack([1 - one, one], axis=1)
        if not self.randomized:
            return self._softmax(self.model, X)
        probabilities = self.component_probabilities(X)
        votes = probabilities.argmax(axis=2)
        return np.stack(
            [
                np.average(votes == c, axis=0, weights=self.weights)
                for c in range(probabilities.shape[2])
            ],
            1,
        )

    def predict(
        self, X: np.ndarray, seed: int | None = None, s: np.ndarray | None = None
    ) -> np.ndarray:
        """Hard predictions; a randomized classifier draws a component (or the derived
        predictor's output, from the record's group `s`) per record from `seed`, which it
        requires."""
        if not self.randomized:
            return self.predict_proba(X).argmax(axis=1)
        if seed is None:
            raise ValueError("a randomized classifier predicts with a seed: predict(X, seed=0)")
        if self.derived is not None:
            one = self.predict_proba(X, s)[:, 1]
            return (np.random.default_rng(seed).random(len(one)) < one).astype(np.int64)
        votes = self.component_predictions(X)
        rng = np.random.default_rng(seed)
        drawn = (
            rng.integers(0, len(votes), size=votes.shape[1])
            if self.weights is None
            else rng.choice(len(votes), size=votes.shape[1], p=self.weights)
        )
        return votes[drawn, np.arange(votes.shape[1])]

    @torch.no_grad()
    def predict_values(self, X: np.ndarray) -> np.ndarray:
        """A regression model's predictions (its single output)."""
        self.model.eval()
        x = torch.as_tensor(X, dtype=torch.float32, device=self.device)
        return self.model(x).squeeze(-1).double().cpu().numpy()


class Method(ABC):
    """A method plugin: class attributes that describe it, and two declarations.

    `plan(shape, target, fairness, seed)`: what a trial will run, from public inputs alone
    (`fairbench.methods.plan.Plan`): the events it releases, the loop's schedule, the budget
    and the public quantities it reports. `program(trials, plan)`: the step over a stack of
    trials that share the plan (models, the update drawn through each trial's session, what
    each trial reports afterwards). The engine (`fairbench.methods.engine.fit_trials`) owns
    the trial: it validates the knob and constraint from the class attributes, submits the
    plan to every session under the declared guarantee, runs the loop, builds the `Fitted`
    results and checks every ledger against its plan. A method whose plan grows with noisy
    outputs (DPSE) sets `adaptive_plan` and runs its own loop (`TrainingProgram.run`)."""

    name: ClassVar[str]
    description: ClassVar[str]
    private: ClassVar[bool]  # True: needs a PrivacyBudget and spends it
    knob: ClassVar[Knob | None] = None  # the fairness knob, None for plain baselines
    Hparams: ClassVar[type[Hparams]] = Hparams
    # what the plugin had to reconstruct because its sources are incomplete (one line, shown
    # wherever methods are listed); None: implemented from a complete specification
    reconstructed: ClassVar[str | None] = None
    # True: predictions read each record's sensitive attribute (a group-aware post-processor);
    # every row, table and plot marks such a method, never compared silently with the others
    sensitive_at_test: ClassVar[bool] = False
    # the citation: authors, year, title, venue; a plain baseline says what it is instead.
    # `fairbench describe` shows it; "" only for a third-party plugin that declares none
    paper: ClassVar[str] = ""
    # the named constraints a trial of this method may use (fairbench.metrics.VIOLATIONS
    # names); the engine refuses any other before training. None: not declared
    constraints: ClassVar[tuple[str, ...] | None] = None
    # True: it also takes a user-declared rate-constraint set (a config's `constraint:
    # {name, partition, constraints}`)
    declared_constraints: ClassVar[bool] = False
    # True: its plan grows during training (`PrivacySession.extend_plan`: budgets set by noisy
    # outputs), so the plan it submits first is not all it spends; private selection, which
    # accounts a candidate by its plan before it trains, refuses it
    adaptive_plan: ClassVar[bool] = False

    def __init__(self, **hparams: Any) -> None:
        try:
            self.hparams = self.Hparams(**hparams)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ConfigError(
                f"method {self.name}: hyperparameter {where!r}: {err['msg']} "
                f"(valid: {', '.join(self.Hparams.model_fields)})"
            ) from None

    # -- what a plugin declares ----------------------------------------------------------------
    def guarantee(self) -> Guarantee:
        """What this configuration's epsilon is a statement about, from its hyper-parameters
        alone (private selection refuses a partial one before anything runs): its
        `privacy_notion` hyper-parameter where it has one, else the full notion. A method that
        reads statistics of the data exactly overrides it; the engine submits every plan
        under it."""
        if not self.private:
            return Guarantee(PrivacyNotion.NONE)
        notion = PrivacyNotion(getattr(self.hparams, "privacy_notion", PrivacyNotion.FULL))
        partial = () if notion is PrivacyNotion.FULL else ("privacy_notion",)
        return Guarantee(notion, because=partial)

    def plan(
        self,
        shape: DataShape,
        target: PrivacyBudget | None,
        fairness: FairnessSpec,
        seed: int = 0,
    ) -> Plan:
        """What a trial on data of `shape` will run to meet `target` (None: non-private):
        public inputs only, no data read, nothing trained. `seed` is the trial's, for a plan
        that depends on its own public randomness (a randomly drawn iterate). A plan that
        cannot meet the target raises `CalibrationError`."""
        raise NotImplementedError(f"method {self.name} declares no plan")

    def program(self, trials: list[Trial], plan: Plan) -> Any:
        """The `engine.TrainingProgram` of `trials`, which share `plan`: their models, the
        step over one round of their batches, and what each reports afterwards."""
        raise NotImplementedError(f"method {self.name} declares no program")

    def stackable(self) -> bool:
        """Whether trials of this method whose plans are equal (these hyperparameters, one
        budget, any seeds and knob values) train as one stacked program."""
        return False

    def check(self, fairness: FairnessSpec) -> None:
        """Refuse, before anything is planned, a constraint or knob value the class attributes
        rule out (`constraints`, `declared_constraints`, `knob`)."""
        if fairness.definition is not None:
            if not self.declared_constraints:
                raise ConfigError(
                    f"method {self.name} takes the named constraints "
                    f"{', '.join(self.constraints or ())}, not a declared constraint set"
                )
        elif self.constraints is not None and fairness.constraint not in self.constraints:
            raise ConfigError(
                f"method {self.name} supports the constraints {', '.join(self.constraints)}; "
                f"got {fairness.constraint!r}"
            )
        if self.knob is None:
            return
        self.knob.validate(fairness.knob, method=self.name)
        if fairness.knob is None and self.knob.required:
            raise ConfigError(
                f"method {self.name} needs {self.knob.name} values: give the method `knobs`"
            )

    # -- what the engine does with it ----------------------------------------------------------
    def fit(
        self,
        task: Task,
        privacy: PrivacyBudget | None,
        fairness: FairnessSpec,
        seed: int,
        device: Device = "cpu",
        session: PrivacySession | None = None,
    ) -> Fitted:
        """Train on `task.train` only (validation and test are the runner's business). The
        returned ledger is what `session` recorded, checked against the method's plan; the
        conditions the device recorded during training (`privacy.sync`) are checked too."""
        if self.private and privacy is None:
            raise ConfigError(f"method {self.name} is private: give it a target epsilon")
        if session is None:
            session = PrivacySession(
                seed, resolve_device(device), privacy if self.private else None
            )
        return self.fit_stack([Trial(task, fairness, session)])[0]

    def fit_stack(self, trials: list[Trial]) -> list[Fitted]:
        """`fit` for several trials of this method at once (one program per group of equal
        plans where the method stacks), each with its own session; each trial's ledger is
        checked against its own plan."""
        from fairbench.methods.engine import fit_trials  # the engine builds on this module

        if self.private and any(t.session.budget is None for t in trials):
            raise ConfigError(f"method {self.name} is private: give it a target epsilon")
        try:
            fits = fit_trials(self, trials)
        except PrivacyContractError as refused:  # a draw outside the plan: name the method
            raise PrivacyContractError(f"method {self.name}: {refused}") from None
        for fitted, trial in zip(fits, trials, strict=True):
            session = trial.session
            try:
                session.checks.verify()  # what the device recorded during training, read once
            except PrivacyContractError as refused:
                raise PrivacyContractError(f"method {self.name}: {refused}") from None
            self._check_guarantee(session)
            fitted.ledger, fitted.plan = session.ledger(), session.plan
            check_plan(self.name, fitted.plan, fitted.ledger)
            if fitted.privacy_notion is None:
                fitted.privacy_notion = session.guarantee.label
        return fits

    def stepper(
        self, task: Task, privacy: PrivacyBudget | None, seed: int, device: Device = "cpu"
    ) -> Callable[[], None]:
        """One training step of exactly the code `fit` runs (sampling included), for
        `fairbench bench`."""
        from fairbench.methods.engine import one_step

        return one_step(self, task, privacy, seed, device)

    def _check_guarantee(self, session: PrivacySession) -> None:
        """A private trial ran under the guarantee the method declares, and its plan grew only
        if the method says it may (what private selection relies on)."""
        if not session.private:
            return
        declared = self.guarantee()
        if session.guarantee != declared:
            raise PrivacyContractError(
                f"method {self.name}: submitted its plan under {session.guarantee.label!r} but "
                f"declares {declared.label!r} (guarantee())"
            )
        if session.extended and not self.adaptive_plan:
            raise PrivacyContractError(
                f"method {self.name}: extended its plan during training without declaring "
                "adaptive_plan = True"
            )


SENSITIVE_MARK = " (A at test)"


def series_label(label: str, method: type[Method]) -> str:
    """How reports name a method entry: its label, marked when the method's predictions read
    the sensitive attribute, so no table or legend compares it silently with those that do
    not (the rows also say so, `uses_sensitive_at_test`)."""
    marked = method.sensitive_at_test and SENSITIVE_MARK not in label
    return label + SENSITIVE_MARK if marked else label


def resolve_device(device: Device) -> torch.device:
    """`auto` picks CUDA when available; asking for CUDA without one is a clear error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "device 'cuda' requested but no CUDA device is available; use cpu or auto"
        )
    return torch.device(device)
