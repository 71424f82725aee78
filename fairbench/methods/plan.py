"""What a method declares before it touches data: its plan.

A plan is a pure function of public inputs (the shape of the training data, the target
(epsilon, delta), the fairness spec, the trial's seed): the schedule the engine's loop runs,
the privacy events that loop will release (the ledger the session then checks every draw
against), what training will have run (`TrainingBudget`, for reports), and the public
quantities a row reports (`info`). Preflight, calibration and private selection call `Method.plan`
directly: nothing trains to learn a plan (as opacus computes the noise from public values
before it touches the model).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dp_accounting import dp_event

from fairbench.privacy.accountant import at_search_bound
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.ledger import PrivacyLedger
from fairbench.task import Task


@dataclass(frozen=True)
class DataShape:
    """The public facts about a task's training data a plan may depend on: the number of
    training records (treated as public, as every DP-SGD calibration that sets q = B / n
    does), features, classes and groups."""

    n: int
    n_features: int
    n_classes: int
    n_groups: int

    @classmethod
    def of(cls, task: Task) -> DataShape:
        return cls(len(task.train), task.n_features, task.n_classes, task.n_groups)


@dataclass(frozen=True)
class TrainingBudget:
    """What training actually ran, in one shape for every method, so that reports can put
    methods' effort side by side (a method that ran 7 steps beside one that ran 146).

    `noise` maps each release kind to its noise scale in units of its sensitivity (Gaussian
    noise multiplier, Laplace scale, zCDP rho); `calibrated` names the quantity the accountant
    solved for the target epsilon (None when nothing was calibrated), and `at_bound` says the
    solve stopped at a search limit rather than at the target."""

    steps: int  # optimisation steps (parameter updates) in total
    sampling_rate: float | None = None  # expected share of the data per step; None: full batch
    noise: dict[str, float] = field(default_factory=dict)
    calibrated: str | None = None
    at_bound: bool = False


@dataclass(frozen=True)
class Schedule:
    """What the loop runs: `steps` batches at `sampling_rate` (Poisson; shuffled mini-batches
    of `shuffle` records instead, for a non-private method that sets it or a private trial
    declared not accounted, each epoch's last n mod `shuffle` records skipped with
    `drop_last`), Gaussian releases at `noise_multiplier` (0: a non-private run),
    `calibrated` naming the solved quantity."""

    sampling_rate: float
    steps: int
    noise_multiplier: float = 0.0
    calibrated: str | None = None
    shuffle: int | None = None
    drop_last: bool = False

    def budget(self, steps: int | None = None, /, **other_noise: float) -> TrainingBudget:
        """The trial's `TrainingBudget`: the Gaussian noise under `gradient`, other releases'
        scales by name; `steps` when fewer were run than scheduled."""
        steps = self.steps if steps is None else steps
        if self.noise_multiplier <= 0:
            return TrainingBudget(int(steps), float(self.sampling_rate))
        return TrainingBudget(
            steps=int(steps),
            sampling_rate=float(self.sampling_rate),
            noise={"gradient": float(self.noise_multiplier)}
            | {k: float(v) for k, v in other_noise.items()},
            calibrated=self.calibrated,
            at_bound=at_search_bound(steps, self.noise_multiplier),
        )

    def rounds_event(
        self,
        laplace_scale: float | None = None,
        gaussians: int = 1,
        substitution: bool = False,
        count_noise: float | None = None,
    ) -> dp_event.DpEvent:
        """The loop's releases: each of the `steps` rounds, `gaussians` Gaussian sums at the
        noise multiplier (and a Laplace histogram, if `laplace_scale`; a Gaussian count vector,
        if `count_noise`) on one Poisson batch (`fairbench.privacy.events.sgd_steps`)."""
        return sgd_steps(
            self.sampling_rate,
            self.noise_multiplier,
            self.steps,
            laplace_scale,
            gaussians,
            substitution,
            count_noise,
        )

    def info(self) -> dict[str, float | int]:
        return {
            "steps": self.steps,
            "sampling_rate": self.sampling_rate,
            "noise_multiplier": self.noise_multiplier,
        }


@dataclass(frozen=True)
class Plan:
    """A trial's plan: the events it will release (`ledger`), the loop the engine runs
    (`schedule`, `rounds` of it: by default all its steps; None: the method runs its own
    loop, `TrainingProgram.run`), what training will have run (`budget`), the public quantities its
    row reports (`info`), and public values its program reads that are not reported
    (`details`). Trials whose plans are equal train as one stacked program."""

    ledger: PrivacyLedger = field(default_factory=PrivacyLedger)
    schedule: Schedule | None = None
    rounds: int | None = None
    budget: TrainingBudget | None = None
    info: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def loop(self) -> Schedule:
        """The schedule of a plan the engine loops over (what a method's program reads)."""
        if self.schedule is None:
            raise ValueError("the plan has no schedule: its method runs its own loop")
        return self.schedule

    @property
    def loop_rounds(self) -> int:
        """How many rounds of batches the engine's loop runs."""
        if self.schedule is None:
            return 0
        return self.schedule.steps if self.rounds is None else self.rounds

    @property
    def key(self) -> str:
        """Equal for plans that may share one stacked program."""
        return json.dumps(
            [
                self.ledger.to_json(),
                repr(self.schedule),
                self.rounds,
                repr(self.budget),
                self.info,
                repr(self.details),
            ],
            sort_keys=True,
            default=repr,
        )
