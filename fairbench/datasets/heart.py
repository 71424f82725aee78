"""BRFSS 2015 Heart Disease Health Indicators (Kaggle extract of the CDC survey; 253,680
rows): predict HeartDiseaseorAttack; sensitive attribute Sex (0 female, 1 male). RaCO-DP's
FNR-constraint dataset.

Preprocessing: the category codes GenHlth (1-5), Age (13 bands), Education (1-6), Income
(1-8) and Diabetes (0-2) are one-hot encoded; BMI, MentHlth and PhysHlth are standardised
with training statistics; the binary indicators are kept as 0/1. Sex is not an input unless
`include_sensitive: true`. `n_rows` takes a uniform subsample of that size first (seeded by
`subsample_seed`, not by the split seed) for quick runs; the full set is the default.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import Field

from fairbench.datasets.base import Dataset, DatasetOptions, build_task, one_hot, read_table
from fairbench.datasets.files import DataFile
from fairbench.task import Task

LABEL = "HeartDiseaseorAttack"
NUMERIC = ("BMI", "MentHlth", "PhysHlth")
CODES = {
    "GenHlth": range(1, 6),
    "Age": range(1, 14),
    "Education": range(1, 7),
    "Income": range(1, 9),
    "Diabetes": range(0, 3),
}
BINARY = (
    "HighBP",
    "HighChol",
    "CholCheck",
    "Smoker",
    "Stroke",
    "PhysActivity",
    "Fruits",
    "Veggies",
    "HvyAlcoholConsump",
    "AnyHealthcare",
    "NoDocbcCost",
    "DiffWalk",
)
COLUMNS = (LABEL, *NUMERIC, *CODES, *BINARY, "Sex")
SOURCE = "https://www.kaggle.com/datasets/alexteboul/heart-disease-health-indicators-dataset"


class HeartOptions(DatasetOptions):
    n_rows: int | None = Field(
        None, ge=100, description="uniform subsample of this many rows first (None: all)"
    )
    subsample_seed: int = Field(0, description="seed of that subsample (not the split seed)")
    include_sensitive: bool = Field(False, description="Sex is also a model input")


class Heart(Dataset):
    name = "heart"
    description = "BRFSS 2015 heart disease indicators (253,680 rows): heart disease, sex"
    version = "kaggle-2021"
    files = (
        DataFile(
            "heart/heart_disease_health_indicators_BRFSS2015.csv",
            "953fb23bb131736d7879539a071d3f6d1eaae8d4867ab05335d0ba89b94d5f99",
            SOURCE,
            direct=False,  # Kaggle needs a login
        ),
    )
    Options = HeartOptions
    options: HeartOptions

    def load(self, seed: int, root: Path | None = None) -> Task:
        ((name, path),) = self.locate(root).items()
        frame = read_table(path, self.name, COLUMNS)
        o = self.options
        if o.n_rows is not None and o.n_rows < len(frame):
            keep = np.random.default_rng(o.subsample_seed).choice(
                len(frame), o.n_rows, replace=False
            )
            frame = frame.iloc[np.sort(keep)].reset_index(drop=True)
        codes = frame[list(CODES)].astype(int).astype(str)
        categorical = one_hot(codes, {c: [str(v) for v in r] for c, r in CODES.items()})
        binary = frame[[*BINARY, *(["Sex"] if o.include_sensitive else [])]].astype(np.float32)
        return build_task(
            name=self.name,
            version=self.version,
            numeric=frame[list(NUMERIC)].astype(np.float64),
            categorical=categorical.join(binary),
            y=frame[LABEL].to_numpy().astype(np.int64),
            s=frame["Sex"].to_numpy().astype(np.int64),
            label_names=("no heart disease", "heart disease or attack"),
            group_names=("female", "male"),
            sensitive_name="Sex",
            seed=seed,
            sha256={name: self.files[0].sha256},
            preprocessing={"rows": len(frame), **o.model_dump()},
        )
