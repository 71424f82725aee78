"""`raco-dp`: private rate-constrained optimisation (Algorithm 1 of "Private Rate-Constrained
Optimization with Applications to Fair Learning", ICLR 2026), and its non-private twin `sgda`.

Per step, on a Poisson batch B (rate r):

1. Histogram. H[q, k] = sum over records of B in part q of sigma_tau(z)_k (soft rates) or of
   onehot(argmax z)_k (hard-rate dual, Appendix E.4), plus Laplace noise of scale
   `laplace_scale` in every cell. Each record lies in one part and contributes a vector of
   l1 norm 1, so the l1 sensitivity is 1 under add/remove.
2. Primal. The per-sample gradient of Eq. (10): grad loss_i / (r|D|) plus the rate
   regularizer, with each |B ∩ I| read from the noisy histogram (post-processing). A
   denominator is floored at the public constant `min_count`, so noise can never make it
   non-positive; no data is touched for this. Per-sample clipping at C / (r|D|) and
   Gaussian noise of std sigma C / (r|D|), then descent. Implementation note: everything is
   multiplied by r|D| (clip at C, noise sigma C, step lr / (r|D|)), which is the same update.
   The regularizer's gradient is one fused Jacobian-vector product whatever J is, so
   inactive constraints (lambda_j = 0) cost only zeros in a Q x K product.
3. Dual. lambda <- clip(lambda + lr_dual (Gamma_post(H) - gamma), 0, lambda_max), with
   Gamma_post of Eq. (12) on the same noisy histogram (post-processing, free). The authors'
   code clips each constraint's value to [0, 1] before subtracting gamma
   (utils/constraints.py); `dual_update: clipped` does the same, for parity. It is
   post-processing too, so still DP, but it biases the noisy gap upwards (negative noise is
   cut, positive noise kept): lambda then grows whatever gamma is (docs/parity.md).

Privacy: per step a Poisson-sampled Laplace(laplace_scale) composed with a Poisson-sampled
Gaussian(noise_multiplier), T steps, accounted by the suite's PLD accountant. `calibrate:
steps` (the paper's practice) fixes sigma and the Laplace scale and solves for the largest T;
`calibrate: noise` fixes T from `epochs` and solves for sigma.

Notation. Algorithm 1 writes the histogram noise as Lap(1/b), while Theorem 4.1 uses b as
the scale itself. Appendix E.2's search range b in [0.1, 0.5] only makes sense as an inverse
scale, so this plugin takes `laplace_scale` = 1/b (paper range: 2 to 10) and says so. The
tempered softmax is sigma_tau(z) = softmax(tau z), which tends to hard rates as tau grows.

This follows the paper, not the authors' public code. A reading of that code found these
departures, which are not repeated here by default (tests cover each):
- Poisson batches padded with zero rows (x, label and group all 0) or truncated to a fixed
  size, the smallest k with P(Poisson(B) <= k) >= 0.999 (307 at B = 256), and the padding
  rows left unmasked. Such a row adds nothing to the histogram nor to the cross-entropy, but
  the demographic-parity loss puts it in every group's "other groups" term, so each one adds
  the clipped gradient of sum_k c_k sigma_tau(b)_k (b: the bias, c: every constraint's
  other-groups coefficient) to the noisy sum. `batches: padded` reproduces this, truncation
  included (a batch keeps its first records by index, as their boolean selection orders
  them; demographic parity, logistic model). It is not DP as accounted: how many padding
  rows a step adds moves with a neighbouring record, and truncation breaks the Poisson
  analysis. So it is refused unless `parity_unaccounted: true`, which records a
  `NonPrivateDpEvent` (epsilon_spent inf) and labels the row not accounted; the schedule is
  still calibrated as for the Poisson batches.
- One Laplace draw shared across predicted classes in the equalized-odds and FNR
  histograms, which is not DP as coded. Here every cell gets its own draw.
- Group-size denominators noised once at the start and never accounted. Here every
  denominator is read from the per-step, accounted histogram; `denominators: frozen`
  reproduces the authors' choice for parity, its one count release accounted (on a Poisson
  batch of its own, so the accountant's independent-batch model holds).
- delta = 1e-4 in the code against 1e-5 in the paper. Here delta comes from the config
  (suite default 1e-5).
- The temperature also in the cross-entropy (CE(tau z), training/loss.py). Here only the rates
  are tempered. No switch: at tau = 1, their setting for the parity table, the two are the
  same function, and the predictions (argmax z) never depend on tau.
- The dual variable's axes swapped in the equalized-odds loss. Here one lambda per
  constraint, applied through the constraint's own terms.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, ClassVar, Literal

import numpy as np
import torch
import torch.nn.functional as F
from dp_accounting import dp_event
from pydantic import Field, model_validator
from scipy.stats import poisson

from fairbench import constraints
from fairbench.constraints import RateConstraintSet
from fairbench.errors import ConfigError
from fairbench.methods.base import Method
from fairbench.methods.engine import (
    Gathered,
    Outcome,
    PerTrial,
    Schedule,
    Stack,
    StackedData,
    TrainingProgram,
    calibrated,
    expected_batch,
    init_models,
    uncalibrated,
)
from fairbench.methods.knob import Direction, Knob
from fairbench.methods.plan import DataShape, Plan
from fairbench.methods.trial import FairnessSpec, TrainingHparams, Trial, check_one_free_quantity
from fairbench.models.grad_sample import class_softmax, one_hot
from fairbench.models.stacked import first, stack_models, stackable
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.accountant import PLAIN, StepShape
from fairbench.privacy.contributions import clip_factors
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.sampling import poisson_batches
from fairbench.privacy.stacked import StackedBatches, gaussian_sums, laplace_histograms
from fairbench.task import Task


def rate_contributions(soft: torch.Tensor, logits: torch.Tensor, hard: bool) -> torch.Tensor:
    """What each record adds to the histogram: its tempered softmax `soft` (soft rates) or the
    one-hot of its argmax (hard-rate dual). Either way a vector of l1 norm 1."""
    if hard:
        return one_hot(logits.argmax(dim=-1), logits.shape[-1], logits.dtype)
    return soft


def unit(temperature: float | torch.Tensor) -> bool:
    """A temperature of 1 for every trial (one float): softmax(z), not softmax(1.0 z)."""
    return isinstance(temperature, float) and temperature == 1.0


class RateLagrangian:
    """Per-sample Lagrangian of Eq. (10), multiplied by r|D|:
    CE(z_i, y_i) + sum_k c_ik sigma_tau(z_i)_k, where c_i is the row of the coefficient matrix
    for the record's part (already multiplied by r|D|). Shapes: y (..., B), coef (..., B, K)."""

    def __init__(
        self,
        y: torch.Tensor,
        coef: torch.Tensor,
        temperature: float | torch.Tensor,
        soft: torch.Tensor | None = None,
    ) -> None:
        """`temperature`: one, or each trial's (T, 1, 1); `soft`: softmax(temperature *
        logits) at the current parameters, if already known."""
        self.y, self.coef, self.tau, self.soft = y, coef, temperature, soft

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """logits (..., B, K) -> per-record Lagrangian (..., B)."""
        soft = torch.softmax(self.tau * logits, dim=-1)
        ce = F.cross_entropy(logits.flatten(0, -2), self.y.flatten(), reduction="none")
        return ce.view(self.y.shape) + (self.coef * soft).sum(dim=-1)

    def logit_grad(self, logits: torch.Tensor) -> torch.Tensor:
        """softmax(z) − onehot(y) + tau · s ⊙ (c − <c, s>), with s = softmax(tau z)."""
        one = unit(self.tau)
        soft = class_softmax(self.tau * logits) if self.soft is None else self.soft
        grad = soft if one else class_softmax(logits)
        grad = grad - one_hot(self.y, logits.shape[-1], logits.dtype)
        centred = self.coef - (self.coef * soft).sum(dim=-1, keepdim=True)
        tempered = soft if one else self.tau * soft  # 1.0 * s is s, bit for bit
        return grad + tempered * centred


