"""`fig-tuning-cost`: what paying for tuning costs, from paired `fairbench tune` outputs.

Each dataset has two tune outputs with the same candidates, counts, seeds and splits: tuning
paid for by private selection (`selection: private`: the released model and its score are
(epsilon, delta)-DP at the stated total) and its uncharged twin (`selection: uncharged`: every
candidate at the full epsilon, exact validation scores, the papers' convention). Per (dataset,
method, epsilon, selection) the row describes the released models over the repeats (one per
split): test error and violation (mean and 95% t-interval over the repeats that released
a model; the repeats are splits, so the violation's interval carries the test splits' noise),
the mean over the released models of their test split's own standard error of the gap
(`uncertainty.trial_ses` on the released candidate's trial row, found through the selection
analysis; NaN where the data is not here), the verdict at tau (`uncertainty.verdict`: cannot
tell where that SE exceeds tau / 2 or the interval straddles tau) and the rank among methods.
Ranked are the methods that released a model in at least half the repeats and whose mean
test violation is at most tau, by mean test error; the others have no rank (a low error
bought by violating the target on average never wins). The fraction of all repeats whose
model held tau on test (`satisfied_fraction`, nothing released counting as a miss) is kept
in the CSV, not in the report: one repeat's "held" is close to a coin flip on a split whose
SE exceeds tau / 2. A method that paid
tuning leaves out (`uncalibratable: leave_out`: no candidate calibrates at the per-candidate
budget the total allows) released nothing in every repeat; its row says why (`left_out`).

Beside the methods: the majority-class predictor (every test record gets the training split's
majority label), per repeat split. It has violation 0 under every rate constraint and needs no
training, so a method whose error is not below it has learnt nothing worth its epsilon.

It reads what tune wrote (`rundir.tuning`: the tune config and the result table, a row per
repeat) and the datasets' splits for the reference; nothing is trained.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullFormatter, ScalarFormatter

from fairbench.errors import ConfigError
from fairbench.methods.base import SENSITIVE_MARK
from fairbench.metrics import majority_class_error
from fairbench.report.aggregate import ci95, trials_frame
from fairbench.report.document import Document, Images, Table
from fairbench.report.figure import finish, legend_below, new_figure
from fairbench.report.outputs import Csv, Doc, Output, Plot
from fairbench.report.palette import style
from fairbench.report.privacy_cost import dataset_key
from fairbench.report.uncertainty import trial_ses, verdict
from fairbench.rundir.store import finished_rows
from fairbench.rundir.tuning import TuneLayout, read_analysis, read_table, read_tune_config

COLUMNS = [
    "dataset",
    "method",
    "epsilon",
    "selection",
    "test_error_mean",
    "ci_low",
    "ci_high",
    "violation_mean",
    "violation_low",
    "violation_high",
    "violation_se",
    "verdict",
    "satisfied_fraction",
    "rank",
    "tau",
    "released",
    "repeats",
    "uses_sensitive_at_test",
    "candidates_mean",
    "candidate_epsilon",
    "total_epsilon",
    "accountant",
    "left_out",
    "majority_error",
    "rank_without_a",
]
SELECTIONS = {"uncharged": "free", "private": "paid"}
RANKED_FROM = 0.5  # share of repeats a method must release a model in to be ranked


def majority_error(out: Path) -> tuple[str, float]:
    """(dataset key, mean test error of the majority-class predictor over the tune output's
    repeat splits); NaN when the data cannot be loaded here."""
    from fairbench.datasets import get_dataset
    from fairbench.errors import FairbenchError

    config = read_tune_config(TuneLayout(out))
    entry = config["datasets"][0]
    options = entry.get("options") or {}
    key, _ = dataset_key(entry["name"], options)
    adapter = get_dataset(entry["name"], **options)
    errors = []
    for repeat in config["final_seeds"]:  # a repeat's split seed is its final seed
        try:
            task = adapter.load(repeat)
        except FairbenchError:
            return key, math.nan
        errors.append(majority_class_error(task.train.y, task.test.y))
    return key, float(np.mean(errors))


def released_frame(out: Path) -> pd.DataFrame:
    """One row per (method, epsilon, target, repeat) of a tune output: the released
    candidate's test error and violation (NaN when the repeat released nothing)."""
    layout = TuneLayout(out)
    config = read_tune_config(layout)
    selection = config.get("selection", "free")
    if selection not in SELECTIONS:
        raise ConfigError(
            f"{out}: selection {selection!r}; fig-tuning-cost pairs `selection: private` with "
            "its `selection: uncharged` twin"
        )
    if len(config["datasets"]) != 1:
        raise ConfigError(f"{out}: fig-tuning-cost reads one dataset per tune output")
    entry = config["datasets"][0]
    key, _ = dataset_key(entry["name"], entry.get("options") or {})
    table = read_table(layout)
    released = released_trials(layout)
    return pd.DataFrame(
        {
            "dataset": key,
            "method": [
                m + (SENSITIVE_MARK if marked else "")
                for m, marked in zip(table["method"], table["uses_sensitive_at_test"], strict=True)
            ],
            "epsilon": table["epsilon"],
            "selection": table["selection"].map(SELECTIONS),
            "tau": table["target"],
            "repeat": table["repeat"],
            "count": table["candidates"],
            "test_error": table["test_error"],
            "test_violation": table["test_violation"],
            "test_split_se": [
                _gap_se(released.get((eps, method, repeat, target)))
                for eps, method, repeat, target in zip(
                    table["epsilon"], table["method"], table["repeat"], table["target"], strict=True
                )
            ],
            "candidate_epsilon": table["candidate_epsilon"],
            "total_epsilon": table["tuning_epsilon"],
            "accountant": table["accountant"].fillna(""),
            "left_out": table["left_out"],
        }
    )


