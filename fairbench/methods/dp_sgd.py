"""`dp-sgd`: DP-SGD (Abadi et al. 2016) with Poisson sampling, per-sample clipping and
Gaussian noise, calibrated to the target (epsilon, delta) by the suite's PLD accountant.

Each step releases sum_i clip(grad_i, C) + N(0, sigma^2 C^2 I) over a Poisson batch (rate
q = batch_size / n): one Poisson-sampled Gaussian of noise multiplier sigma under add/remove
neighbours. The noisy sum is divided by the expected batch size q n (public), not the realised
one. `calibrate: noise` fixes the steps from `epochs` and solves for sigma; `calibrate: steps`
fixes sigma (`noise_multiplier`) and solves for the largest step count that meets the target.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from pydantic import Field, model_validator

from fairbench.methods.base import (
    Device,
    FairnessSpec,
    Fitted,
    Method,
    TrainingHparams,
    resolve_device,
)
from fairbench.methods.engine import (
    Program,
    Schedule,
    calibrated,
    check_one_free_quantity,
    expected_batch,
    init_model,
    one_step,
    run_steps,
    train_tensors,
)
from fairbench.models.grad_sample import CrossEntropy, PerSampleGradients
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.session import Batch, PrivacySession
from fairbench.task import Task

LABEL = "dp-sgd: clipped gradient sum"


class DPSGDHparams(TrainingHparams):
    lr: float = Field(1.0, gt=0)
    batch_size: int = Field(512, ge=1)
    clip_norm: float = Field(1.0, gt=0)
    calibrate: Literal["noise", "steps"] = "noise"
    noise_multiplier: float | None = Field(None, gt=0)
    grad_engine: Literal["auto", "opacus"] = "auto"  # auto: closed form for linear models

    @model_validator(mode="after")
    def _one_free_quantity(self):
        check_one_free_quantity(self)
        return self


class DPSGD(Method):
    name = "dp-sgd"
    description = "DP-SGD: Poisson batches, per-sample clipping, Gaussian noise (no fairness)"
    private = True
    Hparams = DPSGDHparams
    hparams: DPSGDHparams

    def schedule(self, n: int, privacy: PrivacyBudget) -> Schedule:
        """Sampling rate, steps and noise multiplier meeting the budget on n training records."""
        return calibrated(self.hparams, n, privacy)

    def plan(self, schedule: Schedule) -> PrivacyLedger:
        plan = PrivacyLedger()
        plan.record(LABEL, sgd_steps(schedule.sampling_rate, schedule.noise_multiplier,
                                     schedule.steps))  # fmt: skip
        return plan

    def _program(self, task: Task, session: PrivacySession) -> Program:
        hp = self.hparams
        model = init_model(hp, task, session)
        x, y = train_tensors(task, session.device)
        schedule = self.schedule(len(y), session.budget)
        per_sample = PerSampleGradients(model, hp.grad_engine)
        gradient_sum = session.gaussian_sum(LABEL, hp.clip_norm, schedule.noise_multiplier)
        params = list(model.parameters())
        scale = hp.lr / expected_batch(schedule, len(y))

        def step(batch: Batch) -> None:
            idx = batch.indices
            loss = CrossEntropy(y.index_select(0, idx))
            noisy = gradient_sum(per_sample(x.index_select(0, idx), loss), batch)
            with torch.no_grad():
                for p, g in zip(params, noisy, strict=True):
                    p.sub_(scale * g)

        return Program(model, schedule, step)

    def train(self, task: Task, fairness: FairnessSpec, session: PrivacySession) -> Fitted:
        program = self._program(task, session)
        schedule = program.schedule
        run_steps(session, len(task.train), schedule, program.step, self.plan(schedule))
        info = {**schedule.info(), "clip_norm": self.hparams.clip_norm}
        return Fitted(program.model, session.device, info=info, budget=schedule.budget())

    def stepper(
        self, task: Task, privacy: PrivacyBudget | None, seed: int, device: Device = "cpu"
    ) -> Callable[[], None]:
        session = PrivacySession(seed, resolve_device(device), privacy)
        program = self._program(task, session)
        return one_step(session, program, len(task.train), self.plan(program.schedule))