def padded_size(expected: float, alpha: float = 0.001) -> int:
    """`batches: padded`'s fixed batch size: the smallest k with P(Poisson(expected) <= k)
    >= 1 - alpha, found as the authors' code does (data/tabular.py, get_poisson_upper_bound)."""
    k = max(0, math.floor(expected) - 1)  # the answer is at least the median, about `expected`
    while poisson.cdf(k, expected) < 1 - alpha:
        k += 1
    return k


def truncated(round_: StackedBatches, size: int | list[int]) -> StackedBatches:
    """`batches: padded`: each batch cut to its first `size` records (by index, the order of the
    authors' boolean selection; `size` one for all, or each trial's own); the rows beyond are
    never read (sliced off, or masked where another trial keeps more)."""
    sizes_t = [size] * round_.index.shape[0] if isinstance(size, int) else size
    if round_.index.shape[-1] <= min(sizes_t):
        return round_
    width = min(round_.index.shape[-1], max(sizes_t))
    mask = None if round_.mask is None else round_.mask[:, :width]
    if min(sizes_t) < width:
        device = round_.index.device
        keep = torch.arange(width, device=device) < torch.tensor(sizes_t, device=device)[:, None]
        mask = keep if mask is None else mask & keep
    sizes = (
        None
        if round_.sizes is None
        else [min(b, s) for b, s in zip(round_.sizes, sizes_t, strict=True)]
    )
    return replace(round_, index=round_.index[:, :width], mask=mask, sizes=sizes)


