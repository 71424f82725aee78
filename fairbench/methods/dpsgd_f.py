"""`dpsgd-f`: DPSGD-F (Xu, Du, Wu, KDD 2021), per-group clipping bounds set each step from a
private count of clipped gradients, as the authors of the misalignment paper implement it
(layer6ai-labs/fair-dp: trainers/trainer.py `DpsgdFTrainer`, optimizers/dpsgd_f_optimizer.py;
their Adult protocol: sigma 1, C0 0.5, count noise 10, batch 256, 20 epochs, delta 1e-6).

Per step, on a Poisson batch B (rate q, expected size q n):

1. Counts. Per group k, m_k = #{i in B, group k, ||g_i|| > C0} (gradients the base bound C0
   would clip) and o_k = #{i in B, group k, ||g_i|| <= C0}: one count vector of 2K cells plus
   N(0, sigma_c^2) per cell (`count_noise_multiplier`). Each record lies in exactly one cell,
   so adding or removing a record moves the vector by 1 in l2 norm: sensitivity 1.
2. Bounds (post-processing of the noisy counts, as the authors' code does): m~_k = max(m_k +
   noise, 0) rounded down, o~_k likewise, a_k = m~_k / (m~_k + o~_k) (1 where both are 0),
   C_k = C0 (1 + a_k / (mean_j a_j + 1e-8)). A group whose gradients are clipped more often
   gets a larger bound; every C_k lies in [C0, (K + 1) C0].
3. Gradient. sum_i clip(g_i, C_k(i)) + N(0, sigma^2 C_max^2 I), C_max = max_k C_k: one record
   moves the sum by at most C_max. Released by the session's Gaussian sum at clip 1 on the
   contributions divided by C_max (each then of norm <= C_k / C_max <= 1, the mechanism's clip
   a no-op it still enforces), its output multiplied by C_max: the same release, its noise
   drawn by the mechanism. Divided by q n (public, as dp-sgd), then a descent step.

Privacy: per step both releases read the same Poisson batch, so one sampled event wraps their
composition: PoissonSampled(q, Composed([Gaussian(sigma), Gaussian(sigma_c)])). The bounds are
chosen from the first release's noisy output before the second (adaptive composition: the
gradient's noise is sigma times its sensitivity C_max whatever the bounds). Calibrated by the
suite's PLD accountant: `calibrate: noise` solves sigma for the steps `epochs` gives, with
sigma_c fixed; `calibrate: steps` fixes both and solves the steps.

Departures from the authors' code (what runs follows the suite, DESIGN.md):
- Accounting. They account each step's count release as a separate sampled Gaussian step of
  opacus's RDP accountant beside the gradient's, i.e. as if it read an independent batch.
  Here the two share the batch and are accounted as one sampled event (PLD), which is the
  correct model and reports a slightly larger epsilon.
- The gradient noise. Their std is sigma times the largest bound among the batch's records
  (`torch.max(per_sample_clip_bound)`), which moves with whether a group is in the batch at
  all: a record of an absent group would raise it, so it is not the sensitivity. Here it is
  sigma times max_k C_k over every group (the same wherever each group is in the batch, as
  on Adult at batch 256).
- The count vector is noised through the session (their `torch.normal` draws are unseeded
  by the trial); the gradient noise is the session's too.
- Models: their MLP is 256x256 tanh; here the suite's `logistic` or `mlp` (one hidden layer).

Stacked trials (logistic models): trials of any seeds and of different step sizes, batch
sizes, epochs, C0, count and gradient noise (`mixed`: a tune's draws) run as one program,
each at its own values (`fairbench.methods.engine`); a trial whose rounds are done stops.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from fairbench.methods.base import Method
from fairbench.methods.engine import (
    Outcome,
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
from fairbench.models.stacked import OneTrial, first, stack_models, stackable
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.accountant import StepShape
from fairbench.privacy.contributions import scaled
from fairbench.privacy.stacked import gaussian_counts, gaussian_sums

# what both disparate-impact methods target, as the reports name it (fairbench.report.accuracy_cost)
ACCURACY_COST = (
    "test_accuracy_drop_gap: the gap between groups of the test accuracy drop from the run's "
    "erm trial on the same split (per group: test_group_accuracy_drop)"
)
COUNTS = "dpsgd-f: Gaussian counts of clipped and unclipped gradients per group"
GRADIENT = "dpsgd-f: per-group clipped gradient sum"


class DPSGDFHparams(CalibratedHparams):
    lr: float = Field(1.0, gt=0)
    base_clip: float = Field(
        0.5, gt=0, description="C0: the base bound; counts say which gradients exceed it"
    )
    count_noise_multiplier: float = Field(
        10.0, gt=0, description="sigma_c: Gaussian noise on each clipped/unclipped count"
    )
    grad_engine: Literal["auto", "opacus"] = Field(
        "auto", description="per-sample gradients: auto (closed form for linear models) or opacus"
    )


def record_norms(contributions) -> torch.Tensor:
    """Each record's gradient norm, (T, B), from a stack's contributions."""
    if isinstance(contributions, OneTrial):
        return contributions.trial(0).norms().unsqueeze(0)
    return contributions.norms()


def rescaled(contributions, factors: torch.Tensor):
    """A stack's contributions with record i of trial t multiplied by factors[t, i]."""
    if isinstance(contributions, OneTrial):
        return OneTrial(scaled(contributions.trial(0), factors[0]))
    return scaled(contributions, factors)


