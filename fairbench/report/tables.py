"""Writing trials as CSV (and Parquet), and the Pareto points as a document."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from fairbench.errors import ConfigError
from fairbench.report.accuracy_cost import drop_cells
from fairbench.report.aggregate import PANEL
from fairbench.report.budget import BUDGET_COLUMNS
from fairbench.report.document import Document, Table, Warnings

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
    *BUDGET_COLUMNS,
    "test_predictions_sha256",
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


def _met(row) -> str:
    if math.isnan(row.satisfied_fraction):
        return ""
    return (
        f"{int(row.satisfied_k)}/{int(row.satisfied_n)} [{row.satisfied_ci_low:.0%}, "
        f"{row.satisfied_ci_high:.0%}]"
    )


def budget_cells(row) -> list[str]:
    """Steps, epochs, batch size, noise multiplier and what was calibrated of a point (means
    over seeds), as table cells."""
    sigma = "" if math.isnan(row.noise_multiplier_mean) else f"{row.noise_multiplier_mean:.3g}"
    bound = " (at bound)" if row.calibration_at_bound else ""
    return [
        f"{row.steps_mean:,.0f}",
        f"{row.epochs_mean:.3g}",
        f"{row.batch_size_mean:,.0f}",
        sigma,
        f"{row.calibrated}{bound}",
    ]


# the group accuracy cost of privacy, in panels whose points have an erm reference
COST_COLUMNS = ["accuracy drop by group (points)", "drop gap"]
PARETO_COLUMNS = [
    "method",
    "knob",
    "config",
    "seeds",
    "test error",
    "violation (max)",
    "met",
    "steps",
    "epochs",
    "batch",
    "σ",
    "calibrated",
    "ε spent (max)",
    "",
]


def pareto_document(points: pd.DataFrame, title: str, warnings: list[str]) -> Document:
    """One table per (dataset, constraint, privacy notion, epsilon) panel, after the run's
    warnings."""
    doc = Document().heading(1, f"{title}: error vs violation")
    doc.add(
        Warnings(warnings),
        "Mean over seeds ± half-width of the 95% confidence interval (Student t), and the "
        "largest violation over seeds. Violation: the constraint's gap on the test split with "
        "hard (argmax) predictions. ε is spent as reported by the suite's PLD accountant; "
        "hyperparameter tuning is not charged to the privacy budget. met: seeds whose every "
        "rate constraint holds on the test split, for methods told the allowed disparity "
        "(γ, α or a loss bound), with its exact (Clopper-Pearson) 95% interval. Budget: steps, "
        "epochs (steps × sampling rate) and expected batch size, Gaussian noise multiplier σ, "
        "and what the accountant calibrated. Knob values that trained one model (identical "
        "test predictions on every seed) share a row. Where the run has an erm trial on the "
        "same split (same dataset, options, seed and model family), each group's accuracy drop "
        "from it (points of test accuracy, mean over seeds; positive: worse) and the drop gap "
        "(largest minus smallest group's drop, mean over seeds): the group accuracy cost of "
        "privacy. ★ marks the Pareto frontier within a table.",
    )
    for key, panel in points.groupby(PANEL, sort=True, dropna=False):
        dataset, constraint, notion, eps, delta = key
        privacy = "" if math.isinf(eps) else f", δ = {delta:g}, privacy: {notion}"
        doc.heading(2, f"{dataset} · {constraint} · {_eps(eps)}{privacy}")
        costs = panel["group_accuracy_drop_mean"].map(lambda d: d is not None).any()
        rows = [
            [
                row.label,
                str(row.knob_values),
                str(row.config_id),
                str(row.n_seeds),
                _fmt(row.test_error_mean, row.test_error_ci95),
                f"{_fmt(row.violation_mean, row.violation_ci95)} ({row.violation_max:.4f})",
                _met(row),
                *budget_cells(row),
                "" if math.isinf(eps) else f"{row.epsilon_spent_max:.4f}",
                *(
                    drop_cells(row.group_accuracy_drop_mean, row.accuracy_drop_gap_mean)
                    if costs
                    else []
                ),
                "★" if row.on_frontier else "",
            ]
            for row in panel.itertuples()
        ]
        columns = PARETO_COLUMNS[:-1] + (COST_COLUMNS if costs else []) + PARETO_COLUMNS[-1:]
        doc.add(Table(columns, rows, "lrlrrrrrrrrlr" + ("lr" if costs else "") + "l"))
    return doc
