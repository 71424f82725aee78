"""`fig-disparate-impact`: the group accuracy cost of privacy (Bagdasaryan et al. 2019) and
what DPSGD-F and DPSGD-Global-Adapt do to it, from finished `fairbench run` directories.

Per dataset and sensitive attribute (a panel), per epsilon and method: each group's test
accuracy drop from the run's `erm` trial on the same split and seed (`accuracy_cost`: the
group's test error minus erm's, positive is worse), its mean over seeds and 95% Student-t
interval; so each seed's drop is already paired with its own non-private model. The minority
is the group with the fewest training records. Against DP-SGD the comparison is paired by
seed again: the per-seed difference of the minority's drops (erm's error cancels, so it is
the difference of the two methods' minority test errors on the same split), its mean and
interval. An interval below 0 says the method cost the minority less than DP-SGD did; one
that contains 0 resolves nothing.

Outputs: `groups.csv` (every group's drop), `minority.csv` (the minority's drop and the
paired difference against DP-SGD), `minority.png` (the minority's drop against epsilon, a
panel per dataset), one figure per dataset with a panel per group, and `README` (the tables
with their caption and the tally of resolved differences).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from fairbench.errors import ConfigError
from fairbench.report.accuracy_cost import DROPS, REFERENCE
from fairbench.report.aggregate import ci95, trials_frame
from fairbench.report.document import Document, Images, Table
from fairbench.report.figure import finish, legend_outside, new_figure, suptitle
from fairbench.report.outputs import Csv, Doc, Output, Plot
from fairbench.report.palette import style
from fairbench.rundir.store import finished_rows

BASELINE = "dp-sgd"  # what the fixes are compared with, by seed
FIXES = ("dpsgd-f", "dpsgd-global-adapt")  # the methods whose claim the figure tests
SMALLER, LARGER, UNRESOLVED = "smaller", "larger", "not resolved"
GROUP_COLUMNS = [
    "panel",
    "dataset",
    "sensitive",
    "group",
    "group_size_train",
    "minority",
    "epsilon",
    "label",
    "method",
    "n_seeds",
    "drop_mean",
    "drop_ci95",
]
MINORITY_COLUMNS = [
    "panel",
    "dataset",
    "sensitive",
    "group",
    "group_size_train",
    "epsilon",
    "label",
    "method",
    "n_seeds",
    "drop_mean",
    "drop_ci95",
    "n_pairs",
    "difference_mean",
    "difference_ci95",
    "verdict",
]


def panel_name(dataset: str, options: dict[str, Any]) -> str:
    """A dataset and the attribute its groups come from: `adult (sex)`."""
    sensitive = options.get("sensitive")
    return f"{dataset} ({sensitive})" if sensitive else dataset


def _options(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) else dict(value or {})


def drops_frame(rows: list[dict]) -> pd.DataFrame:
    """One row per (private trial, group): its panel, epsilon, method, seed and drop."""
    trials = trials_frame(rows)
    out = []
    for _, trial in trials.iterrows():
        drops = trial[DROPS]
        if trial["method"] == REFERENCE or not isinstance(drops, dict):
            continue
        options = _options(trial["dataset_options"])
        sizes = dict(zip(trial["group_names"], trial["group_sizes_train"], strict=True))
        for group, drop in drops.items():
            out.append(
                {
                    "panel": panel_name(trial["dataset"], options),
                    "dataset": trial["dataset"],
                    "sensitive": options.get("sensitive", ""),
                    "group": group,
                    "group_size_train": int(sizes[group]),
                    "epsilon": float(trial["epsilon"]),
                    "label": trial["label"],
                    "method": trial["method"],
                    "seed": int(trial["seed"]),
                    "drop": float(drop),
                }
            )
    return pd.DataFrame(out)


def minorities(drops: pd.DataFrame) -> dict[str, str]:
    """Per panel the group with the fewest training records (mean over the splits)."""
    sizes = drops.groupby(["panel", "group"])["group_size_train"].mean().reset_index()
    smallest = sizes.sort_values("group_size_train", kind="stable").groupby("panel").head(1)
    return dict(zip(smallest["panel"], smallest["group"], strict=True))


def _is_minority(frame: pd.DataFrame, minority: dict[str, str]) -> list[bool]:
    pairs = zip(frame["panel"], frame["group"], strict=True)
    return [minority[panel] == group for panel, group in pairs]


def group_table(drops: pd.DataFrame) -> pd.DataFrame:
    """Every group's mean drop and its 95% interval over seeds, per panel, epsilon, method."""
    keys = ["panel", "dataset", "sensitive", "group", "epsilon", "label", "method"]
    table = (
        drops.groupby(keys, sort=True)
        .agg(
            group_size_train=("group_size_train", "mean"),
            n_seeds=("seed", "nunique"),
            drop_mean=("drop", "mean"),
            drop_ci95=("drop", ci95),
        )
        .reset_index()
    )
    table["group_size_train"] = table["group_size_train"].round().astype(int)
    table["minority"] = _is_minority(table, minorities(drops))
    return table[GROUP_COLUMNS]