def released_trials(layout: TuneLayout) -> dict[tuple[float, str, int, float], pd.Series]:
    """(epsilon, method, repeat, target) -> the released candidate's trial row (its run
    directory's trials, by the trial id the selection analysis records); {} where the
    candidates' run directories are not here."""
    runs = [p for p in sorted(layout.private.glob("*")) if p.is_dir()]
    rows = [row for run in runs for row in finished_rows(run, "read its trials")]
    if not rows:
        return {}
    trials = trials_frame(rows).drop_duplicates("trial_id").set_index("trial_id")
    out = {}
    for record in read_analysis(layout):
        for repeat in record["repeats"]:
            for target, index in repeat["released"].items():
                trial_id = None if index is None else repeat["candidates"][index]["trial_id"]
                if trial_id in trials.index:
                    key = (record["epsilon"], record["method"], repeat["repeat"], float(target))
                    out[key] = trials.loc[trial_id]
    return out


def _gap_se(trial: pd.Series | None) -> float:
    """The SE of a released model's gap on its test split (NaN: none released, or no data)."""
    return math.nan if trial is None else trial_ses(trial, "test")[0]


def summary_rows(released: pd.DataFrame, majority: dict[str, float] | None = None) -> pd.DataFrame:
    """The CSV: one row per (dataset, method, epsilon, selection, tau), ranked, with the
    dataset's majority-class error beside it (`majority_error`)."""
    out = []
    keys = ["dataset", "method", "epsilon", "selection", "tau"]
    for key, group in released.groupby(keys, sort=True):
        errors, violations = group["test_error"].dropna(), group["test_violation"].dropna()
        half, spread = ci95(errors), ci95(violations)
        mean = float(errors.mean()) if len(errors) else math.nan
        violation = float(violations.mean()) if len(violations) else math.nan
        se = float(group["test_split_se"].mean())  # over the released models
        held = (group["test_violation"] <= group["tau"]).sum()  # NaN (nothing released) is False
        out.append(
            {
                **dict(zip(keys, key, strict=True)),
                "test_error_mean": mean,
                "ci_low": mean - half,
                "ci_high": mean + half,
                "violation_mean": violation,
                "violation_low": violation - spread,
                "violation_high": violation + spread,
                "violation_se": se,
                "verdict": ""
                if violations.empty
                else verdict(key[-1], se, violation - spread, violation + spread),
                "satisfied_fraction": float(held / len(group)),
                "released": int(group["test_error"].notna().sum()),
                "repeats": len(group),
                "uses_sensitive_at_test": key[1].endswith(SENSITIVE_MARK),
                "candidates_mean": float(group["count"].mean()),
                "candidate_epsilon": float(group["candidate_epsilon"].iloc[0]),
                "total_epsilon": float(group["total_epsilon"].iloc[0]),
                "accountant": group["accountant"].iloc[0],
                "left_out": group["left_out"].iloc[0],
            }
        )
    table = pd.DataFrame(out)
    table["rank"] = _ranks(table)
    table["rank_without_a"] = _ranks(table[~table["uses_sensitive_at_test"]])
    table["majority_error"] = table["dataset"].map(majority or {}).astype(float)
    return table[COLUMNS]


