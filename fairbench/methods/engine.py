"""The training engine every method runs on: it owns the trial.

The engine owns what is the same for every method (`fit_trials`): the fairness spec checked
against the class attributes, the plan declared from public inputs (`Method.plan`), trials
with equal plans grouped into one program where the method stacks, each plan submitted to
its trial's privacy session before anything is drawn, the batches (drawn by the sessions:
Poisson, or shuffled for a non-private schedule that asks) and the loop, and the `Fitted`
results. A method supplies what is its own: its plan and its `TrainingProgram` (its models
and `step`, its update from statistics drawn through the sessions' mechanisms, which clip
and noise them, `fairbench.privacy.session`; or, for a fit of its own, `run`).

A step is a tensor program with no Python per record, written over a leading trial axis: T
trials that share the method, its hyperparameters and the plan (seeds x knob values at one
epsilon) run as one program, each with its own task, session (plan, ledger, Poisson batches,
noise streams), parameters and dual variables; one trial alone is a stack of one.
`StackedData` gathers the T Poisson batches into one padded block;
`fairbench.privacy.stacked` hands each trial's statistic to its own mechanism. A trial's
result is its result alone up to float32 reduction order (tests/methods/test_stacking.py).

Stacks across configurations. A method that declares `mixed` hyper-parameters (step sizes,
batch size, epochs, noise, ...) also stacks trials whose values of those differ, and so
whose plans differ (`Stack`): each trial keeps its own plan, and the numbers a step reads
from it become per-trial values on the trial axis (`PerTrial`; the one float where all
trials share it, so a one-configuration stack's arithmetic is unchanged). The engine orders
a stack's trials by their plans' rounds, longest first, and runs the longest plan's rounds:
round r draws batches for the trials whose plans run more than r rounds, a prefix of the
stack, and the step reads and updates those trials only. A trial whose rounds are done draws
nothing more (its session refuses a draw beyond its plan in any case) and its parameters
stay as they are.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from fairbench.errors import ConfigError
from fairbench.methods.plan import DataShape, Plan, Schedule, TrainingBudget
from fairbench.methods.trial import (
    Calibrated,
    Device,
    FairnessSpec,
    Fitted,
    TrainingHparams,
    Trial,
    resolve_device,
)
from fairbench.models import build_model
from fairbench.privacy import PrivacyBudget, calibrate_noise_multiplier, calibrate_steps
from fairbench.privacy.accountant import PLAIN, StepShape
from fairbench.privacy.contributions import StackedOuterProducts
from fairbench.privacy.session import PrivacySession
from fairbench.privacy.stacked import StackedBatches, poisson_rounds, shuffled_rounds
from fairbench.task import Task

if TYPE_CHECKING:  # the interface the engine runs; base builds on this module
    from fairbench.methods.base import Method


def init_model(hp: TrainingHparams, task: Task, session: PrivacySession) -> nn.Module:
    """The classifier on the trial's device, initialised from the trial's stream "init"."""
    if task.kind != "classification":
        raise ConfigError(
            f"{task.name} is a {task.kind} task and this method trains classifiers; choose the "
            "classification task in the dataset's options"
        )
    return build_model(hp.model, task.n_features, task.n_classes, hp.hidden, session.stream("init"))


def train_tensors(task: Task, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Training features and class labels on the device."""
    x = torch.as_tensor(task.train.X, dtype=torch.float32, device=device)
    y = torch.as_tensor(task.train.y, dtype=torch.int64, device=device)
    return x, y


def uncalibrated(hp: TrainingHparams, n: int) -> Schedule:
    """Steps from `epochs` at the expected batch size, no noise (non-private twins)."""
    q = min(1.0, hp.batch_size / n)
    return Schedule(q, max(1, round(hp.epochs / q)))


