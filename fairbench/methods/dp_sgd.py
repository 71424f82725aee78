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

from pydantic import Field, model_validator

from fairbench.methods.base import (
    Device,
    FairnessSpec,
    Fitted,
    Method,
    TrainingHparams,
    Trial,
    resolve_device,
)
from fairbench.methods.engine import (
    Schedule,
    StackedData,
    StackedProgram,
    calibrated,
    check_one_free_quantity,
    expected_batch,
    init_models,
    one_schedule,
    one_stacked_step,
    run_stacked,
)
from fairbench.metrics import VIOLATIONS
from fairbench.models.grad_sample import CrossEntropy
from fairbench.models.stacked import stack_models, stackable
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.session import PrivacySession
from fairbench.privacy.stacked import StackedBatches, gaussian_sums
from fairbench.task import Task

LABEL = "dp-sgd: clipped gradient sum"


class DPSGDHparams(TrainingHparams):
    lr: float = Field(1.0, gt=0)
    batch_size: int = Field(512, ge=1)
    clip_norm: float = Field(1.0, gt=0, description="per-sample gradient clip C")
    calibrate: Literal["noise", "steps"] = Field(
        "noise",
        description="noise: solve sigma (steps from epochs); steps: fix sigma, solve the steps",
    )
    noise_multiplier: float | None = Field(
        None, gt=0, description="Gaussian noise multiplier sigma; set only with calibrate: steps"
    )
    grad_engine: Literal["auto", "opacus"] = Field(
        "auto", description="per-sample gradients: auto (closed form for linear models) or opacus"
    )

    @model_validator(mode="after")
    def _one_free_quantity(self):
        check_one_free_quantity(self)
        return self


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

    def schedule(self, n: int, privacy: PrivacyBudget) -> Schedule:
        """Sampling rate, steps and noise multiplier meeting the budget on n training records."""
        return calibrated(self.hparams, n, privacy)

    def plan(self, schedule: Schedule) -> PrivacyLedger:
        plan = PrivacyLedger()
        plan.record(
            LABEL, sgd_steps(schedule.sampling_rate, schedule.noise_multiplier, schedule.steps)
        )
        return plan

    def stackable(self) -> bool:
        return stackable(self.hparams.model, self.hparams.grad_engine)

    def _program(self, trials: list[Trial]) -> StackedProgram:
        hp = self.hparams
        models = init_models(hp, trials)
        stack = stack_models(models, hp.grad_engine)
        data = StackedData([t.task for t in trials], trials[0].session.device)
        schedule = one_schedule([self.schedule(data.n, t.session.budget) for t in trials])
        sums = [
            t.session.gaussian_sum(LABEL, hp.clip_norm, schedule.noise_multiplier) for t in trials
        ]
        step_size = hp.lr / expected_batch(schedule, data.n)

        def step(round_: StackedBatches) -> None:
            batches = round_.batches
            rows = data.gather(round_)
            x = rows.rows(data.x)
            loss = CrossEntropy(rows.rows(data.y))
            logits = stack.logits(x)
            contributions = stack.contributions(x, loss, logits, rows, rows.rows(data.x_sq))
            stack.descend(gaussian_sums(sums, contributions, batches), step_size)

        return StackedProgram(models, schedule, step, lambda: [{} for _ in trials])

    def train_stack(self, trials: list[Trial]) -> list[Fitted]:
        program = self._program(trials)
        schedule = program.schedule
        run_stacked(trials, program, self.plan(schedule))
        info = {**schedule.info(), "clip_norm": self.hparams.clip_norm}
        return [
            Fitted(model, t.session.device, info=dict(info), budget=schedule.budget())
            for model, t in zip(program.models, trials, strict=True)
        ]

    def train(self, task: Task, fairness: FairnessSpec, session: PrivacySession) -> Fitted:
        return self.train_stack([Trial(task, fairness, session)])[0]

    def stepper(
        self, task: Task, privacy: PrivacyBudget | None, seed: int, device: Device = "cpu"
    ) -> Callable[[], None]:
        session = PrivacySession(seed, resolve_device(device), privacy)
        trial = Trial(task, FairnessSpec("demographic_parity"), session)
        program = self._program([trial])
        return one_stacked_step(trial, program, self.plan(program.schedule))
