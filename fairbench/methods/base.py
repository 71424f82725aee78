"""The method interface every plugin implements, built-in or third-party.

A method is configured with explicit, validated hyperparameters (scikit-learn style) and
`fit` receives the task, the privacy budget (None for a non-private method), the fairness
spec, a seed and a device. It returns a `Fitted` predictor that carries its privacy ledger:
the epsilon a trial reports is computed from that ledger by the suite's accountant.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from torch import nn

from fairbench.errors import ConfigError
from fairbench.models import ModelKind
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.task import Task

Device = Literal["cpu", "cuda", "auto"]


class Hparams(BaseModel):
    """Base for method hyperparameters: typed, with defaults; unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class TrainingHparams(Hparams):
    """What every gradient-trained method shares: the model class and the optimiser basics."""

    model: ModelKind = "logistic"
    hidden: int = Field(64, ge=1, description="hidden width of the mlp model")
    lr: float = Field(0.5, gt=0)
    batch_size: int = Field(256, ge=1, description="(expected) mini-batch size")
    epochs: float = Field(20.0, gt=0)


@dataclass(frozen=True)
class FairnessSpec:
    """Which constraint a trial is evaluated (and, for fair methods, trained) against, and the
    value of the method's fairness knob (None for methods without one)."""

    constraint: str
    knob: float | None = None
    definition: dict[str, Any] | None = None  # a user-declared rate-constraint set, if any


@dataclass
class Fitted:
    """A trained deterministic predictor plus what training spent and did."""

    model: nn.Module
    device: torch.device
    ledger: PrivacyLedger
    privacy_notion: str = "full"
    info: dict[str, Any] = field(default_factory=dict)  # steps, noise multiplier, ...
    # which analysis the noise was calibrated by: `suite` (the ledger's epsilon meets the
    # target) or a paper's own, explicitly opted into (the ledger then reports the truth)
    target_accounting: str = "suite"

    @torch.no_grad()
    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        self.model.eval()
        x = torch.as_tensor(X, dtype=torch.float32, device=self.device)
        return torch.softmax(self.model(x), dim=1).cpu().numpy()

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.predict_proba(X).argmax(axis=1)

    @torch.no_grad()
    def predict_values(self, X: np.ndarray) -> np.ndarray:
        """A regression model's predictions (its single output)."""
        self.model.eval()
        x = torch.as_tensor(X, dtype=torch.float32, device=self.device)
        return self.model(x).squeeze(-1).double().cpu().numpy()


class Method(ABC):
    """A method plugin. Subclasses set the class attributes and implement `fit` and `stepper`."""

    name: ClassVar[str]
    description: ClassVar[str]
    private: ClassVar[bool]  # True: needs a PrivacyBudget and spends it
    knob: ClassVar[str | None] = None  # name of the fairness knob, None for plain baselines
    Hparams: ClassVar[type[Hparams]] = Hparams

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

    @abstractmethod
    def fit(
        self,
        task: Task,
        privacy: PrivacyBudget | None,
        fairness: FairnessSpec,
        seed: int,
        device: Device = "cpu",
    ) -> Fitted:
        """Train on `task.train` only; validation and test are the runner's business."""

    @abstractmethod
    def stepper(
        self, task: Task, privacy: PrivacyBudget | None, seed: int, device: Device = "cpu"
    ) -> Callable[[], None]:
        """One training step of exactly the code `fit` runs (sampling included), for
        `fairbench bench`."""


def resolve_device(device: Device) -> torch.device:
    """`auto` picks CUDA when available; asking for CUDA without one is a clear error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            "device 'cuda' requested but no CUDA device is available; use cpu or auto"
        )
    return torch.device(device)
