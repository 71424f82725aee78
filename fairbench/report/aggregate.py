"""From trial rows to Pareto points: means and 95% confidence intervals over seeds, and which
points are on the error-violation frontier."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
from scipy import stats

from fairbench.report.accuracy_cost import DROPS, GAP, mean_drops, with_accuracy_drops
from fairbench.report.budget import BUDGET_COLUMNS, budget_columns

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
    "knob_values",
    "knob_name",
    "config_id",
    "model",
    "n_seeds",
    "test_error_mean",
    "test_error_ci95",
    "violation_mean",
    "violation_ci95",
    "violation_max",
    "val_error_mean",
    "val_violation_mean",
    "satisfied_k",
    "satisfied_n",
    "satisfied_fraction",
    "satisfied_ci_low",
    "satisfied_ci_high",
    "excess_mean",
    "excess_max",
    "steps_mean",
    "epochs_mean",
    "batch_size_mean",
    "noise_multiplier_mean",
    "noise",
    "calibrated",
    "calibration_at_bound",
    "epsilon_spent_max",
    "wall_seconds_mean",
    "group_accuracy_drop_mean",
    "accuracy_drop_gap_mean",
    "accuracy_drop_gap_ci95",
    "on_frontier",
]


def clopper_pearson(successes: int, n: int) -> tuple[float, float]:
    """Exact two-sided 95% interval of a binomial proportion (NaN, NaN for n = 0)."""
    if n == 0:
        return math.nan, math.nan
    low = stats.beta.ppf(0.025, successes, n - successes + 1) if successes > 0 else 0.0
    high = stats.beta.ppf(0.975, successes + 1, n - successes) if successes < n else 1.0
    return float(low), float(high)


def with_satisfaction_interval(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with `satisfied_ci_low/high`: the interval of `satisfied_k` of `satisfied_n`."""
    pairs = zip(frame["satisfied_k"], frame["satisfied_n"], strict=True)
    bounds = [clopper_pearson(int(k), int(n)) for k, n in pairs]
    return frame.assign(
        satisfied_ci_low=[b[0] for b in bounds], satisfied_ci_high=[b[1] for b in bounds]
    )


def ci95(values: pd.Series) -> float:
    """Half-width of the 95% Student-t confidence interval of the mean (NaN for one seed)."""
    n = values.count()
    if n < 2:
        return float("nan")
    return float(stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / np.sqrt(n))


def _excess(constraints: list[dict]) -> float:
    """How far a trial's worst rate constraint exceeds its gamma on test (0 when all hold, NaN
    when the method states no target)."""
    if constraints[0]["satisfied"] is None:
        return math.nan
    return max(0.0, max(c["value"] - c["gamma"] for c in constraints))


def trials_frame(rows: list[dict]) -> pd.DataFrame:
    """Trial rows as a flat table (nested values stay as Python objects), with per-trial
    satisfaction of the stated target on test (`test_satisfied`, NaN without a target), its
    excess over the target (`test_excess`), the group accuracy cost of privacy against the
    run's erm trial on the same split (`accuracy_cost`), and the training budget's columns."""
    frame = pd.DataFrame(rows)
    frame["epsilon"] = frame["epsilon"].astype(float).fillna(np.inf)  # non-private: inf
    frame["knob"] = frame["knob"].astype(float)
    frame["test_excess"] = frame["test_rate_constraints"].map(_excess).astype(float)
    # a knob that is itself the allowed violation (CGOO's alpha): held-out violation <= alpha
    bound = frame["knob_name"] == "alpha"
    frame.loc[bound, "test_excess"] = (
        frame.loc[bound, "test_violation"] - frame.loc[bound, "knob"]
    ).clip(lower=0.0)
    # a trial satisfies its target when every constraint holds on the test split
    # the model family trained (methods without the option fit a linear model)
    frame["model"] = frame["hparams"].map(lambda h: h.get("model", "linear"))
    frame["knob_values"] = frame["knob"].map(lambda k: "" if np.isnan(k) else f"{k:g}")
    frame["test_satisfied"] = (frame["test_excess"] <= 0).astype(float)
    frame.loc[frame["test_excess"].isna(), "test_satisfied"] = np.nan
    if "test_predictions_sha256" not in frame:  # rows stored before predictions were hashed
        frame["test_predictions_sha256"] = None
    frame = with_accuracy_drops(frame)
    budget = budget_columns(frame)
    return pd.concat([frame.drop(columns=BUDGET_COLUMNS, errors="ignore"), budget], axis=1)


def _knob_text(knobs: list[float]) -> str:
    return ", ".join(f"{k:g}" for k in sorted(knobs))


