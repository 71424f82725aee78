"""`fairbench verify`: does today's code reproduce a run's results, bit for bit?

A committed figure is a promise that its command produces it. `verify` re-runs a stratified
sample of a run directory's finished trials (from its store, or the trials.csv a figure
commits) from their recorded specs, with today's code, in a temporary folder, and compares
what identifies a result exactly: the test and validation predictions' fingerprints and the
epsilon spent (its ledger's, to the last digit). A row whose recorded spec no longer hashes
to its trial id, or whose noise came from the operating system's entropy (`secure_noise`),
cannot be re-run and is reported as such, as is a row written before the fingerprints
were recorded (nothing to compare with).

The sample takes every (method label, epsilon, dataset) group of the run in turn, trials in
a seeded random order within each, so that every method and budget is represented however
small the sample. A sampled trial is re-run in the stack the run trained it in (a trial's
numbers depend on its stack-mates within float32 reduction order: `runner.stacking`): its
whole stack, cut from every finished trial of the run as the run cut it, runs again, and
only the sampled trials are compared.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fairbench.rundir.store import finished_rows
from fairbench.runner.execute import execute
from fairbench.runner.stacking import work_units
from fairbench.runner.trial import NOISE_SAMPLERS, TrialSpec

FINGERPRINTS = ("test_predictions_sha256", "val_predictions_sha256")
COMPARED = (*FINGERPRINTS, "epsilon_spent")


@dataclass(frozen=True)
class Check:
    """One re-run trial: `differences` maps each compared field that changed to (committed,
    now); `problem` says why a trial could not be re-run (then nothing was compared)."""

    trial_id: str
    label: str
    epsilon: float | None
    differences: dict[str, tuple[Any, Any]]
    problem: str | None = None

    @property
    def identical(self) -> bool:
        return self.problem is None and not self.differences


def spec_of(row: dict[str, Any]) -> TrialSpec:
    """The trial spec a stored row records (the inverse of the row's spec columns)."""
    return TrialSpec(
        dataset=row["dataset"],
        dataset_options=dict(row["dataset_options"] or {}),
        method=row["method"],
        label=row["label"],
        hparams=dict(row["hparams"] or {}),
        constraint=row["constraint"],
        knob=_number(row["knob"]),
        epsilon=_epsilon(row["epsilon"]),
        delta=float(row["delta"]),
        seed=int(row["seed"]),
        device=row.get("device") or "cpu",
        constraint_definition=_definition(row.get("constraint_definition")),
    )


def _number(value: Any) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else value


def _epsilon(value: Any) -> float | None:
    number = _number(value)
    return None if number is None or math.isinf(number) else float(number)


def _definition(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def sample(rows: list[dict[str, Any]], size: int, seed: int = 0) -> list[dict[str, Any]]:
    """`size` rows (all when fewer), taken round-robin over the (label, epsilon, dataset)
    groups, each group in a seeded random order."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: r["trial_id"]):
        groups.setdefault((row["label"], str(row["epsilon"]), row["dataset"]), []).append(row)
    rng = np.random.default_rng(seed)
    queues = [
        [members[i] for i in rng.permutation(len(members))] for _, members in sorted(groups.items())
    ]
    out: list[dict[str, Any]] = []
    while len(out) < min(size, len(rows)):
        for queue in queues:
            if queue and len(out) < size:
                out.append(queue.pop(0))
    return out


def verify(run_dir: Path, size: int, seed: int = 0, workers: int = 1) -> list[Check]:
    """Re-run `size` sampled trials of `run_dir` and compare each with its stored row."""
    all_rows = finished_rows(run_dir, "verify")
    rows = sample(all_rows, size, seed)
    checks: dict[str, Check] = {}
    runnable: dict[str, tuple[dict[str, Any], TrialSpec]] = {}
    for row in rows:
        spec = spec_of(row)
        problem = None
        missing = [f for f in FINGERPRINTS if f not in row or _number(row[f]) is None]
        if missing:
            problem = (
                f"its row has no {', '.join(missing)} (written before fairbench recorded it): "
                "re-run the figure"
            )
        elif (row.get("info") or {}).get("noise_sampler") == NOISE_SAMPLERS[True]:
            problem = "its noise came from the operating system's entropy (secure_noise)"
        elif spec.trial_id != row["trial_id"]:
            problem = f"its recorded spec hashes to {spec.trial_id}, not its trial id"
        if problem is None:
            runnable[row["trial_id"]] = (row, spec)
        else:
            checks[row["trial_id"]] = Check(
                row["trial_id"], row["label"], spec.epsilon, {}, problem
            )
    with tempfile.TemporaryDirectory(prefix="fairbench-verify-") as work:
        done = execute(stacks_of(all_rows, set(runnable)), Path(work), workers, quiet=True)
        failed = dict(done.failed)
        now = {r["trial_id"]: r for r in finished_rows(Path(work), "verify")} if done.done else {}
    for trial_id, (row, spec) in runnable.items():
        if trial_id in failed:
            why = failed[trial_id].splitlines()[-1]
            checks[trial_id] = Check(trial_id, row["label"], spec.epsilon, {}, f"failed: {why}")
            continue
        fresh = now[trial_id]
        differences = {
            field: (row[field], fresh[field])
            for field in COMPARED
            if not _same(row[field], fresh[field])
        }
        checks[trial_id] = Check(trial_id, row["label"], spec.epsilon, differences)
    return [checks[row["trial_id"]] for row in rows]


def stacks_of(rows: list[dict[str, Any]], sampled: set[str]) -> list[TrialSpec]:
    """Every trial of the stacks (`work_units` of all the run's finished trials that can be
    re-run) that hold a `sampled` trial id."""
    specs = [spec_of(row) for row in rows]
    runnable = [s for s, row in zip(specs, rows, strict=True) if s.trial_id == row["trial_id"]]
    return [
        s for unit in work_units(runnable) if sampled & {u.trial_id for u in unit} for s in unit
    ]


def _same(committed: Any, now: Any) -> bool:
    if isinstance(committed, float) and isinstance(now, float):
        return committed == now or (math.isnan(committed) and math.isnan(now))
    return committed == now
