"""Training-set subsampling for small-data regimes (`n_train`, an option of every adapter).

Privacy costs most where data are few, so the benchmark needs, e.g., Adult with 2,000 or 5,000
training rows. The subsample is drawn from the training part of the standard split, after
that split, so validation and test stay exactly those of the full task: error and violation
are measured on the same held-out records whatever `n_train` is, and curves at different
`n_train` differ only by the training data.
"""

from __future__ import annotations

import numpy as np

from fairbench.errors import ConfigError
from fairbench.streams import numpy_stream


def allocate(counts: np.ndarray, n: int) -> np.ndarray:
    """Rows to take per stratum: proportional to `counts` (largest remainders), summing to
    `n`, at least one per stratum so no label x group cell vanishes from training."""
    quota = n * counts / counts.sum()
    take = np.maximum(np.floor(quota).astype(np.int64), 1)
    while take.sum() < n:  # hand out the remainders, largest first
        take[np.argmax(np.where(take < counts, quota - take, -np.inf))] += 1
    while take.sum() > n:  # the one-row minimum overshot: take back from the most over-served
        take[np.argmax(np.where(take > 1, take - quota, -np.inf))] -= 1
    return take


def subsample_train(
    train: np.ndarray, strata: np.ndarray, n_train: int, seed: int, dataset: str
) -> np.ndarray:
    """`n_train` of the `train` indices, stratified on `strata` (sorted, like the split)."""
    if n_train > len(train):
        raise ConfigError(
            f"dataset {dataset}: n_train {n_train} exceeds the {len(train)} training rows "
            f"available after the test/validation split; use n_train <= {len(train)}"
        )
    values, counts = np.unique(strata[train], return_counts=True)
    if n_train < len(values):
        raise ConfigError(
            f"dataset {dataset}: n_train {n_train} is below the {len(values)} label x group "
            f"strata it must keep one row of; use n_train >= {len(values)}"
        )
    rng = numpy_stream(seed, "subsample")  # independent of the split's stream
    chosen = [
        rng.choice(train[strata[train] == value], size=take, replace=False)
        for value, take in zip(values, allocate(counts, n_train), strict=True)
    ]
    return np.sort(np.concatenate(chosen))
