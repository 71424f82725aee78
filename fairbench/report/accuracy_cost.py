"""The group accuracy cost of privacy, the metric the disparate-impact literature reports
(Bagdasaryan et al. 2019; DPSGD-F, Xu et al. 2021; DPSGD-Global-Adapt, Esipova et al. 2023):
per group, how far a trial's test accuracy falls below the non-private model's trained on the
same split, and the gap of those drops between groups (largest minus smallest).

The runner trains no non-private twin beside each private trial, so the reference is the
run's own `erm` trial on the same dataset, dataset options and seed (hence the same split)
and the same model family. A trial with no such reference gets NaN. The reference's
hyper-parameters are its erm entry's: for the literature's exact twin (the private method's
learning rate, batch size and epochs without noise or clipping), list `erm` with those.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

REFERENCE = "erm"
MATCH = ["dataset", "dataset_options", "seed", "model"]  # same split, same model family
DROPS = "test_group_accuracy_drop"
GAP = "test_accuracy_drop_gap"


def _key(row) -> tuple:
    options = json.dumps(row["dataset_options"], sort_keys=True, default=str)
    return (row["dataset"], options, row["seed"], row["model"])


def drop_gap(drops: list[float]) -> float:
    """Largest minus smallest group's drop (NaN groups left out; NaN below two groups)."""
    present = [d for d in drops if not math.isnan(d)]
    return max(present) - min(present) if len(present) > 1 else math.nan


def with_accuracy_drops(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with each trial's per-group accuracy drop from its reference (by group name:
    the group's test error minus the reference's, so positive is worse), the gap of those
    drops, and the reference's label (`accuracy_reference`, None without one)."""
    frame = frame.copy()
    references: dict[tuple, tuple[str, np.ndarray]] = {}
    if {"test_group_error", "method", "label", *MATCH} <= set(frame.columns):
        erm = frame[frame["method"] == REFERENCE].sort_values("label", kind="stable")
        for _, row in erm.iterrows():
            if isinstance(row["test_group_error"], list):
                references.setdefault(
                    _key(row), (row["label"], np.asarray(row["test_group_error"], float))
                )
    drops: list[dict[str, float] | None] = []
    gaps: list[float] = []
    labels: list[str | None] = []
    for _, row in frame.iterrows():
        found = references.get(_key(row)) if references else None
        errors = row.get("test_group_error")
        if found is None or not isinstance(errors, list) or len(errors) != len(found[1]):
            drops.append(None)
            gaps.append(math.nan)
            labels.append(None)
            continue
        drop = (np.asarray(errors, float) - found[1]).tolist()
        given = row.get("group_names")
        names = list(given) if isinstance(given, list | tuple) else list(range(len(drop)))
        drops.append({str(name): d for name, d in zip(names, drop, strict=True)})
        gaps.append(drop_gap(drop))
        labels.append(found[0])
    frame[DROPS], frame[GAP], frame["accuracy_reference"] = drops, gaps, labels
    return frame


def mean_drops(values: pd.Series) -> dict[str, float] | None:
    """Per-group mean over seeds of the drops (None where no seed has a reference)."""
    found = [v for v in values if isinstance(v, dict)]
    if not found:
        return None
    return {g: float(np.nanmean([v.get(g, math.nan) for v in found])) for g in found[0]}


def drop_cells(drops: dict[str, float] | None, gap: float) -> list[str]:
    """A Pareto table's cells: each group's mean drop in points of accuracy, and the gap."""
    if drops is None:
        return ["", ""]
    by_group = " · ".join(f"{name} {100 * d:+.2f}" for name, d in drops.items())
    return [by_group, "" if math.isnan(gap) else f"{100 * gap:.2f}"]
