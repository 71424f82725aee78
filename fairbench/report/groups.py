"""Per-group losses of runs whose trials report them (regression tasks, bounded group loss):
a table of each group's mean test loss per method and budget, and how the smallest group's
loss moves with epsilon."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from fairbench.report.document import Document, Table
from fairbench.report.figure import legend_outside, new_figure, save
from fairbench.report.palette import style
from fairbench.report.plots import _linestyles

# column: (before, after) labels whose relative change the table reports when both ran.
# relative_change is DPSE's Table 1 comparison; tailoring_change isolates the budget tailoring
# (the same objective, equal group budgets against private standard errors).
CHANGES = {
    "relative_change": ("dpnose", "dpse"),
    "tailoring_change": ("dpnose-equal-split", "dpse"),
}


def group_table(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per (dataset, epsilon, group): size (training rows), the mean test loss of every
    method label (`mspe_<label>` for regression, `error_<label>` otherwise), the relative
    change from dpnose to dpse when both ran, and the mean zCDP rho where methods report it."""
    rows = []
    for (dataset, eps), grp in trials.groupby(["dataset", "epsilon"], sort=True):
        regression = (
            isinstance(grp["test_group_loss"].iloc[0], list)
            and grp["task_kind"].iloc[0] == "regression"
        )
        prefix = "mspe" if regression else "error"
        sizes = grp["group_sizes_train"].iloc[0]
        names = grp["group_names"].iloc[0]
        per_label = {
            _series(label, knob): np.nanmean(np.stack(g["test_group_loss"].map(np.asarray)), 0)
            for (label, knob), g in grp.groupby(["label", "knob"], dropna=False)
        }
        rho = grp["info"].map(lambda i: i.get("rho", math.nan)).mean()
        for k, name in enumerate(names):
            row = {"dataset": dataset, "epsilon": eps, "group": name, "size": sizes[k]}
            row.update({f"{prefix}_{label}": float(v[k]) for label, v in per_label.items()})
            for column, (before, after) in CHANGES.items():
                if before in per_label and after in per_label:
                    old, new = per_label[before][k], per_label[after][k]
                    row[column] = float((new - old) / old)
            rows.append({**row, "rho": rho})
    return pd.DataFrame(rows)


def _series(label: str, knob: float) -> str:
    """A method label, with its knob when it has one: `dpse@0.4`."""
    return label if pd.isna(knob) else f"{label}@{knob:g}"


def group_document(table: pd.DataFrame, title: str, n_seeds: int) -> Document:
    doc = Document().heading(1, f"{title}: per-group test loss")
    doc.add(
        f"Mean over {n_seeds} seeds (Monte-Carlo trials: split and noise). Size: training rows. "
        "relative_change = (dpse − dpnose) / dpnose; negative: DPSE is better. "
        "tailoring_change = (dpse − dpnose-equal-split) / dpnose-equal-split: the same "
        "objective, so only the budget tailoring differs. rho: the zCDP budget of the "
        "calibrated run (its PLD epsilon is the ε column)."
    )
    for (dataset, eps), grp in table.groupby(["dataset", "epsilon"], sort=True):
        cols = [c for c in grp.columns if c not in ("dataset", "epsilon") and grp[c].notna().any()]
        doc.heading(2, f"{dataset} · ε = {eps:g} (rho = {grp['rho'].iloc[0]:.3g})")
        rows = [
            [f"{v:.4g}" if isinstance(v, float) else str(v) for v in row]
            for row in grp[cols].itertuples(index=False)
        ]
        # the group's name left, its numbers right (every column was left-aligned until issue 36)
        doc.add(Table(cols, rows, "".join("l" if c == "group" else "r" for c in cols)))
    return doc


def smallest_group_figure(trials: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Per dataset with two or more budgets: the smallest group's mean test loss (solid) and the
    largest group's (hollow, faint) against epsilon, one line per method label."""
    written = []
    lines = _linestyles(trials)
    for dataset, grp in trials.groupby("dataset"):
        if grp["epsilon"].nunique() < 2:
            continue
        sizes = np.asarray(grp["group_sizes_train"].iloc[0])
        small, large = int(np.argmin(sizes)), int(np.argmax(sizes))
        fig, grid = new_figure(1, 1, (5.2, 3.8))
        ax = grid[0][0]
        for label, series in grp.groupby("label"):
            means = series.groupby("epsilon")["test_group_loss"].apply(
                lambda v: np.nanmean(np.stack(v.map(np.asarray)), axis=0)
            )
            eps = means.index.to_numpy()
            look = style(series["method"].iloc[0])
            ax.plot(
                eps,
                [m[small] for m in means],
                marker=look.marker,
                color=look.color,
                ls=lines[label],
                label=f"{label}: smallest group (n={sizes[small]})",
            )
            ax.plot(
                eps,
                [m[large] for m in means],
                marker=look.marker,
                color=look.color,
                ls=lines[label],
                markerfacecolor="none",
                alpha=0.5,
                label=f"{label}: largest group (n={sizes[large]})",
            )
        ax.set_xscale("log")
        ax.set_xlabel("ε (δ fixed)")
        ax.set_ylabel("mean test loss (MSPE for regression)")
        ax.set_title(f"{dataset}: group loss against the budget")
        ax.grid(alpha=0.3)
        legend_outside(fig, [ax])
        written.append(save(fig, out_dir / f"{dataset}_group_loss_vs_epsilon")[0])
    return written
