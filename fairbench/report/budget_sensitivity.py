"""Budget sensitivity of tuned verdicts (issue 40 item 2): per (dataset, constraint, privacy
notion, epsilon, target tau) the winner at each tuning budget, the paired gap to the
runner-up, and whether the verdict may be called stable.

It reads what tune and `fairbench tune-budgets` wrote (`rundir.tuning`): the tune's own table
(its full budget) and, per smaller budget k, the table a k-draw tune would have written
(re-selected by tune's own rule from the first k draws, validation averaged over the search
seeds; `workflows.budgets` says how, and runs the final trials those choices need). Nothing
is selected or fitted here.

Per budget: the competitors are the methods selected at tau (not the accuracy references
selected on error alone) with final test numbers; the winner has the lowest mean test error
over the final seeds, the runner-up the next. The gap is the runner-up's test error minus the
winner's, paired by final seed (a seed fixes the split, so the pair shares it): mean and 95%
Student-t interval over the seeds both finished.

The label. "stable" only when every condition holds; otherwise each that fails is named:
the budget can decide (the tune drew at least BUDGETS[-1] configurations per method on at
least MIN_SEARCH_SEEDS search seeds), the winners at the two largest budgets (8 and 16 draws)
agree, and the full budget's paired interval excludes 0 (a runner-up exists).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from fairbench.methods import method_class
from fairbench.report.aggregate import ci95
from fairbench.report.document import Document, Table
from fairbench.rundir.tuning import TuneLayout, read_budget_table, read_table, read_tune_config

BUDGETS = (4, 8, 16)  # draws per method; the stability rule compares the last two
MIN_SEARCH_SEEDS = 3
STABLE = "stable"
VERDICT = ["dataset", "constraint", "privacy_notion", "epsilon", "tau"]
COLUMNS = [
    *VERDICT,
    "budget",
    "competitors",
    "winner",
    "winner_error",
    "runner_up",
    "runner_up_error",
    "n_pairs",
    "gap_mean",
    "gap_ci_low",
    "gap_ci_high",
    "stable",
    "label",
]


def budget_tables(path: Path, budgets: tuple[int, ...] = BUDGETS) -> dict[int, pd.DataFrame]:
    """Draws -> the tuning table at that budget: the tune's own at its draws, each smaller
    one of `budgets` that `fairbench tune-budgets` wrote (one not written is absent)."""
    layout = TuneLayout(Path(path))
    draws = int(read_tune_config(layout)["draws"])
    tables = {draws: read_table(layout)}
    for k in budgets:
        table = read_budget_table(layout, k) if k < draws else None
        if table is not None:
            tables[k] = table
    return dict(sorted(tables.items()))


def notions(config: dict) -> dict[str, str]:
    """Each tune label's privacy notion: its fixed `privacy_notion`, else its method's default
    one (mozannar's `local-dp-attribute`, which must not be ranked with whole-record DP), else
    full."""
    out = {}
    for m in config["methods"]:
        field = method_class(m["name"]).Hparams.model_fields.get("privacy_notion")
        default = "full" if field is None else str(field.default)
        out[m.get("label") or m["name"]] = (m.get("hparams") or {}).get("privacy_notion", default)
    return out


def winners(table: pd.DataFrame, config: dict) -> pd.DataFrame:
    """Per verdict (VERDICT) of one budget's table: its competitors, winner and runner-up
    with their mean test errors, and the paired gap (COLUMNS up to `gap_ci_high`)."""
    free = {m.get("label") or m["name"] for m in config["methods"] if m.get("unconstrained")}
    notion = notions(config)
    rows = table[~table["method"].isin(free) & table["selected"].notna()].copy()
    rows["privacy_notion"] = [
        notion.get(m, "full") if math.isfinite(e) else "non-private"
        for m, e in zip(rows["method"], rows["epsilon"], strict=True)
    ]
    out = []
    keys = ["dataset", "constraint", "privacy_notion", "epsilon", "target"]
    for key, group in rows.groupby(keys, sort=True):
        errors = group.pivot_table(index="repeat", columns="method", values="test_error")
        means = errors.mean().dropna().sort_values(kind="stable")
        item = _empty(key, len(means))
        if len(means):
            item.update(winner=means.index[0], winner_error=float(means.iloc[0]))
        if len(means) > 1:
            gap = (errors[means.index[1]] - errors[means.index[0]]).dropna()
            half = ci95(gap)
            item.update(
                runner_up=means.index[1],
                runner_up_error=float(means.iloc[1]),
                n_pairs=len(gap),
                gap_mean=float(gap.mean()),
                gap_ci_low=float(gap.mean() - half),
                gap_ci_high=float(gap.mean() + half),
            )
        out.append(item)
    return pd.DataFrame(out)


def _empty(key: tuple, competitors: int) -> dict:
    """A verdict's row of one budget before its winner is known (none reaches τ)."""
    return {
        **dict(zip(VERDICT, key, strict=True)),
        "competitors": competitors,
        "winner": None,
        "winner_error": math.nan,
        "runner_up": None,
        "runner_up_error": math.nan,
        "n_pairs": 0,
        "gap_mean": math.nan,
        "gap_ci_low": math.nan,
        "gap_ci_high": math.nan,
    }


def label(
    at: dict[int, pd.Series],
    draws: int,
    search_seeds: int,
    budgets: tuple[int, ...] = BUDGETS,
    min_search_seeds: int = MIN_SEARCH_SEEDS,
) -> str:
    """One verdict's label from its rows per budget (`winners`; a budget not computed is
    absent): "stable", or every failed condition, joined by "; "."""
    failed = []
    if draws < budgets[-1] or search_seeds < min_search_seeds:
        failed.append(
            f"budget too small to call stable: {draws} draws × {search_seeds} search seed(s) "
            f"(needs {budgets[-1]} × {min_search_seeds})"
        )
    else:
        low, high = budgets[-2], budgets[-1]
        if missing := [str(k) for k in (low, high) if k not in at]:
            failed.append(
                f"not re-selected at {' and '.join(missing)} draws "
                "(`fairbench tune-budgets` not run)"
            )
        elif _name(at[low]["winner"]) != _name(at[high]["winner"]):
            failed.append(
                f"winner changes from {low} to {high} draws "
                f"({_name(at[low]['winner']) or 'none'} → {at[high]['winner']})"
            )
    full = at[max(at)]
    if _name(full["runner_up"]) is None:
        failed.append("no runner-up: one method reaches τ")
    elif not full["gap_ci_low"] > 0:  # NaN (one pair) counts as including 0
        failed.append(f"paired interval at {max(at)} draws includes 0")
    return "; ".join(failed) or STABLE


def _name(value: object) -> str | None:
    """A method cell as a name (None where there is none: a missing value reads NaN)."""
    return None if value is None or pd.isna(value) else str(value)


def sensitivity(
    path: Path, budgets: tuple[int, ...] = BUDGETS, min_search_seeds: int = MIN_SEARCH_SEEDS
) -> pd.DataFrame:
    """COLUMNS for one tune output: a row per verdict and budget computed, each verdict's
    `stable` and `label` on all its rows. A verdict is one the full budget makes (a method
    reaches τ there)."""
    config = read_tune_config(TuneLayout(Path(path)))
    tables = budget_tables(path, budgets)
    per_budget = {k: winners(t, config) for k, t in tables.items()}
    full = max(per_budget)
    rows = []
    for _, verdict in per_budget[full].iterrows():
        key = tuple(verdict[VERDICT])
        at = {}
        for k, found in per_budget.items():
            same = found[(found[VERDICT] == verdict[VERDICT]).all(axis=1)] if len(found) else found
            at[k] = same.iloc[0] if len(same) else pd.Series(_empty(key, 0))
        text = label(at, full, len(config["search_seeds"]), budgets, min_search_seeds)
        rows += [
            {**at[k].to_dict(), "budget": k, "stable": text == STABLE, "label": text} for k in at
        ]
    return pd.DataFrame(rows, columns=COLUMNS)


def _cell(row: pd.Series) -> str:
    if _name(row["winner"]) is None:
        return "none reaches τ"
    if _name(row["runner_up"]) is None:
        return f"{row['winner']} (alone)"
    return (
        f"{row['winner']} by {row['gap_mean']:+.4f} [{row['gap_ci_low']:+.4f}, "
        f"{row['gap_ci_high']:+.4f}] over {row['runner_up']}"
    )


HEADERS = {"privacy_notion": "notion"}  # a leading column's header, where not its name


def budget_section(
    frame: pd.DataFrame, eps_text: Callable[[float], str], lead: list[str], level: int = 2
) -> Document:
    """The table for people: a row per verdict (its `lead` columns, ε and τ), a column per
    budget (winner, paired gap to the runner-up with its 95% interval), and the label."""
    doc = Document().heading(level, "Budget sensitivity: is the winner stable?")
    doc.add(
        f"Each method re-selected by tune's own rule from its first k draws (k ∈ "
        f"{{{', '.join(str(b) for b in BUDGETS)}}} up to the tune's draws; validation "
        "averaged over the search seeds), its choice run on the same final seeds. Winner: "
        "the lowest mean test error among the methods selected at τ; the gap is the "
        "runner-up's test error minus the winner's, paired by seed: mean [95% t-interval]. "
        f"**{STABLE}** only when the tune drew at least {BUDGETS[-1]} configurations on "
        f"{MIN_SEARCH_SEEDS} search seeds, the winners at {BUDGETS[-2]} and {BUDGETS[-1]} "
        "draws agree and the full budget's interval excludes 0; otherwise the label names "
        "each condition that fails."
    )
    if frame.empty:
        return doc.add("No method reaches τ at any ε: no verdict.")
    budgets = sorted(frame["budget"].unique())
    rows = []
    for _, mine in frame.groupby([*lead, "epsilon", "tau"], sort=True):
        at = {int(r["budget"]): r for _, r in mine.iterrows()}
        first = mine.iloc[0]
        rows.append(
            [
                *(str(first[c]) for c in lead),
                eps_text(first["epsilon"]),
                f"{first['tau']:g}",
                *(_cell(at[k]) if k in at else "not re-selected" for k in budgets),
                first["label"],
            ]
        )
    columns = [*(HEADERS.get(c, c) for c in lead), "ε", "τ", *(f"{k} draws" for k in budgets)]
    stable = int(frame.drop_duplicates([*lead, "epsilon", "tau"])["stable"].sum())
    doc.add(Table([*columns, "label"], rows, "l" * len(lead) + "rr" + "l" * (len(budgets) + 1)))
    return doc.add(f"{stable} of {len(rows)} verdicts stable.")
