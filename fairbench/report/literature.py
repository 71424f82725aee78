"""`fig-literature`: the field's baselines (Jagielski et al., PF-LD, the DP-ERM mitigation)
beside the seed methods, tuned with equal draws (`fairbench tune`), in both privacy notions,
with the published Adult points beside ours.

Per dataset it writes a CSV (privacy_cost's rows plus each row's privacy notion and whether
the method reads the sensitive attribute at test time), one figure (a row of panels per
notion, a column per violation target tau; published points as black markers in the panels of
their own notion only), the dominance table (does a seed method beat a baseline at tau: the
paired per-seed test-error difference with its 95% t-interval), the budget-sensitivity
table (report.budget_sensitivity: the winner per notion, epsilon and tau at each tuning
budget, and whether it is stable), and `references.csv`/`.md` (each published point against
our tuned error at the loosest target no looser than its violation: ours is then at least as
fair by its target).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from scipy import stats

from fairbench.errors import ConfigError
from fairbench.methods.base import SENSITIVE_MARK
from fairbench.report.budget_sensitivity import budget_section, notions
from fairbench.report.document import Document, Images, Table
from fairbench.report.figure import (
    finish,
    legend_outside,
    new_figure,
    place_labels,
    suptitle,
)
from fairbench.report.outputs import Csv, Doc, Output, Plot
from fairbench.report.privacy_cost import (
    COLUMNS,
    TuneOutput,
    budget_rows,
    cost_rows,
    final_trials,
    load_tune_output,
    unreachable,
)
from fairbench.report.privacy_cost_notes import WITHIN_TAU, fmt_eps, unreached_text
from fairbench.report.privacy_cost_plot import mark_keys, tau_panel
from fairbench.report.uncertainty_notes import satisfaction_section

NOTIONS = ("full", "sensitive-attribute", "local-dp-attribute")  # one row of panels each
NOTION_TITLES = {
    "full": "full-record DP",
    "sensitive-attribute": "DP of the sensitive attribute",
    "local-dp-attribute": "local DP of the sensitive attribute",
}
SEEDS = ("raco-dp", "dp-fermi")  # the seed methods whose claims the baselines test
REFERENCES = Path(__file__).resolve().parent.parent / "references" / "adult-published-baselines.csv"
# the published file's method names -> our re-run of the same method
SAME_METHOD = {
    "Jagielski-Inprocessing": "jagielski-oracle",
    "PFLD": "pf-ld",
    "DP-ERM_Mitigation": "dp-erm-mitigation",
}
# the published file's names for constraints
EXPERIMENTS = {"equalized_odds": "equalized_odds", "demographic_parity": "demographic_parity"}


def literature_rows(tuned: TuneOutput) -> tuple[pd.DataFrame, dict[tuple, pd.Series]]:
    """privacy_cost's rows with `privacy_notion` and `uses_sensitive_at_test`, and per row
    key (dataset, tau, method, epsilon) its fresh seeds' test errors (for paired tests)."""
    rows = cost_rows(tuned)
    notions, at_test, errors = [], [], {}
    for _, sel in tuned.selection.dropna(subset=["selected"]).iterrows():
        trials = final_trials(tuned, sel)
        if trials.empty:
            continue
        key = (
            tuned.datasets[sel["dataset"]][0],
            float(sel["target"]),
            sel["method"],
            float(sel["epsilon"]),
        )
        errors[key] = trials.set_index("seed")["test_error"].astype(float)
        notions.append((key, trials["privacy_notion"].iloc[0]))
        used = trials.get("uses_sensitive_at_test", pd.Series([False]))
        at_test.append((key, bool(used.fillna(False).astype(bool).any())))
    notion_of, test_of = dict(notions), dict(at_test)
    keys = list(zip(rows["dataset"], rows["tau"], rows["method"], rows["epsilon"], strict=True))
    rows["privacy_notion"] = [_base_notion(notion_of[k]) for k in keys]
    rows["uses_sensitive_at_test"] = [test_of[k] for k in keys]
    # tune names a method by its config label: mark those reading the group at test time
    marked = {
        k[2]: k[2] + SENSITIVE_MARK
        for k, used in test_of.items()
        if used and SENSITIVE_MARK not in k[2]
    }
    rows["method"] = rows["method"].map(lambda m: marked.get(m, m))
    errors = {(d, t, marked.get(m, m), e): v for (d, t, m, e), v in errors.items()}
    return rows, errors


