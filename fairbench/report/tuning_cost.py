"""`fig-tuning-cost`: what paying for tuning costs, from paired `fairbench tune` outputs.

Each dataset has two tune outputs with the same candidates, counts, seeds and splits: tuning
paid for by private selection (`selection: private`: the released model and its score are
(epsilon, delta)-DP at the stated total) and its uncharged twin (`selection: uncharged`: every
candidate at the full epsilon, exact validation scores, the papers' convention). Per (dataset,
method, epsilon, selection) the row describes the released models over the repeats (one per
split): test error (mean and 95% t-interval over the repeats that released a model),
violation, the fraction of ALL repeats whose released model held tau on test (a repeat that
released nothing counts as missing it), and the rank among methods. Ranked are the methods
whose released models held tau in at least half the repeats, by mean test error; the others
have no rank (a low error bought by violating the target never wins).

It reads only what tune wrote (tune.yaml, private/selections.json); nothing is re-run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from fairbench.errors import ConfigError
from fairbench.methods.base import SENSITIVE_MARK
from fairbench.report.aggregate import ci95
from fairbench.report.privacy_cost import dataset_key

COLUMNS = ["dataset", "method", "epsilon", "selection", "test_error_mean", "ci_low", "ci_high",
           "violation_mean", "satisfied_fraction", "rank", "tau", "released", "repeats",
           "uses_sensitive_at_test", "candidates_mean", "candidate_epsilon", "total_epsilon",
           "accountant"]  # fmt: skip
SELECTIONS = {"uncharged": "free", "private": "paid"}
RANKED_FROM = 0.5  # satisfied fraction a method needs to be ranked


def released_frame(out: Path) -> pd.DataFrame:
    """One row per (method, epsilon, target, repeat) of a tune output: the released
    candidate's test error and violation (NaN when the repeat released nothing)."""
    config = yaml.safe_load((out / "tune.yaml").read_text())
    selection = config.get("selection", "free")
    if selection not in SELECTIONS:
        raise ConfigError(
            f"{out}: selection {selection!r}; fig-tuning-cost pairs `selection: private` with "
            "its `selection: uncharged` twin"
        )
    path = out / "private" / "selections.json"
    if not path.is_file():
        raise ConfigError(f"{out}: no private/selections.json; run `fairbench tune` into it first")
    if len(config["datasets"]) != 1:
        raise ConfigError(f"{out}: fig-tuning-cost reads one dataset per tune output")
    entry = config["datasets"][0]
    key, _ = dataset_key(entry["name"], entry.get("options") or {})
    rows = []
    for record in json.loads(path.read_text()):
        marked = any(c.get("uses_sensitive_at_test") for r in record["repeats"]
                     for c in r["candidates"])  # fmt: skip
        for repeat in record["repeats"]:
            for target, index in repeat["released"].items():
                chosen = None if index is None else repeat["candidates"][index]
                rows.append({
                    "dataset": key, "method": record["method"] + (SENSITIVE_MARK if marked else ""),
                    "epsilon": record["epsilon"], "selection": SELECTIONS[selection],
                    "tau": float(target), "repeat": repeat["repeat"], "count": repeat["count"],
                    "test_error": math.nan if chosen is None else chosen["test_error"],
                    "test_violation": math.nan if chosen is None else chosen["test_violation"],
                    "candidate_epsilon": record["candidate_epsilon"],
                    "total_epsilon": record["total_epsilon"],
                    "accountant": record["accountant"] if selection == "private" else "",
                })  # fmt: skip
    return pd.DataFrame(rows)


def summary_rows(released: pd.DataFrame) -> pd.DataFrame:
    """The CSV: one row per (dataset, method, epsilon, selection, tau), ranked."""
    out = []
    keys = ["dataset", "method", "epsilon", "selection", "tau"]
    for key, group in released.groupby(keys, sort=True):
        errors = group["test_error"].dropna()
        half = ci95(errors)
        mean = float(errors.mean()) if len(errors) else math.nan
        held = (group["test_violation"] <= group["tau"]).sum()  # NaN (nothing released) is False
        out.append({
            **dict(zip(keys, key, strict=True)),
            "test_error_mean": mean, "ci_low": mean - half, "ci_high": mean + half,
            "violation_mean": float(group["test_violation"].mean()),
            "satisfied_fraction": float(held / len(group)),
            "released": int(group["test_error"].notna().sum()), "repeats": len(group),
            "uses_sensitive_at_test": key[1].endswith(SENSITIVE_MARK),
            "candidates_mean": float(group["count"].mean()),
            "candidate_epsilon": float(group["candidate_epsilon"].iloc[0]),
            "total_epsilon": float(group["total_epsilon"].iloc[0]),
            "accountant": group["accountant"].iloc[0],
        })  # fmt: skip
    table = pd.DataFrame(out)
    table["rank"] = math.nan
    for _, group in table.groupby(["dataset", "epsilon", "selection", "tau"]):
        ranked = group[group["satisfied_fraction"] >= RANKED_FROM].sort_values(
            "test_error_mean", kind="stable"
        )
        table.loc[ranked.index, "rank"] = np.arange(1, len(ranked) + 1)
    return table[COLUMNS]


def paired_cost(released: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, method, epsilon, tau): paid minus free test error over the repeats where
    both released a model (the same split and candidates), mean and 95% t-interval."""
    keys = ["dataset", "method", "epsilon", "tau", "repeat"]
    wide = released.pivot_table(index=keys, columns="selection", values="test_error",
                                aggfunc="first").reset_index()  # fmt: skip
    if not {"free", "paid"} <= set(wide.columns):
        return pd.DataFrame(columns=[*keys[:-1], "pairs", "cost_mean", "cost_ci95"])
    wide["cost"] = wide["paid"] - wide["free"]
    rows = []
    for key, group in wide.groupby(keys[:-1], sort=True):
        cost = group["cost"].dropna()
        rows.append({**dict(zip(keys[:-1], key, strict=True)), "pairs": len(cost),
                     "cost_mean": float(cost.mean()) if len(cost) else math.nan,
                     "cost_ci95": ci95(cost)})  # fmt: skip
    return pd.DataFrame(rows)


def winners(table: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, epsilon, tau): the rank-1 method under free and under paid tuning and
    whether paying changes it (None where no method is ranked)."""
    rows = []
    for (dataset, eps, tau), group in table.groupby(["dataset", "epsilon", "tau"], sort=True):
        best = {}
        for selection in ("free", "paid"):
            top = group[(group["selection"] == selection) & (group["rank"] == 1)]
            best[selection] = None if top.empty else top.iloc[0]
        free, paid = best["free"], best["paid"]
        rows.append({
            "dataset": dataset, "epsilon": eps, "tau": tau,
            "winner_free": None if free is None else free["method"],
            "error_free": math.nan if free is None else free["test_error_mean"],
            "winner_paid": None if paid is None else paid["method"],
            "error_paid": math.nan if paid is None else paid["test_error_mean"],
            "changed": None if free is None or paid is None
            else bool(free["method"] != paid["method"]),
        })  # fmt: skip
    return pd.DataFrame(rows)
