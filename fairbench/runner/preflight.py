"""Pre-flight: everything a run can fail on, found before a run directory exists.

`expand` (runner.config) validates the config's shape, names, hyper-parameters and knob ranges.
What it cannot see without the data and the accountant is found here: each distinct private
configuration's noise or step count is calibrated for its target epsilon exactly as the trial
will calibrate it (the method's declared plan, `Method.plan`, from public inputs: nothing
trains), so an infeasible epsilon is one error line naming the smallest feasible one instead of
a run directory of failed trials. Seeds and knob values do not enter a calibration (the plan
depends on the data size, the hyper-parameters and the budget), so one trial per
configuration stands for the others. The same pass yields the plan `--dry-run` prints: steps
per trial and a time estimate.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from fairbench.errors import CalibrationError
from fairbench.methods import FairnessSpec, get_method, method_class
from fairbench.methods.plan import DataShape
from fairbench.methods.trial import TrainingHparams
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.session import Guarantee, planned_releases
from fairbench.runner.trial import TrialSpec, load_task

# package data: a copy of results/figures/table-step-time/step_time.csv (make table-step-time)
STEP_TIMES = Path(__file__).resolve().parent / "step_time.csv"


@dataclass(frozen=True)
class PlannedConfig:
    """One distinct configuration of a run: its trials and what each trial will do."""

    dataset: str
    label: str
    epsilon: float | None
    knobs: list[float]  # the fairness knob values its trials sweep (empty: no knob)
    seeds: int
    trials: int
    steps: int | None  # per trial: a private method's noisy rounds (exact), else an estimate
    seconds: float | None  # estimated wall seconds of all its trials, from the bench table


@dataclass(frozen=True)
class Preflight:
    configs: list[PlannedConfig]
    warnings: list[str]

    @property
    def seconds(self) -> float:
        """Estimated seconds of the configurations the bench table times (`unestimated`
        counts the others)."""
        return sum(c.seconds for c in self.configs if c.seconds is not None)

    @property
    def unestimated(self) -> int:
        return sum(c.seconds is None for c in self.configs)


def preflight(specs: list[TrialSpec], seeds: list[int]) -> Preflight:
    """Calibrate every distinct private configuration of `specs` (raises a one-line
    `CalibrationError` naming method, dataset, epsilon and the smallest feasible epsilon) and
    collect the warnings a run should start with."""
    warnings = _seed_warnings(seeds)
    groups: dict[str, list[TrialSpec]] = {}
    for spec in specs:
        groups.setdefault(spec.config_key, []).append(spec)
    step_ms = step_milliseconds()
    configs, warned = [], set()
    for members in groups.values():
        spec = members[0]
        n_train = len(load_task(spec).train)
        for message in [*_data_warnings(spec, n_train), *_knob_warnings(members)]:
            if message not in warned:
                warned.add(message)
                warnings.append(message)
        steps = _steps(spec, n_train)
        per_step = step_ms.get(spec.method)
        seconds = None if steps is None or per_step is None else steps * per_step / 1e3
        knobs = sorted({s.knob for s in members if s.knob is not None})
        configs.append(
            PlannedConfig(
                spec.dataset,
                spec.label,
                spec.epsilon,
                knobs,
                len({s.seed for s in members}),
                len(members),
                steps,
                None if seconds is None else seconds * len(members),
            )
        )
    return Preflight(configs, warnings)


def _steps(spec: TrialSpec, n_train: int) -> int | None:
    """The trial's steps: the count of its most frequent planned release for a private method
    (calibrating it on the way, exact); epochs x n / batch for a non-private one (an
    estimate: a non-private method's loop is its own, shuffled or Poisson)."""
    if spec.epsilon is None:
        hparams = get_method(spec.method, **spec.hparams).hparams
        if not isinstance(hparams, TrainingHparams):
            return None
        return math.ceil(hparams.epochs * n_train / hparams.batch_size)
    plan = capture_plan(spec, spec.epsilon)
    counts = planned_releases(plan)
    return max(counts.values()) if counts else 0


def capture_plan(spec: TrialSpec, epsilon: float) -> PrivacyLedger:
    """The privacy plan the trial submits at `epsilon`; a `CalibrationError` when no
    calibration meets it, reworded to name the trial and the smallest feasible epsilon."""
    try:
        return plan_at(spec, epsilon)
    except CalibrationError as exc:
        floor = smallest_feasible_epsilon(spec, epsilon)
        fix = (
            f"it calibrates from epsilon {floor:.3g} up: raise epsilon, or change what the "
            "message names"
            if floor is not None
            else "no epsilon up to 1e4 calibrates: change what the message names"
        )
        raise CalibrationError(
            f"method {spec.label} on {spec.dataset} at epsilon {epsilon:g}: {exc}; {fix}"
        ) from None


def plan_at(spec: TrialSpec, epsilon: float) -> PrivacyLedger:
    return capture(spec, epsilon)[0]


def capture(spec: TrialSpec, epsilon: float) -> tuple[PrivacyLedger, Guarantee]:
    """The plan the trial submits at `epsilon` and the guarantee it submits it under (what its
    epsilon is a statement about): the method's declared plan (`Method.plan`, from public
    inputs) and guarantee, which the engine submits."""
    method = get_method(spec.method, **spec.hparams)
    fairness = FairnessSpec(spec.constraint, spec.knob, spec.constraint_definition)
    method.check(fairness)
    target = PrivacyBudget(epsilon, spec.delta)
    plan = method.plan(DataShape.of(load_task(spec)), target, fairness, spec.seed)
    return plan.ledger, method.guarantee()


def smallest_feasible_epsilon(spec: TrialSpec, infeasible: float) -> float | None:
    """An epsilon within 1% above the smallest at which the trial calibrates, found by
    doubling from `infeasible` then bisecting; None when even 1e4 is infeasible."""

    def feasible(eps: float) -> bool:
        try:
            plan_at(spec, eps)
        except CalibrationError:
            return False
        return True

    low, high = infeasible, infeasible * 2
    while not feasible(high):
        low, high = high, high * 2
        if high > 1e4:
            return None
    while (high - low) / high > 1e-2:
        mid = (low + high) / 2
        low, high = (low, mid) if feasible(mid) else (mid, high)
    return high


def _data_warnings(spec: TrialSpec, n_train: int) -> list[str]:
    out = []
    if spec.epsilon is not None and spec.delta >= 1 / n_train:
        out.append(
            f"delta = {spec.delta:g} is not below 1/n = {1 / n_train:.3g} for "
            f"{spec.dataset} ({n_train} training rows): a mechanism may then release a "
            "record outright; use delta << 1/n (e.g. 1e-5)"
        )
    batch = spec.hparams.get("batch_size")
    if isinstance(batch, int) and batch > n_train:
        out.append(
            f"method {spec.label}: batch_size {batch} exceeds the {n_train} training rows "
            f"of {spec.dataset}; every step is then a full batch (sampling rate 1)"
        )
    return out


def _knob_warnings(specs: list[TrialSpec]) -> list[str]:
    """A tolerance on rate gaps at 1 or more never binds: the trial runs unconstrained."""
    knob = method_class(specs[0].method).knob
    rates = specs[0].constraint != "bounded_group_loss" and specs[0].constraint_definition is None
    if not (knob and knob.rate_tolerance and rates):
        return []
    vacuous = sorted({s.knob for s in specs if s.knob is not None and s.knob >= 1})
    return [
        f"method {specs[0].label}: knob {knob.name} = {v:g} never binds "
        f"({specs[0].constraint} compares rates in [0, 1]), so those trials run "
        "unconstrained; use values below 1"
        for v in vacuous
    ]


def _seed_warnings(seeds: list[int]) -> list[str]:
    repeated = sorted(s for s, k in Counter(seeds).items() if k > 1)
    if not repeated:
        return []
    return [
        f"seeds {repeated} are listed more than once; each seed runs once "
        f"({len(set(seeds))} distinct seeds)"
    ]


def step_milliseconds() -> dict[str, float]:
    """Median ms per step by method from the bench table shipped with the package (Adult,
    CPU); empty when it is absent."""
    if not STEP_TIMES.is_file():
        return {}
    import pandas as pd

    table = pd.read_csv(STEP_TIMES)
    column = next(c for c in table.columns if c.startswith("ms"))
    return dict(zip(table["method"], table[column].astype(float), strict=True))


def describe_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def plan_rows(plan: Preflight) -> list[dict[str, object]]:
    """The `--dry-run` table's rows, JSON-ready."""
    return [
        {
            "dataset": c.dataset,
            "method": c.label,
            "epsilon": c.epsilon,
            "knobs": c.knobs,
            "seeds": c.seeds,
            "trials": c.trials,
            "steps_per_trial": c.steps,
            "estimated_seconds": c.seconds,
        }
        for c in plan.configs
    ]
