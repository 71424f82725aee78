"""How precisely one held-out split measures a fairness gap, and what a table may conclude
from it (issue 40): the split's own standard error of the gap and of the error, the
meets / misses / cannot tell verdict at a target tau, and the `unstable` flag of a selection
whose fresh-seed test numbers exceed its validation numbers by more than that noise explains.

A trial row stores, per split, the one-vs-rest gap of every group (`*_rate_constraints`) and
the per-class error rates (`*_false_negative_rate`), but not the split's group sizes: those
are read from the dataset adapter's split (public benchmark files; this analyses a finished
run, it releases nothing), once per split.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from fairbench.datasets import get_dataset
from fairbench.datasets.base import SPLIT_SEED
from fairbench.errors import FairbenchError
from fairbench.report.aggregate import ci95

MEETS, MISSES, CANNOT_TELL = "meets", "misses", "cannot tell"
Z95 = 1.959963984540054  # two-sided 95% normal quantile
MATCH = 1e-9  # how closely the gap rebuilt from the group rates must equal the stored one

# Per constraint the conditions its gap is taken over and the stored one-vs-rest gap of
# P(ŷ=1 | condition, s=g) per group: `None` conditions on nothing (demographic parity), a label
# on y (equalized odds: y=0 the FPR gap, y=1 the TPR gap; equal opportunity: y=1 alone).
GAPS: dict[str, tuple[tuple[int | None, str], ...]] = {
    "demographic_parity": ((None, "P(ŷ=1|s={g}) - P(ŷ=1|s≠{g})"),),
    "equalized_odds": (
        (0, "P(ŷ=1|y=0,s={g}) - P(ŷ=1|y=0,s≠{g})"),
        (1, "P(ŷ=1|y=1,s={g}) - P(ŷ=1|y=1,s≠{g})"),
    ),
    "false_negative_rate_parity": ((1, "TPR(y=1|s={g}) - TPR(y=1|s≠{g})"),),
}


@lru_cache(maxsize=64)
def _counts(dataset: str, options: str, split_seed: int) -> dict[str, np.ndarray] | None:
    try:
        task = get_dataset(dataset, **json.loads(options)).load(split_seed)
    except FairbenchError:
        return None
    if task.kind != "classification":
        return None
    shape = (task.n_groups, task.n_classes)
    return {
        name: np.bincount(split.s * shape[1] + split.y, minlength=shape[0] * shape[1]).reshape(
            shape
        )
        for name, split in (("val", task.val), ("test", task.test))
    }


def split_counts(dataset: str, options: dict[str, Any], seed: int, split: str) -> np.ndarray | None:
    """Records per (group, label) of the `split` ("val" or "test") a trial ran on: its seed's
    split, or the `split_seed` option's. None when the data cannot be loaded here."""
    rest = dict(options)
    split_seed = int(rest.pop(SPLIT_SEED, seed))
    counts = _counts(dataset, json.dumps(rest, sort_keys=True), split_seed)
    return None if counts is None else counts[split]


def gap_se(
    constraint: str,
    gaps: list[dict[str, Any]],
    class_errors: list[float],
    violation: float,
    counts: np.ndarray,
) -> float:
    """The split's standard error of a binary classifier's gap (NaN where not derivable).

    The rate of each group g is rebuilt exactly from what the row stores: with R the rate
    P(ŷ=1 | condition) on the whole split (from the per-class error rates and the split's
    label shares), w_g the group's share of the condition and d_g its stored one-vs-rest gap,
    r_g = R + (1 − w_g)·d_g. The gap is max over conditions of max_g r_g − min_g r_g; its SE
    is that of a difference of two independent proportions at the observed rates,
    sqrt(r_a(1 − r_a)/n_a + r_b(1 − r_b)/n_b), for the two groups a, b (and condition) that
    attain it, with n the groups' records in that condition (all of the group for demographic
    parity; its label-y records for equalized odds and equal opportunity).

    Assumptions: records independent given the split's group sizes; the maximising pair
    treated as fixed (the max over pairs and conditions is not accounted for); for a
    randomized or derived predictor, whose rates are expected rates, the binomial form is an
    upper bound. NaN for other constraints, more than two classes, a gap the row does not
    store, or a rebuilt gap that differs from the stored violation (a declared constraint
    set, whose violation is another quantity).
    """
    terms = GAPS.get(constraint)
    if terms is None or counts.shape[1] != 2 or len(class_errors) != 2:
        return math.nan
    stored = {c["name"]: c["value"] for c in gaps}
    fpr, fnr = class_errors  # P(ŷ≠0 | y=0), P(ŷ≠1 | y=1)
    positive = counts[:, 1].sum() / counts.sum()
    best, se = -math.inf, math.nan
    for label, name in terms:
        n = counts.sum(axis=1) if label is None else counts[:, label]
        rate = {
            None: positive * (1 - fnr) + (1 - positive) * fpr,
            0: fpr,
            1: 1 - fnr,
        }[label]
        names = [name.format(g=g) for g in range(len(n))]
        if any(k not in stored for k in names) or (n == 0).any():
            return math.nan
        d = np.array([stored[k] for k in names])
        r = rate + (1 - n / n.sum()) * d
        a, b = int(r.argmax()), int(r.argmin())
        if r[a] - r[b] > best:
            best = r[a] - r[b]
            p = np.clip(r, 0.0, 1.0)
            se = math.sqrt(p[a] * (1 - p[a]) / n[a] + p[b] * (1 - p[b]) / n[b])
    return se if abs(best - violation) <= MATCH else math.nan