def _ranks(table: pd.DataFrame) -> pd.Series:
    """Rank by mean test error among the methods that released a model in at least half the
    repeats and whose mean test violation is at most tau, per (dataset, epsilon, selection,
    tau); NaN for the others."""
    rank = pd.Series(math.nan, index=table.index)
    for _, group in table.groupby(["dataset", "epsilon", "selection", "tau"]):
        released = group["released"] >= RANKED_FROM * group["repeats"]
        ranked = group[released & (group["violation_mean"] <= group["tau"])].sort_values(
            "test_error_mean", kind="stable"
        )
        rank.loc[ranked.index] = np.arange(1, len(ranked) + 1)
    return rank


def paired_cost(released: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, method, epsilon, tau): paid minus free test error over the repeats where
    both released a model (the same split and candidates), mean and 95% t-interval."""
    keys = ["dataset", "method", "epsilon", "tau", "repeat"]
    wide = released.pivot_table(
        index=keys, columns="selection", values="test_error", aggfunc="first"
    ).reset_index()
    if not {"free", "paid"} <= set(wide.columns):
        return pd.DataFrame(columns=[*keys[:-1], "pairs", "cost_mean", "cost_ci95"])
    wide["cost"] = wide["paid"] - wide["free"]
    rows = []
    for key, group in wide.groupby(keys[:-1], sort=True):
        cost = group["cost"].dropna()
        rows.append(
            {
                **dict(zip(keys[:-1], key, strict=True)),
                "pairs": len(cost),
                "cost_mean": float(cost.mean()) if len(cost) else math.nan,
                "cost_ci95": ci95(cost),
            }
        )
    return pd.DataFrame(rows)


def winners(
    table: pd.DataFrame, released: pd.DataFrame | None = None, rank: str = "rank"
) -> pd.DataFrame:
    """Per (dataset, epsilon, tau): the rank-1 method under free and under paid tuning,
    whether paying changes it (None where no method is ranked), and whether each winner
    beats the majority-class predictor clearly (its 95% CI entirely below that error).
    Where the winner changes and `released` is given, `paid_gap` is the free winner's minus
    the paid winner's test error under paid tuning, paired over the repeats where both
    released (the same splits), with its 95% half-width: does the change matter? `rank` names
    the ranking (`SCOPES`: all methods, or those that do not read A at test), in `scope`."""
    rows = []
    for (dataset, eps, tau), group in table.groupby(["dataset", "epsilon", "tau"], sort=True):
        best = {}
        for selection in ("free", "paid"):
            top = group[(group["selection"] == selection) & (group[rank] == 1)]
            best[selection] = None if top.empty else top.iloc[0]
        free, paid = best["free"], best["paid"]
        majority = float(group["majority_error"].iloc[0])
        rows.append(
            {
                "scope": SCOPES[rank],
                "dataset": dataset,
                "epsilon": eps,
                "tau": tau,
                "winner_free": None if free is None else free["method"],
                "error_free": math.nan if free is None else free["test_error_mean"],
                "winner_paid": None if paid is None else paid["method"],
                "error_paid": math.nan if paid is None else paid["test_error_mean"],
                "changed": None
                if free is None or paid is None
                else bool(free["method"] != paid["method"]),
                "majority_error": majority,
                "beats_majority_free": _beats(free, majority),
                "beats_majority_paid": _beats(paid, majority),
                **_paid_gap(released, dataset, eps, tau, free, paid),
            }
        )
    return pd.DataFrame(rows)


def _paid_gap(
    released: pd.DataFrame | None,
    dataset: str,
    eps: float,
    tau: float,
    free: pd.Series | None,
    paid: pd.Series | None,
) -> dict[str, float]:
    gap = {"paid_gap": math.nan, "paid_gap_ci95": math.nan, "paid_gap_pairs": 0}
    if released is None or free is None or paid is None or free["method"] == paid["method"]:
        return gap
    here = released[
        (released["dataset"] == dataset)
        & (released["epsilon"] == eps)
        & (released["tau"] == tau)
        & (released["selection"] == "paid")
    ]
    errors = here.pivot_table(
        index="repeat", columns="method", values="test_error", aggfunc="first"
    )
    if free["method"] not in errors or paid["method"] not in errors:
        return gap
    diff = (errors[free["method"]] - errors[paid["method"]]).dropna()
    if len(diff):
        gap.update(paid_gap=float(diff.mean()), paid_gap_ci95=ci95(diff), paid_gap_pairs=len(diff))
    return gap


def _beats(winner: pd.Series | None, majority: float) -> bool | None:
    """Whether a winner's 95% CI lies entirely below the majority-class error (None: no
    winner, or no reference)."""
    if winner is None or math.isnan(majority):
        return None
    return bool(winner["ci_high"] < majority)


def tuning_cost_figure(table: pd.DataFrame) -> Figure:
    """One panel per dataset: test error against epsilon, a line per method, solid for free
    tuning and dashed for paid, 95% CI bars; a point whose method is unranked there (released
    in under half the repeats, or its mean violation above tau) is drawn hollow; the
    majority-class predictor's error is a dotted line."""
    datasets = sorted(table["dataset"].unique())
    fig, axes = new_figure(1, len(datasets), (4.2, 3.8))
    for ax, dataset in zip(axes[0], datasets, strict=True):
        here = table[table["dataset"] == dataset]
        for (method, selection), line in here.groupby(["method", "selection"], sort=True):
            line = line.sort_values("epsilon")
            look = style(method.removesuffix(SENSITIVE_MARK))
            shift = 1.04 if selection == "paid" else 0.96  # dodge on the log axis
            x = line["epsilon"] * shift
            y = line["test_error_mean"]
            ax.errorbar(
                x,
                y,
                yerr=[y - line["ci_low"], line["ci_high"] - y],
                color=look.color,
                marker=look.marker,
                markersize=4,
                capsize=2,
                linewidth=1,
                linestyle="--" if selection == "paid" else "-",
            )
            hollow = line["rank"].isna()
            ax.plot(
                x[hollow],
                y[hollow],
                linestyle="none",
                marker=look.marker,
                markersize=4,
                markerfacecolor="white",
                color=look.color,
                zorder=3,
            )
        majority = here["majority_error"].iloc[0]
        if not math.isnan(majority):
            ax.axhline(majority, color="black", linestyle=":", linewidth=1)
        # an interval from 2 or 3 released models can reach below 0 or far above 1: the axis
        # shows every mean and the intervals of cells with more, and cuts the others at its edge
        steady = here[here["released"] > 3]
        top = max(here["test_error_mean"].max(), steady["ci_high"].max(skipna=True))
        ax.set_ylim(0, min(1.0, 1.05 * top))
        ax.set_xscale("log")
        ax.set_xticks(sorted(here["epsilon"].unique()))
        ax.get_xaxis().set_major_formatter(ScalarFormatter())
        ax.get_xaxis().set_minor_formatter(NullFormatter())
        title = f"{dataset} (τ = {here['tau'].iloc[0]:g})"
        if majority > ax.get_ylim()[1]:  # far above every method: named, not drawn
            title += f"\nmajority class {majority:.3f}, above the axis"
        ax.set_title(title)
        ax.set_xlabel("total ε")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("test error of the released model")
    methods = sorted(table["method"].unique())
    handles = [
        Line2D(
            [],
            [],
            color=style(m.removesuffix(SENSITIVE_MARK)).color,
            marker=style(m.removesuffix(SENSITIVE_MARK)).marker,
            label=m,
        )
        for m in methods
    ]
    handles += [
        Line2D([], [], color="grey", linestyle="-", label="tuning free (not charged)"),
        Line2D([], [], color="grey", linestyle="--", label="tuning paid (private selection)"),
        Line2D(
            [],
            [],
            color="grey",
            marker="o",
            markerfacecolor="white",
            linestyle="none",
            label="unranked: released in < half the repeats, or mean violation above τ",
        ),
        Line2D([], [], color="black", linestyle=":", label="majority class (violation 0)"),
    ]
    legend_below(fig, handles, ncol=min(len(handles), 5))
    return finish(fig)


