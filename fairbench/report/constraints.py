"""Per-constraint held-out values: for every rate constraint of a set, its mean over seeds
per method, epsilon and knob, and how often it held. This is where multi-group runs (one
constraint per group and class) show which group a method fails."""

from __future__ import annotations

import math

import pandas as pd

from fairbench.report.aggregate import ci95

KEYS = ["dataset", "constraint", "label", "privacy_notion", "epsilon", "knob", "name"]


def constraint_values(trials: pd.DataFrame) -> pd.DataFrame:
    """Long table: one row per (dataset, set, method label, epsilon, knob, constraint)."""
    rows = [
        {**{k: trial[k] for k in KEYS[:-1]}, "seed": trial["seed"], **c}
        for _, trial in trials.iterrows()
        for c in trial["test_rate_constraints"]
    ]
    long = pd.DataFrame(rows)
    long["held"] = long["satisfied"].astype(float)
    out = long.groupby(KEYS, dropna=False, sort=False).agg(
        n_seeds=("seed", "nunique"),
        value_mean=("value", "mean"),
        value_ci95=("value", ci95),
        gamma=("gamma", "first"),
        held_fraction=("held", "mean"),
    )
    return out.reset_index()


def constraints_markdown(values: pd.DataFrame, title: str) -> str:
    """Per (dataset, constraint set, knob): constraints as rows, methods x epsilon as columns."""
    lines = [f"# {title}: held-out value of every rate constraint", "",
             "Mean over seeds of each constraint's value on the test split (hard predictions); "
             "a constraint holds when its value is at most γ."]  # fmt: skip
    for (dataset, cset, knob), block in values.groupby(["dataset", "constraint", "knob"],
                                                       dropna=False, sort=True):  # fmt: skip
        columns = block[["label", "epsilon"]].drop_duplicates().sort_values(["label", "epsilon"])
        heads = [f"{lab} ({'non-private' if math.isinf(e) else f'ε={e:g}'})"
                 for lab, e in columns.itertuples(index=False)]  # fmt: skip
        knob_text = "" if pd.isna(knob) else f" · γ = {knob:g}"
        lines += ["", f"## {dataset} · {cset}{knob_text}", "",
                  "| constraint | " + " | ".join(heads) + " |",
                  "|---|" + "---:|" * len(heads)]  # fmt: skip
        for name in dict.fromkeys(block["name"]):
            cells = []
            for lab, e in columns.itertuples(index=False):
                hit = block[
                    (block["name"] == name) & (block["label"] == lab) & (block["epsilon"] == e)
                ]
                cells.append(f"{hit['value_mean'].iloc[0]:.4f}" if len(hit) else "")
            escaped = name.replace("|", "\\|")
            lines.append(f"| {escaped} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
