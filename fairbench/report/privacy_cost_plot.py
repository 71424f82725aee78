"""The `fig-privacy-cost` figure of one dataset and model: test error against epsilon.

One panel per target tau (loosest first), one line per private method with its 95% CI band,
in the method's fixed colour and marker (`palette.style`). A point's fill is its verdict at
tau on test (uncertainty.verdict): filled where it meets tau, hollow where it misses (a low
error bought by violating the target is visible), half-filled where the test split cannot
tell; a ring marks an unstable selection (test beyond validation by more than the splits'
noise). A private method selected on validation error alone (DP-SGD, which has no fairness
knob: the private accuracy reference) is dashed and labelled so, the same in every panel.
ERM and the non-private fair reference are horizontal lines; the private methods'
non-private twins (sgda, cgoo-nonprivate) are points at the right edge, past the largest
epsilon, where a reader looks for "no privacy at all"."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from fairbench.report.figure import finish, legend_outside, new_figure, panel_note, suptitle
from fairbench.report.palette import style
from fairbench.report.privacy_cost_notes import ERROR_ONLY
from fairbench.report.uncertainty import MEETS, MISSES

ERM = "erm"
FAIR_REFERENCE = "fairlearn-eg"
# a point's look by its verdict ("" and cannot tell: half), and the legend's words for it
LOOKS = {MEETS: "filled", MISSES: "hollow"}
KEYS = {
    "filled": "filled: meets τ on test (95% interval ≤ τ)",
    "hollow": "hollow: misses τ on test (95% interval > τ)",
    "half": "half-filled: test split cannot tell (SE > τ/2, or interval straddles τ)",
}
UNSTABLE = "ringed: unstable (test exceeds validation beyond the splits' noise)"
RING = 12  # the unstable ring's marker size, around a point of size 5 to 6


DODGE = 0.12  # log-x spread of the series at one epsilon, where several epsilons share a panel
LONE_DODGE = 0.8  # at a grid's only epsilon, which has the panel to itself


def _dodge(i: int, n: int, spread: float = DODGE) -> float:
    """A small multiplicative x offset for the i-th of n series on a log axis."""
    return 1.0 if n < 2 else math.exp(spread * (i / (n - 1) - 0.5))


def _reference(
    rows: pd.DataFrame, method: str, model: str, tau: float
) -> tuple[pd.Series | None, str]:
    """The reference's row at this tau, of the same model when there is one (fairlearn-eg is
    linear only: an MLP figure borrows the logistic one and says so in the label)."""
    mine = rows[(rows["method"] == method) & (rows["tau"] == tau) & rows["epsilon"].map(math.isinf)]
    if mine.empty:
        return None, ""
    same = mine[mine["model"] == model]
    row = (same if len(same) else mine).iloc[0]
    return row, "" if row["model"] == model else f", {row['model']}"


def _private_lines(ax, private: pd.DataFrame, plugins: dict[str, str], spread: float) -> None:
    """One line per private method with its CI band; each point filled by its verdict
    (`_marks`); dashed for an accuracy reference selected on validation error alone."""
    methods = sorted(private["method"].unique())
    for i, (method, line) in enumerate(private.groupby("method", sort=True)):
        line = line.sort_values("epsilon")
        x = line["epsilon"] * _dodge(i, len(methods), spread)  # overlapping intervals readable
        look = style(plugins.get(method, method))
        free = bool((line["selection_rule"] == ERROR_ONLY).all())
        ax.fill_between(
            x, line["ci_low"], line["ci_high"], color=look.color, alpha=0.12, linewidth=0
        )
        ax.errorbar(
            x,
            line["test_error_mean"],
            yerr=[
                line["test_error_mean"] - line["ci_low"],
                line["ci_high"] - line["test_error_mean"],
            ],
            color=look.color,
            marker=look.marker,
            markersize=5,
            capsize=2,
            linestyle="--" if free else "-",
            label=f"{method} (no fairness constraint)" if free else method,
        )
        _marks(ax, x, line, look.marker, look.color, 5)


def _look(verdict: str) -> str:
    return LOOKS.get(verdict, "half")


def _fill(look: str, color: str) -> dict[str, Any]:
    """Marker keywords for a look: the colour, white, or the lower half coloured."""
    return {
        "color": color,
        "fillstyle": "bottom" if look == "half" else "full",
        "markerfacecolor": "white" if look == "hollow" else color,
        "markerfacecoloralt": "white",
    }


def _ring() -> dict[str, Any]:
    return {
        "marker": "o",
        "markersize": RING,
        "markerfacecolor": "none",
        "markeredgecolor": "black",
        "markeredgewidth": 0.8,
    }


def _marks(ax, x: pd.Series, rows: pd.DataFrame, marker: str, color: str, size: float) -> None:
    """Each point's marker again, above errorbar's own, filled by its verdict; a black ring
    around an unstable one."""
    flagged = rows["unstable"].eq(True)  # None: not checked
    for x_at, row, ring in zip(x, rows.itertuples(index=False), flagged, strict=True):
        at = ([x_at], [row.test_error_mean])
        fill = _fill(_look(row.verdict), color)
        ax.plot(*at, linestyle="none", marker=marker, markersize=size, zorder=3, **fill)
        if ring:
            ax.plot(*at, linestyle="none", zorder=3, **_ring())


def mark_keys(rows: pd.DataFrame) -> dict[str, Line2D]:
    """Legend entries for the looks and the ring the points of `rows` use."""
    used = set(rows["verdict"].map(_look))
    keys = {
        text: Line2D([], [], linestyle="none", marker="o", **_fill(look, "grey"))
        for look, text in KEYS.items()
        if look in used
    }
    if rows["unstable"].eq(True).any():
        keys[UNSTABLE] = Line2D([], [], linestyle="none", **{**_ring(), "markersize": 8})
    return keys


def _twins(ax, here: pd.DataFrame, plugins: dict[str, str], edge: float) -> None:
    """The private methods' non-private twins as points at the "non-private" tick."""
    twins = here[
        here["epsilon"].map(math.isinf).astype(bool) & ~here["method"].isin([ERM, FAIR_REFERENCE])
    ]
    twins = twins.sort_values("method")
    for i, (_, row) in enumerate(twins.iterrows()):
        look = style(plugins.get(row["method"], row["method"]))
        x = edge * _dodge(i, len(twins))
        ax.errorbar(
            [x],
            [row["test_error_mean"]],
            yerr=[
                [row["test_error_mean"] - row["ci_low"]],
                [row["ci_high"] - row["test_error_mean"]],
            ],
            color=look.color,
            marker=look.marker,
            markersize=6,
            capsize=3,
            linestyle="none",
            label=f"{row['method']} (non-private)",
        )
        _marks(ax, pd.Series([x]), twins.iloc[[i]], look.marker, look.color, 6)


