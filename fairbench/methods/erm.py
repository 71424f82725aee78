"""`erm`: non-private mini-batch SGD on the cross-entropy loss; the accuracy ceiling."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from pydantic import Field

from fairbench.methods.base import (
    Budget,
    Device,
    FairnessSpec,
    Fitted,
    Method,
    TrainingHparams,
    resolve_device,
)
from fairbench.methods.engine import init_model, train_tensors
from fairbench.privacy import PrivacyBudget
from fairbench.privacy.session import PrivacySession
from fairbench.task import Task


class ERMHparams(TrainingHparams):
    weight_decay: float = Field(0.0, ge=0)


class ERM(Method):
    """Empirical risk minimisation with shuffled mini-batches and plain SGD; spends no privacy
    budget and ignores the fairness spec."""

    name = "erm"
    description = "non-private mini-batch SGD on the cross-entropy loss (accuracy reference)"
    private = False
    Hparams = ERMHparams
    hparams: ERMHparams

    def _setup(self, task: Task, session: PrivacySession):
        hp = self.hparams
        model = init_model(hp, task, session.seed, session.device)
        x, y = train_tensors(task, session.device)
        next_batch = session.shuffled(len(y), hp.batch_size)
        optimiser = torch.optim.SGD(model.parameters(), lr=hp.lr, weight_decay=hp.weight_decay)

        def step() -> None:
            idx = next_batch().indices
            optimiser.zero_grad(set_to_none=True)
            F.cross_entropy(model(x.index_select(0, idx)), y.index_select(0, idx)).backward()
            optimiser.step()

        steps = math.ceil(hp.epochs * len(y) / hp.batch_size)
        return model, step, steps

    def train(self, task: Task, fairness: FairnessSpec, session: PrivacySession) -> Fitted:
        model, step, steps = self._setup(task, session)
        model.train()
        for _ in range(steps):
            step()
        budget = Budget(steps, min(1.0, self.hparams.batch_size / len(task.train)))
        return Fitted(model, session.device, info={"steps": steps}, budget=budget)

    def stepper(
        self, task: Task, privacy: PrivacyBudget | None, seed: int, device: Device = "cpu"
    ) -> Callable[[], None]:
        return self._setup(task, PrivacySession(seed, resolve_device(device)))[1]