def calibrated(
    hp: Calibrated,
    n: int,
    privacy: PrivacyBudget,
    laplace_scale: float | None = None,
    shape: StepShape = PLAIN,
) -> Schedule:
    """The schedule meeting the budget on n training records: steps from `epochs` and sigma
    solved (`calibrate: noise`), or sigma fixed and the largest step count solved
    (`calibrate: steps`, at most `max_steps` where set)."""
    q = min(1.0, hp.batch_size / n)
    eps, delta = privacy.epsilon, privacy.delta
    if hp.calibrate == "noise":
        steps = max(1, round(hp.epochs / q))
        sigma = calibrate_noise_multiplier(q, steps, eps, delta, laplace_scale, shape)
        return Schedule(q, steps, sigma, "noise_multiplier")
    if hp.noise_multiplier is None:  # the hyperparameters' validator refuses it first
        raise ConfigError("calibrate: steps needs noise_multiplier")
    sigma = float(hp.noise_multiplier)
    steps = calibrate_steps(q, sigma, eps, delta, laplace_scale, shape)
    if hp.max_steps is not None:  # fewer steps spend less: the ledger's epsilon is reported
        steps = min(steps, hp.max_steps)
    return Schedule(q, steps, sigma, "steps")


def expected_batch(schedule: Schedule, n: int) -> float:
    """q n: the public normaliser of a Poisson batch's noisy sum (not the realised size)."""
    return schedule.sampling_rate * n


class StackedData:
    """The trials' training tensors on one device, each distinct task (split) once, and the
    gather of a round of T Poisson batches into one block: rows (T, B, ...) with B the largest
    batch, shorter batches padded (`mask` False; None when nothing is padded)."""

    def __init__(self, tasks: list[Task], device: torch.device) -> None:
        distinct: dict[int, int] = {}
        self.slots = [distinct.setdefault(id(task), len(distinct)) for task in tasks]
        self.tasks = list({id(task): task for task in tasks}.values())
        sizes = {len(task.train) for task in self.tasks}
        if len(sizes) != 1:
            raise ValueError(f"stacked trials need training sets of one size, got {sorted(sizes)}")
        self.n, self.device = sizes.pop(), device
        self.offsets = [slot * self.n for slot in self.slots]
        self.x = self.per_record(lambda task: task.train.X, torch.float32)
        self.y = self.per_record(lambda task: task.train.y, torch.int64)
        self.x_sq = (self.x * self.x).sum(dim=-1)  # each record's ||x||^2, used every step
        trials = torch.arange(len(self.slots), device=device).unsqueeze(1)
        self._task_offsets = torch.tensor(self.offsets, device=device).unsqueeze(1)
        self._trial_offsets = trials * self.n  # a `per_trial` tensor's rows, trial by trial

    @classmethod
    def of(cls, trials: list[Trial]) -> StackedData:
        """The trials' training data on their device."""
        return cls([t.task for t in trials], trials[0].session.device)

    def per_record(self, values: Callable[[Task], np.ndarray], dtype: torch.dtype) -> torch.Tensor:
        """`values(task)` (one entry per training record) of every distinct task, concatenated
        in slot order: what `Gathered.rows` indexes."""
        stacked = np.concatenate([values(task) for task in self.tasks])
        return torch.as_tensor(stacked, dtype=dtype, device=self.device)

    def gather(self, round_: StackedBatches) -> Batch:
        """The round's batches as rows of this data (each trial's rows of its own task; a
        round of k trials: the first k)."""
        index = round_.index
        if len(self.tasks) > 1:
            index = index + self._task_offsets[: index.shape[0]]
        return Batch(index, round_.mask, round_.sizes, self)

    def per_trial(self, dtype: torch.dtype) -> torch.Tensor:
        """A zero (T * n,) tensor for values each trial holds per training record (e.g. the
        targets a method relabels per trial): trial t's record i at t n + i (`own_rows`)."""
        return torch.zeros(len(self.slots) * self.n, dtype=dtype, device=self.device)

    def own_rows(self, round_: StackedBatches) -> Gathered:
        """The round's batches as rows of a `per_trial` tensor (each trial's own values)."""
        if len(self.slots) == 1:
            return Gathered(round_.index, round_.mask, round_.sizes)
        offsets = self._trial_offsets[: round_.index.shape[0]]
        return Gathered(round_.index + offsets, round_.mask, round_.sizes)

    def trial_rows(self, values: torch.Tensor, t: int) -> torch.Tensor:
        """Trial t's task's rows of `values` (a `per_record` tensor): (n, ...)."""
        return values[self.offsets[t] : self.offsets[t] + self.n]


