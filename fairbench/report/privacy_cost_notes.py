"""The notes beside each `fig-privacy-cost` figure: the caption (tuning is not charged to
the privacy budget), the plain verdict of issue 16 item 5 ("does privacy bite?": error at the
smallest epsilon against the largest, beyond both confidence intervals), the budget
sensitivity of each winner (report.budget_sensitivity), the methods that cannot reach a
target, step-count imbalance, and the spread across searched configurations.

Kept apart from privacy_cost (which reads tune outputs and computes the rows) so each module
has one job; these functions take only the rows and tables it computed."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pandas as pd

from fairbench.report.budget_sensitivity import budget_section
from fairbench.report.document import Bullets, Document, Images, Table
from fairbench.report.uncertainty_notes import satisfaction_section

# how a row's configuration was chosen: at the target, or (an accuracy reference such as
# DP-SGD, which has no fairness knob) on validation error alone, the same at every target
WITHIN_TAU, ERROR_ONLY = "within_tau", "error_only"


def privacy_bites(rows: pd.DataFrame, low: float, high: float) -> list[dict[str, Any]]:
    """Per (model, tau, private method): does test error at epsilon `low` exceed the error at
    `high` by more than the sum of the two 95% CI half-widths? `bites` is None when either
    point is missing (the method cannot reach tau there) or has no interval."""
    out = []
    private = rows[rows["epsilon"].map(math.isfinite)]
    for (model, tau, method), grp in private.groupby(["model", "tau", "method"], sort=True):
        at = {float(e): r for e, r in zip(grp["epsilon"], grp.itertuples(), strict=True)}
        item = {
            "model": model,
            "tau": tau,
            "method": method,
            "low": low,
            "high": high,
            "difference": math.nan,
            "margin": math.nan,
            "bites": None,
        }
        if low in at and high in at:
            lo, hi = at[low], at[high]
            margin = (lo.ci_high - lo.test_error_mean) + (hi.ci_high - hi.test_error_mean)
            item.update(difference=lo.test_error_mean - hi.test_error_mean, margin=margin)
            if not math.isnan(margin):
                item["bites"] = bool(item["difference"] > margin)
        out.append(item)
    return out


def step_imbalance(rows: pd.DataFrame, factor: float = 10.0) -> list[str]:
    """Lines naming each (model, tau, epsilon) where the selected private configurations ran
    step counts more than `factor` apart (the comparison may then measure effort, not method)."""
    lines = []
    private = rows[rows["epsilon"].map(math.isfinite)]
    for (model, tau, eps), grp in private.groupby(["model", "tau", "epsilon"], sort=True):
        steps = grp.set_index("method")["steps_mean"]
        if len(steps) > 1 and steps.min() > 0 and steps.max() / steps.min() > factor:
            lines.append(
                f"{model}, τ = {tau:g}, ε = {eps:g}: {steps.idxmin()} ran "
                f"{steps.min():,.0f} steps, {steps.idxmax()} {steps.max():,.0f} "
                f"({steps.max() / steps.min():.0f}×)"
            )
    return lines


def unreached_text(missing: pd.DataFrame) -> dict[float, str]:
    """tau -> "method (ε 0.1, 0.25); other (all ε)" for a figure's panels."""
    out = {}
    for tau, grp in missing.groupby("tau"):
        parts = []
        for method, rows in grp.groupby("method", sort=True):
            eps = ", ".join(fmt_eps(e) for e in sorted(rows["epsilon"]))
            parts.append(f"{method} ({eps if eps == 'non-private' else 'ε ' + eps})")
        out[float(tau)] = "; ".join(parts)
    return out


def fmt_eps(eps: float) -> str:
    return "non-private" if math.isinf(eps) else f"{eps:g}"


def _verdict_text(item: dict[str, Any]) -> str:
    if item["bites"] is None:
        return "cannot say"
    return "**yes**" if item["bites"] else "no"


def _bites_table(
    rows: pd.DataFrame, items: list[dict[str, Any]], model: str, name: Callable[[str], str]
) -> Table:
    """The verdict table of one model: both ends' errors, the gap and the summed margins."""
    low, high = items[0]["low"], items[0]["high"]
    columns = [
        "τ",
        "method",
        f"error at ε = {low:g}",
        f"error at ε = {high:g}",
        "difference",
        "CI half-widths summed",
        "privacy bites?",
    ]
    out = []
    for item in sorted(items, key=lambda i: (-i["tau"], i["method"])):
        at = rows[
            (rows["model"] == model)
            & (rows["tau"] == item["tau"])
            & (rows["method"] == item["method"])
        ].set_index("epsilon")
        cells = [
            f"{at.loc[e, 'test_error_mean']:.4f}" if e in at.index else "—" for e in (low, high)
        ]
        out.append(
            [
                f"{item['tau']:g}",
                name(item["method"]),
                *cells,
                "" if math.isnan(item["difference"]) else f"{item['difference']:+.4f}",
                "" if math.isnan(item["margin"]) else f"{item['margin']:.4f}",
                _verdict_text(item),
            ]
        )
    return Table(columns, out, "rlrrrrl")


