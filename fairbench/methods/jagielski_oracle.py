"""`jagielski-oracle` (and its non-private twin `jagielski-oracle-nonprivate`): the private
in-processing reductions method of Jagielski, Kearns, Mao, Oprea, Roth, Sharifi-Malvajerdi and
Ullman (ICML 2019), i.e. Agarwal et al.'s (2018) exponentiated-gradient reduction made DP.

A zero-sum game between a Learner and an Auditor, played for T rounds (`iterations`):

1. Once, release the (group, label) counts n[a, y] with Laplace noise (`laplace_histogram`,
   one-hot rows: l1 sensitivity 1), floored at 1 (a public constant). Every share the game
   needs (p_e, p_{e,g}, the weight normaliser) is read from them, never from the data.
2. Auditor's multipliers, fairlearn's parametrisation: lambda_t = B exp(theta) / (1 +
   sum exp(theta)) over the constraints (sign, event, group), so lambda >= 0, |lambda|_1 <= B.
3. Learner (a best response to lambda_t, Agarwal et al.'s cost-sensitive reduction as
   fairlearn's `_Lagrangian._call_oracle` writes it): each record's signed weight is
   sw = (2y - 1) + sum_g lambda_s[e, g] (1 / p_e - 1[a = g] / p_{e,g}), with e the record's
   event (its label for equalized odds, `all` for demographic parity) and lambda_s = lambda+ -
   lambda-. sw depends on the record's cell (a, y) only, so the weights are a (groups, 2)
   table: target z = 1[sw > 0], weight |sw| n / sum |sw| (mean 1, as fairlearn normalises).
   The cost-sensitive problem is solved approximately by `epochs` epochs of DP-SGD on the
   weighted logistic loss (Poisson batches, per-example gradient of the *weighted* loss
   clipped at `clip_norm`, Gaussian noise), warm-started from h_{t-1}.
4. Auditor: release the histogram c[a, y, yhat] of h_t on the whole training set with
   Laplace(b_A) (each record in one cell: l1 sensitivity 1). The constraint values
   gamma(h_t) = +/- (P[yhat = 1 | e, g] - P[yhat = 1 | e]) (fairlearn's moments: each group
   against the overall, label-conditional for equalized odds) are post-processing of it and
   of the counts; theta <- theta + eta (gamma - gamma_bound), eta = `eta0` / B. Events, the
   shares p_e, p_{e,g} and the gaps are read through the constraint's group-rate view
   (`fairbench.constraints.group_rates`).
5. Output a mixture of h_1..h_T (`Fitted.components`), a randomized classifier that never
   reads A at test time: the uniform one (`mixture: uniform`, fairlearn's Q_EG), or
   (`mixture: lp`) the weights of fairlearn's linear program (Q_LP: least error subject to
   every constraint, violations paying B) solved on each h_t's *noisy* error and constraint
   values from its released histogram, which is post-processing and free.

Choices where the paper is vague or was not followed (methods-notes §3b):
- The paper's Learner is an exponential mechanism over the labelings of H (exponential time)
  and the authors' experiments ran a least-squares heuristic whose released code is not DP
  (Laplace scale passed as the location, under-calibrated, exact counts in noise scales,
  non-private LP and oracle calls feeding the output). Here: the notes' DP-SGD
  weighted-logistic learner, the Laplace auditor, and every statistic through the session.
- Privacy is accounted by the suite's PLD over the whole ledger, never the paper's
  eps' = eps / (4 sqrt(T ln 1/delta)) (kept in `info` as `epsilon_per_round_paper`, labelled):
  the count release and the T auditor releases share one Laplace scale b_A, set so that
  these T + 1 releases spend `auditor_share` of epsilon (or fixed by `auditor_scale`), and the
  learner's noise multiplier is calibrated so that the whole composition meets the target.
  One scale for both keeps the counts as precise as the auditor's cells, which divide by them.
- B (`bound`) defaults to 1 / gamma, the authors' and fairlearn's choice (Agarwal et al.'s
  guarantee: violation <= gamma + (1 + 2 nu) / B, so the slack scales with gamma); gamma = 0
  then needs an explicit bound.
- fairlearn shrinks eta when its (exact) duality gap stalls, and picks the better of its EG
  and LP mixtures by exact duality gaps, which need extra oracle calls; neither is done here.
  `mixture` chooses one of the two instead.
- Denominators: the auditor's rates divide by the one count release (the same shares the
  Learner's costs use), not by the histogram's own row sums.

Privacy notions (`privacy_notion`, in every row):
- `full` (default): add/remove one whole record. Ledger: LaplaceDpEvent(b_A) (the counts),
  SelfComposed(PoissonSampled(q, Gaussian(sigma)), T K) and SelfComposed(Laplace(b_A), T).
- `sensitive-attribute` (the paper's notion: X and Y public, one record's group substituted).
  The weighted gradient is split into the part that does not read a_i, the plain error
  gradient (weight n / sum |sw|, target y: what sw is without its constraint term, whose
  average over the groups of an event is zero), released exact; and the rest, which reads
  a_i, clipped at `clip_norm` and noised at twice that (a substitution moves it by up to twice
  its bound) and accounted as `SubstitutionSampledDpEvent` (no amplification by sampling, as
  for dp-fermi). The Laplace releases get twice the noise (a substitution moves one count out
  of a cell and into another).

Stacked trials (`stack_program`, logistic models): trials that differ in seed, gamma and
the `mixed` hyper-parameters (a tune's draws: step size, batch size, epochs, T, B, eta0,
clip, auditor share or scale, mixture) play their games side by side, each with its own
counts, multipliers, tables, batches and noise; the game's moves are tensor programs over
the trial axis on the device, and the learner's steps run as one stacked program. Where the
game rounds differ in length, each trial responds and is audited at its own rounds' ends.
Trials of different constraints play different games, so never share one (`stack_shape`).
An MLP trains one trial at a time through the same code.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import lru_cache
from typing import Literal

import numpy as np
import torch
from dp_accounting import dp_event
from pydantic import Field
from scipy.optimize import linprog
from torch import nn

from fairbench import constraints
from fairbench.errors import ConfigError
from fairbench.methods.base import Method
from fairbench.methods.cgoo import WeightedCrossEntropy, component
from fairbench.methods.engine import (
    Outcome,
    Stack,
    StackedData,
    TrainingProgram,
    exact_sums,
    expected_batch,
    init_models,
)
from fairbench.methods.knob import Direction, Knob
from fairbench.methods.plan import DataShape, Plan, Schedule
from fairbench.methods.trial import FairnessSpec, TrainingHparams, Trial
from fairbench.models.grad_sample import one_hot
from fairbench.models.stacked import first, stack_models, stackable
from fairbench.privacy import PrivacyBudget, PrivacyLedger, calibrate_noise_multiplier, epsilon
from fairbench.privacy.accountant import StepShape
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.stacked import StackedBatches, gaussian_sums

COUNTS = "jagielski-oracle: Laplace (group, label) counts"
LEARNER = "jagielski-oracle: learner DP-SGD steps (clipped weighted-loss gradient sums)"
AUDITOR = "jagielski-oracle: Laplace histogram c[a, y, yhat] of h_t, once per round"


class JagielskiOracleHparams(TrainingHparams):
    lr: float = Field(0.5, gt=0, description="learner step size")
    batch_size: int = Field(256, ge=1)
    epochs: float = Field(0.5, gt=0, description="learner epochs per round (K = epochs / q)")
    iterations: int = Field(20, ge=1, description="T: rounds of the game = mixture components")
    bound: float | None = Field(None, gt=0, description="B, the l1 bound of lambda; None: 1/gamma")
    eta0: float = Field(2.0, gt=0, description="EG step times B (fairlearn's eta0)")
    clip_norm: float = Field(1.0, gt=0, description="clip of the weighted per-example gradient")
    auditor_share: float = Field(
        0.2, gt=0, lt=1, description="epsilon share of the counts and the T auditor releases"
    )
    auditor_scale: float | None = Field(
        None, gt=0, description="fixed Laplace scale of counts and auditor; None: from the share"
    )
    privacy_notion: Literal["full", "sensitive-attribute"] = Field(
        "full", description="full: DP of the whole record; sensitive-attribute: of the group only"
    )
    mixture: Literal["uniform", "lp"] = Field(
        "lp",
        description="output mixture: uniform over rounds (Q_EG) or fairlearn's LP weights (Q_LP)",
    )


@lru_cache(maxsize=256)
def laplace_scale(releases: int, target: float, delta: float) -> float:
    """The smallest Laplace scale (to 0.1%) whose `releases` compose to `target` epsilon by
    the suite's accountant: a geometric bisection between the scale basic composition needs
    (releases / target, enough) and a quarter of the one-release scale (too little)."""

    def spent(scale: float) -> float:
        event = dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(scale), releases)
        return epsilon(event, delta)

    lo, hi = 0.25 / target, releases / target
    while hi / lo > 1.001:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if spent(mid) <= target else (mid, hi)
    return hi


def learner_costs(
    counts: torch.Tensor, lam: torch.Tensor, events: constraints.DeviceEvents
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Learner's cost-sensitive problem for multipliers lam (T, 2, E, groups) (signs +, -)
    on (group, label) counts (T, groups, 2): per cell, (T, groups, 2) weights and targets, and
    the (T,) weight of the constraint-free error term (the public part under the
    sensitive-attribute notion). p_{e,g} and p_e are fairlearn's `prob_group_event` and
    `prob_event` (fractions of all records)."""
    p_eg = events.per_event(counts) / counts.sum(dim=(1, 2)).view(-1, 1, 1)  # (T, E, groups)
    signed = lam[:, 0] - lam[:, 1]  # (T, E, groups)
    # per label y: its event's sum_g lambda_s / p_e, minus the own group's lambda_s / p_eg
    per_event = signed.sum(dim=-1) / p_eg.sum(dim=-1)  # (T, E)
    own = signed / p_eg  # (T, E, groups)
    label_event = events.of_label  # (2,): each label's event
    constraint = per_event[:, label_event].unsqueeze(1) - own[:, label_event].transpose(1, 2)
    error = torch.arange(2, device=counts.device) * 2.0 - 1  # 2y - 1, made on the device
    sw = (error + constraint).contiguous()  # (T, groups, 2)
    normaliser = counts.sum(dim=(1, 2)) / (counts * sw.abs()).sum(dim=(1, 2)).clamp(min=1e-12)
    return sw.abs() * normaliser.view(-1, 1, 1), (sw > 0).long(), normaliser


