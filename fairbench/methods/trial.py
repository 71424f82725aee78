"""The values a trial is made of, shared by the method interface (`base`) and the engine
that runs it (`engine`): hyperparameter bases, the fairness spec, a trial (task, fairness,
session), the fitted predictor, and the device a trial runs on."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator
from torch import nn

from fairbench.errors import ConfigError
from fairbench.methods.plan import TrainingBudget
from fairbench.models import ModelKind
from fairbench.privacy import PrivacyLedger
from fairbench.privacy.session import PrivacySession
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
    max_steps: int | None = Field(
        None,
        ge=1,
        description="calibrate: steps stops at this many steps (the RaCO-DP authors' MAX_STEPS "
        "is 5,000): a trial that would run more spends less than its target",
    )

    @model_validator(mode="after")
    def _one_free_quantity(self):
        check_one_free_quantity(self)
        return self


class Calibrated(Protocol):
    """Hyperparameters with one free quantity: `CalibratedHparams`, or a class declaring its
    two fields itself (RaCO-DP's, whose defaults differ)."""

    @property
    def batch_size(self) -> int: ...

    @property
    def epochs(self) -> float: ...

    @property
    def calibrate(self) -> Literal["noise", "steps"]: ...

    @property
    def noise_multiplier(self) -> float | None: ...

    @property
    def max_steps(self) -> int | None: ...


def check_one_free_quantity(hp: Calibrated) -> None:
    """`calibrate: noise` solves for sigma, `calibrate: steps` for the step count given
    `noise_multiplier`: exactly one of the two is free (a pydantic validator's check)."""
    if hp.calibrate == "steps" and hp.noise_multiplier is None:
        raise ValueError("calibrate: steps needs noise_multiplier")
    if hp.calibrate == "noise" and hp.noise_multiplier is not None:
        raise ValueError("noise_multiplier is calibrated; set calibrate: steps to fix it")
    if hp.calibrate == "noise" and hp.max_steps is not None:
        raise ValueError("max_steps caps calibrate: steps; with calibrate: noise set epochs")


@dataclass(frozen=True)
class FairnessSpec:
    """Which constraint a trial is evaluated (and, for fair methods, trained) against, and the
    value of the method's fairness knob (None for methods without one)."""

    constraint: str
    knob: float | None = None
    definition: dict[str, Any] | None = None  # a user-declared rate-constraint set, if any

    @property
    def knob_value(self) -> float:
        """`knob` for a method that needs one (`Method.check` refuses a trial without it)."""
        if self.knob is None:
            raise ConfigError(f"constraint {self.constraint}: the method needs a knob value")
        return float(self.knob)


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
    budget: TrainingBudget | None = None
    plan: PrivacyLedger | None = None  # what the method declared before drawing noise
    # a group-aware derived predictor (Hardt et al. 2016): P(output 1 | model's hard
    # prediction, group), shape (2, groups); set, predictions read the sensitive attribute
    derived: np.ndarray | None = None
    # decoupled base classifiers, one per group: a record's base prediction is its group's
    # model's (set only with `derived`, which reads the group anyway); `model` is group 0's
    group_models: list[nn.Module] = field(default_factory=list)

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
            if self.group_models and len(self.group_models) != table.shape[1]:
                raise ValueError("decoupled base classifiers: one model per group")
        elif self.group_models:
            raise ValueError("decoupled base classifiers are post-processed (`derived`)")

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
            s = np.asarray(s)
            base = self._softmax(self.model, X).argmax(axis=1)
            for g, model in enumerate(self.group_models):  # decoupled: its group's model
                base[s == g] = self._softmax(model, X[s == g]).argmax(axis=1)
            one = np.asarray(self.derived, dtype=np.float64)[base, s]
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


DEVICES: tuple[Device, ...] = ("cpu", "cuda", "auto")


def as_device(name: str, what: str = "device") -> Device:
    """`name` as a `Device`; any other name is a ConfigError (`what` names the option)."""
    for device in DEVICES:
        if name == device:
            return device
    raise ConfigError(f"{what} {name!r}: choose cpu, cuda or auto")


def resolve_device(device: Device) -> torch.device:
    """`auto` picks CUDA when available; asking for CUDA without one is a clear error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "device 'cuda' requested but no CUDA device is available; use cpu or auto"
        )
    return torch.device(device)