def _fmt(mean: float, low: float, high: float) -> str:
    if math.isnan(mean):
        return "none released"
    return f"{mean:.3f} [{low:.3f}, {high:.3f}]" if not math.isnan(low) else f"{mean:.3f}"


def _name(value: object) -> str:
    return value if isinstance(value, str) else "—"


def _num(value: float) -> str:
    return "" if value is None or math.isnan(value) else f"{value:.3f}"


def _significant(r: Any) -> bool:
    """A changed winner whose paired gap under paid tuning excludes 0 (95%)."""
    return bool(r.changed) and r.paid_gap_pairs >= 2 and abs(r.paid_gap) > r.paid_gap_ci95


def _change(r: Any) -> str:
    if r.changed is None or pd.isna(r.changed):
        return ""
    if not r.changed:
        return "no"
    if r.paid_gap_pairs == 0:
        return "yes (the free winner released nothing under paid tuning)"
    if r.paid_gap_pairs == 1:
        return f"yes, undecided (one pair: {r.paid_gap:+.3f})"
    gap = f"{r.paid_gap:+.3f} ± {r.paid_gap_ci95:.3f}, {r.paid_gap_pairs} pairs"
    return f"yes ({gap})" if _significant(r) else f"yes, within noise ({gap})"


def _changed(value: object) -> str:
    return "" if value is None or pd.isna(value) else ("yes" if value else "no")


