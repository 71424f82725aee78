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

Stacked trials (`train_stack`, logistic models): trials that differ in seed and alpha play
their games side by side. Each iteration's count release, costs and relabelling stay per
trial (on the device, once per iteration); the oracle steps, the bulk of the time, run as
one tensor program over the trials (`fairbench.methods.engine`), each trial on its own
Poisson batches with its own targets and weights and its own mechanism's noise. An MLP trains
one trial at a time through the same code.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from dp_accounting import dp_event
from pydantic import Field
from torch import nn

from fairbench.constraints import group_objectives as go
from fairbench.errors import ConfigError
from fairbench.methods.base import (
    Device,
    FairnessSpec,
    Fitted,
    Method,
    TrainingHparams,
    Trial,
    resolve_device,
)
from fairbench.methods.engine import Schedule, StackedData, expected_batch, init_models
from fairbench.methods.knob import Direction, Knob
from fairbench.models.stacked import stack_models, stackable
from fairbench.privacy import PrivacyBudget, PrivacyLedger, calibrate_noise_multiplier
from fairbench.privacy.accountant import StepShape
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.session import PrivacySession
from fairbench.privacy.stacked import gaussian_sums, poisson_rounds
from fairbench.task import Task

OBJECTIVES: dict[str, go.Objective] = {
    "error": go.error,
    "balanced_error": go.balanced_error,
    "negative_gmean": go.negative_gmean,
}
CONSTRAINTS = ("demographic_parity", "equalized_odds", "bounded_group_loss")
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