def _references(ax, rows: pd.DataFrame, model: str, tau: float) -> None:
    """ERM and the non-private fair reference as horizontal lines with their CI bands."""
    for method, text, dash in (
        (ERM, "ERM (non-private, unconstrained", "-"),
        (FAIR_REFERENCE, "fairlearn-eg (non-private fair ref.", "--"),
    ):
        row, suffix = _reference(rows, method, model, tau)
        if row is None:
            continue
        color = style(method).color
        ax.axhline(
            row["test_error_mean"],
            color=color,
            linestyle=dash,
            linewidth=1.2,
            label=f"{text}{suffix})",
        )
        if not math.isnan(row["ci_low"]):
            ax.axhspan(row["ci_low"], row["ci_high"], color=color, alpha=0.07, linewidth=0)


def _axes(ax, eps: list[float], edge: float, tau: float, empty: bool, unreached: str) -> None:
    """Log epsilon axis with the non-private tick, title, and what has no point (a note under
    the panel, laid out with it)."""
    ax.set_xscale("log")
    ax.set_xticks([*eps, edge])
    ax.set_xticklabels([f"{e:g}" for e in eps] + ["non-\nprivate"])
    ax.set_xlim(min(eps) / 1.6, edge * 1.6)
    ax.minorticks_off()
    if empty:
        ax.text(0.5, 0.5, "no method reaches τ", transform=ax.transAxes, ha="center")
    ax.set_title(f"τ = {tau:g} (held-out violation target)", fontsize=10)
    ax.set_xlabel("ε (log scale)")
    ax.grid(alpha=0.3)
    if unreached:
        panel_note(ax, f"not within τ on validation (no point): {unreached}")


def tau_panel(
    ax,
    rows: pd.DataFrame,
    model: str,
    tau: float,
    plugins: dict[str, str],
    eps: list[float],
    unreached: str,
) -> None:
    """One panel at target `tau`: the private methods' lines against epsilon, their
    non-private twins at the right edge, ERM and the fair reference as horizontal lines, and a
    note naming what has no point. fig-literature draws its panels with it too."""
    here = rows[(rows["model"] == model) & (rows["tau"] == tau)]
    edge = max(eps) * 3  # where the non-private twins sit, in every panel alike
    private = here[here["epsilon"].map(math.isfinite).astype(bool)]
    # one epsilon (fig-literature's grid): spread its methods over the panel, not 12% of it
    _private_lines(ax, private, plugins, DODGE if len(eps) > 1 else LONE_DODGE)
    _twins(ax, here, plugins, edge)
    _references(ax, rows, model, tau)
    _axes(ax, eps, edge, tau, here.empty, unreached)


def privacy_cost_figure(
    rows: pd.DataFrame,
    model: str,
    plugins: dict[str, str],
    meta: dict[str, Any],
    unreached: dict[float, str] | None = None,
) -> Figure:
    """One dataset's figure for `model` from its rows (privacy_cost.COLUMNS). `unreached`
    names, per tau, the methods (and epsilons) that have no point because nothing was within
    tau on validation."""
    unreached = unreached or {}
    taus = sorted(rows["tau"].unique(), reverse=True) or [math.nan]
    # two panels a row: four targets in one row left each panel too narrow to read its
    # dozen overlapping lines
    cols = min(len(taus), 2)
    grid_rows = math.ceil(len(taus) / cols)
    fig, grid = new_figure(grid_rows, cols, (5.6, 4.4), sharey=True)
    panels = [ax for row in grid for ax in row]
    eps = sorted(float(e) for e in meta["epsilons"])
    for ax, tau in zip(panels, taus, strict=False):
        tau_panel(ax, rows, model, tau, plugins, eps, unreached.get(float(tau), ""))
    for ax in panels[len(taus) :]:
        ax.set_visible(False)
    for row in grid:
        row[0].set_ylabel("test error (selected configuration)")
    suptitle(
        fig,
        f"{meta['title']} · {meta['constraint']} · {model}: tuned at each τ, "
        f"{meta['final_seeds']} fresh seeds (mean, 95% CI); tuning not charged to ε",
    )
    legend_outside(fig, panels, mark_keys(rows[rows["model"] == model]))
    return finish(fig)
