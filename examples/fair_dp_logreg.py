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

from fairbench.methods.base import Method
from fairbench.methods.engine import TrainingProgram, expected_batch, init_model, train_tensors
from fairbench.methods.knob import Direction, Knob
from fairbench.methods.plan import DataShape, Plan, Schedule
from fairbench.methods.trial import FairnessSpec, TrainingHparams, Trial
from fairbench.models.grad_sample import PerSampleGradients
from fairbench.privacy import PrivacyBudget, PrivacyLedger, calibrate_noise_multiplier
from fairbench.privacy.accountant import StepShape
from fairbench.privacy.stacked import StackedBatches

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
        required=False,  # None: 1, full reweighing
    )
    Hparams = ReweighedHparams
    hparams: ReweighedHparams

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """From public inputs only: the counts' Gaussian at their share of epsilon, and the
        steps' noise solved so that counts and steps together meet the target."""
        hp, eps, delta = self.hparams, target.epsilon, target.delta
        share = calibrate_noise_multiplier(1.0, 1, hp.count_share * eps, delta)
        counts = dp_event.GaussianDpEvent(share)
        q = min(1.0, hp.batch_size / shape.n)
        steps = max(1, round(hp.epochs / q))
        sigma = calibrate_noise_multiplier(q, steps, eps, delta, None, StepShape(extra=counts))
        schedule = Schedule(q, steps, sigma, "noise_multiplier")
        ledger = PrivacyLedger.of((GRADIENT, schedule.rounds_event()), (COUNTS, counts))
        return Plan(ledger, schedule, budget=schedule.budget(counts=share), info=schedule.info())

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        """One trial (the method does not stack): the weights, post-processing of one noisy
        release of the counts (the engine has submitted the plan), then a DP-SGD step on the
        weighted loss for each batch the engine draws."""
        (trial,) = trials
        hp, task, session, schedule = self.hparams, trial.task, trial.session, plan.schedule
        strength = 1.0 if trial.fairness.knob is None else float(trial.fairness.knob)
        model = init_model(hp, task, session)
        x, y = train_tensors(task, session.device)
        s = torch.as_tensor(task.train.s, dtype=torch.int64, device=session.device)
        k, c = task.n_groups, task.n_classes
        release = session.gaussian_counts(COUNTS, plan.budget.noise["counts"])
        joint = release(s * c + y, k * c).clamp(min=1.0).reshape(k, c)
        joint = joint / joint.sum()
        ratio = joint.sum(1, keepdim=True) * joint.sum(0, keepdim=True) / joint  # P(s)P(y)/P(s,y)
        weights = (ratio**strength).float()[s, y]
        gradient_sum = session.gaussian_sum(GRADIENT, hp.clip_norm, schedule.noise_multiplier)
        per_sample, params = PerSampleGradients(model), list(model.parameters())
        scale = hp.lr / expected_batch(schedule, len(y))

        def step(round_: StackedBatches) -> None:
            (batch,) = round_.batches
            idx = batch.indices
            loss = WeightedCrossEntropy(y[idx], weights[idx])
            noisy = gradient_sum(per_sample(x[idx], loss), batch)
            with torch.no_grad():
                for p, g in zip(params, noisy, strict=True):
                    p.sub_(scale * g)

        return TrainingProgram([model], step)
