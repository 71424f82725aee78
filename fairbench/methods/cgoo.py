"""`cgoo` (and its non-private twin `cgoo-nonprivate`): constrained group-objective
optimisation by reductions (the CGOO paper, Algorithm 2, with a private oracle).

Minimise f(l(c, D)) subject to g(l(c, D)) <= 0, where l is the classifier's confusion matrix
split by group (`fairbench.constraints.group_objectives`). For t = 0..T-1:

1. release the current classifier c_t's per-group confusion counts with Gaussian noise. Every
   record falls in exactly one cell, so the count vector has l2 sensitivity 1. The paper
   treats this evaluation as free; here it is accounted. c_0 is the initialisation.
2. build the linear cost r_t = grad f + (constraint term), with gradients taken at the
   statistics of the decision so far: the uniform mixture of c_1..c_t, whose statistics are
   the mean of the released ones (Frank-Wolfe with step 1/(t+1); the paper's Algorithm 4
   tracks this average too).
3. c_{t+1} = LOPT(r_t). The linear problem min_c <r_t, l(c, D)> is cost-sensitive
   classification, relabelled to weighted classification: each record gets its cheaper
   prediction, with weight |cost difference| (`group_objectives.cost_sensitive`). It is
   solved by DP-SGD on the weighted logistic loss, with weights scaled so the largest possible
   is 1, warm-started from c_t: `epochs` epochs of Poisson batches per call.

The output is the uniform mixture of c_1..c_T, a randomized classifier (`Fitted.components`).
The runner evaluates it exactly from its components.

The constraint term (`play`):
- `paper`: G 1[g >= 0] grad g, Algorithm 2's line for h = f + G max(0, g), with G
  defaulting to Corollary 4.2's (alpha + L_f sqrt(K)) / alpha. It is faithful, and it fails
  at practical T. Corollary 4.2's G is 114-284 on Adult, while the constraint cost G / n_a
  already swamps the error cost per record once G > ~0.3. Every oracle answer is then a
  "flip the groups" extreme. Measured on Adult, non-private, 40 iterations: mixtures at the
  target gap with error 0.26-0.33; fairlearn's ExponentiatedGradient gets 0.165.
- `dual` (default): the no-regret player Remark 5.7 allows. A multiplier for each linear
  piece of g (ordered group pairs of rate differences, or groups for bounded group loss:
  `constraint_pieces`) follows projected gradient ascent, with step `lr_dual`, on the latest
  component's piece values. G bounds each multiplier. One multiplier per piece matters: the
  sign of a gap flips between overshooting components, so a single multiplier on |gap| only
  ever grows. On Adult, demographic parity, α = 0.02, the multiplier settles near 0.32.
  Non-private error is 0.166 at gap 0.022, against fairlearn's 0.165 at 0.026.

Privacy: T Gaussian count releases and T * steps Poisson-sampled Gaussian gradient sums, all
in one ledger and accounted by the suite's PLD. `count_share` sets the split: the counts get
the noise that would spend that fraction of the target epsilon on their own. The oracle's
noise is then calibrated so the whole composition meets the target. The paper instead uses
advanced composition with a per-call (epsilon', delta'), which is far looser.

Stacked trials (`program`, logistic models): trials that differ in seed and alpha play
their games side by side. Each iteration's count release, costs and relabelling stay per
trial (on the device, once per iteration, at its first round); the oracle steps, the bulk of
the time, run as one tensor program over the trials (`fairbench.methods.engine`), each trial
on its own Poisson batches with its own targets and weights and its own mechanism's noise.
An MLP trains one trial at a time through the same code.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from functools import partial
from typing import Literal

import torch
import torch.nn.functional as F
from dp_accounting import dp_event
from pydantic import Field
from torch import nn

from fairbench.constraints import group_objectives as go
from fairbench.errors import ConfigError
from fairbench.methods.base import Method
from fairbench.methods.engine import (
    Outcome,
    Stack,
    StackedData,
    TrainingProgram,
    expected_batch,
    init_models,
)
from fairbench.methods.knob import Direction, Knob
from fairbench.methods.plan import DataShape, Plan, Schedule
from fairbench.methods.trial import FairnessSpec, TrainingHparams, Trial
from fairbench.models.stacked import stack_models, stackable
from fairbench.privacy import PrivacyBudget, PrivacyLedger, calibrate_noise_multiplier
from fairbench.privacy.accountant import StepShape
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.stacked import StackedBatches, gaussian_sums

OBJECTIVES: dict[str, go.Objective] = {
    "error": go.error,
    "balanced_error": go.balanced_error,
    "negative_gmean": go.negative_gmean,
}
COUNTS = "cgoo: Gaussian confusion counts, once per iteration"
ORACLE = "cgoo: oracle DP-SGD steps (clipped weighted-loss gradient sums)"


class CGOOHparams(TrainingHparams):
    lr: float = Field(0.5, gt=0)
    batch_size: int = Field(256, ge=1)
    epochs: float = Field(1.0, gt=0, description="oracle epochs per iteration")
    iterations: int = Field(40, ge=1, description="T: oracle calls = mixture components")
    objective: Literal["error", "balanced_error", "negative_gmean"] = Field(
        "error", description="f of the group statistics: error, balanced error or negative g-mean"
    )
    eta: float = Field(20.0, gt=0, description="smooth-max parameter (equalized odds)")
    G: float | None = Field(None, gt=0, description="default (alpha + L_f sqrt(K)) / alpha")
    play: Literal["dual", "paper"] = Field(
        "dual",
        description="constraint term: dual (no-regret multipliers) or paper (G 1[g >= 0] grad g)",
    )
    lr_dual: float = Field(1.0, gt=0, description="multiplier step (play: dual)")
    clip_norm: float = Field(
        1.0, gt=0, description="per-sample clip of the oracle's DP-SGD gradient"
    )
    count_share: float = Field(0.1, gt=0, lt=1, description="epsilon share of the counts")


class WeightedCrossEntropy:
    """Per-record weight times cross-entropy against the relabelled targets, with its
    closed-form logit gradient (the linear fast path's contract). Shapes: z, w (..., B),
    logits (..., B, K)."""

    def __init__(self, z: torch.Tensor, w: torch.Tensor) -> None:
        self.z, self.w = z, w

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        losses = F.cross_entropy(logits.flatten(0, -2), self.z.flatten(), reduction="none")
        return self.w * losses.view(self.z.shape)

    def logit_grad(self, logits: torch.Tensor) -> torch.Tensor:
        """(softmax(z) - onehot(target)) times the record's weight."""
        onehot = F.one_hot(self.z, logits.shape[-1]).to(logits.dtype)
        return (torch.softmax(logits, dim=-1) - onehot) * self.w.unsqueeze(-1)


def constraint_function(name: str, alpha: float, eta: float) -> go.Objective:
    if name == "demographic_parity":
        return go.demographic_parity(alpha)
    if name == "equalized_odds":
        return go.smoothed_equalized_odds(alpha, eta)
    return go.bounded_group_loss(alpha)


class Game:
    """One trial's reductions game between the oracle and the constraint player, on the
    device: the released statistics' running sum, the multipliers, G and the trace.
    `move(t)` plays iteration t up to the oracle's targets and weights (`relabel`), reading
    nothing on the host; `outcome()` brings the trace and G to the host once, at the end."""

    def __init__(
        self,
        hp: CGOOHparams,
        fairness: FairnessSpec,
        statistics: Callable[[], torch.Tensor],
        relabel: Callable[[torch.Tensor], None],
    ) -> None:
        self.hp, self.constraint, self.alpha = hp, fairness.constraint, fairness.knob_value
        self.statistics, self.relabel = statistics, relabel
        self.components: list[nn.Module] = []  # the oracle's answers c_1, c_2, ...
        self.f = OBJECTIVES[hp.objective]
        self.g = constraint_function(self.constraint, self.alpha, hp.eta)
        self.big_g: torch.Tensor | None = None  # set at the first move
        self.total: torch.Tensor | None = None  # sum of the statistics of c_1..c_t
        self.lam: torch.Tensor | None = None
        self.trace: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []

    def move(self, t: int) -> None:
        hp, alpha = self.hp, self.alpha
        latest = self.statistics()  # of c_t: the initialisation c_0, then c_1, ...
        # the decision so far is the uniform mixture of c_1..c_t: its statistics are the mean
        # of theirs (Frank-Wolfe with step 1 / (t + 1))
        stats = latest
        if t:
            self.total = latest if self.total is None else self.total + latest
            stats = self.total / t
        sizes = go.Sizes.of(stats)
        f_value, f_grad = self.f(stats, sizes)
        g_value, g_grad = self.g(stats, sizes)
        if self.big_g is None and hp.G is not None:
            self.big_g = torch.tensor(hp.G, dtype=stats.dtype, device=stats.device)
        if self.big_g is None:  # Corollary 4.2, L_f = |grad f| at the first statistics
            norm = torch.linalg.vector_norm(f_grad)
            self.big_g = (alpha + norm * math.sqrt(f_grad.numel())) / alpha
        if hp.play == "dual":  # a multiplier per linear piece of g, projected ascent on the
            # latest component's piece values (its move in the Lagrangian game)
            values, _ = go.constraint_pieces(self.constraint, alpha, latest, go.Sizes.of(latest))
            self.lam = (
                torch.zeros_like(values)
                if self.lam is None or t == 0
                else torch.minimum((self.lam + hp.lr_dual * values).clamp(min=0.0), self.big_g)
            )
            _, grads = go.constraint_pieces(self.constraint, alpha, stats, sizes)
            constraint_cost = torch.tensordot(self.lam, grads, dims=1)
        else:  # the paper's indicator (c_1 answers f alone)
            active = (g_value >= 0) & (t > 0)
            constraint_cost = self.big_g * active.to(stats.dtype) * g_grad
        self.trace.append((f_value, g_value, None if self.lam is None else self.lam.sum()))
        self.relabel(f_grad + constraint_cost)

    def outcome(self) -> Outcome:
        """The trial's mixture, and its G, alpha and trace on the host."""
        trace = [
            {"f": float(f), "g": float(g), "lambda": None if lam is None else float(lam)}
            for f, g, lam in self.trace
        ]
        assert self.big_g is not None  # set by the first move
        info = {"G": float(self.big_g), "alpha": self.alpha, "trace": trace}
        return Outcome(info, components=self.components)


def component(model: nn.Module) -> nn.Module:
    """A frozen copy of `model` alone: a stacked model's parameters are views into the stack,
    and deep-copying a parameter clones just its own data (tests/methods/test_stacking.py)."""
    return copy.deepcopy(model)


class CGOO(Method):
    name = "cgoo"
    description = "CGOO: reductions over group statistics, private counts + DP-SGD oracle"
    private = True
    paper = (
        "Alabi (2019): The Cost of a Reductions Approach to Private Fair Optimization. "
        "arXiv:1906.09613"
    )
    constraints = ("demographic_parity", "equalized_odds", "bounded_group_loss")
    knob = Knob(
        "alpha",
        "allowed violation of the constraint g",
        Direction.LOOSER,
        low=0.0,
        low_inclusive=False,
        rate_tolerance=True,
        typical=0.05,
    )
    Hparams = CGOOHparams
    hparams: CGOOHparams
    mixed = frozenset(
        {"lr", "batch_size", "epochs", "iterations", "lr_dual", "clip_norm", "count_share", "G"}
    )

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """The oracle's schedule (`steps` per call, T calls: the loop runs T * steps rounds),
        the count noise std (`count_noise`; 0: exact) and T count releases with T * steps
        oracle steps."""
        if shape.n_classes != 2:
            raise ConfigError(f"method {self.name} handles binary classification tasks only")
        hp, ledger, count_std = self.hparams, PrivacyLedger(), 0.0
        q = min(1.0, hp.batch_size / shape.n)
        steps = max(1, round(hp.epochs / q))
        total = steps * hp.iterations
        schedule = Schedule(q, steps)
        if self.private:
            privacy = self.required_target(target)
            eps, delta = privacy.epsilon, privacy.delta
            single = calibrate_noise_multiplier(1.0, 1, hp.count_share * eps, delta)
            count_std = single * math.sqrt(hp.iterations)  # T releases compose to `single`
            count = dp_event.GaussianDpEvent(count_std)
            counts = dp_event.SelfComposedDpEvent(count, hp.iterations)
            sigma = calibrate_noise_multiplier(q, total, eps, delta, None, StepShape(extra=counts))
            schedule = Schedule(q, steps, sigma, "noise_multiplier")
            ledger.record(ORACLE, sgd_steps(q, sigma, total))
            ledger.record(COUNTS, counts)
        info = {
            "sampling_rate": q,
            "oracle_steps": steps,
            "noise_multiplier": schedule.noise_multiplier,
            "count_noise": count_std,
            "iterations": hp.iterations,
        }
        return Plan(ledger, schedule, total, schedule.budget(total, count=count_std), info)

    def stackable(self) -> bool:
        return stackable(self.hparams.model)

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        """Trials of this configuration that share `plan`: a stack of one configuration."""
        return self.stack_program(Stack([self] * len(trials), trials, [plan] * len(trials)))

    def stack_program(self, stack: Stack) -> TrainingProgram:
        """Every trial plays its own game (statistics release, costs, relabelling: per trial,
        on the device) at the start of each of its iterations of its own `steps` rounds; the
        oracle's steps run stacked across the trials, each at its own step size, clip and
        noise, and each iteration ends by keeping the trial's model as a component."""
        trials, hp = stack.trials, self.hparams
        models = init_models(hp, trials)
        model_stack = stack_models(models)
        data = StackedData.of(trials)
        n, k, sessions = data.n, trials[0].task.n_groups, [t.session for t in trials]
        gradient_sums = [
            s.gaussian_sum(
                ORACLE, h.clip_norm if self.private else math.inf, p.loop.noise_multiplier
            )
            for s, h, p in zip(sessions, stack.hparams, stack.plans, strict=True)
        ]
        confusions = [
            s.gaussian_counts(COUNTS, p.info["count_noise"])
            for s, p in zip(sessions, stack.plans, strict=True)
        ]
        # flat index of (group, label, prediction 0) in (k, 2, 2), per record
        cells = data.per_record(lambda task: (task.train.s * 2 + task.train.y) * 2, torch.int64)
        groups = data.per_record(lambda task: task.train.s, torch.int64)
        z, w = data.per_trial(torch.int64), data.per_trial(torch.float32)
        step_size = stack.values(lambda h, p: h.lr / expected_batch(p.loop, n))
        steps = [p.loop.steps for p in stack.plans]  # per iteration

        def statistics(t: int) -> torch.Tensor:
            """Trial t's released l(c, D) of its current classifier."""
            with torch.no_grad():
                pred = models[t](data.trial_rows(data.x, t)).argmax(dim=1)
            counts = confusions[t](data.trial_rows(cells, t) + pred, k * 4)
            return counts.clamp(min=0.0).reshape(k, 2, 2) / n

        def relabel(t: int, costs: torch.Tensor) -> None:
            """Trial t's oracle targets and weights for the linear costs."""
            gap = (costs[:, :, 1] - costs[:, :, 0]).abs().max()
            scaled = torch.where(gap > 0, costs / gap, costs)  # public: a function of the costs
            targets, weights, _ = go.cost_sensitive(
                scaled, data.trial_rows(data.y, t), data.trial_rows(groups, t), 1
            )
            z[t * n : (t + 1) * n] = targets
            w[t * n : (t + 1) * n] = weights.to(torch.float32)

        games = [
            Game(h, trial.fairness, partial(statistics, t), partial(relabel, t))
            for t, (trial, h) in enumerate(zip(trials, stack.hparams, strict=True))
        ]
        done = 0

        def step(round_: StackedBatches) -> None:
            nonlocal done
            active = len(round_.batches)
            for game, every in zip(games[:active], steps, strict=False):
                if done % every == 0:  # an iteration begins: the game moves
                    game.move(done // every)
            rows, own = data.gather(round_), data.own_rows(round_)
            x = rows.rows(data.x)
            loss = WeightedCrossEntropy(own.rows(z), own.rows(w))
            logits = model_stack.logits(x)
            contributions = model_stack.contributions(x, loss, logits, rows, rows.rows(data.x_sq))
            sums = gaussian_sums(gradient_sums, contributions, round_.batches)
            model_stack.descend(sums, step_size.at(active))
            done += 1
            for game, model, every in zip(games[:active], models, steps, strict=False):
                if done % every == 0:  # it ends: the oracle's answer is a component
                    game.components.append(component(model))

        return TrainingProgram(models, step, lambda: [game.outcome() for game in games])


class CGOONonPrivate(CGOO):
    name = "cgoo-nonprivate"
    description = "CGOO without noise or clipping: exact counts, plain SGD oracle"
    private = False
    paper = (
        "non-private twin of CGOO (Alabi, 2019, arXiv:1906.09613): exact counts, plain SGD oracle"
    )