@dataclass(frozen=True)
class Gathered:
    """T batches' global row indices (T, B), the mask of real rows (None: none padded) and
    each batch's size."""

    index: torch.Tensor
    mask: torch.Tensor | None
    sizes: list[int] | None  # None: not read (on a device)

    def rows(self, values: torch.Tensor) -> torch.Tensor:
        """values (N, ...) at the batches' rows: (T, B, ...)."""
        picked = values.index_select(0, self.index.reshape(-1))
        return picked.view(*self.index.shape, *values.shape[1:])

    def masked(self, values: torch.Tensor) -> torch.Tensor:
        """(T, B, ...) with padding rows zeroed."""
        if self.mask is None:
            return values
        return values * self.mask.view(*self.mask.shape, *[1] * (values.dim() - 2))


@dataclass(frozen=True)
class Batch(Gathered):
    """A round's rows of `StackedData`, with their features, labels and squared norms read
    once, when first asked for."""

    data: StackedData

    @functools.cached_property
    def x(self) -> torch.Tensor:
        return self.rows(self.data.x)

    @functools.cached_property
    def y(self) -> torch.Tensor:
        return self.rows(self.data.y)

    @functools.cached_property
    def x_sq(self) -> torch.Tensor:
        return self.rows(self.data.x_sq)


def init_models(hp: TrainingHparams, trials: list[Trial]) -> list[nn.Module]:
    """Each trial's classifier, initialised from its own stream "init"."""
    return [init_model(hp, t.task, t.session) for t in trials]


def exact_sums(contributions) -> list[torch.Tensor]:
    """The unclipped, noiseless sums of a stack's contributions, stacked on the trial axis
    (public terms, which no mechanism releases)."""
    if isinstance(contributions, StackedOuterProducts):
        return contributions.weighted_sum(None)
    return [part.unsqueeze(0) for part in contributions.trial(0).weighted_sum(None)]


@dataclass(frozen=True)
class Outcome:
    """What a program reports for one trial once its loop is done: row info of its own (its
    final dual variables, say), and the predictor when it is not the trial's model alone (a
    mixture's `components` and `weights`, a `derived` post-processor's table and, where the
    base is decoupled, its `group_models`), or a notion or
    accounting the method qualifies."""

    info: dict[str, Any] = field(default_factory=dict)
    model: nn.Module | None = None
    components: list[nn.Module] = field(default_factory=list)
    weights: list[float] | None = None
    derived: np.ndarray | None = None
    group_models: list[nn.Module] = field(default_factory=list)
    privacy_notion: str | None = None
    target_accounting: str = "suite"
    budget: TrainingBudget | None = (
        None  # what ran, when only training could tell (else the plan's)
    )


@dataclass(frozen=True)
class TrainingProgram:
    """T trials that share a plan, ready to run as one: each trial's model (views into
    stacked parameters where the method stacks), the step over one round of their batches
    (drawn by the engine from each trial's session, among its `n` first records: by default
    all its training records), and each trial's `Outcome` afterwards. `run`, where set, is
    the method's own loop instead of the engine's (an adaptive plan, a non-gradient fit)."""

    models: list[nn.Module]
    step: Callable[[StackedBatches], None] | None = None
    outcomes: Callable[[], list[Outcome]] | None = None
    run: Callable[[], None] | None = None
    n: int | None = None


