"""fairbench's half of the parity harness (runs in fairbench's environment, public API only).

- `write_processed_parkinsons`: the Parkinsons file both authors' codes read
  (`parkinsons_updrs_processed.csv`), rebuilt from fairbench's own checksummed UCI file and
  checked byte for byte against its published sha256, so no authors' data file is needed.
- `task_from_split`: the `fairbench.task.Task` of a parity split file: its rows, the authors'
  label rule (total_UPDRS above the median of all 5,875 recordings, as in the processed file),
  group 0 male / 1 female, the 19 inputs z-scored with the mean and standard deviation (ddof 1)
  of the parts the file names (train + validation, as their loaders do). It refuses to return
  a task whose labels, groups or feature digest differ from what the file says.
- `run_port`: fairbench's method on that task through `Method.fit`, with its final test
  predictions, steps and epsilon (from the trial's own ledger).
- `epsilon_of_schedule`: fairbench's accountant on a schedule given by its parameters (used
  for the authors' schedule).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from dp_accounting import dp_event

from fairbench.datasets import get_dataset
from fairbench.datasets.parkinsons import VOICE
from fairbench.methods import get_method
from fairbench.methods.trial import FairnessSpec
from fairbench.privacy import PrivacyBudget, epsilon
from fairbench.privacy.events import sgd_steps
from fairbench.task import Provenance, Split, Task
from parity import protocol

# the authors' processed columns: age, test time and motor UPDRS, then the voice measures
INPUTS = ("age", "test_time", "motor_UPDRS", *VOICE)
GROUPS = ("Male", "Female")  # the processed file's values of sex 0 and 1


class ParityError(RuntimeError):
    """The two sides do not see the same data."""


def parkinsons_raw(root: Path | None = None) -> tuple[pd.DataFrame, Path]:
    """fairbench's UCI Parkinsons file (verified by the adapter's checksum) and its path."""
    ((_, path),) = get_dataset("parkinsons").locate(root).items()
    return pd.read_csv(path), path


def processed_parkinsons(raw: pd.DataFrame) -> pd.DataFrame:
    """The DP-FERMI repository's derivation: drop subject#, sex 0/1 -> Male/Female,
    total_UPDRS -> Yes above the median of all rows, No otherwise."""
    out = raw.drop(columns=["subject#"]).copy()
    out["sex"] = raw["sex"].map(dict(enumerate(GROUPS)))
    out["total_UPDRS"] = np.where(raw["total_UPDRS"] > np.median(raw["total_UPDRS"]), "Yes", "No")
    return out


def write_processed_parkinsons(out_dir: Path, root: Path | None = None) -> Path:
    """Write `parkinsons_updrs_processed.csv` into `out_dir`; raise unless it is the authors'
    file byte for byte."""
    raw, _ = parkinsons_raw(root)
    path = Path(out_dir) / protocol.PARKINSONS_PROCESSED
    path.parent.mkdir(parents=True, exist_ok=True)
    processed_parkinsons(raw).to_csv(path, index=False)
    if protocol.sha256_file(path) != protocol.PARKINSONS_PROCESSED_SHA256:
        raise ParityError(f"{path}: not the authors' processed Parkinsons file (sha256 differs)")
    return path


def task_from_split(
    split: dict[str, Any], raw: pd.DataFrame, source: str = "parkinsons", tol: float = 1e-4
) -> Task:
    """The Task of a parity split file (see the module docstring); raises ParityError where the
    rebuilt labels, groups or features differ from the file's."""
    names = split["feature_names"]
    if sorted(names) != sorted(INPUTS):
        raise ParityError(f"split file: features {names}, expected the 19 Parkinsons inputs")
    values = raw[names].to_numpy(dtype=np.float64)
    label = (raw["total_UPDRS"] > np.median(raw["total_UPDRS"])).to_numpy(dtype=np.int64)
    group = raw["sex"].to_numpy(dtype=np.int64)
    rows = {p: np.asarray(split["rows"][p], dtype=np.int64) for p in protocol.PARTS}
    pool = np.concatenate([rows[p] for p in split["standardised_with"]])
    mean, std = values[pool].mean(axis=0), values[pool].std(axis=0, ddof=1)
    X = ((values - mean) / std).astype(np.float32)

    problems = []
    for part in protocol.PARTS:
        r = rows[part]
        if not np.array_equal(label[r], split["y"][part]):
            problems.append(f"{part}: labels differ on {(label[r] != split['y'][part]).sum()} rows")
        index = split["group_maps"].get(part, {})
        theirs = np.asarray(split["s"][part], dtype=np.int64)
        if len(r) and not np.array_equal([index[GROUPS[g]] for g in group[r]], theirs):
            problems.append(f"{part}: groups differ")
        digest = protocol.feature_digest(X[r], names)
        problems += [
            f"{part}: {m}" for m in protocol.digest_mismatches(digest, split["digest"][part], tol)
        ]
    if problems:
        raise ParityError("the rebuilt task is not the authors': " + "; ".join(problems[:5]))

    def part(p: str) -> Split:
        return Split(X=np.ascontiguousarray(X[rows[p]]), y=label[rows[p]], s=group[rows[p]])

    median = float(np.median(raw["total_UPDRS"]))
    return Task(
        name=f"{source} (authors' split)",
        train=part("train"),
        val=part("val"),
        test=part("test"),
        feature_names=tuple(names),
        label_names=(f"total_UPDRS <= {median:.3f}", f"total_UPDRS > {median:.3f}"),
        group_names=("male", "female"),
        sensitive_name="sex",
        provenance=Provenance(
            dataset="parkinsons",
            version=get_dataset("parkinsons").version,
            sha256={"parkinsons_updrs.data": get_dataset("parkinsons").files[0].sha256},
            preprocessing={
                "split": "injected from a parity split file",
                "threshold": median,
                "threshold_from": "all rows (authors' file)",
                "standardised_with": list(split["standardised_with"]),
                "std_ddof": 1,
            },
            split_seed=int(split["source"].get("fold", split["source"].get("seed", 0)) or 0),
        ),
    )


