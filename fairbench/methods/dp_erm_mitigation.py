"""`dp-erm-mitigation`: DP-SGD on the fairness-lens mitigation objective of Tran, Dinh and
Fioretto, "Differentially Private Empirical Risk Minimization under the Fairness Lens"
(NeurIPS 2021), the baseline DP-FERMI's repository calls "DP-ERM_Mitigation".

Why. The paper explains why DP-SGD hurts some groups more: clipping takes more signal from
groups with larger per-example gradients, and the noise costs a group in proportion to its
loss curvature. Its mitigation penalises group differences in both quantities, so the private
model's excess risk is spread more evenly (an accuracy-parity-like target; it does not target
a rate constraint). The constraint of a trial therefore only chooses how it is evaluated;
DP-FERMI reported this method on demographic parity, which it does not target.

Objective (reconstructed: no primary text or code was available, methods-notes §5, §8.1):
  L(theta) + gamma1 sum_a |mean_a u - mean u| + gamma2 sum_a |mean_a c - mean c|,
with u_i = min(||grad loss_i||, C_u) (the per-example gradient norm up to `norm_clip`) and
c_i = 1 - sum_k f_k(x_i)^2 (the curvature proxy, 2p(1-p) for two classes), group vs
population over every group. Choices where the notes leave the form open: absolute gaps (the
regulariser the paper's analysis bounds is a gap, not its square); group vs population summed
over groups (every group is pulled each step, as in PF-LD, where a max would move one); the
knob `lambda` sets gamma1 = lambda `gradient_weight`, gamma2 = lambda `curvature_weight`
(DP-FERMI swept one lambda; defaults 1 and 1).

Privacy: full record only, add/remove one (the paper studies standard DP-SGD on whole records;
no sensitive-attribute option). Per step, on one Poisson batch (rate q):
- signs s_a of each gap, from the previous step's noisy group sums (zero at the first step);
- each record's gradient v_i = grad loss_i + sum_a [gamma1 s^u_a grad u_i +
  gamma2 s^c_a grad c_i] (n 1[a_i = a] / n_a - 1) (n times the gradient of the objective
  summed over records), clipped at `clip_norm`, Gaussian noise (`gaussian_sum`), descent by
  lr / (q n);
- a Laplace histogram of the rows (u_i / C_u, c_i, 1) / 3 by group (l1 norm <= 1, hence
  sensitivity 1), scale `histogram_scale`; multiplying back by 3 and C_u is post-processing.
  Its per-group means (noisy sums over noisy counts floored at `min_count`) give the next
  step's signs; `sign_momentum` > 0 takes them from a moving average of the noisy sums
  instead (post-processing, free; default 0, the notes' previous-step form). On Adult at
  eps 1 (2 seeds) 0.9 made the penalty bite at smaller lambda but collapsed at lambda >= 10.
n and n_a come from one Laplace release of the group counts at the start (scale
`count_scale`, floored at `min_count`; n = sum of the noisy n_a). Ledger:
  PoissonSampled(q, Composed[Gaussian(sigma), Laplace(histogram_scale)]) x T
  + Laplace(count_scale) once,
calibrated by the suite's accountant (`calibrate: noise` solves sigma, `steps` the step count).

lambda = 0 is DP-SGD itself: `dp-sgd`'s plan and program with these hyperparameters (its
release under `dp_sgd.LABEL`, hence the same noise stream, schedule and update; no histogram
and no counts), so parameters equal `dp-sgd`'s bit for bit for the same seed. lambda = 0 and
lambda > 0 run steps of different kinds, so they train in separate stacks (`stack_shape`).
A tune's draws stack across configurations (`mixed`: step size, batch size, epochs, clip,
noise, Laplace scales, penalty weights), each trial at its own values.

Gradients of the regulariser. Logistic regression (stacked: seeds x lambda as one program):
every term depends on theta only through the logits z = W x + b, so each record's gradient
is g_i (x) [x_i, 1] with, for p = softmax(z), e = p - onehot(y), r = sqrt(||x||^2 + 1):
||grad loss_i|| = ||e|| r, d u_i / dz = 1[||e|| r < C_u] r p * (e - <p, e>) / ||e||, and
d c_i / dz = -2 p * (p - <p, p>). The MLP (one trial at a time) takes torch.func's
per-example gradient of the gradient norm (double backward through vmap).

Departures from the notes' privatisation sketch: the histogram rows are scaled to l1 <= 1
(the session's Laplace histogram contract) instead of declaring sensitivity C_u + 2.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from dp_accounting import dp_event
from pydantic import Field
from torch import nn
from torch.func import functional_call, grad, vmap

from fairbench import constraints
from fairbench.methods.base import Method
from fairbench.methods.dp_sgd import DPSGD
from fairbench.methods.engine import (
    Gathered,
    Outcome,
    Stack,
    StackedData,
    TrainingProgram,
    calibrated,
    expected_batch,
    init_models,
)
from fairbench.methods.knob import Direction, Knob
from fairbench.methods.plan import DataShape, Plan
from fairbench.methods.trial import CalibratedHparams, FairnessSpec, Trial
from fairbench.models.grad_sample import class_softmax, one_hot
from fairbench.models.stacked import OneTrial, StackedLinear, first, stack_models, stackable
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.accountant import StepShape
from fairbench.privacy.contributions import Rows, StackedOuterProducts
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.session import PrivacySession
from fairbench.privacy.stacked import StackedBatches, gaussian_sums, laplace_histograms

# evaluated on (the method targets none of them); accuracy parity where the suite has it
CONSTRAINTS = tuple(
    c
    for c in ("demographic_parity", "equalized_odds", "accuracy_parity")
    if c in constraints.BUILDERS
)
GRADIENT = "dp-erm-mitigation: clipped regularised gradient sum"
HISTOGRAM = "dp-erm-mitigation: Laplace group sums of (u, c, 1)"
COUNTS = "dp-erm-mitigation: Laplace group counts"
WIDTH = 3  # histogram columns (u / C_u, c, 1), each row divided by WIDTH: l1 norm <= 1
TINY = 1e-12
WEIGHTS = ("gradient_weight", "curvature_weight")  # gamma1 / lambda, gamma2 / lambda


class Regularised:
    """Per-record loss_i + coef_u u_i + coef_c c_i of a linear model, as a function of the
    logits, with its closed-form logit gradient (module docstring). Shapes: y, coef_u, coef_c,
    x_sq (..., B); logits (..., B, K). u_i and c_i are those of the current logits (`terms`)."""

    def __init__(self, y, coef_u, coef_c, x_sq, norm_clip: float) -> None:
        self.y, self.coef_u, self.coef_c, self.norm_clip = y, coef_u, coef_c, norm_clip
        self.r = torch.sqrt(x_sq + 1.0)  # ||[x, 1]||: the logits' gradient in theta

    def terms(self, logits: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """u, c, and their logit gradients du, dc, and e = softmax - onehot (dloss/dz)."""
        p = class_softmax(logits)
        e = p - one_hot(self.y, logits.shape[-1], logits.dtype)
        e_norm = torch.sqrt((e * e).sum(dim=-1)).clamp(min=TINY)
        norm = e_norm * self.r  # ||grad loss_i||
        unclipped = (norm < self.norm_clip).to(logits.dtype)
        du = (unclipped * self.r / e_norm).unsqueeze(-1) * p * (e - (p * e).sum(-1, keepdim=True))
        p_sq = (p * p).sum(dim=-1, keepdim=True)
        return norm.clamp(max=self.norm_clip), 1 - p_sq.squeeze(-1), du, -2 * p * (p - p_sq), e

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """The per-record objective written out (for autograd checks)."""
        p = torch.softmax(logits, dim=-1)
        e = p - one_hot(self.y, logits.shape[-1], logits.dtype)
        u = (e.norm(dim=-1) * self.r).clamp(max=self.norm_clip)
        ce = F.cross_entropy(logits.flatten(0, -2), self.y.flatten(), reduction="none")
        return ce.view(self.y.shape) + self.coef_u * u + self.coef_c * (1 - (p * p).sum(-1))

    def logit_grad(self, logits: torch.Tensor) -> torch.Tensor:
        _, _, du, dc, e = self.terms(logits)
        return e + self.coef_u.unsqueeze(-1) * du + self.coef_c.unsqueeze(-1) * dc


def functional_terms(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    weight: torch.Tensor,
    coef_u: torch.Tensor,
    coef_c: torch.Tensor,
    norm_clip: float,
) -> tuple[torch.Tensor, torch.Tensor, Rows]:
    """Any model, one trial: per record (B,) u_i, c_i and the gradient of
    weight_i (loss_i + coef_u u_i + coef_c c_i) (`weight` 0 silences a padding row), through
    torch.func (the gradient norm's gradient is a double backward)."""
    params = {name: p.detach() for name, p in model.named_parameters()}

    def logits_of(theta, xi):
        return functional_call(model, theta, (xi.unsqueeze(0),)).squeeze(0)

    def loss(theta, xi, yi):
        return F.cross_entropy(logits_of(theta, xi), yi)

    def objective(theta, xi, yi, wi, cu, cc):
        g = grad(loss)(theta, xi, yi)
        squared = sum((v * v).sum() for v in g.values())
        u = squared.clamp(min=TINY**2).sqrt().clamp(max=norm_clip)
        z = logits_of(theta, xi)
        p = torch.softmax(z, dim=-1)
        c = 1 - (p * p).sum()
        total = F.cross_entropy(z, yi) + cu * u + cc * c
        return wi * total, (wi * u, wi * c)

    per_record = vmap(grad(objective, has_aux=True), in_dims=(None, 0, 0, 0, 0, 0))
    grads, (u, c) = per_record(params, x, y, weight, coef_u, coef_c)
    return u.detach(), c.detach(), Rows([grads[name] for name in params])


class FunctionalModel:
    """One trial's model of any kind, trained through `functional_terms` (opacus's hooks,
    which `OneModel` installs, would fire inside torch.func's calls)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    @torch.no_grad()
    def descend(self, sums: list[torch.Tensor], step: float) -> None:
        for p, g in zip(self.model.parameters(), sums, strict=True):
            p.sub_(step * g[0])


class DPERMMitigationHparams(CalibratedHparams):
    # lr, batch_size, clip_norm, epochs, calibrate: dp-sgd's defaults, so that lambda = 0 with
    # the defaults is dp-sgd with its defaults
    lr: float = Field(1.0, gt=0)
    batch_size: int = Field(512, ge=1)
    clip_norm: float = Field(1.0, gt=0, description="per-record clip of the gradient v_i")
    norm_clip: float = Field(
        1.0, gt=0, description="C_u: per-example gradient norms are counted up to it"
    )
    gradient_weight: float = Field(
        1.0, ge=0, description="gamma1 / lambda: weight of the gradient-norm gap"
    )
    curvature_weight: float = Field(
        1.0, ge=0, description="gamma2 / lambda: weight of the curvature-proxy gap"
    )
    histogram_scale: float = Field(
        10.0, gt=0, description="Laplace scale of the per-step group sums (l1 sensitivity 1)"
    )
    count_scale: float = Field(
        50.0, gt=0, description="Laplace scale of the one release of the group counts"
    )
    min_count: float = Field(1.0, gt=0, description="public floor of every noisy count")
    sign_momentum: float = Field(
        0.0, ge=0, lt=1, description="signs from a moving average of the noisy group sums"
    )


class DPERMMitigation(Method):
    name = "dp-erm-mitigation"
    description = (
        "DP-SGD on the loss plus group gaps in gradient norm and curvature "
        "(Tran, Dinh, Fioretto 2021)"
    )
    private = True
    paper = (
        "Tran, Dinh, Fioretto (2021): Differentially Private Empirical Risk Minimization "
        "under the Fairness Lens. NeurIPS 2021"
    )
    constraints = CONSTRAINTS  # evaluated on; it targets none of them
    knob = Knob(
        "lambda",
        "weight of the gradient-norm and curvature gap penalties",
        Direction.STRICTER,
        low=0.0,
        typical=1.0,
    )
    reconstructed = "no paper or code found: regulariser and its privatisation from secondary notes"
    Hparams = DPERMMitigationHparams
    hparams: DPERMMitigationHparams
    mixed = frozenset(
        {
            "lr",
            "batch_size",
            "epochs",
            "clip_norm",
            "calibrate",
            "noise_multiplier",
            "max_steps",
            "histogram_scale",
            "count_scale",
            *WEIGHTS,
        }
    )

    def _dp_sgd(self) -> DPSGD:
        """lambda = 0: dp-sgd with these hyperparameters (its schedule, release, label, noise
        and update)."""
        return DPSGD(**self.hparams.model_dump(include=set(DPSGD.Hparams.model_fields)))

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """lambda = 0: dp-sgd's plan; lambda > 0: the Laplace histogram on every batch and the
        counts once are released and calibrated too."""
        hp = self.hparams
        if fairness.knob == 0:
            twin = self._dp_sgd().plan(shape, target, fairness, seed)
            return replace(twin, info={**twin.info, "norm_clip": hp.norm_clip})
        counts = dp_event.LaplaceDpEvent(hp.count_scale)
        step_shape = StepShape(1, False, counts)
        schedule = calibrated(
            hp, shape.n, self.required_target(target), hp.histogram_scale, step_shape
        )
        q, sigma, steps = schedule.sampling_rate, schedule.noise_multiplier, schedule.steps
        ledger = PrivacyLedger()
        ledger.record(f"{GRADIENT} + {HISTOGRAM}", sgd_steps(q, sigma, steps, hp.histogram_scale))
        ledger.record(COUNTS, counts)
        info = {
            **schedule.info(),
            "clip_norm": hp.clip_norm,
            "norm_clip": hp.norm_clip,
            "histogram_scale": hp.histogram_scale,
            "count_scale": hp.count_scale,
        }
        budget = schedule.budget(laplace=hp.histogram_scale, count=hp.count_scale)
        return Plan(ledger, schedule, budget=budget, info=info)

    def stackable(self) -> bool:
        return stackable(self.hparams.model)

    def stack_shape(self, plan: Plan) -> bool:
        """Whether lambda > 0: the regularised step and its releases, or dp-sgd's."""
        return "histogram_scale" in plan.info

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        """Trials of this configuration that share `plan`: a stack of one configuration."""
        return self.stack_program(Stack([self] * len(trials), trials, [plan] * len(trials)))

    def stack_program(self, stack: Stack) -> TrainingProgram:
        """lambda = 0: dp-sgd's program. lambda > 0: each trial's group counts (one release),
        then per round the regularised gradients and the group sums. The trials' lambdas are
        all 0 or all > 0 (`stack_shape`); each trial reads its own step size, clip, noise,
        Laplace scales and penalty weights (`mixed`)."""
        trials = stack.trials
        lams = [t.fairness.knob_value for t in trials]

        def outcomes(reports: list[dict]) -> list[Outcome]:
            return [
                Outcome(
                    {
                        "lambda": lam,
                        "gamma1": lam * h.gradient_weight,
                        "gamma2": lam * h.curvature_weight,
                        **report,
                    }
                )
                for lam, h, report in zip(lams, stack.hparams, reports, strict=True)
            ]

        if lams[0] == 0:
            twins = [m._dp_sgd() for m in stack.methods]
            twin = twins[0].stack_program(Stack(twins, trials, stack.plans))
            return TrainingProgram(twin.models, twin.step, lambda: outcomes([{} for _ in trials]))
        hp = self.hparams
        models = init_models(hp, trials)
        functional = not stackable(hp.model)  # no opacus hooks under torch.func
        model_stack = FunctionalModel(models[0]) if functional else stack_models(models)
        data = StackedData.of(trials)
        group = data.per_record(lambda task: task.train.s, torch.int64)
        n_groups = trials[0].task.n_groups
        counts = torch.stack(
            [
                self._counts(trial.session, data.trial_rows(group, t), n_groups, h.count_scale)
                for t, (trial, h) in enumerate(zip(trials, stack.hparams, strict=True))
            ]
        )
        step, report = self._step(stack, model_stack, data, group, counts, lams)
        return TrainingProgram(models, step, lambda: outcomes(report()))

    def _counts(self, session: PrivacySession, groups: torch.Tensor, n_groups: int, scale: float):
        """n_a: one Laplace release of the group sizes, floored at `min_count` (G,)."""
        ones = torch.ones((len(groups), 1), device=groups.device)
        noisy = session.laplace_histogram(COUNTS, scale)(ones, groups, n_groups)
        return noisy.squeeze(1).clamp(min=self.hparams.min_count)

    def _step(self, stack, model_stack, data, group, counts, lams):
        """Each round (its k trials): gradients with the previous signs, the noisy
        histogram, new signs."""
        hp, dev, trials = self.hparams, data.device, stack.trials
        n_trials, n_groups = len(trials), counts.shape[1]
        sums = [
            t.session.gaussian_sum(GRADIENT, h.clip_norm, p.loop.noise_multiplier)
            for t, h, p in zip(trials, stack.hparams, stack.plans, strict=True)
        ]
        histograms = [
            t.session.laplace_histogram(HISTOGRAM, h.histogram_scale)
            for t, h in zip(trials, stack.hparams, strict=True)
        ]
        lam = torch.tensor(lams, dtype=torch.float32, device=dev).unsqueeze(1)  # (T, 1)
        weights = [stack.values(lambda h, p, w=w: getattr(h, w)) for w in WEIGHTS]
        gammas = torch.stack([lam * w.at(n_trials, 1) for w in weights])  # (2, T, 1)
        share = (counts.sum(dim=1, keepdim=True) / counts).to(torch.float32)  # n / n_a (T, G)
        signs = torch.zeros((2, n_trials, n_groups), device=dev)  # (u, c) x trials x groups
        average = torch.zeros((n_trials, n_groups, WIDTH), device=dev)  # of the noisy sums
        unscale = torch.tensor([WIDTH * hp.norm_clip, WIDTH, WIDTH], device=dev)
        step_size = stack.values(lambda h, p: h.lr / expected_batch(p.loop, data.n))

        def step(round_: StackedBatches) -> None:
            nonlocal signs, average
            k = len(round_.batches)
            rows = data.gather(round_)
            xb, yb, ab = rows.rows(data.x), rows.rows(data.y), rows.rows(group)
            # sum_a gamma s_a (n 1[a_i = a] / n_a - 1), for u and for c: (2, k, B)
            own = signs if k == n_trials else signs[:, :k]
            per_group = gammas[:, :k] * (own * first(share, k) - own.sum(dim=-1, keepdim=True))
            coef = per_group.gather(2, ab.unsqueeze(0).expand(2, -1, -1))
            u, c, contributions = self._terms(model_stack, xb, yb, rows, coef, data)
            ones = torch.ones_like(u)
            cells = rows.masked(torch.stack([u / hp.norm_clip, c, ones], dim=-1) / WIDTH)
            hist = (
                laplace_histograms(histograms, cells, ab, n_groups, rows.sizes, round_.batches)
                * unscale
            )
            model_stack.descend(gaussian_sums(sums, contributions, round_.batches), step_size.at(k))
            moved = hp.sign_momentum * first(average, k) + (1 - hp.sign_momentum) * hist
            if k == n_trials:
                average, signs = moved, gap_signs(moved, hp.min_count)
            else:
                average[:k], signs[:, :k] = moved, gap_signs(moved, hp.min_count)

        def report() -> list[dict]:
            return [
                {"group_counts": n_a, "final_signs": {"u": s_u, "c": s_c}}
                for n_a, s_u, s_c in zip(
                    counts.cpu().tolist(),
                    signs[0].cpu().tolist(),
                    signs[1].cpu().tolist(),
                    strict=True,
                )
            ]

        return step, report

    def _terms(self, stack, xb, yb, rows: Gathered, coef, data: StackedData):
        """u, c (T, B) and each record's gradient v_i as contributions."""
        norm_clip = self.hparams.norm_clip
        if isinstance(stack, StackedLinear):
            objective = Regularised(yb, coef[0], coef[1], rows.rows(data.x_sq), norm_clip)
            u, c, du, dc, e = objective.terms(stack.logits(xb))
            grads = e + coef[0].unsqueeze(-1) * du + coef[1].unsqueeze(-1) * dc
            contributions = StackedOuterProducts.masked(
                grads, xb, rows.mask, rows.sizes, rows.rows(data.x_sq)
            )
            return u, c, contributions
        weight = torch.ones_like(coef[0, 0]) if rows.mask is None else rows.mask[0].to(xb.dtype)
        u, c, grads = functional_terms(
            stack.model, xb[0], yb[0], weight, coef[0, 0], coef[1, 0], norm_clip
        )
        return u.unsqueeze(0), c.unsqueeze(0), OneTrial(grads)


def gap_signs(hist: torch.Tensor, min_count: float) -> torch.Tensor:
    """sign(mean_a - mean) of u and of c per trial and group, from a round's noisy group sums
    hist (T, G, 3) = (sum u, sum c, count): (2, T, G)."""
    counts = hist[..., 2].clamp(min=min_count)
    means = hist[..., :2] / counts.unsqueeze(-1)  # (T, G, 2)
    overall = hist[..., :2].sum(dim=1) / hist[..., 2].sum(dim=1).clamp(min=min_count).unsqueeze(-1)
    return torch.sign(means - overall.unsqueeze(1)).permute(2, 0, 1)
