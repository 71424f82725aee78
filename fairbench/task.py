"""The `Task`: what every method receives, whatever dataset it came from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Split:
    """One split of a classification task: features, label and sensitive attribute."""

    X: np.ndarray  # (n, d) float32
    y: np.ndarray  # (n,) int64 in [0, n_classes); float64 targets for regression tasks
    s: np.ndarray  # (n,) int64 in [0, n_groups)

    def __post_init__(self) -> None:
        n = len(self.X)
        if self.X.ndim != 2 or self.y.shape != (n,) or self.s.shape != (n,):
            raise ValueError(
                f"inconsistent split shapes X={self.X.shape} y={self.y.shape} s={self.s.shape}"
            )

    def __len__(self) -> int:
        return len(self.y)


@dataclass(frozen=True)
class Provenance:
    """Where a task came from, precisely enough to rebuild it."""

    dataset: str
    version: str
    sha256: dict[str, str]  # file name -> checksum of the raw file read
    preprocessing: dict[str, Any]
    split_seed: int


@dataclass(frozen=True)
class Task:
    """A preprocessed, split task (train / validation / test): classification, or regression
    (no label names, float targets)."""

    name: str
    train: Split
    val: Split
    test: Split
    feature_names: tuple[str, ...]
    label_names: tuple[str, ...]
    group_names: tuple[str, ...]
    sensitive_name: str
    provenance: Provenance

    @property
    def n_features(self) -> int:
        return self.train.X.shape[1]

    @property
    def kind(self) -> str:
        return "classification" if self.label_names else "regression"

    @property
    def n_classes(self) -> int:
        return len(self.label_names)

    @property
    def n_groups(self) -> int:
        return len(self.group_names)