def run_port(
    method: str,
    hparams: dict[str, Any],
    task: Task,
    *,
    knob: float,
    seed: int,
    target_epsilon: float,
    delta: float,
    constraint: str = "demographic_parity",
) -> dict[str, Any]:
    """Train fairbench's `method` on `task` with `Method.fit`; the final model's test
    predictions, error and gap, steps, and epsilon from the trial's ledger."""
    started = time.time()
    fitted = get_method(method, **hparams).fit(
        task, PrivacyBudget(target_epsilon, delta), FairnessSpec(constraint, knob), seed
    )
    pred = fitted.predict(task.test.X)
    error, gap = protocol.error_and_gap(task.test.y, task.test.s, pred)
    return {
        "pred": pred,
        "test_error": error,
        "test_gap": gap,
        "steps": int(fitted.budget.steps),
        "sampling_rate": fitted.budget.sampling_rate,
        "noise": dict(fitted.budget.noise),
        "epsilon": float(fitted.ledger.epsilon(delta)),
        "notion": fitted.privacy_notion,
        "info": {k: v for k, v in fitted.info.items() if isinstance(v, int | float | str)},
        "lambda": fitted.info.get("lambda"),
        "wall_seconds": time.time() - started,
    }


def epsilon_of_schedule(
    sampling_rate: float,
    noise_multiplier: float,
    steps: int,
    delta: float,
    laplace_scale: float | None = None,
    extra: list[dp_event.DpEvent] | None = None,
) -> float:
    """fairbench's accountant on `steps` Poisson-sampled rounds of one Gaussian sum (and a
    Laplace histogram, as RaCO-DP releases, when `laplace_scale` is given), composed with
    `extra` events."""
    event = sgd_steps(sampling_rate, noise_multiplier, steps, laplace_scale)
    if extra:
        event = dp_event.ComposedDpEvent([event, *extra])
    return epsilon(event, delta)


def fermi_schedule_epsilons(schedule: dict[str, Any]) -> dict[str, float]:
    """fairbench's accountant (add/remove-one neighbours) on the DP-FERMI script's schedule, as
    coded: per update, theta's noisy sum of per-record gradients of (loss + lambda psi) / B,
    each clipped to L (so one record moves it by at most L: noise multiplier std_theta / L),
    and W's noisy, unclipped sum of lambda grad_W psi / B, which |W| <= C and the exact share
    p_0 of group 0 bound by lambda (2 C + 2 / sqrt(p_0)) / B. Two readings of the sampling:
    `fairbench` each record is in at most one released batch per epoch (shuffled fixed-size
    batches; no amplification is claimed, so this bound holds whatever the order);
    `fairbench_if_poisson` the same updates as if batches were Poisson at q = B / n (they are
    not; shown as the optimistic reference)."""
    n, batch = schedule["n_train"], schedule["batch_size"]
    share0 = schedule["group_counts"][0] / n
    releases = [dp_event.GaussianDpEvent(schedule["std_theta"] / schedule["lipschitz_theta"])]
    if schedule["lambda"] > 0:
        bound = schedule["lambda"] * (2 * schedule["C"] + 2 / np.sqrt(share0)) / batch
        releases.append(dp_event.GaussianDpEvent(schedule["std_W"] / bound))
    update = dp_event.ComposedDpEvent(releases)
    delta = schedule["delta"]
    per_epoch = dp_event.SelfComposedDpEvent(update, schedule["epochs"])
    poisson = dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(batch / n, update), schedule["updates"]
    )
    return {"fairbench": epsilon(per_epoch, delta), "fairbench_if_poisson": epsilon(poisson, delta)}