def verdict(mean: float, half: float) -> str:
    """Where the 95% interval of a difference (method minus DP-SGD) lies against 0."""
    if math.isnan(half):
        return UNRESOLVED
    if mean + half < 0:
        return SMALLER
    return LARGER if mean - half > 0 else UNRESOLVED


def minority_table(drops: pd.DataFrame) -> pd.DataFrame:
    """Per panel, epsilon and method the minority's drop, and the per-seed paired difference
    of that drop against DP-SGD's (mean, 95% interval, verdict; empty for DP-SGD itself)."""
    mine = drops[_is_minority(drops, minorities(drops))]
    groups = group_table(mine)
    rows = []
    for _, row in groups.iterrows():
        at = mine[(mine["panel"] == row["panel"]) & (mine["epsilon"] == row["epsilon"])]
        own = at[at["label"] == row["label"]].set_index("seed")["drop"]
        base = at[at["method"] == BASELINE].set_index("seed")["drop"]
        seeds = own.index.intersection(base.index)
        paired = row["method"] != BASELINE and len(seeds) > 0
        diff = own.loc[seeds] - base.loc[seeds] if paired else pd.Series(dtype=float)
        mean, half = (float(diff.mean()), ci95(diff)) if paired else (math.nan, math.nan)
        rows.append(
            {
                **{k: row[k] for k in GROUP_COLUMNS if k != "minority"},
                "n_pairs": len(seeds) if paired else 0,
                "difference_mean": mean,
                "difference_ci95": half,
                "verdict": verdict(mean, half) if paired else "",
            }
        )
    table = pd.DataFrame(rows, columns=MINORITY_COLUMNS)
    rank = {label: i for i, label in enumerate(_labels(table))}
    order = table.assign(rank=table["label"].map(rank)).sort_values(
        ["panel", "epsilon", "rank"], kind="stable"
    )
    return order[MINORITY_COLUMNS].reset_index(drop=True)


def _points(value: float, half: float, signed: bool = True) -> str:
    """A drop in points of accuracy, with its interval: `+1.23 ± 0.45`."""
    if math.isnan(value):
        return ""
    text = f"{100 * value:+.2f}" if signed else f"{100 * value:.2f}"
    return text if math.isnan(half) else f"{text} ± {100 * half:.2f}"


def _eps(value: float) -> str:
    return f"{value:g}"