class PerTrial:
    """A number each trial of a stack reads (a step size, a dual step, a cap): the one float
    where every trial's is the same, so that a one-configuration stack computes exactly what
    it computed before stacks mixed configurations, else a float32 tensor on the trial axis
    (a float times a float32 tensor rounds as the float32 tensor product does, so a trial's
    arithmetic is its arithmetic alone)."""

    def __init__(
        self, values: Sequence[float], device: torch.device, dtype: torch.dtype = torch.float32
    ) -> None:
        """`dtype`: the tensor's, float64 for values that enter float64 arithmetic (a float32
        value would round what a trial alone computes with the float)."""
        self.values = [float(v) for v in values]
        self.tensor = None
        if len(set(self.values)) > 1:
            self.tensor = torch.tensor(self.values, dtype=dtype, device=device)

    def at(self, k: int, dims: int = 0) -> float | torch.Tensor:
        """The first k trials' values (a round's trials), shaped (k, 1, ...) with `dims`
        axes of 1 to broadcast over (k, ...) tensors; the float where all are equal."""
        if self.tensor is None:
            return self.values[0]
        return self.tensor[:k].view(k, *[1] * dims)


@dataclass(frozen=True)
class Stack:
    """T trials run as one program, ordered by their plans' rounds, longest first (stable:
    trials with equal plans keep their order): each trial's method (its own hyper-parameters,
    which differ from the others' only in the method's `mixed` keys), trial and plan. Without
    `mixed` keys, the trials share hyper-parameters and plan (`plan`)."""

    methods: list[Method]
    trials: list[Trial]
    plans: list[Plan]

    @property
    def plan(self) -> Plan:
        """The first (longest) trial's plan: every trial's, for a method without `mixed`."""
        return self.plans[0]

    @property
    def hparams(self) -> list[Any]:
        """Each trial's hyper-parameters (its method's)."""
        return [m.hparams for m in self.methods]

    def program(self) -> TrainingProgram:
        """The stack's program: `program(trials, plan)` where its trials share one
        configuration and plan (every method's contract, and what a subclass that overrides
        it changes), else the method's `stack_program`."""
        method, key = self.methods[0], self.plan.key
        if all(m.hparams == method.hparams for m in self.methods) and all(
            p.key == key for p in self.plans
        ):
            return method.program(self.trials, self.plan)
        return method.stack_program(self)

    def values(
        self, of: Callable[[Any, Plan], float], dtype: torch.dtype = torch.float32
    ) -> PerTrial:
        """Each trial's `of(hparams, plan)` (its step size, its clip, ...)."""
        return PerTrial(
            [of(m.hparams, p) for m, p in zip(self.methods, self.plans, strict=True)],
            self.trials[0].session.device,
            dtype,
        )


def stack_key(method: Method, plan: Plan, index: int) -> str:
    """Equal for trials that may share one program: a method that stacks, and its hyper-
    parameters but its `mixed` keys and its `stack_shape` (the plans may then differ), or the
    whole plan for a method that declares none; `index` keeps any other trial alone."""
    if not method.stackable():
        return f"alone {index}"
    shared = {k: v for k, v in method.hparams.model_dump().items() if k not in method.mixed}
    of_plan = method.stack_shape(plan) if method.mixed else plan.key
    return json.dumps([method.name, shared, of_plan], sort_keys=True, default=repr)


def fit_trials(method: Method, trials: list[Trial]) -> list[Fitted]:
    """`fit_stacks` with one method for every trial."""
    return fit_stacks([method] * len(trials), trials)