def _base_notion(notion: str) -> str:
    """`full`, `sensitive-attribute` (however qualified), `local-dp-attribute` or
    `non-private`."""
    if notion.startswith("sensitive-attribute"):
        return "sensitive-attribute"
    return "full" if notion.startswith("full") else notion


def published_points(path: Path = REFERENCES) -> pd.DataFrame:
    """The published baseline points (README beside the file says what they are)."""
    if not Path(path).is_file():
        raise ConfigError(f"no published reference points at {path}")
    frame = pd.read_csv(path)
    frame["epsilon"] = frame["epsilon"].astype(float)
    return frame


MATCH_COLUMNS = [
    "reference",
    "dataset",
    "constraint",
    "epsilon",
    "lambda",
    "published_error",
    "published_violation",
    "method",
    "our_notion",
    "tau",
    "our_error",
    "our_violation",
    "difference",
]


def matched(rows: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """Each published point (DP of the sensitive attribute) against each of our tuned private
    methods at its dataset, constraint and epsilon: our test error at the loosest target tau
    <= its violation (ours is then at least as fair by its target; NaN where every target is
    looser). Ours in its own notion (`our_notion` sensitive-attribute), and, labelled, in
    the stricter full-record notion, where a method offers no other (dp-erm-mitigation), or
    in local DP of the attribute (no curator: also stricter)."""
    out = []
    private = rows[rows["privacy_notion"].isin(NOTIONS) & (rows["selection_rule"] == WITHIN_TAU)]
    for p in points.itertuples():
        constraint = EXPERIMENTS.get(p.experiment, p.experiment)
        panel = private[
            (private["dataset"] == p.dataset)
            & (private["constraint"] == constraint)
            & (private["epsilon"] == p.epsilon)
        ]
        for (method, notion), series in panel.groupby(["method", "privacy_notion"]):
            within = series[series["tau"] <= p.fairness_violation]
            best = within.sort_values("tau").iloc[-1] if len(within) else None
            out.append(
                {
                    "reference": p.method,
                    "dataset": p.dataset,
                    "constraint": constraint,
                    "epsilon": p.epsilon,
                    "lambda": p._7,
                    "published_error": p.test_error,
                    "published_violation": p.fairness_violation,
                    "method": method,
                    "our_notion": notion,
                    "tau": math.nan if best is None else best["tau"],
                    "our_error": math.nan if best is None else best["test_error_mean"],
                    "our_violation": math.nan if best is None else best["violation_mean"],
                    "difference": (
                        math.nan if best is None else best["test_error_mean"] - p.test_error
                    ),
                }
            )
    return pd.DataFrame(out, columns=MATCH_COLUMNS)


def references_document(table: pd.DataFrame) -> Document:
    doc = Document().heading(1, "Published Adult points against fairbench's tuned re-runs")
    doc.add(
        "Published: the DP-FERMI authors' stored result files (DP of the sensitive attribute "
        "only, their closed-form calibration, delta = 1/n^2, hyper-parameters chosen on test; "
        "see fairbench/references/README.md). Ours: the configuration tuned on validation at "
        "the loosest target τ no looser than the published point's violation, re-run on 10 "
        "fresh seeds (mean test error), in the same notion (`sensitive-attribute`) or, "
        "labelled `full`, in the stricter full-record notion. difference = ours − published "
        "(negative: ours is better at a violation target at least as strict). Blank: no target "
        "of ours is that strict."
    )
    reached = table.dropna(subset=["difference"])
    plugin = reached["method"].str.split(" ").str[0]
    same = plugin == reached["reference"].map(SAME_METHOD)
    unmatched = sorted(set(table["reference"]) - set(reached.loc[same, "reference"]))
    if unmatched:
        doc.add(
            "Not compared with our re-run of the same method (it has no tuned point at a "
            f"target within the published violations): {', '.join(unmatched)}."
        )
    parts = (
        ("The same method: published vs our re-run", reached[same]),
        ("Every other method of ours at the same points", reached[~same]),
    )
    columns = [
        "published",
        "constraint",
        "ours",
        "our notion",
        "ε",
        "points compared",
        "worst difference",
        "best difference",
    ]
    for title, part in parts:
        doc.heading(2, f"{title}: worst difference per method, notion and ε")
        rows = [
            [
                ref,
                constraint,
                method,
                notion,
                f"{eps:g}",
                str(len(grp)),
                f"{grp['difference'].max():+.4f}",
                f"{grp['difference'].min():+.4f}",
            ]
            for (ref, constraint, method, notion, eps), grp in part.groupby(
                ["reference", "constraint", "method", "our_notion", "epsilon"]
            )
        ]
        doc.add(Table(columns, rows, "llllrrrr"))
    doc.heading(2, "Every point")
    columns = [
        "published",
        "constraint",
        "λ",
        "ε",
        "published error",
        "published violation",
        "ours",
        "notion",
        "τ",
        "our error",
        "our violation",
        "difference",
    ]
    rows = [
        [
            r.reference,
            r.constraint,
            "" if pd.isna(r._5) else f"{r._5:g}",
            f"{r.epsilon:g}",
            f"{r.published_error:.3f}",
            f"{r.published_violation:.3f}",
            r.method,
            r.our_notion,
            "" if math.isnan(r.tau) else f"{r.tau:g}",
            "" if math.isnan(r.our_error) else f"{r.our_error:.4f}",
            "" if math.isnan(r.our_violation) else f"{r.our_violation:.4f}",
            "" if math.isnan(r.difference) else f"{r.difference:+.4f}",
        ]
        for r in table.itertuples()
    ]
    return doc.add(Table(columns, rows, "llrrrrllrrrr"))


DOMINANCE_COLUMNS = [
    "dataset",
    "privacy_notion",
    "epsilon",
    "tau",
    "seed_method",
    "other",
    "n_pairs",
    "error_seed",
    "error_other",
    "difference",
    "ci95",
    "violation_seed",
    "violation_other",
    "dominates",
]


def dominance(rows: pd.DataFrame, errors: dict[tuple, pd.Series]) -> pd.DataFrame:
    """Per (dataset, notion, epsilon, tau): each seed method against each other tuned private
    method of that notion, on their shared fresh seeds: mean paired test-error difference
    (seed − other) and its 95% t-interval; `dominates` when the interval lies below 0 and
    the seed method's mean test violation is no larger."""
    out = []
    private = rows[rows["epsilon"].map(math.isfinite) & (rows["selection_rule"] == WITHIN_TAU)]
    for (dataset, notion, eps, tau), panel in private.groupby(
        ["dataset", "privacy_notion", "epsilon", "tau"]
    ):
        by = {r.method: r for r in panel.itertuples()}
        for seed in (m for m in by if m.split(" ")[0] in SEEDS):
            for other in (m for m in by if m.split(" ")[0] not in SEEDS):
                a = errors[(dataset, tau, seed, eps)]
                b = errors[(dataset, tau, other, eps)]
                diff = (a - b).dropna()
                n = len(diff)
                half = (
                    float(stats.t.ppf(0.975, n - 1) * diff.std(ddof=1) / np.sqrt(n))
                    if n > 1
                    else math.nan
                )
                mean = float(diff.mean()) if n else math.nan
                fairer = by[seed].violation_mean <= by[other].violation_mean
                verdict = (
                    "dominates"
                    if mean + half < 0 and fairer
                    else "worse"
                    if mean - half > 0
                    else "no"
                )
                out.append(
                    {
                        "dataset": dataset,
                        "privacy_notion": notion,
                        "epsilon": eps,
                        "tau": tau,
                        "seed_method": seed,
                        "other": other,
                        "n_pairs": n,
                        "error_seed": by[seed].test_error_mean,
                        "error_other": by[other].test_error_mean,
                        "difference": mean,
                        "ci95": half,
                        "violation_seed": by[seed].violation_mean,
                        "violation_other": by[other].violation_mean,
                        "dominates": verdict,
                    }
                )
    return pd.DataFrame(out, columns=DOMINANCE_COLUMNS)


def literature_figure(
    rows: pd.DataFrame,
    points: pd.DataFrame,
    tuned: TuneOutput,
    dataset: str,
    unreached: dict[str, dict[float, str]],
) -> Figure:
    """A row of panels per privacy notion present, a column per target (loosest first);
    `unreached[notion][tau]` names the methods with no configuration within tau there."""
    notions = [n for n in NOTIONS if (rows["privacy_notion"] == n).any()]
    taus = sorted(rows["tau"].unique(), reverse=True)
    eps = sorted(float(e) for e in tuned.config["epsilons"])
    fig, axes = new_figure(len(notions), len(taus), (4.8, 4.0), sharey=True)
    shared = rows[rows["privacy_notion"] == "non-private"]
    plugins = {**tuned.plugins, **{k + SENSITIVE_MARK: v for k, v in tuned.plugins.items()}}
    labelled = []
    for i, notion in enumerate(notions):
        mine = pd.concat([rows[rows["privacy_notion"] == notion], shared])
        for j, tau in enumerate(taus):
            ax = axes[i][j]
            note = unreached.get(notion, {}).get(float(tau), "")
            tau_panel(ax, mine, "logistic", tau, plugins, eps, note)
            ax.set_title(f"{NOTION_TITLES[notion]} · τ = {tau:g}", fontsize=10)
            if notion == "sensitive-attribute":
                here = points[points["dataset"] == dataset]
                labelled.append((ax, _published(ax, here, tau, rows["constraint"].iloc[0])))
        axes[i][0].set_ylabel("test error (tuned at τ)")
    suptitle(
        fig,
        f"{dataset} · {rows['constraint'].iloc[0]}: tuned with equal draws at each τ, "
        f"{len(tuned.config['final_seeds'])} fresh seeds (mean, 95% CI); tuning not "
        "charged to ε",
    )
    legend_outside(fig, [ax for row in axes for ax in row], mark_keys(rows))
    for ax, labels in labelled:
        place_labels(ax, labels, color="grey", fontsize=5)
    return finish(fig)


PUBLISHED_MARKERS = {"PFLD": "d", "Jagielski-Inprocessing": ">", "DP-ERM_Mitigation": "8"}


def _published(
    ax, points: pd.DataFrame, tau: float, constraint: str
) -> list[tuple[str, float, float]]:
    """Published points of this constraint at their epsilon: filled black where their own
    violation is within tau, hollow grey where it is not; returns the labels (violation, x, y)
    to write beside the hollow ones where there is room (references.md lists every one)."""
    mine = points[(points["experiment"] == constraint) & points["epsilon"].map(math.isfinite)]
    labels: list[tuple[str, float, float]] = []
    for method, grp in mine.groupby("method"):
        marker = PUBLISHED_MARKERS.get(method, "x")
        within = grp[grp["fairness_violation"] <= tau]
        above = grp[grp["fairness_violation"] > tau]
        ax.plot(
            within["epsilon"],
            within["test_error"],
            linestyle="none",
            marker=marker,
            color="black",
            markersize=6,
            label=f"published {method} (violation ≤ τ)",
        )
        ax.plot(
            above["epsilon"],
            above["test_error"],
            linestyle="none",
            marker=marker,
            color="grey",
            markerfacecolor="none",
            markersize=6,
            label=f"published {method} (violation > τ)",
        )
        labels += [
            (f"{r.fairness_violation:.3f}", r.epsilon, r.test_error) for r in above.itertuples()
        ]
    return labels


def dominance_document(table: pd.DataFrame) -> Document:
    doc = Document().heading(2, "Does a seed method beat each baseline at τ?")
    doc.add(
        "Paired over the shared fresh seeds: mean test-error difference (seed − other) "
        "with its 95% t-interval. **dominates**: the interval lies below 0 and the seed "
        "method's mean test violation is no larger; **worse**: the interval lies above 0; "
        "**no**: neither."
    )
    columns = [
        "notion",
        "ε",
        "τ",
        "seed",
        "other",
        "seed error",
        "other error",
        "difference",
        "seed violation",
        "other violation",
        "verdict",
    ]
    rows = [
        [
            r.privacy_notion,
            f"{r.epsilon:g}",
            f"{r.tau:g}",
            r.seed_method,
            r.other,
            f"{r.error_seed:.4f}",
            f"{r.error_other:.4f}",
            f"{r.difference:+.4f} ± {r.ci95:.4f}",
            f"{r.violation_seed:.4f}",
            f"{r.violation_other:.4f}",
            r.dominates,
        ]
        for r in table.sort_values(
            ["privacy_notion", "epsilon", "tau", "seed_method", "other"],
            ascending=[True, True, False, True, True],
        ).itertuples()
    ]
    return doc.add(Table(columns, rows, "lrrllrrrrrl"))


def outputs(inputs: list[Path], references: Path = REFERENCES) -> Iterator[Output]:
    """Per (dataset, constraint) `<key>.csv`, `<key>.png/.pdf`, `<key>-dominance.csv`,
    `<key>-budgets.csv` (budget sensitivity); `references.csv/.md` for the published points;
    `README.md` with every table."""
    if not inputs:
        raise ConfigError("give at least one `fairbench tune` output directory")
    points = published_points(references)
    report = Document().heading(
        1, "fig-literature: the field's baselines, tuned, in both privacy notions"
    )
    report.add(
        "Equal draws per method and ε, selection on validation, fresh seeds for the "
        "final runs (`fairbench tune`). Methods marked (A at test) read the sensitive "
        "attribute at prediction time."
    )
    columns = [*COLUMNS, "privacy_notion", "uses_sensitive_at_test"]
    every = []
    for tuned in (load_tune_output(p) for p in inputs):
        rows, errors = literature_rows(tuned)
        every.append(rows)
        missing = unreachable(tuned)
        missing["privacy_notion"] = missing["method"].map(notions(tuned.config))
        budgets = budget_rows(tuned)
        report.add(
            f"Tune output `{tuned.path}`: {tuned.config['draws']} configurations per method and ε."
        )
        for (dataset, constraint), mine in rows.groupby(["dataset", "constraint"]):
            key = f"{dataset}-{constraint}"
            mine = mine.sort_values(
                ["privacy_notion", "tau", "method", "epsilon"], ascending=[True, False, True, True]
            )
            yield Csv(f"{key}.csv", mine[columns])
            gone = missing[(missing["dataset"] == dataset) & (missing["constraint"] == constraint)]
            unreached = {n: unreached_text(grp) for n, grp in gone.groupby("privacy_notion")}
            yield Plot(key, literature_figure(mine, points, tuned, dataset, unreached))
            table = dominance(mine, errors)
            yield Csv(f"{key}-dominance.csv", table)
            report.heading(1, f"{dataset} · {constraint}")
            report.add(Images([(f"{key}.png", f"{key}.png")]), f"Rows: `{key}.csv`.")
            report.extend(dominance_document(table))
            report.extend(satisfaction_section(mine, fmt_eps, by="privacy_notion"))
            verdicts = budgets[
                (budgets["dataset"] == dataset) & (budgets["constraint"] == constraint)
            ]
            yield Csv(f"{key}-budgets.csv", verdicts)
            report.extend(budget_section(verdicts, fmt_eps, ["privacy_notion"]))
    table = matched(pd.concat(every, ignore_index=True), points)
    yield Csv("references.csv", table)
    yield Doc("references", references_document(table))
    report.add("See `references.md` for the published Adult points against ours.")
    yield Doc("README", report)