def violations(
    positives: torch.Tensor, counts: torch.Tensor, events: constraints.DeviceEvents
) -> torch.Tensor:
    """gamma (T, 2, E, groups): P[yhat = 1 | e, g] - P[yhat = 1 | e] and its negative, from
    positive-prediction counts and (group, label) counts, both (T, groups, 2); the counts are
    floored at 1 already, so the gaps' floor changes nothing."""
    gap = events.gaps(positives, counts, 1.0)
    return torch.stack([gap, -gap], dim=1)


class Difference:
    """A loss minus another, with its closed-form logit gradient: the part of the weighted
    loss's gradient that reads the record's group (full weighted loss minus its public part)."""

    def __init__(self, full: WeightedCrossEntropy, public: WeightedCrossEntropy) -> None:
        self.full, self.public = full, public

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        return self.full(logits) - self.public(logits)

    def logit_grad(self, logits: torch.Tensor) -> torch.Tensor:
        return self.full.logit_grad(logits) - self.public.logit_grad(logits)


class Game:
    """T trials' games on the device. `respond()` turns each trial's multipliers into its
    Learner's weight and target tables; `audit()` releases each trial's histogram of its
    current h_t and takes the EG step. Neither reads a value on the host. Trials whose game
    rounds are of different lengths (a stack of several configurations) move apart: each
    call then names the trials that move."""

    def __init__(
        self,
        rates: constraints.GroupRates,
        counts: torch.Tensor,
        bounds: torch.Tensor,
        gammas: torch.Tensor,
        eta0: float | torch.Tensor,
        release: Callable[[int], torch.Tensor],
    ) -> None:
        self.events = rates.on(counts.device)
        self.counts, self.release = counts, release
        self.bounds, self.gammas = bounds.view(-1, 1, 1, 1), gammas.view(-1, 1, 1, 1)
        # a reciprocal times eta0: what `eta0 / tensor` computes for a float eta0
        self.eta = self.bounds.reciprocal() * eta0
        n_trials, groups = counts.shape[:2]
        self.theta = torch.zeros((n_trials, 2, rates.n_events, groups), device=counts.device)
        # per trial, per round: its h_t's noisy error and its noisy constraint values
        self.errors: list[list[torch.Tensor]] = [[] for _ in range(n_trials)]
        self.values: list[list[torch.Tensor]] = [[] for _ in range(n_trials)]
        self.lam = self.multipliers()
        self.weights, self.targets, self.public = learner_costs(counts, self.lam, self.events)

    def multipliers(self) -> torch.Tensor:
        """lambda = B exp(theta) / (1 + sum exp(theta)), per trial."""
        e = self.theta.exp()
        return self.bounds * e / (1 + e.sum(dim=(1, 2, 3), keepdim=True))

    def respond(self, moving: torch.Tensor | None = None) -> None:
        """Every trial's tables, or (`moving`, (T,) bool) those of the trials beginning a
        round; the others keep theirs (and their multipliers, which an audit since their
        last response would otherwise move)."""
        lam = self.multipliers()
        weights, targets, public = learner_costs(self.counts, lam, self.events)
        if moving is not None:
            lam = torch.where(moving.view(-1, 1, 1, 1), lam, self.lam)
            weights = torch.where(moving.view(-1, 1, 1), weights, self.weights)
            targets = torch.where(moving.view(-1, 1, 1), targets, self.targets)
            public = torch.where(moving, public, self.public)
        self.lam = lam
        self.weights.copy_(weights)
        self.targets.copy_(targets)
        self.public.copy_(public)

    def audit(self, moving: list[int] | None = None) -> None:
        """Every trial's release and EG step, or those of the trials `moving` (ending a
        round)."""
        trials = range(len(self.theta)) if moving is None else moving
        hist = torch.stack([self.release(t) for t in trials])  # (T, g, y, yhat)
        index = None if moving is None else torch.tensor(moving, device=self.theta.device)

        def of(values: torch.Tensor) -> torch.Tensor:
            return values if index is None else values[index]

        counts = of(self.counts)
        gamma = violations(hist[..., 1], counts, self.events)
        theta = of(self.theta) + of(self.eta) * (gamma - of(self.gammas))
        if index is None:
            self.theta = theta
        else:
            self.theta[index] = theta
        wrong = hist[:, :, 0, 1] + hist[:, :, 1, 0]  # false positives, false negatives
        errors, values = wrong.sum(dim=1) / counts.sum(dim=(1, 2)), gamma.flatten(1)
        for row, t in enumerate(trials):
            self.errors[t].append(errors[row])
            self.values[t].append(values[row])

    def lp_weights(self, t: int) -> list[float]:
        """Trial t's mixture weights from fairlearn's linear program over its components'
        noisy errors and constraint values (`solve_linprog`): min Q.err + B xi subject to
        Q.(gamma_j - bound) <= xi for every constraint j, Q in the simplex, xi >= 0."""
        errors = torch.stack(self.errors[t]).double().cpu().numpy()
        gammas = torch.stack(self.values[t]).double().cpu().numpy()
        bound, excess = float(self.bounds[t]), gammas.T - float(self.gammas[t])
        rounds, constraints = len(errors), len(excess)
        result = linprog(
            np.append(errors, bound),
            A_ub=np.hstack([excess, -np.ones((constraints, 1))]),
            b_ub=np.zeros(constraints),
            A_eq=np.append(np.ones(rounds), 0.0)[None],
            b_eq=[1.0],
            method="highs-ds",
        )
        q = np.clip(result.x[:rounds], 0.0, None)
        return (q / q.sum()).tolist()