def tally(table: pd.DataFrame) -> list[str]:
    """Per fix: in how many (dataset, epsilon) cells the minority's drop is resolved smaller
    or larger than DP-SGD's, and the largest resolved reduction."""
    lines = []
    for method in FIXES:
        rows = table[table["method"] == method]
        if rows.empty:
            continue
        smaller, larger = rows[rows["verdict"] == SMALLER], rows[rows["verdict"] == LARGER]
        text = (
            f"`{method}` against `{BASELINE}` on the minority: smaller in {len(smaller)} of "
            f"{len(rows)} (dataset, ε) cells, larger in {len(larger)}, not resolved in "
            f"{len(rows) - len(smaller) - len(larger)}"
        )
        if not smaller.empty:
            best = smaller.loc[smaller["difference_mean"].idxmin()]
            text += (
                f"; the largest resolved reduction {_points(-best['difference_mean'], math.nan)}"
                f" points ({best['panel']}, ε {_eps(best['epsilon'])}, interval "
                f"{_points(best['difference_mean'], best['difference_ci95'])})"
            )
        lines.append(text + ".")
    return lines


CAPTION = (
    "The minority group's test-accuracy drop from the non-private model (erm on the same split "
    "and seed), in points of accuracy (positive: the private model is worse), mean ± 95% "
    "Student-t interval over seeds; and the per-seed paired difference of that drop against "
    f"{BASELINE}'s (negative: the method costs the minority less), with its verdict."
)


def document(table: pd.DataFrame, figures: list[tuple[str, str]]) -> Document:
    doc = Document().heading(1, "The disparate impact of DP-SGD: the minority group's drop")
    doc.add(
        "Each group's accuracy drop is its test error minus the run's erm trial's on the same "
        "split and seed; the minority is the group with the fewest training records. Methods "
        "at their defaults, untuned; the fair methods (raco-dp, dp-fermi) also pay for their "
        "demographic-parity constraint."
    )
    doc.heading(2, "Paired against DP-SGD")
    doc.add(*tally(table))
    columns = [
        "dataset (attribute)",
        "minority (train n)",
        "ε",
        "method",
        "seeds",
        "minority drop (points)",
        f"minus {BASELINE} (points)",
        "verdict",
    ]
    rows = [
        [
            r["panel"],
            f"{r['group']} ({r['group_size_train']:,})",
            _eps(r["epsilon"]),
            r["label"],
            str(r["n_seeds"]),
            _points(r["drop_mean"], r["drop_ci95"]),
            _points(r["difference_mean"], r["difference_ci95"]),
            r["verdict"],
        ]
        for _, r in table.iterrows()
    ]
    doc.heading(2, "Minority drop by dataset, ε and method")
    doc.add(Table(columns, rows, "llrlrrrl", caption=CAPTION))
    return doc.add(Images(figures))


def _offsets(labels: list[str]) -> dict[str, float]:
    """Each method's horizontal nudge (a factor on epsilon) so intervals do not overlap."""
    n = len(labels)
    return {label: 2 ** (0.06 * (i - (n - 1) / 2)) for i, label in enumerate(labels)}


def _draw(ax: Axes, rows: pd.DataFrame, labels: list[str], epsilons: list[float]) -> None:
    """Drop (points) against epsilon, one series per method with its interval bars."""
    nudge = _offsets(labels)
    for label in labels:
        mine = rows[rows["label"] == label].sort_values("epsilon")
        if mine.empty:
            continue
        look = style(str(mine["method"].iloc[0]))
        ax.errorbar(
            mine["epsilon"] * nudge[label],
            100 * mine["drop_mean"],
            yerr=100 * mine["drop_ci95"].fillna(0.0),
            color=look.color,
            marker=look.marker,
            markersize=4,
            linewidth=1,
            capsize=2,
            label=label,
        )
    ax.axhline(0.0, color="0.5", linewidth=0.8, linestyle=":")
    ax.set_xscale("log", base=2)
    ax.set_xticks(epsilons, [_eps(e) for e in epsilons])
    ax.minorticks_off()
    ax.set_xlabel("ε (whole-record DP)", fontsize=8)
    ax.tick_params(labelsize=7)