def merge_identical_knobs(trials: pd.DataFrame) -> tuple[pd.DataFrame, list[dict]]:
    """Knob values of one method configuration that gave identical test predictions on every
    seed trained one model, not several: their trials collapse onto the smallest (strictest)
    knob, whose rows stand for the point, with every value listed in `knob_values`.

    Returns the trials to aggregate and one record per collapse (for the report's warnings).
    """
    trials = trials.copy()
    merged, dropped = [], []
    for key, grp in trials.groupby([*POINT[:-1]], dropna=False, sort=True):
        if grp["knob"].nunique() < 2 or grp["test_predictions_sha256"].isna().any():
            continue
        signatures: dict[tuple, list[float]] = {}
        for knob, runs in grp.groupby("knob"):
            hashes = runs.set_index("seed")["test_predictions_sha256"].sort_index()
            signature = tuple(hashes.items())
            signatures.setdefault(signature, []).append(float(knob))
        for knobs in (k for k in signatures.values() if len(k) > 1):
            keep = grp[grp["knob"] == min(knobs)].index
            trials.loc[keep, "knob_values"] = _knob_text(knobs)
            dropped.extend(grp[grp["knob"].isin(knobs) & (grp["knob"] != min(knobs))].index)
            merged.append(
                {
                    **dict(zip(POINT[:-1], key, strict=True)),
                    "knobs": sorted(knobs),
                    "n_seeds": int(grp["seed"].nunique()),
                }
            )
    return trials.drop(index=dropped), merged


def dominated(errors: np.ndarray, violations: np.ndarray) -> np.ndarray:
    """True where another point is at least as good on both axes and better on one."""
    e, v = errors[:, None], violations[:, None]
    better_eq = (errors[None, :] <= e) & (violations[None, :] <= v)
    strictly = (errors[None, :] < e) | (violations[None, :] < v)
    return np.asarray((better_eq & strictly).any(axis=1))  # an array (numpy's stubs: or a bool)


def qualified_datasets(trials: pd.DataFrame) -> pd.Series:
    """Each trial's dataset name, qualified by the options that tell apart two entries of one
    dataset in a run (`adult[sensitive=race]` beside `adult[sensitive=sex]`), so that no panel
    averages them; a dataset listed once keeps its bare name."""
    options = trials["dataset_options"].map(_options)
    keys = options.map(lambda o: json.dumps(o, sort_keys=True, default=str))
    out = trials["dataset"].copy()
    for name in trials["dataset"].unique():
        mine = trials["dataset"] == name
        entries = [json.loads(k) for k in keys[mine].unique()]
        if len(entries) < 2:
            continue
        differ = sorted(
            {k for e in entries for k in e if len({repr(f.get(k)) for f in entries}) > 1}
        )
        for entry in entries:
            text = ",".join(f"{k}={entry.get(k)}" for k in differ)
            out[mine & (keys == json.dumps(entry, sort_keys=True, default=str))] = f"{name}[{text}]"
    return out


def _options(value: object) -> dict:
    """A row's dataset options as a dict (stored as JSON text in trials.csv)."""
    if isinstance(value, str):
        return json.loads(value) if value else {}
    return dict(value) if isinstance(value, dict) else {}


def pareto_points(trials: pd.DataFrame) -> pd.DataFrame:
    """Aggregate trials over seeds and flag the frontier within each panel. Constraint
    satisfaction is counted per seed (never read off a mean), and each point carries the
    budget its trials ran. Pass trials through `merge_identical_knobs` first to collapse
    knob values that trained one model."""
    if GAP not in trials.columns:  # a frame not built by `trials_frame`
        trials = with_accuracy_drops(trials)
    if "dataset_options" in trials.columns:
        trials = trials.assign(dataset=qualified_datasets(trials))
    grouped = trials.groupby(POINT, dropna=False, sort=True)
    points = grouped.agg(
        n_seeds=("seed", "nunique"),
        knob_name=("knob_name", "first"),
        knob_values=("knob_values", "first"),
        model=("model", "first"),
        satisfied_fraction=("test_satisfied", "mean"),
        satisfied_k=("test_satisfied", "sum"),
        satisfied_n=("test_satisfied", "count"),
        excess_mean=("test_excess", "mean"),
        excess_max=("test_excess", "max"),
        test_error_mean=("test_error", "mean"),
        test_error_ci95=("test_error", ci95),
        violation_mean=("test_violation", "mean"),
        violation_ci95=("test_violation", ci95),
        violation_max=("test_violation", "max"),
        val_error_mean=("val_error", "mean"),
        val_violation_mean=("val_violation", "mean"),
        steps_mean=("steps", "mean"),
        epochs_mean=("epochs", "mean"),
        batch_size_mean=("batch_size", "mean"),
        noise_multiplier_mean=("noise_multiplier", "mean"),
        noise=("noise", "first"),
        calibrated=("calibrated", "first"),
        calibration_at_bound=("calibration_at_bound", "any"),
        epsilon_spent_max=("epsilon_spent", "max"),
        wall_seconds_mean=("wall_seconds", "mean"),
        group_accuracy_drop_mean=(DROPS, mean_drops),
        accuracy_drop_gap_mean=(GAP, "mean"),
        accuracy_drop_gap_ci95=(GAP, ci95),
    ).reset_index()
    points = with_satisfaction_interval(points)
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
