"""Trade-off figures in the style of the method papers: test error vs held-out violation,
one panel per epsilon, one series per method entry (knob values joined in order and written
beside their points), 95% CI bars on both axes; non-private methods are drawn hollow in every
panel as references. Each method keeps one colour and marker across all figures (`palette`);
the legend sits outside the data, and the title says what the figure compares."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from fairbench.report.aggregate import dominated
from fairbench.report.figure import finish, legend_outside, new_figure, place_labels, save
from fairbench.report.palette import LINESTYLES, style

# how a run chose its hyper-parameters when `fairbench tune` did not (every title says it)
UNTUNED = "defaults, untuned"


def _linestyles(points: pd.DataFrame) -> dict[str, str]:
    """Several entries (labels) of one method in a figure share its colour, not its line."""
    out = {}
    for _, labels in points.groupby("method")["label"]:
        for i, label in enumerate(sorted(labels.unique())):
            out[label] = LINESTYLES[i % len(LINESTYLES)]
    return out


Label = tuple[str, float, float, str]  # text, x, y, colour


def _series(ax, points: pd.DataFrame, lines: dict[str, str], hollow: bool = False) -> list[Label]:
    """The points' series with CI bars; returns the knob values to write beside the points."""
    labels: list[Label] = []
    for (label, _config), series in points.groupby(["label", "config_id"], sort=True):
        series = series.sort_values("knob")
        look = style(series["method"].iloc[0])
        ax.errorbar(
            series["violation_mean"],
            series["test_error_mean"],
            xerr=series["violation_ci95"].fillna(0),
            yerr=series["test_error_ci95"].fillna(0),
            label=label + (" (non-private)" if hollow else ""),
            color=look.color,
            marker=look.marker,
            markersize=5,
            capsize=2,
            linestyle="--" if hollow else lines[label],
            markerfacecolor="none" if hollow else look.color,
            alpha=0.8 if hollow else 1.0,
        )
        labels += [
            (row.knob_values, row.violation_mean, row.test_error_mean, look.color)
            for row in series.itertuples()
            if row.knob_values
        ]
    return labels


def _knob_labels(ax, labels: list[Label]) -> None:
    """Each knob value beside its point where it touches no other text (pareto.md has all)."""
    place_labels(ax, labels)


def _eps_title(eps: float) -> str:
    return "non-private" if math.isinf(eps) else f"ε = {eps:g}"


def _suptitle(
    fig, dataset: str, constraint: str, notion: str, grp: pd.DataFrame, hyper: str
) -> None:
    models = ", ".join(sorted(grp["model"].unique()))
    seeds = int(grp["n_seeds"].max())
    fig.suptitle(
        f"{dataset} · {constraint.replace('_', ' ')} · privacy: {notion} · "
        f"model: {models} · {seeds} seeds (95% CI)\nhyper-parameters: {hyper}",
        fontsize=10,
    )


def _save(fig: Figure, stem: Path) -> Path:
    """PNG (for reading) and PDF (for papers) through `figure.save`; returns the PNG path."""
    return save(fig, stem)[0]


def _frontier(ax, points: pd.DataFrame) -> None:
    err, vio = points["test_error_mean"].to_numpy(), points["violation_mean"].to_numpy()
    keep = ~dominated(err, vio)
    order = vio[keep].argsort()
    ax.step(
        vio[keep][order],
        err[keep][order],
        where="post",
        color="0.6",
        lw=0.8,
        zorder=0,
        label="Pareto frontier",
    )


def _published(ax, references: list[dict], dataset, constraint, notion, eps) -> None:
    for i, ref in enumerate(references):
        if (ref["dataset"], ref["constraint"], ref["epsilon"]) != (dataset, constraint, eps):
            continue
        if ref.get("privacy_notion") not in (None, notion):
            continue
        err, vio = zip(*ref["points"], strict=True)
        ax.plot(
            vio,
            err,
            color="k",
            marker="xs^v"[i % 4],
            ls=":",
            lw=1,
            label=f"{ref['label']} (published)",
        )