SCOPES = {"rank": "all methods", "rank_without_a": "without reading A at test"}


def _finding(top: pd.DataFrame, scope: str) -> Document:
    """The finding for one ranking scope: how often paying changes the winner, how each
    change is judged, and whether the winners beat the majority-class predictor."""
    decided = top.dropna(subset=["changed"])
    changed = decided[decided["changed"].astype(bool)]
    doc = Document().heading(3, f"Ranking {scope}")
    doc.add(
        f"The winner (rank 1) changes when tuning is paid for in {len(changed)} of "
        f"{len(decided)} (dataset, ε) settings where both arms rank a method"
        + (
            f"; {len(top) - len(decided)} settings have no ranked method in one arm."
            if len(top) > len(decided)
            else "."
        )
        + f" Of the changes, {sum(r.paid_gap_pairs == 0 for r in changed.itertuples())} "
        "are forced (the free winner released nothing under paid tuning: no candidate "
        "calibrates at its share of ε, or none passed the noisy score), "
        f"{sum(_significant(r) for r in changed.itertuples())} are significant (under "
        "paid tuning the free winner's test error exceeds the paid winner's by more than "
        "the 95% interval of their difference, paired over repeats: the `changed` "
        "column), and the rest are within noise."
    )
    columns = [
        "dataset",
        "ε",
        "majority",
        "winner, free",
        "error",
        "beats majority",
        "winner, paid",
        "error",
        "beats majority",
        "changed",
    ]
    rows = [
        [
            r.dataset,
            f"{r.epsilon:g}",
            _num(r.majority_error),
            _name(r.winner_free),
            _num(r.error_free),
            _changed(r.beats_majority_free),
            _name(r.winner_paid),
            _num(r.error_paid),
            _changed(r.beats_majority_paid),
            _change(r),
        ]
        for r in top.itertuples(index=False)
    ]
    doc.add(Table(columns, rows, "lrrlrllrll"))
    for selection in ("free", "paid"):
        judged = top[f"beats_majority_{selection}"].dropna()
        if len(judged):
            doc.add(
                f"Under {selection} tuning the winner clearly beats the majority-class "
                f"predictor in {int(judged.astype(bool).sum())} of {len(judged)} settings "
                "with a winner."
            )
    return doc


def _arm_cells(pair: pd.DataFrame, selection: str) -> list[str]:
    """error, violation (with the verdict at tau) and rank of one (method, epsilon) under one
    arm."""
    row = pair[pair["selection"] == selection]
    if row.empty:
        return ["not run", "", ""]
    r = row.iloc[0]
    if isinstance(r["left_out"], str):
        return ["no candidate calibrates", "", ""]
    error = _fmt(r["test_error_mean"], r["ci_low"], r["ci_high"])
    violation = ""
    if not math.isnan(r["violation_mean"]):
        violation = _fmt(r["violation_mean"], r["violation_low"], r["violation_high"])
        violation += f", {r['verdict']}" if r["verdict"] else ""
    return [error, violation, "" if math.isnan(r["rank"]) else f"{r['rank']:.0f}"]


