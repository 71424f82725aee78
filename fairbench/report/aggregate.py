"""From trial rows to Pareto points: means and 95% confidence intervals over seeds, and which
points are on the error-violation frontier."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats

# One Pareto point per (panel, method entry, hyperparameter config, knob); seeds are averaged.
PANEL = ["dataset", "constraint", "privacy_notion", "epsilon", "delta"]
POINT = [*PANEL, "method", "label", "config_id", "knob"]
PARETO_COLUMNS = [
    "dataset",
    "constraint",
    "method",
    "label",
    "privacy_notion",
    "epsilon",
    "delta",
    "knob",
    "knob_name",
    "config_id",
    "n_seeds",
    "test_error_mean",
    "test_error_ci95",
    "violation_mean",
    "violation_ci95",
    "val_error_mean",
    "val_violation_mean",
    "epsilon_spent_max",
    "wall_seconds_mean",
    "satisfied_fraction",
    "satisfied_ci_low",
    "satisfied_ci_high",
    "on_frontier",
]


def clopper_pearson(successes: int, n: int) -> tuple[float, float]:
    """Exact two-sided 95% interval of a binomial proportion (NaN, NaN for n = 0)."""
    if n == 0:
        return math.nan, math.nan
    low = stats.beta.ppf(0.025, successes, n - successes + 1) if successes > 0 else 0.0
    high = stats.beta.ppf(0.975, successes + 1, n - successes) if successes < n else 1.0
    return float(low), float(high)


def ci95(values: pd.Series) -> float:
    """Half-width of the 95% Student-t confidence interval of the mean (NaN for one seed)."""
    n = values.count()
    if n < 2:
        return float("nan")
    return float(stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / np.sqrt(n))


def trials_frame(rows: list[dict]) -> pd.DataFrame:
    """Trial rows as a flat table (nested values stay as Python objects)."""
    frame = pd.DataFrame(rows)
    frame["epsilon"] = frame["epsilon"].astype(float).fillna(np.inf)  # non-private: inf
    frame["knob"] = frame["knob"].astype(float)
    # a trial satisfies its target when every constraint holds on the test split (None when
    # the method states no target)
    frame["test_satisfied"] = (
        frame["test_rate_constraints"]
        .map(lambda cs: None if cs[0]["satisfied"] is None else all(c["satisfied"] for c in cs))
        .astype(float)
    )
    # a knob that is itself the allowed violation (CGOO's alpha): held-out violation <= alpha
    bound = frame["knob_name"] == "alpha"
    frame.loc[bound, "test_satisfied"] = (
        frame.loc[bound, "test_violation"] <= frame.loc[bound, "knob"]
    ).astype(float)
    return frame


def dominated(errors: np.ndarray, violations: np.ndarray) -> np.ndarray:
    """True where another point is at least as good on both axes and better on one."""
    e, v = errors[:, None], violations[:, None]
    better_eq = (errors[None, :] <= e) & (violations[None, :] <= v)
    strictly = (errors[None, :] < e) | (violations[None, :] < v)
    return (better_eq & strictly).any(axis=1)


def pareto_points(trials: pd.DataFrame) -> pd.DataFrame:
    """Aggregate trials over seeds and flag the frontier within each panel."""
    grouped = trials.groupby(POINT, dropna=False, sort=True)
    points = grouped.agg(
        n_seeds=("seed", "nunique"),
        knob_name=("knob_name", "first"),
        satisfied_fraction=("test_satisfied", "mean"),
        satisfied_k=("test_satisfied", "sum"),
        satisfied_n=("test_satisfied", "count"),
        test_error_mean=("test_error", "mean"),
        test_error_ci95=("test_error", ci95),
        violation_mean=("test_violation", "mean"),
        violation_ci95=("test_violation", ci95),
        val_error_mean=("val_error", "mean"),
        val_violation_mean=("val_violation", "mean"),
        epsilon_spent_max=("epsilon_spent", "max"),
        wall_seconds_mean=("wall_seconds", "mean"),
    ).reset_index()
    pairs = zip(points["satisfied_k"], points["satisfied_n"], strict=True)
    bounds = [clopper_pearson(int(k), int(n)) for k, n in pairs]
    points["satisfied_ci_low"] = [b[0] for b in bounds]
    points["satisfied_ci_high"] = [b[1] for b in bounds]
    points["on_frontier"] = False
    for _, idx in points.groupby(PANEL, dropna=False).groups.items():
        panel = points.loc[idx]
        points.loc[idx, "on_frontier"] = ~dominated(
            panel["test_error_mean"].to_numpy(), panel["violation_mean"].to_numpy()
        )
    return (
        points[PARETO_COLUMNS]
        .sort_values([*PANEL, "violation_mean", "test_error_mean"], kind="stable")
        .reset_index(drop=True)
    )