def _plain_words(items: list[dict[str, Any]], model: str, name: Callable[[str], str]) -> list[str]:
    """One sentence per tau naming the methods where privacy bites, does not, or cannot say."""
    lines = []
    for tau in sorted({i["tau"] for i in items}, reverse=True):
        mine = [i for i in items if i["tau"] == tau]
        yes = [name(i["method"]) for i in mine if i["bites"]]
        no = [name(i["method"]) for i in mine if i["bites"] is False]
        unsure = [name(i["method"]) for i in mine if i["bites"] is None]
        lines.append(
            f"In plain words ({model}, τ = {tau:g}): privacy bites for "
            f"{', '.join(yes) or 'no method'}; it does not for "
            f"{', '.join(no) or 'no method'}"
            + (f"; cannot say for {', '.join(unsure)}" if unsure else "")
            + "."
        )
    return lines


def _bites_section(rows: pd.DataFrame, models: dict[str, tuple[float, float]]) -> Document:
    doc = Document().heading(2, "Does privacy bite?")
    doc.add(
        "A method's privacy *bites* when its test error at the smallest ε exceeds its "
        "error at the largest ε by more than the sum of the two 95% CI half-widths. "
        '"Cannot say": the method reaches τ at only one of the two (or has one seed).'
    )
    chosen_on_error = rows["selection_rule"] == ERROR_ONLY
    free = set(rows.loc[chosen_on_error & rows["epsilon"].map(math.isfinite), "method"])
    if free:
        doc.add(
            f"{', '.join(sorted(free))}: no fairness knob, so selected on validation error "
            'alone (the private accuracy reference, marked "no constraint"); its verdict '
            "is the price of privacy for accuracy, not at τ."
        )

    def name(method: str) -> str:
        return f"{method} (no constraint)" if method in free else method

    verdicts = []
    for model, (low, high) in sorted(models.items()):
        if low == high:
            doc.heading(3, f"{model}: tuned at ε = {low:g} only: nothing to compare")
            continue
        items = privacy_bites(rows[rows["model"] == model], low, high)
        verdicts += items
        doc.heading(3, f"{model}: ε = {low:g} vs ε = {high:g}")
        if items:
            doc.add(_bites_table(rows, items, model, name))
        doc.add(*_plain_words(items, model, name))
    decided = [i for i in verdicts if i["bites"] is not None]
    if decided and not any(i["bites"] for i in decided):
        doc.add(
            "**No price of privacy is visible here**: for every private method that "
            "reaches τ at both ends, error at the smallest ε is within the confidence "
            "band of the largest ε (issue 16, item 5)."
        )
    return doc


def _spread_section(spread: pd.DataFrame, file: str) -> Document:
    """Min–max validation error over all searched configurations, per method and ε."""
    doc = Document().heading(2, "Spread across configurations")
    doc.add(
        f"Validation error of every configuration the search drew (mean over search seeds), "
        f"min – max per method and ε; per τ, the range among configurations within τ is in "
        f"`{file}` (columns `feasible_val_error_min/max`, with `n_feasible`, and "
        "`n_infeasible` for draws whose noise could not be calibrated at that ε)."
    )
    one_tau = spread[spread["tau"] == spread["tau"].max()]
    for model, grp in one_tau.groupby("model", sort=True):
        eps = sorted(grp["epsilon"].unique())
        rows = []
        for method, mine in grp.groupby("method", sort=True):
            at = mine.set_index("epsilon")
            rows.append(
                [
                    method,
                    *(
                        f"{at.loc[e, 'val_error_min']:.3f} – {at.loc[e, 'val_error_max']:.3f}"
                        if e in at.index
                        else ""
                        for e in eps
                    ),
                ]
            )
        doc.heading(3, model)
        doc.add(Table(["method", *(fmt_eps(e) for e in eps)], rows, "l" + "r" * len(eps)))
    return doc


