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

from fairbench.methods.base import FairnessSpec, Fitted, Hparams, Method
from fairbench.privacy.session import PrivacySession
from fairbench.task import Task


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

    def train(self, task: Task, fairness: FairnessSpec, session: PrivacySession) -> Fitted:
        majority = int(np.bincount(task.train.y, minlength=task.n_classes).argmax())
        proba = np.full(task.n_classes, (1 - self.hparams.confidence) / (task.n_classes - 1))
        proba[majority] = self.hparams.confidence
        dev = session.device
        model = ConstantLogits(torch.log(torch.as_tensor(proba, dtype=torch.float32))).to(dev)
        # reading labels outside a mechanism is only allowed because this method is non-private;
        # a private plugin draws every release through the session's mechanisms instead.
        return Fitted(model, dev, info={"majority_class": majority})

    def stepper(self, task, privacy, seed, device="cpu"):
        return lambda: None