def trade_off_figure(
    points: pd.DataFrame,
    dataset: str,
    constraint: str,
    notion: str,
    references: list[dict] | None = None,
    hyper: str = UNTUNED,
    ax=None,
) -> Figure:
    """The trade-off figure of one (dataset, constraint, privacy notion): one panel per epsilon
    of its private points, or, in `ax`, the one epsilon `points` holds (the caller filters).
    Non-private points of the dataset are drawn hollow in every panel. A new figure is not
    registered with pyplot: nothing to close, and a notebook shows the one returned."""
    is_ref = points["epsilon"].map(math.isinf)
    here = (points["dataset"] == dataset) & (points["constraint"] == constraint)
    refs = points[here & is_ref]
    grp = points[here & ~is_ref & (points["privacy_notion"] == notion)]
    if grp.empty:
        grp = refs  # a run without private methods: the non-private points alone
    epsilons = sorted(grp["epsilon"].unique())
    lines = _linestyles(points)
    if ax is None:
        fig, grid = new_figure(1, len(epsilons), (4.2, 3.8), sharey=True)
        axes = grid[0]
    else:
        fig, axes = ax.figure, [ax]
        if len(epsilons) != 1:
            raise ValueError(f"one axes shows one epsilon; these points hold {epsilons}")
    labels = []
    for panel_ax, eps in zip(axes, epsilons, strict=True):
        panel = grp[grp["epsilon"] == eps]
        mine = []
        if not math.isinf(eps):
            _frontier(panel_ax, panel)
            mine += _series(panel_ax, panel, lines)
        _published(panel_ax, references or [], dataset, constraint, notion, eps)
        mine += _series(panel_ax, refs, lines, hollow=True)
        labels.append((panel_ax, mine))
        panel_ax.set_title(_eps_title(eps), fontsize=9)
        panel_ax.set_xlabel(f"{constraint.replace('_', ' ')} violation (test)")
        panel_ax.grid(alpha=0.3)
    axes[0].set_ylabel("test error")
    if ax is None:
        _suptitle(fig, dataset, constraint, notion, pd.concat([grp, refs]), hyper)
        legend_outside(fig, axes)
        for panel_ax, mine in labels:
            _knob_labels(panel_ax, mine)
        finish(fig)
    else:  # the caller's axes (a notebook's): written where they fall, its canvas untouched
        for text, x, y, colour in labels[0][1]:
            ax.annotate(
                text, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=6, color=colour
            )
        ax.legend(fontsize=7)
    return fig


def trade_off_figures(
    points: pd.DataFrame,
    out_dir: Path,
    references: list[dict] | None = None,
    hyper: str = UNTUNED,
) -> list[Path]:
    """Write one PNG (and PDF) per (dataset, constraint, privacy notion); returns PNG paths.
    Published reference curves are drawn in the panels they match; `hyper` says in the title
    how the hyper-parameters were chosen."""
    out_dir.mkdir(parents=True, exist_ok=True)
    private = points[~points["epsilon"].map(math.isinf)]
    keys = ["dataset", "constraint", "privacy_notion"]
    figures = list(private.groupby(keys).groups) or [
        (d, c, "non-private") for d, c in points.groupby(["dataset", "constraint"]).groups
    ]
    written = []
    for dataset, constraint, notion in figures:
        fig = trade_off_figure(points, dataset, constraint, notion, references, hyper)
        written.append(_save(fig, out_dir / f"{dataset}_{constraint}_{notion}"))
    return written


def satisfaction_figures(points: pd.DataFrame, out_dir: Path, hyper: str = UNTUNED) -> list[Path]:
    """For methods whose knob is the allowed disparity gamma: held-out violation against the
    gamma asked for, one panel per epsilon (RaCO-DP Fig. 3 read as a calibration plot);
    points under the diagonal kept their promise."""
    gamma_points = points[points["knob_name"] == "gamma"]
    lines = _linestyles(points)
    written = []
    for (dataset, constraint, notion), private, refs in _by_notion(gamma_points):
        grp = pd.concat([private, refs])
        epsilons = sorted(private["epsilon"].unique()) or [math.inf]
        fig, axes = new_figure(1, len(epsilons), (3.8, 3.8), sharey=True)
        top = float(max(grp["knob"].max(), grp["violation_mean"].max())) * 1.1
        for ax, eps in zip(axes[0], epsilons, strict=True):
            ax.plot([0, top], [0, top], color="0.5", ls="--", lw=0.8, label="violation = γ")
            for frame, hollow in ((private[private["epsilon"] == eps], False), (refs, True)):
                for label, series in frame.groupby("label"):
                    series = series.sort_values("knob")
                    look = style(series["method"].iloc[0])
                    ax.errorbar(
                        series["knob"],
                        series["violation_mean"],
                        yerr=series["violation_ci95"].fillna(0),
                        marker=look.marker,
                        markersize=5,
                        capsize=2,
                        color=look.color,
                        linestyle="--" if hollow else lines[label],
                        markerfacecolor="none" if hollow else look.color,
                        label=label + (" (non-private)" if hollow else ""),
                    )
            ax.set_title(_eps_title(eps), fontsize=9)
            ax.set_xlabel("γ (allowed disparity)")
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(f"{constraint.replace('_', ' ')} on test")
        _suptitle(fig, dataset, constraint, notion, grp, hyper)
        legend_outside(fig, axes[0])
        own = notion not in ("full", "non-private")  # the other notions' figures say so
        stem = f"{dataset}_{constraint}_satisfaction" + (f"_{notion}" if own else "")
        written.append(_save(fig, out_dir / stem))
    return written


def _by_notion(
    points: pd.DataFrame,
) -> list[tuple[tuple[str, str, str], pd.DataFrame, pd.DataFrame]]:
    """Per (dataset, constraint, privacy notion of the private points): those points and the
    panel's non-private references, so that no figure mixes two notions (non-private only:
    one figure under "non-private")."""
    out = []
    for (dataset, constraint), grp in points.groupby(["dataset", "constraint"]):
        is_ref = grp["epsilon"].map(math.isinf)
        refs, private = grp[is_ref], grp[~is_ref]
        notions = sorted(private["privacy_notion"].unique()) or ["non-private"]
        for notion in notions:
            mine = private[private["privacy_notion"] == notion]
            out.append(((dataset, constraint, notion), mine, refs))
    return out
