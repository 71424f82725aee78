"""A generated classification task with a known fairness structure, for tests and quick runs.

Groups differ in their label base rate (so an accurate classifier has a demographic-parity
gap to trade off) and in the mean of one proxy feature, the last, which carries no label
information beyond the group. An unconstrained model learns to use the proxy against the
minority; a constrained one can re-weight it and recover parity at a moderate cost. Fully
determined by `data_seed`; the trial seed only fixes the split. No file is read.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import Field

from fairbench.datasets.base import Dataset, DatasetOptions, build_task
from fairbench.task import Task


class SyntheticOptions(DatasetOptions):
    n_rows: int = Field(4000, ge=40)
    n_features: int = Field(10, ge=2)
    n_groups: int = Field(2, ge=2)
    minority_fraction: float = Field(0.3, gt=0, lt=1)  # share of rows outside group 0
    group_shift: float = Field(2.5, ge=0)  # proxy-feature mean of minority groups
    base_rate_gap: float = Field(2.5, ge=0)  # logit offset between group 0 and the others
    label_noise: float = Field(0.5, ge=0)
    data_seed: int = 0


class Synthetic(Dataset):
    name = "synthetic"
    description = "generated task with group-dependent shift and base rates (no file needed)"
    version = "1"
    Options = SyntheticOptions
    options: SyntheticOptions

    def load(self, seed: int, root: Path | None = None) -> Task:
        o = self.options
        rng = np.random.default_rng(o.data_seed)
        others = np.full(o.n_groups - 1, o.minority_fraction / (o.n_groups - 1))
        s = rng.choice(o.n_groups, size=o.n_rows, p=[1 - o.minority_fraction, *others])
        w = rng.normal(size=o.n_features - 1)
        w /= np.linalg.norm(w)
        X = rng.normal(size=(o.n_rows, o.n_features))
        X[:, -1] += o.group_shift * (s > 0)  # the proxy: group membership, no label signal
        signal = 2.0 * X[:, :-1] @ w
        logit = signal - o.base_rate_gap * (s > 0) + o.label_noise * rng.normal(size=o.n_rows)
        y = (logit > 0).astype(np.int64)
        return build_task(
            name=self.name,
            version=self.version,
            numeric=pd.DataFrame(X, columns=[f"x{i}" for i in range(o.n_features)]),
            categorical=pd.DataFrame(index=range(o.n_rows)),
            y=y,
            s=s,
            label_names=("negative", "positive"),
            group_names=tuple(f"group{g}" for g in range(o.n_groups)),
            sensitive_name="group",
            seed=seed,
            sha256={},
            preprocessing=o.model_dump(),
        )
