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

from fairbench.errors import ConfigError
from fairbench.methods._training import (
    calibrated_quantity,
    calibrated_schedule,
    check_one_free_quantity,
    generator,
    init_model,
    poisson_batches,
    schedule_budget,
    train_tensors,
)
from fairbench.methods.base import (
    Device,
    FairnessSpec,
    Fitted,
    Method,
    TrainingHparams,
    resolve_device,
)
from fairbench.models.grad_sample import ClippedGradients, CrossEntropy
from fairbench.privacy import (
    PrivacyBudget,
    PrivacyLedger,
)
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.noise import add_gaussian_noise
from fairbench.task import Task


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

    def schedule(self, n: int, privacy: PrivacyBudget) -> tuple[float, int, float]:
        """(sampling rate, steps, noise multiplier) meeting the budget on n training records."""
        return calibrated_schedule(self.hparams, n, privacy)

    def _setup(self, task: Task, privacy: PrivacyBudget | None, seed: int, device: Device):
        if privacy is None:
            raise ConfigError(f"method {self.name} is private: give it a target epsilon")
        hp = self.hparams
        dev = resolve_device(device)
        model = init_model(hp, task, seed, dev)
        x, y = train_tensors(task, dev)
        q, steps, sigma = self.schedule(len(y), privacy)
        gen = generator(seed, dev)
        next_batch = poisson_batches(len(y), q, gen, dev)
        clipped = ClippedGradients(model, hp.grad_engine)
        params = list(model.parameters())
        scale = hp.lr / (q * len(y))

        def step() -> None:
            idx = next_batch()
            loss = CrossEntropy(y.index_select(0, idx))
            sums = clipped(x.index_select(0, idx), loss, hp.clip_norm)
            noisy = add_gaussian_noise(sums, sigma * hp.clip_norm, gen)
            with torch.no_grad():
                for p, g in zip(params, noisy, strict=True):
                    p.sub_(scale * g)

        ledger = PrivacyLedger()
        ledger.record("dp-sgd: clipped gradient sums", sgd_steps(q, sigma, steps))
        info = {
            "steps": steps,
            "noise_multiplier": sigma,
            "sampling_rate": q,
            "clip_norm": hp.clip_norm,
        }
        return model, dev, step, ledger, info

    def fit(
        self,
        task: Task,
        privacy: PrivacyBudget | None,
        fairness: FairnessSpec,
        seed: int,
        device: Device = "cpu",
    ) -> Fitted:
        model, dev, step, ledger, info = self._setup(task, privacy, seed, device)
        for _ in range(info["steps"]):
            step()
        budget = schedule_budget(info["sampling_rate"], info["steps"], info["noise_multiplier"],
                                 calibrated_quantity(self.hparams))  # fmt: skip
        return Fitted(model, dev, ledger, info=info, budget=budget)

    def stepper(
        self, task: Task, privacy: PrivacyBudget | None, seed: int, device: Device = "cpu"
    ) -> Callable[[], None]:
        return self._setup(task, privacy, seed, device)[2]
