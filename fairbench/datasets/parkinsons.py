"""UCI Parkinsons Telemonitoring (Tsanas & Little 2009): 5,875 voice recordings of 42
subjects; sensitive attribute sex (0 male, 1 female).

Two tasks:
- `task: classification` (default, as prior work): is total_UPDRS above the median of the
  *training* split? The median is a statistic of training data computed without privacy, as
  prior work does (documented exception).
- `task: regression`: total_UPDRS itself (DPSE's real regression task).

Inputs are the other 19 columns: age, test_time, motor_UPDRS and the 16 voice measures.
motor_UPDRS is a component of total_UPDRS and makes the classification easy (prior work
reports ~0.95 accuracy with it); `drop_motor: true` removes it. The subject id is never an
input. All inputs are standardised with training statistics.

`split: rows` (default, prior work) splits recordings at random, stratified, so one subject's
recordings land in several parts. `split: subject` keeps each subject in one part and avoids
that leakage; with only 14 female subjects a part may then lack a group, which is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field

from fairbench.datasets.base import (
    Dataset,
    DatasetOptions,
    build_task,
    read_table,
    stratified_split,
    unit_split,
)
from fairbench.datasets.files import DataFile
from fairbench.task import Task

UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/parkinsons/telemonitoring"
VOICE = (
    "Jitter(%)",
    "Jitter(Abs)",
    "Jitter:RAP",
    "Jitter:PPQ5",
    "Jitter:DDP",
    "Shimmer",
    "Shimmer(dB)",
    "Shimmer:APQ3",
    "Shimmer:APQ5",
    "Shimmer:APQ11",
    "Shimmer:DDA",
    "NHR",
    "HNR",
    "RPDE",
    "DFA",
    "PPE",
)
COLUMNS = ("subject#", "age", "sex", "test_time", "motor_UPDRS", "total_UPDRS", *VOICE)


class ParkinsonsOptions(DatasetOptions):
    task: Literal["classification", "regression"] = Field(
        "classification",
        description="classification (total_UPDRS above the training median) or regression",
    )
    split: Literal["rows", "subject"] = Field(
        "rows", description="rows (prior work) or subject (each subject's recordings in one part)"
    )
    drop_motor: bool = Field(False, description="remove motor_UPDRS from the inputs")


class Parkinsons(Dataset):
    name = "parkinsons"
    description = "UCI Parkinsons telemonitoring (5,875 rows, 42 subjects): total UPDRS, sex"
    version = "uci-2009"
    files = (
        DataFile(
            "parkinsons/parkinsons_updrs.data",
            "f2c7d5025dec4e92e7feae367a5f7ccf58789a10ac6b54bdf15976c599f9dd39",
            f"{UCI}/parkinsons_updrs.data",
        ),
    )
    Options = ParkinsonsOptions
    options: ParkinsonsOptions

    def load(self, seed: int, root: Path | None = None) -> Task:
        ((name, path),) = self.locate(root).items()
        frame = read_table(path, self.name, COLUMNS)
        o = self.options
        inputs = ["age", "test_time", *([] if o.drop_motor else ["motor_UPDRS"]), *VOICE]
        target = frame["total_UPDRS"].to_numpy(dtype=np.float64)
        s = frame["sex"].to_numpy()
        # split first (the label threshold depends on the training part): recordings stratified
        # on sex, or whole subjects within each sex
        if o.split == "subject":
            split = unit_split(frame["subject#"].to_numpy(), s, seed)
        else:
            split = stratified_split(s, seed)
        preprocessing = {
            "rows": len(frame),
            **o.model_dump(),
            "split": "by subject" if o.split == "subject" else "stratified on group",
        }
        labels: tuple[str, ...]
        if o.task == "regression":
            y, labels = target, ()
        else:
            median = float(np.median(target[split[0]]))
            preprocessing["threshold"] = median
            y = (target > median).astype(np.int64)
            labels = (f"total_UPDRS <= {median:.3f}", f"total_UPDRS > {median:.3f}")
        return build_task(
            name=self.name,
            version=self.version,
            numeric=frame[inputs].astype(np.float64),
            categorical=pd.DataFrame(index=frame.index),
            y=y,
            s=s,
            label_names=labels,
            group_names=("male", "female"),
            sensitive_name="sex",
            seed=seed,
            sha256={name: self.files[0].sha256},
            preprocessing=preprocessing,
            split=split,
        )