def _caption(delta: float) -> list[str]:
    """What the axes, bands, markers and lines mean, and that tuning is not charged."""
    return [
        "**Caption.** x: ε (log scale; δ = "
        f"{delta:g}). y: test error of the configuration selected on the "
        "validation split at violation ≤ τ (the lowest mean validation error among a "
        "method's random configurations whose mean validation violation is within τ), "
        "re-run on fresh seeds and evaluated once on test: mean and 95% t-interval "
        "(band). A point's fill is its verdict at τ on test (below): filled, meets τ; "
        "hollow, misses τ; half-filled, this test split cannot tell; a black ring marks an "
        "unstable selection. Horizontal lines: ERM (non-private, selected "
        "on validation error alone) and the non-private fair reference (fairlearn "
        "ExponentiatedGradient, selected at τ by the same rule); the methods' "
        'non-private twins sit at the right edge. Dashed, "no fairness constraint": '
        "a private method without a fairness knob (DP-SGD), selected on validation error "
        "alone, the same in both panels: the private accuracy reference, so the gap "
        "between it and a fair method is what the target costs at that ε.",
        "**Tuning is not charged to the privacy budget**: each point's ε covers the final "
        "model's training only; the search fits that chose it are not accounted (as in "
        "the papers). The spread across configurations below shows how much the choice "
        "mattered.",
    ]


def _unreached_section(missing: pd.DataFrame) -> Document:
    """Each (model, tau, method) with no point, and how many draws were infeasible there."""
    doc = Document().heading(2, "Cannot reach τ")
    if missing.empty:
        return doc.add("Every method reached every τ at every ε on validation.")
    items = []
    for (model, tau, method), grp in missing.groupby(["model", "tau", "method"], sort=True):
        eps = ", ".join(fmt_eps(e) for e in sorted(grp["epsilon"]))
        where = "(non-private)" if eps == "non-private" else f"at ε = {eps}"
        bad = int(grp["infeasible"].sum())
        note = f" ({bad} draws could not be calibrated at these ε)" if bad else ""
        items.append(f"{model}, τ = {tau:g}: {method} {where}{note}")
    intro = "No configuration within τ on validation, so no row and no point:"
    return doc.add(intro, Bullets(items))


def _steps_section(rows: pd.DataFrame) -> Document:
    doc = Document().heading(2, "Step counts")
    imbalance = step_imbalance(rows)
    if not imbalance:
        return doc.add(
            "The selected private configurations ran step counts within 10× of each other "
            "at every ε and τ (`steps_mean`)."
        )
    return doc.add(Bullets(imbalance))


def dataset_document(
    key: str,
    meta: list[dict[str, Any]],
    rows: pd.DataFrame,
    missing: pd.DataFrame,
    spread: pd.DataFrame,
    budgets: pd.DataFrame,
    figures: list[str],
) -> Document:
    """The caption and notes beside one dataset's figures."""
    first = meta[0]
    doc = Document().heading(1, f"fig-privacy-cost: {first['title']} · {first['constraint']}")
    if figures:
        doc.add(Images([(name, name) for name in figures]))
    doc.add(*_caption(first["delta"]))
    doc.add(
        Bullets(
            [
                f"{m['model']}: {m['draws']} configurations per method and ε, each on "
                f"{m['search_seeds']} search seed(s); selected ones on {m['final_seeds']} "
                f"fresh seeds; ε ∈ {{{', '.join(f'{e:g}' for e in m['epsilons'])}}}; "
                f"tune output `{m['path']}`."
                for m in meta
            ]
        ),
        f"Table: `{key}.csv` (one row per model, τ, method and ε).",
    )
    ends = {model: (m["low"], m["high"]) for model, m in by_model(meta).items()}
    doc.extend(_bites_section(rows, ends))
    doc.extend(satisfaction_section(rows, fmt_eps))
    doc.extend(budget_section(budgets, fmt_eps, ["model"]))
    doc.add(f"Table: `{key}-budgets.csv` (a row per verdict and budget).")
    doc.extend(_unreached_section(missing))
    doc.extend(_steps_section(rows))
    doc.extend(_spread_section(spread, f"{key}-search-spread.csv"))
    return doc


def by_model(meta: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One dataset's tune outputs per model family (a model may be tuned in several outputs,
    e.g. at different epsilons): their epsilons joined, for one figure per model."""
    out: dict[str, dict[str, Any]] = {}
    for m in meta:
        for model in m["model"].split(", "):
            mine = out.setdefault(model, {**m, "epsilons": []})
            mine["epsilons"] = sorted({*mine["epsilons"], *m["epsilons"]})
            if mine["final_seeds"] != m["final_seeds"]:
                mine["final_seeds"] = f"{mine['final_seeds']}-{m['final_seeds']}"
    for mine in out.values():
        mine["low"], mine["high"] = min(mine["epsilons"]), max(mine["epsilons"])
    return out
