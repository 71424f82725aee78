"""`reweighed-dp-sgd`: DP-SGD on a privately reweighed loss; a complete third-party plugin.

Reweighing (Kamiran and Calders, "Data preprocessing techniques for classification without
discrimination", Knowledge and Information Systems 33(1), 2012) weighs a record of group s and
label y by P(s) P(y) / P(s, y), making label and group independent in the weighted data. Here
the (group, label) counts are one Gaussian release through the privacy session (a share
`count_share` of epsilon) and the weights, raised to the knob `strength` (0: plain DP-SGD, 1:
full reweighing), are post-processing of it. Training is DP-SGD (Abadi et al. 2016) on the
weighted loss: each record's weighted gradient is clipped, so the weights change no
sensitivity. The gradient noise is calibrated so that counts and steps together meet the target.

Register it from your package's pyproject.toml (then `pip install` the package):

    [project.entry-points."fairbench.methods"]
    reweighed-dp-sgd = "my_package.fair_dp_logreg:ReweighedDPSGD"

or at run time, in the process that runs the trials: `fairbench.methods.register(ReweighedDPSGD)`.
Check it from the repository root:

    python -m fairbench.testing examples.fair_dp_logreg:ReweighedDPSGD --knob-values 0 1
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from dp_accounting import dp_event
from pydantic import Field

from fairbench.errors import ConfigError
from fairbench.methods.base import FairnessSpec, Fitted, Method, TrainingHparams, resolve_device
from fairbench.methods.engine import Schedule, expected_batch, init_model, run_steps, train_tensors
from fairbench.methods.knob import Direction, Knob
from fairbench.models.grad_sample import PerSampleGradients
from fairbench.privacy import PrivacyBudget, PrivacyLedger, calibrate_noise_multiplier
from fairbench.privacy.accountant import StepShape
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.session import PrivacySession

COUNTS, GRADIENT = "reweighing: (group, label) counts", "reweighed dp-sgd: clipped gradient sum"


class ReweighedHparams(TrainingHparams):
    lr: float = Field(1.0, gt=0)
    epochs: float = Field(5.0, gt=0)
    clip_norm: float = Field(1.0, gt=0)
    count_share: float = Field(0.1, gt=0, lt=1, description="epsilon share of the counts")


class WeightedCrossEntropy:
    """Each record's cross-entropy times its (public, post-processed) weight."""

    def __init__(self, y: torch.Tensor, w: torch.Tensor) -> None:
        self.y, self.w = y, w

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return self.w * F.cross_entropy(logits, self.y, reduction="none")


class ReweighedDPSGD(Method):
    name = "reweighed-dp-sgd"
    description = "DP-SGD on a loss reweighed by noisy (group, label) counts (Kamiran-Calders)"
    private = True
    knob = Knob(
        "strength",
        "exponent of the reweighing weights: 0 plain DP-SGD, 1 full",
        Direction.STRICTER,
        low=0.0,
    )
    Hparams = ReweighedHparams
    hparams: ReweighedHparams

    def schedule(self, n: int, privacy: PrivacyBudget) -> tuple[Schedule, dp_event.DpEvent]:
        """The counts' event at their share of epsilon; the steps' noise solved for the rest."""
        hp, eps, delta = self.hparams, privacy.epsilon, privacy.delta
        share = calibrate_noise_multiplier(1.0, 1, hp.count_share * eps, delta)
        counts = dp_event.GaussianDpEvent(share)
        q = min(1.0, hp.batch_size / n)
        steps = max(1, round(hp.epochs / q))
        sigma = calibrate_noise_multiplier(q, steps, eps, delta, None, StepShape(extra=counts))
        return Schedule(q, steps, sigma, "noise_multiplier"), counts

    def _program(self, task, fairness: FairnessSpec, session: PrivacySession):
        """(model, schedule, plan, step); the first step draws the counts, after the plan."""
        strength = 1.0 if fairness.knob is None else float(fairness.knob)
        if strength < 0:
            raise ConfigError(f"method {self.name}: strength must be >= 0, got {strength}")
        hp, dev = self.hparams, session.device
        model = init_model(hp, task, session)
        x, y = train_tensors(task, dev)
        s = torch.as_tensor(task.train.s, dtype=torch.int64, device=dev)
        k, c = task.n_groups, task.n_classes
        schedule, counts = self.schedule(len(y), session.budget)
        plan = PrivacyLedger()
        plan.record(
            GRADIENT, sgd_steps(schedule.sampling_rate, schedule.noise_multiplier, schedule.steps)
        )
        plan.record(COUNTS, counts)
        gradient_sum = session.gaussian_sum(GRADIENT, hp.clip_norm, schedule.noise_multiplier)
        per_sample, params = PerSampleGradients(model), list(model.parameters())
        scale = hp.lr / expected_batch(schedule, len(y))
        weights: list[torch.Tensor] = []

        def step(batch) -> None:
            if not weights:  # P(s) P(y) / P(s, y) from one noisy release
                cells = session.gaussian_counts(COUNTS, counts.noise_multiplier)(s * c + y, k * c)
                joint = cells.clamp(min=1.0).reshape(k, c)
                joint = joint / joint.sum()
                ratio = joint.sum(1, keepdim=True) * joint.sum(0, keepdim=True) / joint
                weights.append((ratio**strength).float()[s, y])
            idx = batch.indices
            loss = WeightedCrossEntropy(y[idx], weights[0][idx])
            noisy = gradient_sum(per_sample(x[idx], loss), batch)
            with torch.no_grad():
                for p, g in zip(params, noisy, strict=True):
                    p.sub_(scale * g)

        return model, schedule, plan, step

    def train(self, task, fairness: FairnessSpec, session: PrivacySession) -> Fitted:
        model, schedule, plan, step = self._program(task, fairness, session)
        run_steps(session, len(task.train), schedule, step, plan)
        counts = plan.entries[-1].event.noise_multiplier
        return Fitted(
            model, session.device, info=schedule.info(), budget=schedule.budget(counts=counts)
        )

    def stepper(self, task, privacy: PrivacyBudget | None, seed: int, device="cpu"):
        session = PrivacySession(seed, resolve_device(device), privacy)
        _, schedule, plan, step = self._program(task, FairnessSpec("demographic_parity"), session)
        session.submit_plan(plan)
        next_batch = session.poisson(len(task.train), schedule.sampling_rate)
        return lambda: step(next_batch())