def fit_stacks(methods: list[Method], trials: list[Trial]) -> list[Fitted]:
    """The engine's trial: validate each trial's fairness spec, plan each trial from public
    inputs with its method, group trials that may share a program (`stack_key`: each group
    one program where the method stacks), submit each plan to its session under its
    method's guarantee, run the loop, and build each trial's `Fitted` from its model, its
    outcome, its plan's budget and info."""
    for method, trial in zip(methods, trials, strict=True):
        method.check(trial.fairness)
    plans = [
        m.plan(DataShape.of(t.task), t.session.budget, t.fairness, t.session.seed)
        for m, t in zip(methods, trials, strict=True)
    ]
    groups: dict[str, list[int]] = {}
    for i, (method, plan) in enumerate(zip(methods, plans, strict=True)):
        groups.setdefault(stack_key(method, plan, i), []).append(i)
    fits: list[Fitted | None] = [None] * len(trials)
    for members in groups.values():
        members.sort(key=lambda i: -plans[i].loop_rounds)
        stack = Stack(
            [methods[i] for i in members], [trials[i] for i in members], [plans[i] for i in members]
        )
        for method, trial, plan in zip(stack.methods, stack.trials, stack.plans, strict=True):
            trial.session.submit_plan(plan.ledger, method.guarantee())
        program = stack.program()
        if program.run is not None:
            program.run()
        else:
            run_rounds(stack, program)
        outcomes = program.outcomes() if program.outcomes else [Outcome() for _ in members]
        models: list[Any] = program.models or [None] * len(members)  # a fit of its own: None
        for i, trial, plan, model, outcome in zip(
            members, stack.trials, stack.plans, models, outcomes, strict=True
        ):
            fits[i] = Fitted(
                outcome.model if outcome.model is not None else model,
                trial.session.device,
                privacy_notion=outcome.privacy_notion,
                info={**plan.info, **outcome.info},
                target_accounting=outcome.target_accounting,
                components=outcome.components,
                weights=outcome.weights,
                budget=outcome.budget if outcome.budget is not None else plan.budget,
                derived=outcome.derived,
                group_models=outcome.group_models,
            )
    return fits  # type: ignore[return-value]  # each trial is in one group: none is left None


def run_rounds(stack: Stack, program: TrainingProgram) -> None:
    """The engine's loop: the longest plan's rounds, each drawn for the trials whose plans
    run that many (a prefix of the stack, longest first); the batches of each stretch of
    rounds with one set of trials are drawn together (`rounds`), each session from its own
    stream, so a trial's batches are its batches alone."""
    assert program.step is not None
    n = len(stack.trials[0].task.train) if program.n is None else program.n
    counts = [plan.loop_rounds for plan in stack.plans]
    done = 0
    for end in sorted(set(counts)):
        k = sum(count >= end for count in counts)
        next_round = rounds([t.session for t in stack.trials[:k]], n, stack.plans[:k])
        for _ in range(done, end):
            program.step(next_round())
        done = end


def rounds(
    sessions: list[PrivacySession], n: int, plan: Plan | Sequence[Plan]
) -> Callable[[], StackedBatches]:
    """The loop's batches for `sessions` (with one plan, or each its own): Poisson at each
    schedule's rate (each session's own "sampling" stream), or shuffled mini-batches for a
    schedule that asks (non-private, or declared not accounted: the sessions refuse them
    otherwise)."""
    plans = [plan] * len(sessions) if isinstance(plan, Plan) else list(plan)
    schedules = [p.loop for p in plans]
    first = schedules[0]
    if first.shuffle is not None:
        sizes = [s.shuffle or first.shuffle for s in schedules]
        return shuffled_rounds(sessions, n, sizes, first.drop_last)
    return poisson_rounds(sessions, n, [s.sampling_rate for s in schedules])


def one_step(
    method: Method, task: Task, privacy: PrivacyBudget | None, seed: int, device: Device = "cpu"
) -> Callable[[], None]:
    """`fairbench bench`'s view of a one-trial program: each call runs one round of exactly the
    code `fit` runs, on the method's typical knob. When the plan's rounds are used up, the next
    call starts a fresh trial (a new session and program), so a bench may run any number of
    steps without a session drawing beyond its plan."""
    knob = None if method.knob is None else method.knob.typical
    left, step, next_round = 0, None, None

    def start() -> tuple[int, Callable[[StackedBatches], None], Callable[[], StackedBatches]]:
        session = PrivacySession(seed, resolve_device(device), privacy if method.private else None)
        trial = Trial(task, FairnessSpec("demographic_parity", knob), session)
        plan = method.plan(DataShape.of(task), session.budget, trial.fairness, seed)
        session.submit_plan(plan.ledger, method.guarantee())
        program = method.program([trial], plan)
        assert program.step is not None
        n = len(task.train) if program.n is None else program.n
        return plan.loop_rounds, program.step, rounds([session], n, plan)

    def one() -> None:
        nonlocal left, step, next_round
        if left == 0:
            left, step, next_round = start()
        left -= 1
        step(next_round())  # type: ignore[misc]  # set by start()

    return one