def real_rows(rows: Gathered) -> torch.Tensor:
    """Each batch's number of real records (T,), without reading a device's sizes."""
    if rows.sizes is not None:
        return torch.tensor(rows.sizes, device=rows.index.device)
    if rows.mask is not None:
        return rows.mask.sum(dim=-1)
    return torch.full(rows.index.shape[:1], rows.index.shape[-1], device=rows.index.device)


def outside_coefficients(
    rates: constraints.TorchRates, lam: torch.Tensor, sizes: torch.Tensor
) -> torch.Tensor:
    """(T, K): the regularizer's coefficients of a record in no group, counted (as the authors'
    OUT = 1 - z counts a zero row) in every "other groups" term of demographic parity, the
    terms with negative weights: sum_j lam_j sum_{I in I_j, alpha < 0} alpha_{j,I,k} / |B∩I|."""
    scaled = lam[..., rates.owner] / sizes
    return (scaled.unsqueeze(-1) * rates.weights.clamp(max=0.0)).sum(dim=-2)


def padding_sum(
    bias: torch.Tensor,
    coef: torch.Tensor,
    temperature: float | torch.Tensor,
    clip: float | torch.Tensor,
    count: torch.Tensor,
) -> torch.Tensor:
    """The bias gradient the authors' `count` unmasked padding rows add to the clipped sum (T, K):
    a zero row's logits are the bias b and its cross-entropy is 0 (no label), so each adds
    the gradient of sum_k coef_k sigma_tau(b)_k, clipped at `clip` (one, or each trial's
    (T, 1)) like any record."""
    soft = class_softmax(temperature * bias)
    grad = temperature * soft * (coef - (coef * soft).sum(dim=-1, keepdim=True))
    clipped = grad * clip_factors(grad.norm(dim=-1, keepdim=True), clip)
    return count.to(grad.dtype).unsqueeze(-1) * clipped


def frozen_counts(q: float, laplace_scale: float) -> dp_event.DpEvent:
    """`denominators: frozen`'s one release: Laplace part counts of one Poisson batch."""
    return dp_event.PoissonSampledDpEvent(q, dp_event.LaplaceDpEvent(laplace_scale))