class JagielskiOracle(Method):
    name = "jagielski-oracle"
    description = (
        "Jagielski et al. 2019 DP reductions: EG auditor on Laplace histograms, "
        "DP-SGD weighted-logistic learner; mixture output"
    )
    private = True
    paper = (
        "Jagielski, Kearns, Mao, Oprea, Roth, Sharifi-Malvajerdi, Ullman (2019): "
        "Differentially Private Fair Learning. ICML 2019 (DP reductions of Agarwal et "
        "al. 2018)"
    )
    constraints = ("demographic_parity", "equalized_odds")
    knob = Knob(
        "gamma",
        "allowed gap of each group's rate to the overall rate",
        Direction.LOOSER,
        low=0.0,
        rate_tolerance=True,
        typical=0.05,
    )
    reconstructed = (
        "the authors' experiments ran a non-DP least-squares heuristic; this is the notes' "
        "DP-SGD weighted-logistic learner with a Laplace auditor"
    )
    Hparams = JagielskiOracleHparams
    hparams: JagielskiOracleHparams
    mixed = frozenset(
        {
            "lr",
            "batch_size",
            "epochs",
            "iterations",
            "bound",
            "eta0",
            "clip_norm",
            "auditor_share",
            "auditor_scale",
            "mixture",
        }
    )

    @property
    def sensitive(self) -> bool:
        return self.hparams.privacy_notion == "sensitive-attribute"

    def check(self, fairness: FairnessSpec) -> None:
        """Also refuse gamma = 0 without an explicit `bound` (the default B = 1/gamma)."""
        super().check(fairness)
        if fairness.knob == 0 and self.hparams.bound is None:
            raise ConfigError(
                f"method {self.name}: gamma = 0 needs an explicit `bound` "
                "(the default B = 1/gamma is infinite)"
            )

    def plan(
        self, shape: DataShape, target: PrivacyBudget | None, fairness: FairnessSpec, seed: int = 0
    ) -> Plan:
        """The learner's schedule over all rounds (T K steps, K = `inner_steps` per round) and
        the Laplace scale of the counts and the auditor (0: exact), meeting the target on n
        records: T K learner steps, one count release, T auditor releases. The constraint is
        in the plan: trials of different constraints play different games."""
        if shape.n_classes != 2:
            raise ConfigError(f"method {self.name} handles binary classification tasks only")
        hp, ledger, scale = self.hparams, PrivacyLedger(), 0.0
        q = min(1.0, hp.batch_size / shape.n)
        inner = max(1, round(hp.epochs / q))
        steps = inner * hp.iterations
        schedule = Schedule(q, steps)
        if self.private:
            privacy = self.required_target(target)
            eps, delta = privacy.epsilon, privacy.delta
            releases = hp.iterations + 1  # the counts, then one histogram per round
            scale = hp.auditor_scale or laplace_scale(releases, hp.auditor_share * eps, delta)
            laplace = dp_event.LaplaceDpEvent(scale)
            laplaces = dp_event.SelfComposedDpEvent(laplace, releases)
            alone = epsilon(laplaces, delta)
            if alone >= eps:
                raise ConfigError(
                    f"method {self.name}: the count release and the {hp.iterations} auditor "
                    f"releases (Laplace scale {scale:g}) alone spend epsilon {alone:.3g} >= the "
                    f"target {eps:g}; raise epsilon above {alone:.3g}, raise auditor_scale or "
                    "lower iterations"
                )
            sigma = calibrate_noise_multiplier(
                q, steps, eps, delta, None, StepShape(1, self.sensitive, laplaces)
            )
            schedule = Schedule(q, steps, sigma, "noise_multiplier")
            ledger.record(LEARNER, sgd_steps(q, sigma, steps, None, 1, self.sensitive))
            ledger.record(COUNTS, laplace)
            ledger.record(AUDITOR, dp_event.SelfComposedDpEvent(laplace, hp.iterations))
        info = {
            **schedule.info(),
            "inner_steps": inner,
            "iterations": hp.iterations,
            "clip_norm": hp.clip_norm,
            "laplace_scale": scale,
        }
        if self.private:
            # the paper's per-round epsilon' (its advanced composition), for reference only
            per_round = 4 * math.sqrt(hp.iterations * math.log(1 / delta))
            info["epsilon_per_round_paper"] = eps / per_round
        budget = schedule.budget(**({"laplace": scale} if self.private else {}))
        details = {"constraint": fairness.constraint}
        return Plan(ledger, schedule, budget=budget, info=info, details=details)

    def stackable(self) -> bool:
        return stackable(self.hparams.model)

    def stack_shape(self, plan: Plan) -> str:
        """The constraint: trials of different constraints play different games."""
        return plan.details["constraint"]

    def program(self, trials: list[Trial], plan: Plan) -> TrainingProgram:
        """Trials of this configuration that share `plan`: a stack of one configuration."""
        return self.stack_program(Stack([self] * len(trials), trials, [plan] * len(trials)))

    def stack_program(self, stack: Stack) -> TrainingProgram:
        """Each trial's counts released and its game set up; then each round of its game is
        its `inner_steps` rounds of the loop: the Learner's best response to the multipliers
        at its first, the learner's steps (stacked across the trials, each at its own step
        size, clip and noise), and at its last the trial's h_t kept as a component and
        audited. Trials whose game rounds differ in length move apart (`Game`). Each trial's
        outcome is its mixture."""
        trials, hp, dev = stack.trials, self.hparams, stack.trials[0].session.device
        inner = [p.info["inner_steps"] for p in stack.plans]
        scales = [p.info["laplace_scale"] for p in stack.plans]
        data = StackedData.of(trials)
        n, k = data.n, trials[0].task.n_groups
        sessions = [t.session for t in trials]
        cell = data.per_record(lambda task: task.train.s * 2 + task.train.y, torch.int64)
        ones = torch.ones((n, 1), device=dev)
        counts = []
        for t, (session, scale) in enumerate(zip(sessions, scales, strict=True)):
            released = session.laplace_histogram(COUNTS, scale)(
                ones, data.trial_rows(cell, t), 2 * k
            )
            counts.append(released.view(k, 2).clamp(min=1.0))  # a public floor
        models = init_models(hp, trials)
        auditors = [
            s.laplace_histogram(AUDITOR, scale) for s, scale in zip(sessions, scales, strict=True)
        ]

        @torch.no_grad()
        def release(t: int) -> torch.Tensor:
            """Trial t's noisy histogram c[a, y, yhat] of its current classifier."""
            pred = models[t](data.trial_rows(data.x, t)).argmax(dim=1)
            hist = auditors[t](one_hot(pred, 2, torch.float32), data.trial_rows(cell, t), 2 * k)
            return hist.view(k, 2, 2)

        gammas = [t.fairness.knob_value for t in trials]
        bounds = torch.tensor(
            [h.bound or 1 / g for h, g in zip(stack.hparams, gammas, strict=True)], device=dev
        )
        game = Game(
            constraints.group_rates(stack.plan.details["constraint"], 2, k),
            torch.stack(counts),
            bounds,
            torch.tensor(gammas, device=dev),
            stack.values(lambda h, p: h.eta0).at(len(trials), 3),
            release,
        )
        learn = self._learner(stack, models, data, cell, game)
        mixtures: list[list[nn.Module]] = [[] for _ in trials]
        masks: dict[tuple[int, ...], torch.Tensor] = {}
        done = 0

        def moving(active: int) -> list[int]:
            """The round's trials (the first `active`) at a boundary of their game's rounds."""
            return [t for t in range(active) if done % inner[t] == 0]

        def step(round_: StackedBatches) -> None:
            nonlocal done
            active = len(round_.batches)
            beginning = moving(active)  # a round of their game begins: the Learner responds
            if len(beginning) == len(trials):
                game.respond()
            elif beginning:
                key = tuple(beginning)
                if key not in masks:
                    mask = torch.zeros(len(trials), dtype=torch.bool)
                    masks[key] = mask.index_fill_(0, torch.tensor(key), True).to(dev)
                game.respond(masks[key])
            learn(round_)
            done += 1
            ending = moving(active)  # it ends: h_t is a component, and the auditor moves
            for t in ending:
                mixtures[t].append(component(models[t]))
            if len(ending) == len(trials):
                game.audit()
            elif ending:
                game.audit(ending)

        def outcomes() -> list[Outcome]:
            return [
                Outcome(
                    {
                        "gamma": trial.fairness.knob,
                        "bound": float(game.bounds[t]),
                        "lambda": game.lam[t].flatten().tolist(),
                        "counts": game.counts[t].tolist(),
                    },
                    components=mixture,
                    weights=game.lp_weights(t) if h.mixture == "lp" else None,
                )
                for t, (trial, h, mixture) in enumerate(
                    zip(trials, stack.hparams, mixtures, strict=True)
                )
            ]

        return TrainingProgram(models, step, outcomes)

    def _learner(
        self,
        stack: Stack,
        models: list[nn.Module],
        data: StackedData,
        cell: torch.Tensor,
        game: Game,
    ) -> Callable[[StackedBatches], None]:
        """One DP-SGD step of the round's trials' weighted logistic regressions, on the
        game's current tables (read at each step, so `respond` changes what the next step
        fits)."""
        model_stack = stack_models(models)
        sums = [
            t.session.gaussian_sum(
                LEARNER, h.clip_norm if self.private else math.inf, p.loop.noise_multiplier
            )
            for t, h, p in zip(stack.trials, stack.hparams, stack.plans, strict=True)
        ]
        step_size = stack.values(lambda h, p: h.lr / expected_batch(p.loop, data.n))

        def step(round_: StackedBatches) -> None:
            active = len(round_.batches)
            rows = data.gather(round_)
            x, y, cells = rows.rows(data.x), rows.rows(data.y), rows.rows(cell)
            x_sq = rows.rows(data.x_sq)
            flat = active, -1
            targets, weights = first(game.targets, active), first(game.weights, active)
            full = WeightedCrossEntropy(
                targets.view(flat).gather(1, cells), weights.view(flat).gather(1, cells)
            )
            logits = model_stack.logits(x)
            if self.sensitive:  # the group-free error term is public: exact; the rest noised
                public_weight = first(game.public, active).view(-1, 1).expand_as(cells)
                public = WeightedCrossEntropy(y, public_weight)
                grads = exact_sums(model_stack.contributions(x, public, logits, rows, x_sq))
                noisy = gaussian_sums(
                    sums,
                    model_stack.contributions(x, Difference(full, public), logits, rows, x_sq),
                    round_.batches,
                )
                grads = [g + h for g, h in zip(grads, noisy, strict=True)]
            else:
                grads = gaussian_sums(
                    sums, model_stack.contributions(x, full, logits, rows, x_sq), round_.batches
                )
            model_stack.descend(grads, step_size.at(active))

        return step


class JagielskiOracleNonPrivate(JagielskiOracle):
    name = "jagielski-oracle-nonprivate"
    description = "jagielski-oracle without noise or clipping: exact counts, plain SGD learner"
    private = False
    paper = (
        "non-private twin of jagielski-oracle (Jagielski et al., ICML 2019): exact "
        "statistics, plain SGD learner"
    )
