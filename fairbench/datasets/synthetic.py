"""Generated tasks with a known group structure, for tests, quick runs and DPSE's mixtures.

Classification (default). Groups differ in their label base rate, so an accurate classifier
has a demographic-parity gap to trade off. They also differ in the mean of one proxy feature,
the last, which carries no label information beyond the group. An unconstrained model learns
to use the proxy against the minority; a constrained one can re-weight it and recover parity
at a moderate cost. `intercept` moves the overall positive rate (label imbalance).

Regression (`task: regression`): DPSE's ordinary-least-squares mixture. For group k,
Y = X beta_k + N(0, noise_k^2), with every coefficient of beta_k equal to `slopes[k]` (the
paper's scalar slopes, e.g. (-10, 10)) and X ~ N(0, I).

Group sizes: `group_sizes` gives each group's rows exactly (e.g. [10000, 2000, 1000, 500, 500]);
otherwise `n_rows` rows are drawn with `minority_fraction` shared by the non-first groups.
Everything is fixed by `data_seed`; the trial seed only fixes the split. No file is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field, model_validator

from fairbench.datasets.base import Dataset, DatasetOptions, build_task
from fairbench.task import Task


class SyntheticOptions(DatasetOptions):
    task: Literal["classification", "regression"] = Field(
        "classification", description="classification or regression"
    )
    n_rows: int = Field(
        4000, ge=40, description="rows in all (split over groups by minority_fraction)"
    )
    n_features: int = Field(
        10, ge=1, description="features; in classification the last is the group proxy"
    )
    n_groups: int = Field(2, ge=2, description="number of groups")
    group_sizes: list[int] | None = Field(
        None, description="exact rows per group; overrides n_rows, n_groups, minority_fraction"
    )
    minority_fraction: float = Field(0.3, gt=0, lt=1, description="share of rows outside group 0")
    group_shift: float = Field(
        2.5, ge=0, description="classification: proxy-feature mean of the non-first groups"
    )
    base_rate_gap: float = Field(
        2.5, ge=0, description="classification: logit offset of the non-first groups"
    )
    intercept: float = Field(0.0, description="classification: shifts the overall positive rate")
    label_noise: float = Field(0.5, ge=0, description="classification: logit noise std")
    slopes: list[float] | None = Field(
        None, description="regression: per-group coefficient (default 1 each)"
    )
    noise: list[float] | None = Field(
        None, description="regression: per-group noise std (default 1 each)"
    )
    data_seed: int = Field(
        0, description="seed of the generated data (the trial seed fixes only the split)"
    )

    @model_validator(mode="after")
    def _consistent(self):
        k = len(self.group_sizes) if self.group_sizes is not None else self.n_groups
        if self.group_sizes is not None and (k < 2 or min(self.group_sizes) < 10):
            raise ValueError("group_sizes needs at least 2 groups of at least 10 rows")
        for name in ("slopes", "noise"):
            value = getattr(self, name)
            if value is not None and self.task != "regression":
                raise ValueError(f"{name} applies to task: regression only")
            if value is not None and len(value) != k:
                raise ValueError(f"{name} needs one value per group ({k})")
        if self.task == "classification" and self.n_features < 2:
            raise ValueError("classification needs n_features >= 2 (one is the group proxy)")
        return self


class Synthetic(Dataset):
    name = "synthetic"
    description = "generated groups: classification with a proxy, or DPSE's OLS mixtures"
    version = "2"
    Options = SyntheticOptions
    options: SyntheticOptions

    def load(self, seed: int, root: Path | None = None) -> Task:
        o = self.options
        rng = np.random.default_rng(o.data_seed)
        if o.group_sizes is not None:
            s = np.repeat(np.arange(len(o.group_sizes)), o.group_sizes)
            n_groups = len(o.group_sizes)
        else:
            n_groups = o.n_groups
            others = np.full(n_groups - 1, o.minority_fraction / (n_groups - 1))
            s = rng.choice(n_groups, size=o.n_rows, p=[1 - o.minority_fraction, *others])
        n = len(s)
        X = rng.normal(size=(n, o.n_features))
        if o.task == "regression":
            slopes = np.asarray(o.slopes if o.slopes is not None else np.ones(n_groups))
            noise = np.asarray(o.noise if o.noise is not None else np.ones(n_groups))
            y = slopes[s] * X.sum(axis=1) + noise[s] * rng.normal(size=n)
            labels: tuple[str, ...] = ()
        else:
            w = rng.normal(size=o.n_features - 1)
            w /= np.linalg.norm(w)
            X[:, -1] += o.group_shift * (s > 0)  # the proxy: group membership, no label signal
            logit = (
                2.0 * X[:, :-1] @ w
                + o.intercept
                - o.base_rate_gap * (s > 0)
                + o.label_noise * rng.normal(size=n)
            )
            y = (logit > 0).astype(np.int64)
            labels = ("negative", "positive")
        return build_task(
            name=self.name,
            version=self.version,
            numeric=pd.DataFrame(X, columns=[f"x{i}" for i in range(o.n_features)]),
            categorical=pd.DataFrame(index=range(n)),
            y=y,
            s=s,
            label_names=labels,
            group_names=tuple(f"group{g}" for g in range(n_groups)),
            sensitive_name="group",
            seed=seed,
            sha256={},
            preprocessing=o.model_dump(),
        )
