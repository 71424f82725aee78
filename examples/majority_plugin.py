"""A complete third-party method plugin: predict the training majority class.

Register it from your own package's pyproject.toml:

    [project.entry-points."fairbench.methods"]
    majority = "my_package.majority_plugin:Majority"

then `fairbench list methods` shows it and configs can name it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fairbench.methods.base import Method
from fairbench.methods.engine import Outcome, TrainingProgram
from fairbench.methods.plan import DataShape, Plan
from fairbench.methods.trial import FairnessSpec, Hparams, Trial
from fairbench.privacy import PrivacyBudget


class MajorityHparams(Hparams):
    confidence: float = 0.9  # probability given to the majority class


class ConstantLogits(nn.Module):
    def __init__(self, logits: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("logits", logits)

    def forward(self, x):
        return self.logits.expand(len(x), -1)


class Majority(Method):
    name = "majority"
    description = "predicts the most frequent training label (non-private sanity baseline)"
    private = False
    Hparams = MajorityHparams

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """Nothing is released and no batch is drawn: a fit of its own (`run`)."""
        return Plan()

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        (trial,) = trials
        task, dev = trial.task, trial.session.device
        fitted: list[Outcome] = []

        def run() -> None:
            majority = int(np.bincount(task.train.y, minlength=task.n_classes).argmax())
            proba = np.full(task.n_classes, (1 - self.hparams.confidence) / (task.n_classes - 1))
            proba[majority] = self.hparams.confidence
            model = ConstantLogits(torch.log(torch.as_tensor(proba, dtype=torch.float32))).to(dev)
            # reading labels outside a mechanism is only allowed because this method is
            # non-private; a private plugin draws every release through the session instead.
            fitted.append(Outcome({"majority_class": majority}, model))

        return TrainingProgram([], run=run, outcomes=lambda: fitted)

    def stepper(self, task, privacy, seed, device="cpu"):
        return lambda: None
