"""Trade-off figures in the style of the method papers: test error vs held-out violation,
one panel per epsilon, one series per method (knob values joined in order), 95% CI bars;
non-private methods are drawn in every panel as references."""

from __future__ import annotations

import math
import re
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


def _colors(points: pd.DataFrame) -> dict[str, str]:
    """One colour per method label, the same in every figure of a report."""
    return {label: f"C{i % 10}" for i, label in enumerate(sorted(points["label"].unique()))}


def _title(dataset: str, eps: float) -> str:
    return f"{dataset} · {'non-private' if math.isinf(eps) else f'ε = {eps:g}'}"


def _save(fig, stem: Path) -> Path:
    """PNG (for reading) and PDF (for papers); returns the PNG path. The file name keeps
    letters, digits, `.`, `_` and `-` only, so it needs no quoting in a shell."""
    stem = stem.with_name(re.sub(r"[^A-Za-z0-9_.-]+", "_", stem.name).strip("_"))
    fig.tight_layout()
    fig.savefig(stem.with_suffix(".png"), dpi=130)
    fig.savefig(stem.with_suffix(".pdf"), metadata={"CreationDate": None})  # reproducible bytes
    plt.close(fig)
    return stem.with_suffix(".png")


def _frontier(ax, points: pd.DataFrame) -> None:
    err, vio = points["test_error_mean"].to_numpy(), points["violation_mean"].to_numpy()
    keep = ~dominated(err, vio)
    order = vio[keep].argsort()
    ax.step(vio[keep][order], err[keep][order], where="post", color="0.6", lw=0.8, zorder=0)


def _published(ax, references: list[dict], dataset, constraint, notion, eps) -> None:
    for i, ref in enumerate(references):
        if (ref["dataset"], ref["constraint"], ref["epsilon"]) != (dataset, constraint, eps):
            continue
        if ref.get("privacy_notion") not in (None, notion):
            continue
        err, vio = zip(*ref["points"], strict=True)
        ax.plot(vio, err, color="k", marker="xs^v"[i % 4], ls=":", lw=1,
                label=f"{ref['label']} (published)")  # fmt: skip


def trade_off_figures(
    points: pd.DataFrame, out_dir: Path, references: list[dict] | None = None
) -> list[Path]:
    """Write one PNG (and PDF) per (dataset, constraint, privacy notion); returns PNG paths.
    Published reference curves are drawn in the panels they match."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    reference = points[points["epsilon"].map(math.isinf)]
    private = points[~points["epsilon"].map(math.isinf)]
    colors = _colors(points)
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
            _published(ax, references or [], dataset, constraint, notion, eps)
            hollow = {"linestyle": "--", "markerfacecolor": "none", "alpha": 0.8}
            _series(ax, refs, colors, hollow, suffix=" (non-private)")
            ax.set_title(_title(dataset, eps))
            ax.set_xlabel(f"{constraint.replace('_', ' ')} violation (test)")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("test error")
        entries = {}  # every series of every panel (a published curve may sit in one only)
        for ax in axes[0]:
            for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
                entries.setdefault(label, handle)
        axes[0][-1].legend(entries.values(), entries.keys(), fontsize=8, loc="best")
        written.append(_save(fig, out_dir / f"{dataset}_{constraint}_{notion}"))
    return written


def satisfaction_figures(points: pd.DataFrame, out_dir: Path) -> list[Path]:
    """For methods whose knob is the allowed disparity gamma: held-out violation against the
    gamma asked for, one panel per epsilon (RaCO-DP Fig. 3 read as a calibration plot);
    points under the diagonal kept their promise."""
    gamma_points = points[points["knob_name"] == "gamma"]
    colors = _colors(points)
    written = []
    for (dataset, constraint), grp in gamma_points.groupby(["dataset", "constraint"]):
        private = grp[~grp["epsilon"].map(math.isinf)]
        refs = grp[grp["epsilon"].map(math.isinf)]
        epsilons = sorted(private["epsilon"].unique()) or [math.inf]
        fig, axes = plt.subplots(1, len(epsilons), figsize=(3.8 * len(epsilons), 3.6),
                                 squeeze=False, sharey=True)  # fmt: skip
        top = float(max(grp["knob"].max(), grp["violation_mean"].max())) * 1.1
        for ax, eps in zip(axes[0], epsilons, strict=True):
            ax.plot([0, top], [0, top], color="0.5", ls="--", lw=0.8, label="violation = γ")
            for frame, suffix, style in (
                (private[private["epsilon"] == eps], "", {}),
                (refs, " (non-private)", {"markerfacecolor": "none"}),
            ):
                for label, series in frame.groupby("label"):
                    series = series.sort_values("knob")
                    ax.errorbar(series["knob"], series["violation_mean"],
                                yerr=series["violation_ci95"].fillna(0), marker="o",
                                markersize=4, capsize=2, color=colors[label],
                                label=label + suffix, **style)  # fmt: skip
            ax.set_title(_title(dataset, eps))
            ax.set_xlabel("γ (allowed disparity)")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(f"{constraint.replace('_', ' ')} on test")
        axes[0][-1].legend(fontsize=8, loc="upper left")
        written.append(_save(fig, out_dir / f"{dataset}_{constraint}_satisfaction"))
    return written