class SGDAHparams(TrainingHparams):
    # defaults tuned on Adult (2 seeds, the same small grid as raco-dp's): without noise, a
    # smaller step over more epochs and the hard-rate dual (Appendix E.4) do best
    lr: float = Field(0.2, gt=0)
    epochs: float = Field(40.0, gt=0)
    # noisy dual gradients make projected ascent drift upward (noise plus the clamp at 0): a
    # small dual step (the paper's range tops out at 0.1) keeps lambda from wandering
    lr_dual: float = Field(0.1, gt=0, description="projected ascent step of the multipliers lambda")
    batch_size: int = Field(1024, ge=1)
    temperature: float = Field(
        1.0,
        gt=0,
        description="tau of the tempered softmax of the soft rates (large: near hard rates)",
    )
    lambda_max: float = Field(20.0, gt=0, description="cap on every multiplier lambda")
    dual_rates: Literal["soft", "hard"] = Field(
        "hard", description="rates the dual update reads: tempered softmax or argmax (Appendix E.4)"
    )
    min_count: float = Field(1.0, gt=0, description="public floor for histogram denominators")
    batches: Literal["poisson", "padded"] = Field(
        "poisson",
        description="poisson: exact Poisson batches; padded: the authors' batches padded with "
        "unmasked zero rows or truncated to a fixed size (raco-dp: needs parity_unaccounted)",
    )
    denominators: Literal["per-step", "frozen"] = Field(
        "per-step",
        description="per-step: group sizes read from each step's histogram; frozen: noisy "
        "counts of one Poisson batch drawn before training, kept (the authors' code; accounted)",
    )
    dual_update: Literal["signed", "clipped"] = Field(
        "signed",
        description="signed: the paper's ascent on Gamma - gamma; clipped: each constraint's "
        "value clipped to [0, 1] first, as the authors' code does (parity; still DP)",
    )
    clip_norm: float = Field(math.inf, gt=0, description="inf: no clipping (plain SGDA)")


DEFAULT_NOISE_MULTIPLIER = 4.0
HISTOGRAM = "raco-dp: Laplace prediction histogram"
DENOMINATORS = "raco-dp: Laplace part counts of one batch, frozen (denominators: frozen)"
GRADIENT = "raco-dp: Gaussian sum of clipped Lagrangian gradients"
UNACCOUNTED = "raco-dp: not accounted (parity_unaccounted: the authors' padded batches)"


class RaCODPHparams(SGDAHparams):
    # defaults work on Adult untuned; paper ranges (E.2): noise multiplier 3-6, Laplace scale
    # 2-10, learning rates 1e-4-0.1 (for its unscaled gradient), batch 256-1256, tau 1-10
    lr: float = Field(0.5, gt=0)
    epochs: float = Field(
        20.0,
        gt=0,
        description="passes over the data; read only when calibrate = noise (steps solves T)",
    )
    dual_rates: Literal["soft", "hard"] = "soft"
    # C = 2 Pareto-dominates C = 1 on Adult at eps = 1 (10 seeds): less clipping bias lets
    # the constraint bite (the paper's Appendix E.6 makes the same point)
    clip_norm: float = Field(
        2.0, gt=0, description="per-sample clip C of the Lagrangian gradient (finite)"
    )
    calibrate: Literal["steps", "noise"] = Field(
        "steps", description="steps: fix sigma and the Laplace scale, solve T; noise: solve sigma"
    )
    noise_multiplier: float | None = Field(None, gt=0, description="default 4 when fixed")
    max_steps: int | None = Field(
        None,
        ge=1,
        description="calibrate: steps stops at this many steps (the RaCO-DP authors' MAX_STEPS "
        "is 5,000): a trial that would run more spends less than its target",
    )
    laplace_scale: float = Field(5.0, gt=0, description="Laplace scale, the paper's 1/b")
    parity_unaccounted: bool = Field(
        False,
        description="run batches: padded in a private run: the row is labelled not accounted "
        "and its epsilon_spent is inf",
    )

    @model_validator(mode="before")
    @classmethod
    def _default_noise(cls, data):
        if isinstance(data, dict) and data.get("calibrate", "steps") == "steps":
            data = {"noise_multiplier": DEFAULT_NOISE_MULTIPLIER, **data}
        return data

    @model_validator(mode="after")
    def _one_free_quantity(self):
        check_one_free_quantity(self)
        if not math.isfinite(self.clip_norm):
            raise ValueError("raco-dp needs a finite clip_norm")
        return self

    @model_validator(mode="after")
    def _unaccounted_switch_is_labelled(self):
        """batches: padded is not DP as the suite accounts it: refused unless
        parity_unaccounted says so (raco-dp runs are always private)."""
        if self.batches == "padded" and not self.parity_unaccounted:
            raise ValueError(
                "batches: padded (the authors' choice) is not DP as the suite accounts it; set "
                "parity_unaccounted: true to run it anyway, labelled not accounted, with "
                "epsilon_spent inf"
            )
        if self.parity_unaccounted and self.batches != "padded":
            raise ValueError("parity_unaccounted: true goes with batches: padded")
        return self