def error_se(error: float, n: int) -> float:
    """Binomial standard error of an error rate measured on n records."""
    return math.sqrt(error * (1 - error) / n)


def trial_ses(row: pd.Series, split: str) -> tuple[float, float]:
    """(SE of the gap, SE of the error) of one trial on its `split` (NaN, NaN without data)."""
    counts = split_counts(row["dataset"], row["dataset_options"], int(row["seed"]), split)
    if counts is None:
        return math.nan, math.nan
    gap = gap_se(
        row["constraint"],
        row[f"{split}_rate_constraints"],
        row[f"{split}_false_negative_rate"],
        float(row[f"{split}_violation"]),
        counts,
    )
    return gap, error_se(float(row[f"{split}_error"]), int(counts.sum()))


def mean_ses(trials: pd.DataFrame, split: str) -> tuple[float, float]:
    """The mean over trials of each trial's own split SE (gap, error): one split's SE, the
    precision of a single run's measurement. NaN when any trial's is unknown."""
    ses = np.array([trial_ses(row, split) for _, row in trials.iterrows()], dtype=float)
    if not len(ses):
        return math.nan, math.nan
    return float(ses[:, 0].mean()), float(ses[:, 1].mean())


def verdict(tau: float, se: float, low: float, high: float) -> str:
    """`cannot tell` where the split's SE exceeds tau / 2 (one split cannot resolve tau);
    else by the 95% interval [low, high] of the mean violation: `meets` when high <= tau,
    `misses` when low > tau, `cannot tell` when it straddles tau (or is undefined, one seed).
    "" where the SE is unknown: no verdict."""
    if math.isnan(se):
        return ""
    if se > tau / 2 or math.isnan(low) or math.isnan(high):
        return CANNOT_TELL
    if high <= tau:
        return MEETS
    return MISSES if low > tau else CANNOT_TELL


def exceeds(val: float, val_se: float, test: float, test_se: float) -> bool | None:
    """Whether `test` exceeds `val` by more than 1.96 · sqrt(val_se² + test_se²); None when
    an SE is unknown."""
    if math.isnan(val_se) or math.isnan(test_se):
        return None
    return bool(test - val > Z95 * math.hypot(val_se, test_se))


def unstable(parts: list[bool | None]) -> bool | None:
    """A selection is unstable when its violation or its error exceeds (`exceeds`); None when
    neither could be checked."""
    known = [p for p in parts if p is not None]
    return any(known) if known else None


COLUMNS = [
    "violation_ci_low",
    "violation_ci_high",
    "violation_se",
    "verdict",
    "val_violation",
    "val_violation_se",
    "error_se",
    "val_error",
    "val_error_se",
    "unstable",
]


def cell(
    final: pd.DataFrame, search: pd.DataFrame, tau: float, val_violation: float, val_error: float
) -> dict[str, Any]:
    """COLUMNS of one selection: its fresh-seed `final` trials on test against the `search`
    trials it was chosen on (their mean validation violation and error as tune stored them)."""
    violations = final["test_violation"].astype(float)
    half = ci95(violations)
    low, high = float(violations.mean() - half), float(violations.mean() + half)
    test_gap, test_error = mean_ses(final, "test")
    val_gap, val_err = mean_ses(search, "val")
    checks = [
        exceeds(val_violation, val_gap, float(violations.mean()), test_gap),
        exceeds(val_error, val_err, float(final["test_error"].mean()), test_error),
    ]
    return {
        "violation_ci_low": low,
        "violation_ci_high": high,
        "violation_se": test_gap,
        "verdict": verdict(tau, test_gap, low, high),
        "val_violation": val_violation,
        "val_violation_se": val_gap,
        "error_se": test_error,
        "val_error": val_error,
        "val_error_se": val_err,
        "unstable": unstable(checks),
    }
