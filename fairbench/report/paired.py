"""Paired comparisons between methods at fixed violation levels.

Every method in a run sees the same seeds, and a seed fixes the split, so two methods'
errors on one seed are a matched pair: their per-seed difference cancels the split's own
variance. At each level v and panel, a method's operating point is the configuration (hparams
and knob) with the lowest mean *validation* error among those whose mean validation violation
is at most v, the one selection rule for every method, and never the test split. Each pair
of methods that reach v is then compared on the test errors of their shared seeds: the mean
paired difference with its 95% Student-t interval. A is better (a win) when the interval lies
below 0, worse (a loss) when it lies above, and otherwise a tie.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd

from fairbench.report.aggregate import PANEL, POINT, ci95
from fairbench.report.document import Document, Table, Warnings

DEFAULT_LEVELS = (0.02, 0.05, 0.10)
PAIRED_COLUMNS = [
    *PANEL,
    "level",
    "method_a",
    "method_b",
    "n_pairs",
    "error_a",
    "error_b",
    "violation_a",
    "violation_b",
    "difference_mean",
    "difference_ci95",
    "verdict",
    "steps_a",
    "steps_b",
    "epochs_a",
    "epochs_b",
    "noise_multiplier_a",
    "noise_multiplier_b",
    "epsilon_spent_a",
    "epsilon_spent_b",
]
BUDGET = ("steps", "epochs", "noise_multiplier", "epsilon_spent")  # per side, seed means


def operating_points(trials: pd.DataFrame, level: float) -> pd.DataFrame:
    """Per panel and method label: the trials of the configuration chosen at `level` on the
    validation split (lowest validation error with validation violation <= level)."""
    means = trials.groupby(POINT, dropna=False)[["val_error", "val_violation"]].mean().reset_index()
    feasible = means[means["val_violation"] <= level]
    best = feasible.sort_values("val_error", kind="stable").groupby([*PANEL, "label"]).head(1)
    return trials.merge(best[POINT], on=POINT, how="inner")


def paired_table(trials: pd.DataFrame, levels: tuple[float, ...] = DEFAULT_LEVELS) -> pd.DataFrame:
    """One row per (panel, level, pair of methods reaching it): paired test-error difference
    (method_a − method_b) over shared seeds, and the verdict for method_a."""
    rows = []
    for level in levels:
        chosen = operating_points(trials, level)
        for key, panel in chosen.groupby(PANEL, dropna=False, sort=True):
            by_label = {label: g.set_index("seed") for label, g in panel.groupby("label")}
            for a, b in itertools.combinations(sorted(by_label), 2):
                seeds = by_label[a].index.intersection(by_label[b].index)
                if len(seeds) < 2:
                    continue
                ea, eb = by_label[a].loc[seeds, "test_error"], by_label[b].loc[seeds, "test_error"]
                diff = ea - eb
                mean, half = float(diff.mean()), ci95(diff)
                rows.append(
                    {
                        **dict(zip(PANEL, key, strict=True)),
                        "level": level,
                        "method_a": a,
                        "method_b": b,
                        "n_pairs": len(seeds),
                        "error_a": float(ea.mean()),
                        "error_b": float(eb.mean()),
                        "violation_a": float(by_label[a].loc[seeds, "test_violation"].mean()),
                        "violation_b": float(by_label[b].loc[seeds, "test_violation"].mean()),
                        "difference_mean": mean,
                        "difference_ci95": half,
                        "verdict": paired_verdict(mean, half),
                        **{
                            f"{col}_{side}": float(by_label[m].loc[seeds, col].mean())
                            for col in BUDGET
                            for side, m in (("a", a), ("b", b))
                        },
                    }
                )
    return pd.DataFrame(rows, columns=PAIRED_COLUMNS)


def paired_verdict(mean: float, half: float) -> str:
    """A's side of a paired difference (A minus B, mean ± 95% half-width): "win" when the
    interval lies below 0, "loss" above, "tie" when it contains 0 or there is none."""
    if math.isnan(half) or abs(mean) <= half:
        return "tie"
    return "win" if mean < 0 else "loss"


def wins_ties_losses(paired: pd.DataFrame) -> pd.DataFrame:
    """Per dataset, level and method: how many paired comparisons (over the run's epsilons)
    it won, tied and lost; both sides of every pair count."""
    flipped = paired.rename(columns={"method_a": "method_b", "method_b": "method_a"}).assign(
        verdict=paired["verdict"].map({"win": "loss", "loss": "win", "tie": "tie"})
    )
    both = pd.concat([paired, flipped], ignore_index=True)
    counts = both.groupby(["dataset", "level", "method_a", "verdict"]).size().unstack(fill_value=0)
    counts = counts.reindex(columns=["win", "tie", "loss"], fill_value=0)
    return counts.reset_index().rename(
        columns={"method_a": "method", "win": "wins", "tie": "ties", "loss": "losses"}
    )


def _steps(a: float, b: float) -> str:
    return f"{a:,.0f} / {b:,.0f}"


def _sigma(a: float, b: float) -> str:
    return " / ".join("–" if math.isnan(v) else f"{v:.3g}" for v in (a, b))


def paired_document(paired: pd.DataFrame, title: str, warnings: list[str]) -> Document:
    doc = Document().heading(1, f"{title}: paired comparisons at fixed violation levels")
    doc.add(
        Warnings(warnings),
        "Per level v, each method's configuration is chosen on the validation split (lowest "
        "validation error with validation violation ≤ v); methods that cannot reach v are left "
        "out. difference: mean over shared seeds of method_a's test error minus method_b's, "
        "± the 95% Student-t half-width; a win for method_a when the interval lies below 0. "
        "Hyperparameter tuning is not charged to the privacy budget. steps and σ: each side's "
        "optimisation steps and Gaussian noise multiplier (means over the paired seeds), so a "
        "verdict between lopsided budgets can be seen as such.",
    )
    doc.heading(2, "Wins / ties / losses")
    doc.add(
        Table(
            ["dataset", "level", "method", "wins", "ties", "losses"],
            [
                [r.dataset, f"{r.level:g}", r.method, str(r.wins), str(r.ties), str(r.losses)]
                for r in wins_ties_losses(paired).itertuples(index=False)
            ],
            "lrlrrr",
        )
    )
    columns = [
        "method_a",
        "method_b",
        "pairs",
        "error a",
        "error b",
        "difference",
        "verdict",
        "steps a / b",
        "σ a / b",
    ]
    for key, panel in paired.groupby([*PANEL, "level"], dropna=False, sort=True):
        dataset, constraint, notion, eps, _, level = key
        privacy = "non-private" if np.isinf(eps) else f"ε = {eps:g} ({notion})"
        doc.heading(2, f"{dataset} · {constraint} · {privacy} · violation ≤ {level:g}")
        rows = [
            [
                r.method_a,
                r.method_b,
                str(r.n_pairs),
                f"{r.error_a:.4f}",
                f"{r.error_b:.4f}",
                f"{r.difference_mean:+.4f} ± {r.difference_ci95:.4f}",
                r.verdict,
                _steps(r.steps_a, r.steps_b),
                _sigma(r.noise_multiplier_a, r.noise_multiplier_b),
            ]
            for r in panel.itertuples(index=False)
        ]
        doc.add(Table(columns, rows, "llrrrrlrr"))
    return doc
