"""`dp-sgd`: DP-SGD (Abadi et al. 2016) with Poisson sampling, per-sample clipping and
Gaussian noise, calibrated to the target (epsilon, delta) by the suite's PLD accountant.

Each step releases sum_i clip(grad_i, C) + N(0, sigma^2 C^2 I) over a Poisson batch (rate
q = batch_size / n): one Poisson-sampled Gaussian of noise multiplier sigma under add/remove
neighbours. The noisy sum is divided by the expected batch size q n (public), not the realised
one. `calibrate: noise` fixes the steps from `epochs` and solves for sigma; `calibrate: steps`
fixes sigma (`noise_multiplier`) and solves for the largest step count that meets the target.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fairbench.methods.base import Method
from fairbench.methods.engine import (
    Stack,
    StackedData,
    TrainingProgram,
    calibrated,
    expected_batch,
    init_models,
)
from fairbench.methods.plan import DataShape, Plan
from fairbench.methods.trial import CalibratedHparams, FairnessSpec, Trial
from fairbench.metrics import VIOLATIONS
from fairbench.models.grad_sample import CrossEntropy
from fairbench.models.stacked import stack_models, stackable
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.stacked import gaussian_sums

LABEL = "dp-sgd: clipped gradient sum"


class DPSGDHparams(CalibratedHparams):
    lr: float = Field(1.0, gt=0)
    batch_size: int = Field(512, ge=1)
    clip_norm: float = Field(1.0, gt=0, description="per-sample gradient clip C")
    grad_engine: Literal["auto", "opacus"] = Field(
        "auto", description="per-sample gradients: auto (closed form for linear models) or opacus"
    )


class DPSGD(Method):
    name = "dp-sgd"
    description = "DP-SGD: Poisson batches, per-sample clipping, Gaussian noise (no fairness)"
    private = True
    paper = (
        "Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar, Zhang (2016): Deep Learning "
        "with Differential Privacy. ACM CCS 2016"
    )
    constraints = tuple(VIOLATIONS)  # ignores the fairness spec: evaluated on any
    declared_constraints = True
    Hparams = DPSGDHparams
    hparams: DPSGDHparams
    mixed = frozenset({"lr", "batch_size", "epochs", "clip_norm", "noise_multiplier"})

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """The schedule meeting the target on n records; one Poisson-sampled Gaussian a step."""
        schedule = calibrated(self.hparams, shape.n, self.required_target(target))
        info = {**schedule.info(), "clip_norm": self.hparams.clip_norm}
        ledger = PrivacyLedger.of((LABEL, schedule.rounds_event()))
        return Plan(ledger, schedule, budget=schedule.budget(), info=info)

    def stackable(self) -> bool:
        return stackable(self.hparams.model, self.hparams.grad_engine)

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        """Trials of this configuration that share `plan`: a stack of one configuration."""
        return self.stack_program(Stack([self] * len(trials), trials, [plan] * len(trials)))

    def stack_program(self, stack: Stack) -> TrainingProgram:
        """Each trial at its own step size lr / (q n), clip and noise multiplier."""
        trials, hp = stack.trials, self.hparams
        models = init_models(hp, trials)
        model_stack = stack_models(models, hp.grad_engine)
        data = StackedData.of(trials)
        sums = [
            t.session.gaussian_sum(LABEL, h.clip_norm, p.loop.noise_multiplier)
            for t, h, p in zip(trials, stack.hparams, stack.plans, strict=True)
        ]
        step_size = stack.values(lambda h, p: h.lr / expected_batch(p.loop, data.n))

        def step(round_):
            batch = data.gather(round_)
            logits = model_stack.logits(batch.x)
            grads = model_stack.contributions(
                batch.x, CrossEntropy(batch.y), logits, batch, batch.x_sq
            )
            k = len(round_.batches)
            model_stack.descend(gaussian_sums(sums, grads, round_.batches), step_size.at(k))

        return TrainingProgram(models, step)
