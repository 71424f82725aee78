"""`erm`: non-private mini-batch SGD on the cross-entropy loss; the accuracy ceiling."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from pydantic import Field

from fairbench.methods.base import Method
from fairbench.methods.engine import TrainingProgram, init_model, train_tensors
from fairbench.methods.plan import DataShape, Plan, Schedule
from fairbench.methods.trial import FairnessSpec, TrainingHparams, Trial
from fairbench.metrics import VIOLATIONS
from fairbench.privacy import PrivacyBudget
from fairbench.privacy.stacked import StackedBatches


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

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """`epochs` of shuffled mini-batches; nothing released."""
        hp = self.hparams
        steps = math.ceil(hp.epochs * shape.n / hp.batch_size)
        schedule = Schedule(min(1.0, hp.batch_size / shape.n), steps, shuffle=hp.batch_size)
        return Plan(schedule=schedule, budget=schedule.budget(), info={"steps": steps})

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        (trial,) = trials
        hp = self.hparams
        model = init_model(hp, trial.task, trial.session)
        x, y = train_tensors(trial.task, trial.session.device)
        optimiser = torch.optim.SGD(model.parameters(), lr=hp.lr, weight_decay=hp.weight_decay)
        model.train()

        def step(round_: StackedBatches) -> None:
            idx = round_.batches[0].indices
            optimiser.zero_grad(set_to_none=True)
            F.cross_entropy(model(x.index_select(0, idx)), y.index_select(0, idx)).backward()
            optimiser.step()

        return TrainingProgram([model], step)