class SGDA(Method):
    """Non-private stochastic gradient descent-ascent on the rate-constrained Lagrangian:
    RaCO-DP's code with no noise and (by default) no clipping, exact histograms."""

    name = "sgda"
    description = "non-private SGDA on generalized rate constraints (RaCO-DP without noise)"
    private = False
    paper = (
        "non-private twin of RaCO-DP (Yaghini, Cebere, Menart, Bellet, Papernot, 2026; "
        "ICLR 2026): the same SGDA with exact histograms, no noise, no clipping"
    )
    constraints = tuple(constraints.BUILDERS)
    declared_constraints = True
    knob = Knob(
        "gamma",
        "allowed disparity of each rate constraint",
        Direction.LOOSER,
        low=0.0,
        rate_tolerance=True,
        typical=0.05,
    )
    Hparams: ClassVar[type[SGDAHparams]] = SGDAHparams
    hparams: SGDAHparams
    mixed = frozenset(
        {"lr", "batch_size", "epochs", "lr_dual", "lambda_max", "clip_norm", "temperature"}
    )

    def schedule(self, n: int, target: PrivacyBudget | None) -> Schedule:
        """Sampling rate and steps from `epochs`, no noise."""
        return uncalibrated(self.hparams, n)

    def laplace_scale(self) -> float:
        """The histogram's Laplace scale (0: exact histograms)."""
        return 0.0

    def unaccounted(self) -> bool:
        """The trial runs an authors' choice the suite does not account (`parity_unaccounted`)."""
        return False

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """Per step a Laplace histogram and a Gaussian gradient sum on one Poisson batch."""
        hp = self.hparams
        if hp.batches == "padded":
            check_padded(hp, fairness)
        schedule = self.schedule(shape.n, target)
        ledger = PrivacyLedger()
        laplace = self.laplace_scale()
        if self.private:
            q, sigma, steps = schedule.sampling_rate, schedule.noise_multiplier, schedule.steps
            ledger.record(f"{HISTOGRAM} + {GRADIENT}", sgd_steps(q, sigma, steps, laplace))
            if hp.denominators == "frozen":
                ledger.record(DENOMINATORS, frozen_counts(q, laplace))
            if self.unaccounted():
                ledger.record(UNACCOUNTED, dp_event.NonPrivateDpEvent())
        budget = schedule.budget(**({"laplace": laplace} if self.private else {}))
        info = {**schedule.info(), "laplace_scale": laplace, "clip_norm": hp.clip_norm}
        if hp.batches == "padded":
            info["padded_batch"] = padded_size(expected_batch(schedule, shape.n))
        return Plan(ledger, schedule, budget=budget, info=info)

    def stackable(self) -> bool:
        return stackable(self.hparams.model)

    def _constraints(self, fairness: FairnessSpec, task: Task) -> RateConstraintSet:
        return constraints.build(
            fairness.constraint,
            fairness.definition,
            task.n_classes,
            task.n_groups,
            fairness.knob_value,
        )

    @staticmethod
    def _parts(cs: RateConstraintSet, task: Task) -> np.ndarray:
        """Each training record's part of the constraint set's partition."""
        parts = cs.parts_of(task.train.y, task.train.s)
        empty = sorted(set(range(cs.n_parts)) - set(np.unique(parts)))
        if empty:  # a validity check on the configuration, like a missing column
            raise ConfigError(
                f"constraint set {cs.name!r}: partition part {empty[0]} has no training "
                "record; merge groups or choose another partition"
            )
        return parts

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        """Trials of this configuration that share `plan`: a stack of one configuration."""
        return self.stack_program(Stack([self] * len(trials), trials, [plan] * len(trials)))

    def stack_program(self, stack: Stack) -> TrainingProgram:
        """Each trial at its own step sizes (primal lr / (r|D|), dual), cap, clip, noise
        multiplier, Laplace scale, temperature and knob (`mixed`)."""
        trials, hp, dev = stack.trials, self.hparams, stack.trials[0].session.device
        sets = [self._constraints(t.fairness, t.task) for t in trials]
        data = StackedData.of(trials)
        part = data.per_record(lambda task: self._parts(sets[0], task), torch.int64)
        models = init_models(hp, trials)
        model_stack = stack_models(models)
        histograms = [
            t.session.laplace_histogram(HISTOGRAM, p.info["laplace_scale"])
            for t, p in zip(trials, stack.plans, strict=True)
        ]
        gradient_sums = [
            t.session.gaussian_sum(GRADIENT, h.clip_norm, p.loop.noise_multiplier)
            for t, h, p in zip(trials, stack.hparams, stack.plans, strict=True)
        ]
        rates = constraints.TorchRates(sets, dev)
        n_parts, hard = sets[0].n_parts, hp.dual_rates == "hard"
        temperature = stack.values(lambda h, p: h.temperature)
        lam = torch.zeros((len(trials), sets[0].n_constraints), device=dev)
        scales = [expected_batch(p.loop, data.n) for p in stack.plans]  # r|D|
        scale = PerTrial(scales, dev)
        step_size = stack.values(lambda h, p: h.lr / expected_batch(p.loop, data.n))
        lr_dual, cap = stack.values(lambda h, p: h.lr_dual), stack.values(lambda h, p: h.lambda_max)
        clip = stack.values(lambda h, p: h.clip_norm)
        frozen = None
        if hp.denominators == "frozen":
            frozen = self._frozen_sizes(stack, data, part, n_parts, rates)
        pads = [padded_size(r) for r in scales] if hp.batches == "padded" else None
        if self.unaccounted():  # the release that makes each trial's epsilon inf
            for t in trials:
                t.session.unaccounted(UNACCOUNTED)

        def step(round_: StackedBatches) -> None:
            batches = round_.batches
            k = len(batches)
            if pads is not None:
                round_ = truncated(round_, pads[0] if len(set(pads)) == 1 else pads[:k])
            rows = data.gather(round_)
            xb, yb, pb = rows.rows(data.x), rows.rows(data.y), rows.rows(part)
            logits = model_stack.logits(xb)
            tau = temperature.at(k, 2)
            soft = class_softmax(logits if unit(tau) else tau * logits)  # 1.0 * z is z
            contrib = rows.masked(rate_contributions(soft, logits, hard))
            hist = laplace_histograms(histograms, contrib, pb, n_parts, rows.sizes, batches)
            sizes = rates.sizes(hist, hp.min_count) if frozen is None else first(frozen, k)
            multipliers = first(lam, k)
            coef = rates.coefficients(multipliers, sizes) * scale.at(k, 2)  # (k, Q, K)
            per_record = torch.gather(coef, 1, pb.unsqueeze(-1).expand(-1, -1, coef.shape[-1]))
            loss = RateLagrangian(yb, per_record, tau, soft)
            contributions = model_stack.contributions(xb, loss, logits, rows, rows.rows(data.x_sq))
            sums = gaussian_sums(gradient_sums, contributions, batches)
            if pads is not None:  # added after the (additive) noise: the same sum
                outside = outside_coefficients(rates, multipliers, sizes) * scale.at(k, 1)
                count = torch.tensor(pads[:k], device=dev) - real_rows(rows)
                bias = padding_sum(
                    model_stack.bias[:k], outside, temperature.at(k, 1), clip.at(k, 1), count
                )
                sums = [sums[0], sums[1] + bias]
            model_stack.descend(sums, step_size.at(k))
            values = rates.values(hist, sizes)
            if hp.dual_update == "clipped":
                values = values.clamp(0.0, 1.0)
            gap = values - first(rates.gamma, k)
            ascended = multipliers + lr_dual.at(k, 1) * gap
            bound = cap.at(k, 1)
            if isinstance(bound, torch.Tensor):  # written into lam's first k rows
                torch.minimum(ascended.clamp(min=0.0), bound, out=multipliers)
            else:
                torch.clamp(ascended, 0.0, bound, out=multipliers)

        def outcomes() -> list[Outcome]:
            qualified: dict[str, Any] = {}
            if self.unaccounted():
                notion = f"{self.guarantee().label} (not accounted: padded batches)"
                qualified = {"privacy_notion": notion, "target_accounting": "not accounted"}
            return [
                Outcome(
                    {
                        "gamma": t.fairness.knob,
                        "n_constraints": sets[0].n_constraints,
                        "lambda": row,
                    },
                    **qualified,
                )
                for t, row in zip(trials, lam.cpu().tolist(), strict=True)
            ]

        return TrainingProgram(models, step, outcomes)

    def _frozen_sizes(self, stack: Stack, data, part, n_parts, rates) -> torch.Tensor:
        """`denominators: frozen`: each trial's part counts on one Poisson batch of its own
        (stream "denominators", independent of the training batches, so the release is its
        own sampled event, at its own rate and Laplace scale), Laplace-noised at the
        histogram's scale, then held for every step as the authors' code does with its first
        batch (compute_denominator.py)."""
        counts = []
        for t, (trial, plan) in enumerate(zip(stack.trials, stack.plans, strict=True)):
            session, rate = trial.session, plan.loop.sampling_rate
            draw = poisson_batches(data.n, rate, session.stream("denominators"), session.device)
            batch = session.numbered(draw(), rate)
            parts = data.trial_rows(part, t)[batch.indices]
            ones = torch.ones((len(parts), 1), device=session.device)
            release = session.laplace_histogram(DENOMINATORS, plan.info["laplace_scale"])
            counts.append(release(ones, parts, n_parts, batch))
        return rates.sizes(torch.stack(counts), self.hparams.min_count)