@dataclass(frozen=True)
class Reduction:
    """T trials' reductions games, ready to play (one trial's game when T = 1): each trial's
    model (its current component; views into the stack for logistic models), the oracle's
    schedule and the count noise they share, and the moves of an iteration: per trial,
    `statistics(t)` releases trial t's current classifier's l(c, D) and `relabel(t, costs)`
    sets its oracle's targets and weights; `step()` is one DP-SGD step of every trial's
    oracle, each on its own Poisson batch, as one tensor program."""

    models: list[nn.Module]
    schedule: Schedule
    count_std: float
    statistics: Callable[[int], torch.Tensor]
    relabel: Callable[[int, torch.Tensor], None]
    step: Callable[[], None]


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
    nothing on the host; `report()` brings the trace and G to the host once, at the end."""

    def __init__(
        self,
        hp: CGOOHparams,
        constraint: str,
        alpha: float,
        statistics: Callable[[], torch.Tensor],
        relabel: Callable[[torch.Tensor], None],
    ) -> None:
        self.hp, self.constraint, self.alpha = hp, constraint, alpha
        self.statistics, self.relabel = statistics, relabel
        self.components: list[nn.Module] = []
        self.f = OBJECTIVES[hp.objective]
        self.g = constraint_function(constraint, alpha, hp.eta)
        self.big_g: torch.Tensor | None = None  # set at the first move
        self.total: torch.Tensor | None = None  # sum of the statistics of c_1..c_t
        self.lam: torch.Tensor | None = None
        self.trace: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]] = []

    def move(self, t: int) -> None:
        hp, alpha = self.hp, self.alpha
        latest = self.statistics()  # of c_t: the initialisation c_0, then c_1, ...
        # the decision so far is the uniform mixture of c_1..c_t: its statistics are the mean
        # of theirs (Frank-Wolfe with step 1 / (t + 1))
        if t:
            self.total = latest if self.total is None else self.total + latest
        stats = self.total / t if t else latest
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

    def report(self) -> tuple[list[dict], float]:
        """(trace, G) on the host."""
        trace = [
            {"f": float(f), "g": float(g), "lambda": None if lam is None else float(lam)}
            for f, g, lam in self.trace
        ]
        return trace, float(self.big_g)


def component(model: nn.Module) -> nn.Module:
    """A frozen copy of `model` alone: a stacked model's parameters are views into the stack,
    and deep-copying a parameter clones just its own data (checked in tests/test_stacking.py)."""
    return copy.deepcopy(model)


class CGOO(Method):
    name = "cgoo"
    description = "CGOO: reductions over group statistics, private counts + DP-SGD oracle"
    private = True
    paper = (
        "Alabi (2019): The Cost of a Reductions Approach to Private Fair Optimization. "
        "arXiv:1906.09613"
    )
    constraints = CONSTRAINTS
    knob = Knob(
        "alpha",
        "allowed violation of the constraint g",
        Direction.LOOSER,
        low=0.0,
        low_inclusive=False,
        rate_tolerance=True,
    )
    Hparams = CGOOHparams
    hparams: CGOOHparams

    def schedule(self, n: int, privacy: PrivacyBudget | None) -> tuple[Schedule, float]:
        """The oracle's schedule (steps per call) and the count noise std; zeros mean no
        noise."""
        hp = self.hparams
        q = min(1.0, hp.batch_size / n)
        steps = max(1, round(hp.epochs / q))
        if not self.private:
            return Schedule(q, steps), 0.0
        single = calibrate_noise_multiplier(1.0, 1, hp.count_share * privacy.epsilon, privacy.delta)
        count_std = single * math.sqrt(hp.iterations)  # T releases compose to `single`
        counts = dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(count_std), hp.iterations)
        total = steps * hp.iterations
        sigma = calibrate_noise_multiplier(
            q, total, privacy.epsilon, privacy.delta, None, StepShape(extra=counts)
        )
        return Schedule(q, steps, sigma, "noise_multiplier"), count_std

    def plan(self, schedule: Schedule, count_std: float) -> PrivacyLedger:
        """T count releases and T * steps oracle steps."""
        plan, hp = PrivacyLedger(), self.hparams
        if self.private:
            plan.record(
                ORACLE,
                sgd_steps(
                    schedule.sampling_rate,
                    schedule.noise_multiplier,
                    schedule.steps * hp.iterations,
                ),
            )
            plan.record(
                COUNTS,
                dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(count_std), hp.iterations),
            )
        return plan

    def stackable(self) -> bool:
        return stackable(self.hparams.model)

    def _check(self, trial: Trial) -> float:
        """The trial's alpha, after refusing what the method cannot do."""
        fairness = trial.fairness
        if fairness.constraint not in CONSTRAINTS or fairness.definition is not None:
            raise ConfigError(
                f"method {self.name} supports the constraints "
                f"{', '.join(CONSTRAINTS)}; got {fairness.constraint!r}"
            )
        if fairness.knob is None or fairness.knob <= 0:
            raise ConfigError(f"method {self.name} needs alpha values > 0: give it `knobs`")
        return float(fairness.knob)

    def _setup(self, trials: list[Trial]) -> Reduction:
        """Models, noise and data for the trials (see `Reduction`); each trial's plan is
        submitted here, to its own session."""
        if any(t.task.n_classes != 2 for t in trials):
            raise ConfigError(f"method {self.name} handles binary classification tasks only")
        hp, dev = self.hparams, trials[0].session.device
        models = init_models(hp, trials)
        stack = stack_models(models)
        data = StackedData([t.task for t in trials], dev)
        n, k = data.n, trials[0].task.n_groups
        shared = {self.schedule(n, t.session.budget) for t in trials}
        if len(shared) != 1:
            raise ValueError("stacked trials need one schedule; run them one at a time")
        schedule, count_std = shared.pop()
        for trial in trials:
            trial.session.submit_plan(self.plan(schedule, count_std))
        sessions = [t.session for t in trials]
        next_round = poisson_rounds(sessions, n, schedule.sampling_rate)
        clip = hp.clip_norm if self.private else math.inf
        gradient_sums = [s.gaussian_sum(ORACLE, clip, schedule.noise_multiplier) for s in sessions]
        confusions = [s.gaussian_counts(COUNTS, count_std) for s in sessions]
        # flat index of (group, label, prediction 0) in (k, 2, 2), per record
        cells = data.per_record(lambda task: (task.train.s * 2 + task.train.y) * 2, torch.int64)
        groups = data.per_record(lambda task: task.train.s, torch.int64)
        z, w = data.per_trial(torch.int64), data.per_trial(torch.float32)
        step_size = hp.lr / expected_batch(schedule, n)

        def statistics(t: int) -> torch.Tensor:
            with torch.no_grad():
                pred = models[t](data.trial_rows(data.x, t)).argmax(dim=1)
            counts = confusions[t](data.trial_rows(cells, t) + pred, k * 4)
            return counts.clamp(min=0.0).reshape(k, 2, 2) / n

        def relabel(t: int, costs: torch.Tensor) -> None:
            gap = (costs[:, :, 1] - costs[:, :, 0]).abs().max()
            scaled = torch.where(gap > 0, costs / gap, costs)  # public: a function of the costs
            targets, weights, _ = go.cost_sensitive(
                scaled, data.trial_rows(data.y, t), data.trial_rows(groups, t), 1
            )
            z[t * n : (t + 1) * n] = targets
            w[t * n : (t + 1) * n] = weights.to(torch.float32)

        def step() -> None:
            round_ = next_round()
            rows, own = data.gather(round_), data.own_rows(round_)
            x = rows.rows(data.x)
            loss = WeightedCrossEntropy(own.rows(z), own.rows(w))
            logits = stack.logits(x)
            contributions = stack.contributions(x, loss, logits, rows, rows.rows(data.x_sq))
            stack.descend(gaussian_sums(gradient_sums, contributions, round_.batches), step_size)

        return Reduction(models, schedule, count_std, statistics, relabel, step)

    def train_stack(self, trials: list[Trial]) -> list[Fitted]:
        """Every trial plays its own game (statistics release, costs, relabelling: per trial,
        on the device); the oracle's steps of an iteration run stacked across the trials."""
        hp = self.hparams
        run = self._setup(trials)
        schedule, count_std = run.schedule, run.count_std
        games = [
            Game(
                hp,
                trial.fairness.constraint,
                self._check(trial),
                lambda t=t: run.statistics(t),
                lambda costs, t=t: run.relabel(t, costs),
            )
            for t, trial in enumerate(trials)
        ]
        for it in range(hp.iterations):
            for game in games:
                game.move(it)
            for _ in range(schedule.steps):
                run.step()
            for game, model in zip(games, run.models, strict=True):
                game.components.append(component(model))
        budget = schedule.budget(schedule.steps * hp.iterations, count=count_std)
        fits = []
        for game, model, trial in zip(games, run.models, trials, strict=True):
            trace, big_g = game.report()
            info = {
                "sampling_rate": schedule.sampling_rate,
                "oracle_steps": schedule.steps,
                "noise_multiplier": schedule.noise_multiplier,
                "count_noise": count_std,
                "iterations": hp.iterations,
                "G": big_g,
                "alpha": game.alpha,
                "trace": trace,
            }
            fits.append(
                Fitted(
                    model,
                    trial.session.device,
                    info=info,
                    components=game.components,
                    budget=budget,
                )
            )
        return fits

    def train(self, task: Task, fairness: FairnessSpec, session: PrivacySession) -> Fitted:
        return self.train_stack([Trial(task, fairness, session)])[0]

    def stepper(
        self, task: Task, privacy: PrivacyBudget | None, seed: int, device: Device = "cpu"
    ) -> Callable[[], None]:
        """One oracle step, on the costs of plain error."""
        session = PrivacySession(seed, resolve_device(device), privacy if self.private else None)
        run = self._setup([Trial(task, FairnessSpec("demographic_parity", 0.05), session)])
        stats = run.statistics(0)
        run.relabel(0, go.error(stats, go.Sizes.of(stats))[1])
        return run.step


class CGOONonPrivate(CGOO):
    name = "cgoo-nonprivate"
    description = "CGOO without noise or clipping: exact counts, plain SGD oracle"
    private = False
    paper = (
        "non-private twin of CGOO (Alabi, 2019, arXiv:1906.09613): exact counts, plain SGD oracle"
    )
