"""Trade-off figures in the style of the method papers: test error vs held-out violation,
one panel per epsilon, one series per method (knob values joined in order), 95% CI bars;
non-private methods are drawn in every panel as references."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from fairbench.report.aggregate import dominated


def _series(
    ax, points: pd.DataFrame, colors: dict[str, str], style: dict, suffix: str = ""
) -> None:
    for (label, _config), series in points.groupby(["label", "config_id"], sort=True):
        series = series.sort_values("knob")
        ax.errorbar(
            series["violation_mean"],
            series["test_error_mean"],
            xerr=series["violation_ci95"].fillna(0),
            yerr=series["test_error_ci95"].fillna(0),
            label=label + suffix,
            color=colors[label],
            capsize=2,
            marker="o",
            markersize=4,
            **style,
        )


def _frontier(ax, points: pd.DataFrame) -> None:
    err, vio = points["test_error_mean"].to_numpy(), points["violation_mean"].to_numpy()
    keep = ~dominated(err, vio)
    order = vio[keep].argsort()
    ax.step(vio[keep][order], err[keep][order], where="post", color="0.6", lw=0.8, zorder=0)


def trade_off_figures(points: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Write one PNG (and PDF) per (dataset, constraint, privacy notion); returns PNG paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    reference = points[points["epsilon"].map(math.isinf)]
    private = points[~points["epsilon"].map(math.isinf)]
    labels = sorted(points["label"].unique())
    colors = {label: f"C{i % 10}" for i, label in enumerate(labels)}  # one colour per method
    keys = ["dataset", "constraint"]
    figures = [
        ((d, c, n), grp) for (d, c, n), grp in private.groupby([*keys, "privacy_notion"])
    ] or [((d, c, "non-private"), grp) for (d, c), grp in reference.groupby(keys)]
    for (dataset, constraint, notion), grp in figures:
        refs = reference[
            (reference["dataset"] == dataset) & (reference["constraint"] == constraint)
        ]
        epsilons = sorted(grp["epsilon"].unique())
        fig, axes = plt.subplots(
            1, len(epsilons), figsize=(4.2 * len(epsilons), 3.6), squeeze=False, sharey=True
        )
        for ax, eps in zip(axes[0], epsilons, strict=True):
            panel = grp[grp["epsilon"] == eps]
            if not math.isinf(eps):
                _frontier(ax, panel)
                _series(ax, panel, colors, {})
            hollow = {"linestyle": "--", "markerfacecolor": "none", "alpha": 0.8}
            _series(ax, refs, colors, hollow, suffix=" (non-private)")
            ax.set_title(f"{dataset} · {'non-private' if math.isinf(eps) else f'ε = {eps:g}'}")
            ax.set_xlabel(f"{constraint.replace('_', ' ')} violation (test)")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("test error")
        axes[0][-1].legend(fontsize=8, loc="best")
        fig.tight_layout()
        stem = out_dir / f"{dataset}_{constraint}_{notion}"
        fig.savefig(stem.with_suffix(".png"), dpi=130)
        fig.savefig(stem.with_suffix(".pdf"))
        plt.close(fig)
        written.append(stem.with_suffix(".png"))
    return written