def per_trial(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(T,) values shaped to multiply a (T, ...) tensor."""
    return values.to(like.dtype).view(-1, *[1] * (like.dim() - 1))


def count_cells(
    group: torch.Tensor, norms: torch.Tensor, base_clip: float | torch.Tensor
) -> torch.Tensor:
    """Each record's one cell of the count vector: 2k if its gradient is within C0, 2k + 1 if
    C0 would clip it (k: its group). `base_clip` a float or (T, 1) float32."""
    return 2 * group + (norms > base_clip).long()


def group_bounds(noisy: torch.Tensor, base_clip: float | torch.Tensor) -> torch.Tensor:
    """(T, K) bounds C_k from the noisy (T, 2K) counts (cell 2k: unclipped in group k, 2k + 1:
    clipped), by the authors' rule (module docstring, step 2). `base_clip` a float or (T, 1)
    float64."""
    counts = noisy.clamp(min=0).floor()
    unclipped, clipped = counts[:, 0::2], counts[:, 1::2]
    total = clipped + unclipped
    share = torch.where(total > 0, clipped / total.clamp(min=1), torch.ones_like(total))
    return base_clip * (1 + share / (share.mean(dim=-1, keepdim=True) + 1e-8))


class DPSGDF(Method):
    name = "dpsgd-f"
    description = (
        "DPSGD-F: per-group clipping bounds from private counts of clipped gradients "
        "(targets accuracy parity; no knob)"
    )
    private = True
    paper = (
        "Xu, Du, Wu (2021): Removing Disparate Impact on Model Accuracy in Differentially "
        "Private Stochastic Gradient Descent. KDD 2021"
    )
    constraints = tuple(VIOLATIONS)  # targets the group accuracy cost of privacy: evaluated on any
    declared_constraints = True
    target_metric = ACCURACY_COST
    Hparams = DPSGDFHparams
    hparams: DPSGDFHparams
    mixed = frozenset(
        {
            "lr",
            "batch_size",
            "epochs",
            "base_clip",
            "count_noise_multiplier",
            "noise_multiplier",
            "max_steps",
            "calibrate",
        }
    )

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """Per step a Gaussian count vector and a Gaussian gradient sum on one Poisson batch."""
        hp = self.hparams
        sigma_c = hp.count_noise_multiplier
        shape_ = StepShape(count_noise=sigma_c)
        schedule = calibrated(hp, shape.n, self.required_target(target), shape=shape_)
        event = schedule.rounds_event(count_noise=sigma_c)
        ledger = PrivacyLedger.of((f"{COUNTS} + {GRADIENT}", event))
        info = {**schedule.info(), "base_clip": hp.base_clip, "count_noise_multiplier": sigma_c}
        return Plan(ledger, schedule, budget=schedule.budget(counts=sigma_c), info=info)

    def stackable(self) -> bool:
        return stackable(self.hparams.model, self.hparams.grad_engine)

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        """Trials of this configuration that share `plan`: a stack of one configuration."""
        return self.stack_program(Stack([self] * len(trials), trials, [plan] * len(trials)))

    def stack_program(self, stack: Stack) -> TrainingProgram:
        """Each trial at its own step size, base clip C0, count noise and gradient noise; a
        round of k trials reads and updates the first k trials' state only."""
        trials, hp = stack.trials, self.hparams
        n_groups, device = trials[0].task.n_groups, trials[0].session.device
        models = init_models(hp, trials)
        model_stack = stack_models(models, hp.grad_engine)
        data = StackedData.of(trials)
        groups = data.per_record(lambda task: task.train.s, torch.int64)
        counters = [
            t.session.gaussian_counts(COUNTS, h.count_noise_multiplier)
            for t, h in zip(trials, stack.hparams, strict=True)
        ]
        sums = [
            t.session.gaussian_sum(GRADIENT, 1.0, p.loop.noise_multiplier)
            for t, p in zip(trials, stack.plans, strict=True)
        ]
        step_size = stack.values(lambda h, p: h.lr / expected_batch(p.loop, data.n))
        base_clip = stack.values(lambda h, p: h.base_clip)  # compared with float32 norms
        base_clip64 = stack.values(lambda h, p: h.base_clip, torch.float64)  # float64 bounds
        rounds = stack.values(lambda h, p: p.loop_rounds, torch.float64)
        bound_total = torch.zeros((len(trials), n_groups), dtype=torch.float64, device=device)

        def step(round_):
            k = len(round_.batches)
            batch = data.gather(round_)
            logits = model_stack.logits(batch.x)
            grads = model_stack.contributions(
                batch.x, CrossEntropy(batch.y), logits, batch, batch.x_sq
            )
            norms = record_norms(grads)
            group = batch.rows(groups)
            real = torch.ones_like(group, dtype=torch.bool) if batch.mask is None else batch.mask
            cells = count_cells(group, norms, base_clip.at(k, 1))
            noisy = gaussian_counts(counters[:k], cells, real, 2 * n_groups, round_.batches)
            bounds = group_bounds(noisy, base_clip64.at(k, 1))  # (k, K)
            largest = bounds.max(dim=-1).values
            first(bound_total, k).add_(bounds)
            own = bounds.gather(1, group).to(norms.dtype)
            factors = (own / (norms + 1e-12)).clamp(max=1.0) / per_trial(largest, norms)
            noisy_sums = gaussian_sums(sums, rescaled(grads, factors), round_.batches)
            model_stack.descend([s * per_trial(largest, s) for s in noisy_sums], step_size.at(k))

        def outcomes() -> list[Outcome]:
            mean = (bound_total / rounds.at(len(trials), 1)).cpu().tolist()
            return [Outcome({"mean_group_clip": row}) for row in mean]

        return TrainingProgram(models, step, outcomes)
