"""`erm`: non-private mini-batch SGD on the cross-entropy loss; the accuracy ceiling."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from pydantic import Field

from fairbench.methods.base import (
    Device,
    FairnessSpec,
    Fitted,
    Method,
    TrainingHparams,
    resolve_device,
)
from fairbench.methods.engine import Program, Schedule, init_model, train_tensors
from fairbench.metrics import VIOLATIONS
from fairbench.privacy import PrivacyBudget
from fairbench.privacy.session import Batch, PrivacySession
from fairbench.task import Task


class ERMHparams(TrainingHparams):
    weight_decay: float = Field(0.0, ge=0, description="l2 penalty of torch's SGD")


class ERM(Method):
    """Empirical risk minimisation with shuffled mini-batches and plain SGD; spends no privacy
    budget and ignores the fairness spec."""

    name = "erm"
    description = "non-private mini-batch SGD on the cross-entropy loss (accuracy reference)"
    private = False
    paper = "plain baseline: non-private empirical risk minimisation (mini-batch SGD)"
    constraints = tuple(VIOLATIONS)  # ignores the fairness spec: evaluated on any
    declared_constraints = True
    Hparams = ERMHparams
    hparams: ERMHparams

    def _program(self, task: Task, session: PrivacySession) -> Program:
        hp = self.hparams
        model = init_model(hp, task, session)
        x, y = train_tensors(task, session.device)
        optimiser = torch.optim.SGD(model.parameters(), lr=hp.lr, weight_decay=hp.weight_decay)

        def step(batch: Batch) -> None:
            idx = batch.indices
            optimiser.zero_grad(set_to_none=True)
            F.cross_entropy(model(x.index_select(0, idx)), y.index_select(0, idx)).backward()
            optimiser.step()

        steps = math.ceil(hp.epochs * len(y) / hp.batch_size)
        return Program(model, Schedule(min(1.0, hp.batch_size / len(y)), steps), step)

    def train(self, task: Task, fairness: FairnessSpec, session: PrivacySession) -> Fitted:
        program = self._program(task, session)
        program.model.train()
        next_batch = session.shuffled(len(task.train), self.hparams.batch_size)
        for _ in range(program.schedule.steps):
            program.step(next_batch())
        steps = program.schedule.steps
        return Fitted(
            program.model, session.device, info={"steps": steps}, budget=program.schedule.budget()
        )

    def stepper(
        self, task: Task, privacy: PrivacyBudget | None, seed: int, device: Device = "cpu"
    ) -> Callable[[], None]:
        session = PrivacySession(seed, resolve_device(device))
        program = self._program(task, session)
        next_batch = session.shuffled(len(task.train), self.hparams.batch_size)
        return lambda: program.step(next_batch())