def _labels(table: pd.DataFrame) -> list[str]:
    """Method labels in a fixed order: DP-SGD, the fixes, then the rest by name."""
    order = {BASELINE: 0, **{m: i + 1 for i, m in enumerate(FIXES)}}
    firsts = table.drop_duplicates("label")
    pairs = zip(firsts["method"], firsts["label"], strict=True)
    ranked = sorted(pairs, key=lambda m: (order.get(m[0], len(order)), m[1]))
    return [label for _, label in ranked]


def minority_figure(table: pd.DataFrame) -> Figure:
    panels = list(dict.fromkeys(table["panel"]))
    cols = min(len(panels), 2)
    rows = math.ceil(len(panels) / cols)
    fig, axes = new_figure(rows, cols, (3.4, 2.6))
    labels, epsilons = _labels(table), sorted(table["epsilon"].unique())
    flat = [ax for row in axes for ax in row]
    for ax, panel in zip(flat, panels, strict=False):
        mine = table[table["panel"] == panel]
        first = mine.iloc[0]
        _draw(ax, mine, labels, epsilons)
        ax.set_title(f"{panel}: {first['group']}", fontsize=9)
        ax.set_ylabel("accuracy drop (points)", fontsize=8)
    for ax in flat[len(panels) :]:
        ax.set_visible(False)
    suptitle(
        fig,
        "The minority group's accuracy drop from the non-private model "
        "(mean and 95% interval over seeds, paired by seed with erm)",
    )
    legend_outside(fig, flat[: len(panels)])
    return finish(fig)


def panel_figure(table: pd.DataFrame, panel: str) -> Figure:
    """One dataset: a panel per group (the minority marked), drop against epsilon."""
    mine = table[table["panel"] == panel]
    groups = (
        mine.drop_duplicates("group")
        .sort_values("group_size_train", ascending=False, kind="stable")
        .to_dict("records")
    )
    cols = min(len(groups), 3)
    rows = math.ceil(len(groups) / cols)
    fig, axes = new_figure(rows, cols, (3.0, 2.4), sharey=True)
    labels, epsilons = _labels(table), sorted(mine["epsilon"].unique())
    flat = [ax for row in axes for ax in row]
    for ax, group in zip(flat, groups, strict=False):
        _draw(ax, mine[mine["group"] == group["group"]], labels, epsilons)
        mark = ", minority" if group["minority"] else ""
        ax.set_title(f"{group['group']} (train n {group['group_size_train']:,}{mark})", fontsize=8)
    for row in axes:
        row[0].set_ylabel("accuracy drop (points)", fontsize=8)
    for ax in flat[len(groups) :]:
        ax.set_visible(False)
    suptitle(fig, f"{panel}: each group's accuracy drop from the non-private model")
    legend_outside(fig, flat[: len(groups)])
    return finish(fig)


def _stem(panel: str) -> str:
    return panel.replace(" (", "-").replace(")", "")


def outputs(inputs: list[Path]) -> Iterator[Output]:
    """The figure from finished run directories (their stores, or trials.csv where the store
    was not kept)."""
    rows = [row for run in inputs for row in finished_rows(run, "draw the figure")]
    drops = drops_frame(rows)
    if drops.empty:
        raise ConfigError(
            f"{', '.join(map(str, inputs))}: no private trial has an `{REFERENCE}` trial on its "
            "split and seed to drop from; list erm in the run (fairbench run resumes)"
        )
    groups, minority = group_table(drops), minority_table(drops)
    yield Csv("groups.csv", groups)
    yield Csv("minority.csv", minority)
    yield Plot("minority", minority_figure(minority))
    panels = list(dict.fromkeys(groups["panel"]))
    for panel in panels:
        yield Plot(_stem(panel), panel_figure(groups, panel))
    figures = [("minority", "minority.png")] + [(p, f"{_stem(p)}.png") for p in panels]
    yield Doc("README", document(minority, figures))
