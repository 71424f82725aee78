"""fairbench's erm, dp-sgd, dpsgd-f and dpsgd-global-adapt on the fair-dp authors' Adult split
(written by export_split.py), at their adult_script.sh settings. One JSON line per method.

    python parity/fair_dp/fairbench_side.py SPLIT.npz SEED EPOCHS [METHOD ...]

Settings: batch 256, EPOCHS epochs (theirs 20: 92 steps each at q = 256 / 23,484, 1,840 in
all), sigma 1 (`calibrate: steps` with `max_steps` 92 EPOCHS and a target epsilon above what
those steps spend, so the run stops at their step count and its ledger states what it
spent), delta 1e-6, their learning rates (0.01; 0.2 for Global-Adapt), clip 0.5, count
noise 10, Z_0 50, lr_Z 0.1, threshold 1. Model: the suite's `mlp` with one hidden layer of
256 ReLU units (theirs: two of 256, tanh); erm is the non-private twin (same lr, batch,
epochs, model). Their code has no validation split at these settings (it validates on the
test split), so the Task's `val` is the test split too; none of these methods reads it.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np

from fairbench import constraints
from fairbench.datasets import get_dataset
from fairbench.methods import FairnessSpec, get_method
from fairbench.privacy import PrivacyBudget
from fairbench.runner.trial import evaluate
from fairbench.task import Provenance, Split, Task

DP = "demographic_parity"
DELTA = 1e-6
BATCHES = 92  # per epoch: their len(train_loader), 23,484 / 256 rounded up
TARGET = 20.0  # above what 1,840 steps at sigma 1 spend, so max_steps binds
MODEL = {"model": "mlp", "hidden": 256, "batch_size": 256}
PRIVATE = {"calibrate": "steps", "noise_multiplier": 1.0}
HPARAMS: dict[str, dict[str, Any]] = {
    "erm": {**MODEL, "lr": 0.01},
    "dp-sgd": {**MODEL, **PRIVATE, "lr": 0.01, "clip_norm": 0.5},
    "dpsgd-f": {**MODEL, **PRIVATE, "lr": 0.01, "base_clip": 0.5, "count_noise_multiplier": 10},
    "dpsgd-global-adapt": {
        **MODEL,
        **PRIVATE,
        "lr": 0.2,
        "clip_norm": 0.5,
        "initial_bound": 50.0,
        "count_noise_multiplier": 10,
        "lr_bound": 0.1,
        "threshold": 1.0,
    },
}


def authors_task(path: str, seed: int) -> Task:
    """The Task of an exported split (features as their loader made them)."""
    arrays = np.load(path)

    def part(name: str) -> Split:
        return Split(
            X=np.ascontiguousarray(arrays[f"X_{name}"], dtype=np.float32),
            y=arrays[f"y_{name}"].astype(np.int64),
            s=arrays[f"s_{name}"].astype(np.int64),
        )

    test = part("test")
    adult = get_dataset("adult")
    return Task(
        name="adult (fair-dp authors' split)",
        train=part("train"),
        val=test,
        test=test,
        feature_names=tuple(f"x{i}" for i in range(arrays["X_train"].shape[1])),
        label_names=("<=50K", ">50K"),
        group_names=("Male", "Female"),
        sensitive_name="sex",
        provenance=Provenance(
            dataset="adult",
            version=adult.version,
            sha256={f.path: f.sha256 for f in adult.files},
            preprocessing={"split": "fair-dp authors' loader (export_split.py)"},
            split_seed=seed,
        ),
    )


def main(path: str, seed: int, epochs: int, methods: list[str]) -> None:
    task = authors_task(path, seed)
    rate_set = constraints.build(DP, None, 2, task.n_groups, 0.0)
    for name in methods:
        start = time.time()
        hparams = {**HPARAMS[name], "epochs": float(epochs)}
        if "calibrate" in hparams:
            hparams["max_steps"] = BATCHES * epochs
        method = get_method(name, **hparams)
        budget = PrivacyBudget(TARGET, DELTA) if method.private else None
        fitted = method.fit(task, budget, FairnessSpec(DP), seed)
        scores = evaluate(fitted, task.test, task, rate_set, True)
        row = {
            "method": name,
            "seed": seed,
            "epochs": epochs,
            "accuracy": 1 - scores["error"],
            "group_accuracy": [1 - e for e in scores["group_error"]],
            "epsilon": fitted.ledger.epsilon(DELTA) if method.private else None,
            "steps": fitted.info.get("steps"),
            "seconds": time.time() - start,
        }
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:] or list(HPARAMS))
