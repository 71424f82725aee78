"""Writing trials and Pareto points as CSV and Markdown."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from fairbench.errors import ConfigError
from fairbench.report.aggregate import PANEL

LEAD_COLUMNS = [
    "trial_id",
    "dataset",
    "constraint",
    "method",
    "label",
    "privacy_notion",
    "epsilon",
    "delta",
    "knob",
    "seed",
    "test_error",
    "test_violation",
    "val_error",
    "val_violation",
    "epsilon_spent",
    "wall_seconds",
]


def flat_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per trial, key columns first; nested values (hyperparameters, ledger,
    per-group metrics, the reproducibility stamp) as JSON strings."""
    flat = trials.copy()
    for col in flat.columns:
        if flat[col].map(lambda v: isinstance(v, dict | list)).any():
            flat[col] = flat[col].map(lambda v: json.dumps(v, sort_keys=True, default=str))
    lead = [c for c in LEAD_COLUMNS if c in flat.columns]
    return flat[lead + [c for c in flat.columns if c not in lead]]


def write_trials_csv(trials: pd.DataFrame, path: Path) -> None:
    flat_trials(trials).to_csv(path, index=False)


def write_trials_parquet(trials: pd.DataFrame, path: Path) -> None:
    """The same table as trials.csv, typed, in Parquet (needs pyarrow: the `parquet` extra)."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ConfigError(
            "Parquet export needs pyarrow: pip install 'dp-fairbench[parquet]' (or pyarrow)"
        ) from None
    flat = flat_trials(trials)
    for col in flat.columns:  # object columns mixing numbers and None/strings: as text
        if flat[col].dtype == object:
            flat[col] = flat[col].map(lambda v: None if v is None else str(v))
    flat.to_parquet(path, index=False)


def _fmt(mean: float, ci: float) -> str:
    return f"{mean:.4f}" if math.isnan(ci) else f"{mean:.4f} ± {ci:.4f}"


def _eps(value: float) -> str:
    return "non-private" if math.isinf(value) else f"ε = {value:g}"


def pareto_markdown(points: pd.DataFrame, title: str) -> str:
    """One table per (dataset, constraint, privacy notion, epsilon) panel."""
    lines = [
        f"# {title}: error vs violation",
        "",
        "Mean over seeds ± half-width of the 95% confidence interval (Student t). Violation: "
        "the constraint's gap on the test split with hard (argmax) predictions. ε is spent as "
        "reported by the suite's PLD accountant; hyperparameter tuning is not charged to the "
        "privacy budget. γ met: share of seeds whose every rate constraint holds on the test "
        "split, for methods told the allowed disparity γ (or α), with its exact (Clopper-Pearson) "
        "95% interval. ★ marks the Pareto frontier within a "
        "table.",
    ]
    for key, panel in points.groupby(PANEL, sort=True, dropna=False):
        dataset, constraint, notion, eps, delta = key
        privacy = "" if math.isinf(eps) else f", δ = {delta:g}, privacy: {notion}"
        lines += [
            "",
            f"## {dataset} · {constraint} · {_eps(eps)}{privacy}",
            "",
            "| method | knob | config | seeds | test error | violation | γ met | ε spent (max) | |",
            "|---|---:|---|---:|---:|---:|---:|---:|---|",
        ]
        for row in panel.itertuples():
            knob = "" if math.isnan(row.knob) else f"{row.knob:g}"
            spent = "" if math.isinf(eps) else f"{row.epsilon_spent_max:.4f}"
            met = (
                ""
                if math.isnan(row.satisfied_fraction)
                else f"{row.satisfied_fraction:.0%} [{row.satisfied_ci_low:.0%}, "
                f"{row.satisfied_ci_high:.0%}]"
            )
            lines.append(
                f"| {row.label} | {knob} | {row.config_id} | {row.n_seeds} | "
                f"{_fmt(row.test_error_mean, row.test_error_ci95)} | "
                f"{_fmt(row.violation_mean, row.violation_ci95)} | {met} | {spent} | "
                f"{'★' if row.on_frontier else ''} |"
            )
    return "\n".join(lines) + "\n"