def tuning_cost_document(table: pd.DataFrame, cost: pd.DataFrame, top: pd.DataFrame) -> Document:
    """The report: the finding (does paying change the winner, by how much), ranking all
    methods and ranking only those that do not read the sensitive attribute at test time,
    then per dataset one table of free vs paid per method and epsilon."""
    doc = Document().heading(1, "fig-tuning-cost: what paying for tuning costs")
    doc.add(
        "Per dataset and total ε, every private fair method tuned by the same procedure "
        "twice: **free** (`selection: uncharged`: each candidate at the full ε, exact "
        "validation scores, tuning not charged, the papers' convention) and **paid** "
        "(`selection: private`: Papernot and Steinke's private selection, the released "
        "model and its score (ε, δ)-DP at the stated total, accounted by the RDP "
        "accountant). Same candidates, counts, seeds and splits in both; 10 repeats, each "
        "on its own split. Test error of the released models: mean [95% CI] over the "
        "repeats that released one, and their test violation likewise (the repeats are "
        "splits: the interval carries the test splits' noise) with the verdict at τ: "
        "**cannot tell** where the released models' test split's standard error of the gap "
        "(their mean) exceeds τ/2 or the interval straddles τ, else meets or misses. "
        "Ranked: methods that released a model in at least half the repeats and whose mean "
        "test violation is at most τ, by mean test error (one repeat's 'held τ' is close to "
        "a coin flip where the split's SE exceeds τ/2). `majority`: the "
        "test error of predicting the training split's majority label (violation 0, no "
        "training, no ε); a winner *beats* it when its 95% CI lies entirely below."
    )
    doc.heading(2, "Finding")
    for scope in SCOPES.values():
        doc.extend(_finding(top[top["scope"] == scope], scope))
    costs = cost.dropna(subset=["cost_mean"])
    if len(costs):
        doc.add(
            f"Paid minus free test error, paired over repeats where both released: "
            f"median {costs['cost_mean'].median():+.3f}, range "
            f"{costs['cost_mean'].min():+.3f} to {costs['cost_mean'].max():+.3f} over "
            f"{len(costs)} (dataset, method, ε) cells."
        )
    columns = [
        "method",
        "ε",
        "free: error",
        "violation",
        "rank",
        "paid: error",
        "violation",
        "rank",
        "paid − free (paired)",
        "candidate ε (paid)",
    ]
    for dataset, here in table.groupby("dataset", sort=True):
        majority, se = here["majority_error"].iloc[0], here["violation_se"]
        doc.heading(2, dataset)
        doc.add(
            Images([(dataset, "tuning-cost.png")]),
            f"Majority-class predictor: test error {_num(majority) or 'not computed'} "
            "(violation 0). The released models' test split's standard error of the gap: "
            f"{_num(se.min()) or 'not computed'} to {_num(se.max()) or 'not computed'} over "
            f"the cells (τ/2 = {here['tau'].iloc[0] / 2:g}).",
        )
        rows = []
        for (method, eps), pair in here.groupby(["method", "epsilon"], sort=True):
            c = cost[
                (cost["dataset"] == dataset) & (cost["method"] == method) & (cost["epsilon"] == eps)
            ]
            paid = pair[pair["selection"] == "paid"]
            rows.append(
                [
                    method,
                    f"{eps:g}",
                    *_arm_cells(pair, "free"),
                    *_arm_cells(pair, "paid"),
                    ""
                    if c.empty or math.isnan(c["cost_mean"].iloc[0])
                    else f"{c['cost_mean'].iloc[0]:+.3f} ± {c['cost_ci95'].iloc[0]:.3f} "
                    f"({c['pairs'].iloc[0]})",
                    ""
                    if paid.empty or math.isnan(paid["candidate_epsilon"].iloc[0])
                    else f"{paid['candidate_epsilon'].iloc[0]:.3g}",
                ]
            )
        doc.add(Table(columns, rows, "lrrrrrrrrr"))
    return doc


def outputs(inputs: list[Path]) -> Iterator[Output]:
    """tuning-cost.csv (the issue's columns, then detail), paired.csv, winners.csv, the figure
    (PNG, PDF) and README.md from paired tune outputs."""
    if not inputs:
        raise ConfigError("give the `fairbench tune --out` directories of both arms")
    released = pd.concat([released_frame(p) for p in inputs], ignore_index=True)
    majority = dict(majority_error(p) for p in inputs)
    table = summary_rows(released, majority)
    cost = paired_cost(released)
    top = pd.concat([winners(table, released, rank) for rank in SCOPES], ignore_index=True)
    yield Csv("tuning-cost.csv", table)
    yield Csv("paired.csv", cost)
    yield Csv("winners.csv", top)
    yield Plot("tuning-cost", tuning_cost_figure(table))
    yield Doc("README", tuning_cost_document(table, cost, top))