class RaCODP(SGDA):
    name = "raco-dp"
    description = "RaCO-DP: DP-SGDA with one Laplace histogram per step for rate constraints"
    private = True
    paper = (
        "Yaghini, Cebere, Menart, Bellet, Papernot (2026): Private Rate-Constrained "
        "Optimization with Applications to Fair Learning. ICLR 2026"
    )
    Hparams = RaCODPHparams
    hparams: RaCODPHparams
    mixed = SGDA.mixed | {"noise_multiplier", "laplace_scale", "max_steps", "calibrate"}

    def schedule(self, n: int, privacy: PrivacyBudget | None) -> Schedule:
        """The budget covers the frozen count release too, when there is one."""
        hp, shape = self.hparams, PLAIN
        if hp.denominators == "frozen":
            shape = StepShape(extra=frozen_counts(min(1.0, hp.batch_size / n), hp.laplace_scale))
        return calibrated(hp, n, self.required_target(privacy), hp.laplace_scale, shape)

    def laplace_scale(self) -> float:
        return self.hparams.laplace_scale

    def unaccounted(self) -> bool:
        return self.hparams.parity_unaccounted


def check_padded(hp: SGDAHparams, fairness: FairnessSpec) -> None:
    """`batches: padded` reproduces the authors' demographic-parity loss on their logistic
    model (a zero row's logits are the bias): refuse anything else with one line."""
    if fairness.constraint != "demographic_parity" or fairness.definition is not None:
        raise ConfigError(
            "batches: padded reproduces the authors' demographic-parity loss; constraint "
            f"{fairness.constraint!r} has no padding rows to reproduce"
        )
    if hp.model != "logistic":
        raise ConfigError("batches: padded is the authors' logistic model: model: logistic")
