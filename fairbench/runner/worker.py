"""What runs where trials are sent (a pool process, a Dask task): the trials themselves, with
failures turned into messages. Shared by both executors, so neither imports the other."""

from __future__ import annotations

import traceback

import torch

from fairbench.errors import FairbenchError
from fairbench.methods import FairnessSpec, get_method
from fairbench.methods.plan import DataShape
from fairbench.privacy import PrivacyBudget
from fairbench.rundir.row import TrialRow
from fairbench.runner.lifeline import die_with_parent, ignore_interrupts
from fairbench.runner.trial import TrialSpec, load_task, run_stack, run_trial


def single_threaded() -> None:
    torch.set_num_threads(1)  # workers are the parallelism; avoid oversubscribing cores


def init_worker() -> None:
    """Pool process initializer: Ctrl-C is the parent's to handle, and the process ends with
    its parent (`runner.lifeline`)."""
    ignore_interrupts()
    die_with_parent()
    single_threaded()


def failure_message(exc: BaseException) -> str:
    if isinstance(exc, FairbenchError):
        return f"{type(exc).__name__}: {exc}"
    return "".join(traceback.format_exception(exc)).strip()


def run_unit(specs: list[TrialSpec]) -> list[tuple[TrialSpec, TrialRow | None, str | None]]:
    """Run one work unit (`runner.stacking.work_units`: one trial, or a stack) where this is
    called: (spec, result, None) or (spec, None, error) for each trial. A stack's trials that
    cannot be planned (a tune's draw whose noise cannot be calibrated at its epsilon: a
    function of its spec) fail alone and the others still stack; a stack that fails
    otherwise is re-run one trial at a time, so that each error names its own trial and the
    others still finish."""
    single_threaded()
    out: list[tuple[TrialSpec, TrialRow | None, str | None]] = []
    if len(specs) > 1:
        refused = {s.trial_id: why for s in specs if (why := plan_refusal(s)) is not None}
        out = [(s, None, refused[s.trial_id]) for s in specs if s.trial_id in refused]
        specs = [s for s in specs if s.trial_id not in refused]
    if len(specs) > 1:
        try:
            return out + [(s, row, None) for s, row in zip(specs, run_stack(specs), strict=True)]
        except Exception:  # attributed below
            pass
    for spec in specs:
        try:
            out.append((spec, run_trial(spec), None))
        except Exception as exc:  # a failed trial is reported, the unit goes on
            out.append((spec, None, failure_message(exc)))
    return out


def plan_refusal(spec: TrialSpec) -> str | None:
    """Why the trial's method cannot plan it (public inputs only: its calibration, cached
    for the fit), or None."""
    try:
        method = get_method(spec.method, **spec.hparams)
        privacy = None if spec.epsilon is None else PrivacyBudget(spec.epsilon, spec.delta)
        fairness = FairnessSpec(spec.constraint, spec.knob, spec.constraint_definition)
        method.check(fairness)
        method.plan(DataShape.of(load_task(spec)), privacy, fairness, spec.seed)
    except FairbenchError as exc:
        return failure_message(exc)
    return None


def run_units(units: list[list[TrialSpec]]) -> list[tuple[TrialSpec, TrialRow | None, str | None]]:
    """Several work units in turn (a remote task of a distributed executor)."""
    return [result for unit in units for result in run_unit(unit)]
