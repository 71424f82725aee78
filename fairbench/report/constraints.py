"""Constraint satisfaction on held-out data, counted per seed.

A target is met by a *trial* when every rate constraint holds on its test split; a method meets
it on k of n seeds, reported with its exact (Clopper-Pearson) interval and the mean and largest
excess over the target. Averages of signed constraint values are shown only as values, never as
satisfaction: on two groups, P(ŷ=1|s=0) − P(ŷ=1|s≠0) flips sign from seed to seed, so its mean
can sit under γ while every seed violates γ. Per-constraint rows say which constraint (which
group, in multi-group runs) fails, and on how many seeds.
"""

from __future__ import annotations

import math

import pandas as pd

from fairbench.report.aggregate import ci95, with_satisfaction_interval
from fairbench.report.document import Document, Table

SYMBOLS = {"gamma": "γ", "alpha": "α", "lambda": "λ"}
POINT = ["dataset", "constraint", "label", "privacy_notion", "epsilon", "knob"]


def satisfaction_table(trials: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, constraint set, method label, notion, epsilon, knob): seeds whose held-out
    violation is within the target (k of n, with its 95% interval) and the excess over it."""
    grouped = trials.groupby(POINT, dropna=False, sort=True)
    out = grouped.agg(
        n_seeds=("seed", "nunique"),
        knob_name=("knob_name", "first"),
        satisfied_k=("test_satisfied", "sum"),
        satisfied_n=("test_satisfied", "count"),
        excess_mean=("test_excess", "mean"),
        excess_max=("test_excess", "max"),
        violation_mean=("test_violation", "mean"),
        violation_max=("test_violation", "max"),
    ).reset_index()
    return with_satisfaction_interval(out)


def constraint_values(trials: pd.DataFrame) -> pd.DataFrame:
    """Long table: one row per (point, constraint) with its mean and largest held-out value
    over seeds and on how many seeds it held (NaN counts without a stated γ)."""
    rows = [
        {**{k: trial[k] for k in POINT}, "seed": trial["seed"], **c}
        for _, trial in trials.iterrows()
        for c in trial["test_rate_constraints"]
    ]
    long = pd.DataFrame(rows)
    long["held"] = long["satisfied"].astype(float)
    out = long.groupby([*POINT, "name"], dropna=False, sort=False).agg(
        n_seeds=("seed", "nunique"),
        value_mean=("value", "mean"),
        value_ci95=("value", ci95),
        value_max=("value", "max"),
        gamma=("gamma", "first"),
        held_k=("held", "sum"),
        held_n=("held", "count"),
    )
    return out.reset_index()


def _eps(e: float) -> str:
    return "non-private" if math.isinf(e) else f"ε={e:g}"


def _met(k: float, n: float, low: float, high: float) -> str:
    if n == 0:
        return "no target"
    return f"{int(k)}/{int(n)} [{low:.0%}, {high:.0%}]"


def constraints_document(satisfaction: pd.DataFrame, values: pd.DataFrame, title: str) -> Document:
    """Per (dataset, constraint set): satisfaction per seed, then every constraint's values."""
    doc = Document().heading(1, f"{title}: constraint satisfaction on held-out data")
    doc.add(
        "met: seeds whose every rate constraint holds on the test split (hard predictions), "
        "with the exact 95% (Clopper-Pearson) interval; excess: how far the worst constraint "
        "exceeds its target, mean and max over seeds (0 when met). Methods not told a target "
        "show values only. Constraint values are signed means over seeds: a mean under γ "
        "does not mean that the seeds met γ."
    )
    columns = [
        "method",
        "privacy",
        "knob",
        "seeds",
        "met",
        "excess mean",
        "excess max",
        "violation mean",
        "violation max",
    ]
    for (dataset, cset), block in satisfaction.groupby(["dataset", "constraint"], sort=True):
        doc.heading(2, f"{dataset} · {cset}")
        rows = []
        for r in block.itertuples(index=False):
            symbol = SYMBOLS.get(r.knob_name, r.knob_name)
            target = "" if pd.isna(r.knob) else f"{symbol} {r.knob:g}"
            excess = (
                ("", "") if r.satisfied_n == 0 else (f"{r.excess_mean:.4f}", f"{r.excess_max:.4f}")
            )
            rows.append(
                [
                    r.label,
                    _eps(r.epsilon),
                    target,
                    str(r.n_seeds),
                    _met(r.satisfied_k, r.satisfied_n, r.satisfied_ci_low, r.satisfied_ci_high),
                    *excess,
                    f"{r.violation_mean:.4f}",
                    f"{r.violation_max:.4f}",
                ]
            )
        doc.add(Table(columns, rows, "llrrrrrrr"))
        doc.extend(
            _values_tables(values[(values["dataset"] == dataset) & (values["constraint"] == cset)])
        )
    return doc


def _values_tables(values: pd.DataFrame) -> Document:
    """Per knob: constraints as rows, methods x epsilon as columns; each cell the mean value
    (max over seeds) and, with a target, the seeds on which that constraint held."""
    doc = Document()
    for knob, block in values.groupby("knob", dropna=False, sort=True):
        columns = block[["label", "epsilon"]].drop_duplicates().sort_values(["label", "epsilon"])
        heads = [f"{lab} ({_eps(e)})" for lab, e in columns.itertuples(index=False)]
        knob_text = "no target" if pd.isna(knob) else f"target {knob:g}"
        doc.heading(3, f"constraint values · {knob_text}")
        rows = []
        for name in dict.fromkeys(block["name"]):
            cells = []
            for lab, e in columns.itertuples(index=False):
                hit = block[
                    (block["name"] == name) & (block["label"] == lab) & (block["epsilon"] == e)
                ]
                cells.append(_cell(hit.iloc[0]) if len(hit) else "")
            rows.append([name, *cells])
        doc.add(Table(["constraint", *heads], rows, "l" + "r" * len(heads)))
    return doc


def _cell(row: pd.Series) -> str:
    held = "" if row["held_n"] == 0 else f" · held {int(row['held_k'])}/{int(row['held_n'])}"
    return f"{row['value_mean']:.4f} (max {row['value_max']:.4f}){held}"
