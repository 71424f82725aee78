"""`dp-fermi`: noisy DP-SGDA on the ERMI min-max objective (Algorithm 1 of "Stochastic
Differentially Private and Fair Learning", Lowy, Gupta and Razaviyayn, ICLR 2023).

Objective (Theorem C.1): min_theta max_W  (1/n) sum_i loss_i + lambda psi_i(theta, W), with
  psi_i = -sum_{r,j} W_rj^2 F_ij + 2 p_{s_i}^(-1/2) sum_j W_{s_i j} F_ij - 1,
F_i = softmax(model(x_i)) and p_r the share of group r. Maximising over W gives lambda times
the ERMI between prediction and group, so lambda is the fairness knob (paper: 0 to 2.5). The
equalized-odds variant (Appendix B, F.2.4) keeps one W per true label and uses p(s | y); the
average of psi_i then maximises to the conditional ERMI. Multi-class labels and many groups
work alike: W is k x l per cell.

Per step, on a Poisson batch (rate q), two Gaussian releases share the batch:
- theta: sum of per-sample gradients of loss_i + lambda psi_i, each clipped to `clip_norm`,
  plus N(0, (sigma clip_norm)^2); descent by lr / (q n).
- W: sum of per-sample gradients of psi_i (k x l per record, in its cell), each clipped to
  `clip_norm_w`, plus N(0, (sigma clip_norm_w)^2); ascent by lr_w lambda / (q n), then
  projection of each cell's W onto the Frobenius ball of diameter `w_diameter`.
Both are accounted as one Poisson-sampled composition per step. With lambda = 0, theta never
depends on W, so W is neither updated nor released (the method is then DP-SGD). The last
iterate is returned (the paper's advice for practice) or, with `iterate: random`, a uniformly
drawn one (its theory).

Group marginals. psi needs p(s) (or p(s | y)), which are not public. By default they come from
one Gaussian release of the group (or label-group) counts, noise `marginal_noise` per cell,
accounted and calibrated with the rest; counts are floored at 1 (public). `marginals: public`
uses exact counts instead, and the row's `privacy_notion` says so.

Privacy notions (`privacy_notion`, recorded in every row):
- `full` (default): add/remove-one neighbours, whole record, as every other method.
- `sensitive-attribute` (Definition 2.2): neighbours differ in one record's group only. Only
  the group-dependent parts of the gradients need noise: in theta's gradient,
  lambda 2 p_s^(-1/2) sum_j W_sj grad F_j; in W's, 2 p_s^(-1/2) e_s F^T. Each is clipped per
  record (to `clip_norm`, `clip_norm_w`; the paper assumes Lipschitz bounds instead) and noised
  at sigma times twice the clip (a substitution moves a clipped term by up to twice its
  bound), as in Theorem 3.3 (first part). Accounting departs from the paper on purpose: the
  record's other gradient terms are public and unclipped, so an adversary can tell whether it
  was sampled, and sampling cannot amplify epsilon (only delta scales with q); the suite
  accounts exactly that worst case (`SubstitutionSampledDpEvent`). The epsilon the paper's
  analysis would claim for the same noise (sampling amplification as under add/remove) is
  reported as `epsilon_paper_analysis` in the row's info, labelled as such. To reproduce the
  published curves, `sensitive_accounting: paper` calibrates the noise by that analysis; the
  row's notion then reads "sensitive-attribute (paper analysis)", its `target_accounting` is
  `paper-analysis`, and its `epsilon_spent` is still the suite's true epsilon (larger).

Stacked trials (logistic models): trials whose plans are equal train as one tensor program
(`fairbench.methods.engine`), each with its own W, marginals (its own count release), Poisson
batches and noise. lambda = 0 and lambda > 0 release different things per step, so they plan
different schedules, and under `iterate: random` each drawn step count plans its own ledger:
a stack splits into one program per plan. An MLP trains one trial at a time through the same
code.

The authors' public code departs from the paper in ways this plugin does not follow: it clips
the averaged batch gradient rather than per-sample gradients (or does not clip at all); it
draws shuffled fixed-size batches rather than Poisson samples; it sets delta = 1/n^2; for
binary tasks it uses a 1 x 1 W, so only one cell of the ERMI objective is optimised; it has
no validation split. Here: per-sample clipping, Poisson batches, delta from the config, the
full k x l W, and the suite's splits.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from dp_accounting import dp_event
from pydantic import Field, model_validator

from fairbench.methods.base import Method
from fairbench.methods.engine import (
    Outcome,
    StackedData,
    TrainingProgram,
    calibrated,
    exact_sums,
    expected_batch,
    init_models,
    uncalibrated,
)
from fairbench.methods.knob import Direction, Knob
from fairbench.methods.plan import DataShape, Plan
from fairbench.methods.trial import CalibratedHparams, FairnessSpec, Trial
from fairbench.models.stacked import stack_models, stackable
from fairbench.privacy import PrivacyBudget, PrivacyLedger, epsilon
from fairbench.privacy.accountant import StepShape
from fairbench.privacy.contributions import StackedScattered
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.session import Guarantee, PrivacyNotion, PrivacySession
from fairbench.privacy.stacked import StackedBatches, gaussian_sums
from fairbench.streams import numpy_stream

THETA = "dp-fermi: Gaussian sum of clipped theta-gradients"
W_LABEL = "dp-fermi: Gaussian sum of clipped W-gradients"
COUNTS = "dp-fermi: Gaussian group counts for the marginals p(s)"
Part = Literal["all", "public", "sensitive"]


class FermiObjective:
    """Per-sample loss_i + lambda psi_i as a function of the logits, or one part of it:
    `public` (loss and the group-free psi term), `sensitive` (the group term of psi, without
    lambda). Offers its closed-form logit gradient for the linear fast path.

    Shapes: y, s, inv_sqrt_p (..., B) and logits (..., B, l), with any leading axes (a
    stack's trial axis T). `w_rows`: W of each record's cell (..., B, k, l); `inv_sqrt_p`:
    p^(-1/2) of each record's (cell, group); `s`: each record's group; `lam`: a float, or one
    per trial as a (T, 1) tensor; `soft`: softmax(logits) at the current parameters, if
    already known.
    """

    def __init__(
        self,
        y: torch.Tensor,
        s: torch.Tensor,
        w_rows: torch.Tensor,
        inv_sqrt_p: torch.Tensor,
        lam: float | torch.Tensor,
        part: Part = "all",
        soft: torch.Tensor | None = None,
    ) -> None:
        self.y, self.lam, self.part, self.soft = y, lam, part, soft
        self._lam = lam.unsqueeze(-1) if isinstance(lam, torch.Tensor) else lam  # (T, 1, 1)
        own = s[..., None, None].expand(*s.shape, 1, w_rows.shape[-1])
        self.public_coef = -(w_rows**2).sum(dim=-2)  # d psi_public / dF  (..., B, l)
        # d psi_sensitive / dF: W's row of the record's own group
        self.sensitive_coef = 2 * inv_sqrt_p[..., None] * w_rows.gather(-2, own).squeeze(-2)

    def _coef(self) -> torch.Tensor:
        if self.part == "sensitive":
            return self.sensitive_coef
        if self.part == "public":
            return self._lam * self.public_coef
        return self._lam * (self.public_coef + self.sensitive_coef)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        psi = (self._coef() * torch.softmax(logits, dim=-1)).sum(dim=-1)  # psi is linear in F
        if self.part == "sensitive":
            return psi
        ce = F.cross_entropy(logits.flatten(0, -2), self.y.flatten(), reduction="none")
        return ce.view(self.y.shape) + psi - self.lam

    def logit_grad(self, logits: torch.Tensor) -> torch.Tensor:
        """softmax Jacobian applied to the coefficients, plus softmax(z) - onehot(y)."""
        soft = torch.softmax(logits, dim=-1) if self.soft is None else self.soft
        coef = self._coef()
        grad = soft * (coef - (coef * soft).sum(dim=-1, keepdim=True))
        if self.part != "sensitive":
            grad = grad + soft - F.one_hot(self.y, logits.shape[-1]).to(logits.dtype)
        return grad


def w_gradients(
    soft: torch.Tensor, s: torch.Tensor, w_rows: torch.Tensor, inv_sqrt_p: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample gradients of psi_i in W (Appendix D), split into the group-free part
    -2 W diag(F_i) and the group part 2 p_s^(-1/2) e_s F_i^T; each (..., B, k, l)."""
    public = -2 * w_rows * soft[..., None, :]
    own = s[..., None, None].expand(*s.shape, 1, w_rows.shape[-1])
    group = (2 * inv_sqrt_p[..., None] * soft).unsqueeze(-2)
    return public, torch.zeros_like(w_rows).scatter_(-2, own, group)


def project_rows(w: torch.Tensor, radius: float) -> torch.Tensor:
    """Each cell's W (the last two axes) projected onto the Frobenius ball of `radius`."""
    norms = w.flatten(-2).norm(dim=-1).clamp(min=1e-12)
    return w * (radius / norms).clamp(max=1.0)[..., None, None]


class DPFermiHparams(CalibratedHparams):
    # The paper (Appendix F.2.1) uses batch 1024, 200 epochs, learning rates in [0.005, 0.01]
    # and clip and diameter in [1, 5]; configs/fig-dp-fermi.yaml reproduces that. Under the
    # full notion at eps = 1 on Adult (validation, 2 seeds), 40 epochs at step 0.1 trade better:
    # fewer steps need less noise per step. Step 0.5 collapses to a constant predictor for
    # lambda >= 4, and lambda >= 16 collapses at step 0.1.
    lr: float = Field(0.1, gt=0, description="descent step for theta")
    lr_w: float = Field(0.1, gt=0, description="ascent step for W")
    batch_size: int = Field(1024, ge=1)
    epochs: float = Field(
        40.0,
        gt=0,
        description="passes over the data; read only when calibrate = noise (steps solves T)",
    )
    clip_norm: float = Field(2.0, gt=0, description="per-sample clip of the theta-gradient")
    clip_norm_w: float = Field(2.0, gt=0, description="per-sample clip of the W-gradient")
    w_diameter: float = Field(4.0, gt=0, description="Frobenius diameter of W's ball")
    privacy_notion: Literal["full", "sensitive-attribute"] = Field(
        "full", description="full: DP of the whole record; sensitive-attribute: of the group only"
    )
    # sensitive-attribute only: `paper` calibrates the noise by the paper's analysis
    # (amplified as under add/remove) to reproduce published curves; rows still report the
    # suite's (true) epsilon
    sensitive_accounting: Literal["worst-case", "paper"] = Field(
        "worst-case",
        description="sensitive-attribute notion: noise by worst-case or the paper's analysis",
    )
    marginals: Literal["private", "public"] = Field(
        "private",
        description="group marginals p(s): private (Gaussian counts) or public (exact counts)",
    )
    marginal_noise: float = Field(100.0, gt=0, description="Gaussian std per group count")
    iterate: Literal["last", "random"] = Field(
        "last",
        description="model returned: the last iterate or a uniformly drawn one (the analysis')",
    )

    @model_validator(mode="after")
    def _paper_accounting_is_sensitive(self):
        if self.sensitive_accounting == "paper" and self.privacy_notion != "sensitive-attribute":
            raise ValueError("sensitive_accounting: paper goes with sensitive-attribute")
        return self


class DPFermi(Method):
    name = "dp-fermi"
    description = "DP-FERMI: noisy DP-SGDA on the ERMI min-max objective (DP or EO)"
    private = True
    paper = (
        "Lowy, Gupta, Razaviyayn (2023): Stochastic Differentially Private and Fair "
        "Learning. ICLR 2023"
    )
    constraints = ("demographic_parity", "equalized_odds")
    knob = Knob(
        "lambda", "weight of the ERMI fairness penalty", Direction.STRICTER, low=0.0, typical=1.0
    )
    Hparams = DPFermiHparams
    hparams: DPFermiHparams

    @property
    def sensitive(self) -> bool:
        return self.hparams.privacy_notion == "sensitive-attribute"

    def guarantee(self) -> Guarantee:
        """The `privacy_notion`, and the group marginals read exactly under `marginals:
        public`."""
        hp = self.hparams
        notion = PrivacyNotion(hp.privacy_notion)
        public = hp.marginals == "public"
        because = (("privacy_notion",) if notion is not PrivacyNotion.FULL else ()) + (
            ("marginals",) if public else ()
        )
        return Guarantee(notion, ("marginals",) if public else (), because)

    def _count_event(self, lam: float) -> dp_event.GaussianDpEvent | None:
        """The group-count release behind p(s), or None when it is not run (lambda = 0: psi
        has no weight) or the marginals are declared public."""
        hp = self.hparams
        if lam == 0 or hp.marginals == "public":
            return None
        # add/remove moves one count by 1; a group substitution moves two, l2 distance sqrt 2
        moved = math.sqrt(2) if self.sensitive else 1.0
        return dp_event.GaussianDpEvent(hp.marginal_noise / moved)

    def _marginals(self, session: PrivacySession, cells, shape, event) -> torch.Tensor:
        """p(s | cell) for each cell, from exact or Gaussian-noised counts of the records'
        (cell, group) `cells` (uniform, unused, when lambda = 0)."""
        if event is not None:
            noisy = session.gaussian_counts(COUNTS, event.noise_multiplier)(cells, math.prod(shape))
            counts = noisy.reshape(shape).clamp(min=1.0)
        elif self.hparams.marginals == "public":
            counts = torch.bincount(cells, minlength=math.prod(shape)).reshape(shape).double()
        else:
            counts = torch.ones(shape, dtype=torch.float64, device=cells.device)
        return counts / counts.sum(dim=1, keepdim=True)

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """Per step theta's Gaussian sum and, when lambda > 0, W's, on one Poisson batch (under
        the sensitive-attribute notion theta's carries nothing group-dependent when lambda =
        0), and the counts once. With `iterate: random` only the steps up to the drawn iterate
        are run and planned (the draw, from the trial's stream "iterate", is independent of
        the data; the noise stays calibrated for all the steps). lambda = 0 and lambda > 0,
        and each drawn iterate, plan differently: they run in separate stacks."""
        hp, lam = self.hparams, float(fairness.knob)
        counts = self._count_event(lam)
        releases = 2 if lam > 0 else (0 if self.sensitive else 1)
        paper = hp.sensitive_accounting == "paper"
        step_shape = StepShape(releases, self.sensitive and not paper, counts)
        if releases == 0:  # nothing private is released per step
            schedule = uncalibrated(hp, shape.n)
        else:
            schedule = calibrated(hp, shape.n, target, None, step_shape)
        q, sigma = schedule.sampling_rate, schedule.noise_multiplier
        rounds = None
        if hp.iterate == "random":
            rounds = int(numpy_stream(seed, "iterate").integers(1, schedule.steps + 1))
        steps = rounds or schedule.steps
        ledger = PrivacyLedger()
        if releases:
            ledger.record(THETA, sgd_steps(q, sigma, steps, None, releases, self.sensitive))
        if counts is not None:
            ledger.record(COUNTS, counts)
        info = {
            **schedule.info(),
            "clip_norm": hp.clip_norm,
            "clip_norm_w": hp.clip_norm_w,
            "releases_per_step": releases,
        }
        if self.sensitive and releases:
            amplified = sgd_steps(q, sigma, schedule.steps, None, releases)
            if counts is not None:
                amplified = dp_event.ComposedDpEvent([amplified, counts])
            info["epsilon_paper_analysis"] = epsilon(amplified, target.delta)
        info["returned_iterate"] = steps
        noise = {"count": hp.marginal_noise} if hp.marginals == "private" else {}
        cells = shape.n_classes if fairness.constraint == "equalized_odds" else 1
        budget = schedule.budget(steps, **noise)
        return Plan(ledger, schedule, rounds, budget, info, {"cells": cells})

    def stackable(self) -> bool:
        return stackable(self.hparams.model)

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        """Each trial's marginals (its count release), then per round every trial's update on
        its own batch: noisy descent on theta, noisy projected ascent on W (not when lambda =
        0). The trials' lambdas are all 0 or all > 0 (their plans are equal)."""
        hp, dev, schedule = self.hparams, trials[0].session.device, plan.schedule
        lams = [float(t.fairness.knob) for t in trials]
        positive, sensitive = lams[0] > 0, self.sensitive
        models = init_models(hp, trials)
        stack = stack_models(models)
        data = StackedData([t.task for t in trials], dev)
        s = data.per_record(lambda task: task.train.s, torch.int64)
        task = trials[0].task
        n_cells, k, l = plan.details["cells"], task.n_groups, task.n_classes  # noqa: E741 (the paper's l)
        cell = data.y if n_cells > 1 else torch.zeros_like(data.y)
        part, event = cell * k + s, self._count_event(lams[0])  # each record's (cell, group)
        marginals = [
            self._marginals(t.session, data.trial_rows(part, i), (n_cells, k), event)
            for i, t in enumerate(trials)
        ]
        inv_sqrt_p = torch.stack([p.rsqrt().to(dev, torch.float32) for p in marginals])
        sigma = schedule.noise_multiplier
        theta_sums = [t.session.gaussian_sum(THETA, hp.clip_norm, sigma) for t in trials]
        w_sums = [t.session.gaussian_sum(W_LABEL, hp.clip_norm_w, sigma) for t in trials]
        w = torch.zeros((len(trials), n_cells, k, l), device=dev)
        radius, scale = hp.w_diameter / 2, expected_batch(schedule, data.n)
        lam = torch.tensor(lams, dtype=torch.float32, device=dev).unsqueeze(1)  # (T, 1)
        ascent = torch.tensor(
            [hp.lr_w * x / scale for x in lams], dtype=torch.float32, device=dev
        ).view(-1, 1, 1, 1)
        first_cell = torch.arange(len(trials), device=dev).unsqueeze(1) * n_cells
        flat_p = inv_sqrt_p.reshape(-1)

        def step(round_: StackedBatches) -> None:
            nonlocal w
            batches = round_.batches
            rows = data.gather(round_)
            xb, yb, sb, cb = (rows.rows(v) for v in (data.x, data.y, s, cell))
            x_sq = rows.rows(data.x_sq)
            cells = cb + first_cell  # (T, B): each trial's own cells of W
            w_rows = w.view(-1, k, l).index_select(0, cells.reshape(-1)).view(*cb.shape, k, l)
            ip = flat_p.index_select(0, (cells * k + sb).reshape(-1)).view(cb.shape)
            logits = stack.logits(xb)
            soft = torch.softmax(logits, dim=-1)  # once for theta's and W's gradients

            def contributions(part: Part):
                objective = FermiObjective(yb, sb, w_rows, ip, lam, part, soft)
                return stack.contributions(xb, objective, logits, rows, x_sq)

            if sensitive:  # the group-free part is public: exact; the group term is noised
                grads = exact_sums(contributions("public"))
                if positive:
                    noisy = gaussian_sums(theta_sums, contributions("sensitive"), batches)
                    grads = [
                        g + lam.view(-1, *[1] * (h.dim() - 1)) * h
                        for g, h in zip(grads, noisy, strict=True)
                    ]
            else:
                grads = gaussian_sums(theta_sums, contributions("all"), batches)
            stack.descend(grads, hp.lr / scale)
            if not positive:
                return
            public_w, group_w = w_gradients(soft, sb, w_rows, ip)

            def scattered(values: torch.Tensor) -> StackedScattered:
                return StackedScattered.masked(values, cb, n_cells, rows.mask, rows.sizes)

            if sensitive:
                total = scattered(public_w).weighted_sum(None)[0]
                total = total + gaussian_sums(w_sums, scattered(group_w), batches)[0]
            else:
                total = gaussian_sums(w_sums, scattered(public_w + group_w), batches)[0]
            w = project_rows(w + ascent * total, radius)

        def outcomes() -> list[Outcome]:
            paper = hp.sensitive_accounting == "paper"
            notion = self.guarantee().label + (" (paper analysis)" if paper else "")
            norms = w.flatten(-2).norm(dim=-1).cpu().tolist()
            accounting = "paper-analysis" if paper else "suite"
            return [
                Outcome({"lambda": x, "w_norm": w_norm, "marginals": p.cpu().tolist()},
                        privacy_notion=notion, target_accounting=accounting)
                for x, w_norm, p in zip(lams, norms, marginals, strict=True)
            ]  # fmt: skip

        return TrainingProgram(models, step, outcomes)
