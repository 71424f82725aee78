"""What a reader must know before trusting a comparison, printed at the top of the reports:
lopsided step budgets, calibrations that stopped at a search limit, knob values that trained
one model, and fair methods that ran without a fairness target."""

from __future__ import annotations

import math

import pandas as pd

STEP_RATIO = 10.0  # step counts further apart than this make a comparison lopsided


def _where(dataset: str, eps: float) -> str:
    return f"{dataset} · {'non-private' if math.isinf(eps) else f'ε = {eps:g}'}"


def step_imbalance(trials: pd.DataFrame) -> list[str]:
    """Per (dataset, epsilon): methods whose mean step counts differ by more than 10x."""
    out = []
    for (dataset, eps), panel in trials.groupby(["dataset", "epsilon"], sort=True):
        steps = panel.groupby("label")["steps"].mean().sort_values()
        if len(steps) < 2 or steps.iloc[0] <= 0 or steps.iloc[-1] / steps.iloc[0] <= STEP_RATIO:
            continue
        out.append(
            f"{_where(dataset, eps)}: step counts differ {steps.iloc[-1] / steps.iloc[0]:.0f}x "
            f"across methods (fewest: {steps.index[0]} {steps.iloc[0]:.0f}; most: "
            f"{steps.index[-1]} {steps.iloc[-1]:.0f}). The comparison may measure the step "
            "budget rather than the methods: tune each method's schedule (fairbench tune)."
        )
    return out


def calibration_bounds(trials: pd.DataFrame) -> list[str]:
    """Trials whose calibration stopped at a search limit rather than at the target."""
    hit = trials[trials["calibration_at_bound"]]
    out = []
    for (dataset, eps, label), grp in hit.groupby(["dataset", "epsilon", "label"], sort=True):
        n = int(
            (
                trials["label"].eq(label)
                & trials["dataset"].eq(dataset)
                & trials["epsilon"].eq(eps)
            ).sum()
        )
        out.append(
            f"{_where(dataset, eps)}: {label}'s {grp['calibrated'].iloc[0]} calibration "
            f"stopped at its search limit in {len(grp)}/{n} trials: the privacy target did not "
            "bind, so its budget is the limit's, not epsilon's."
        )
    return out


def identical_models(merged: list[dict]) -> list[str]:
    """Knob values that gave identical test predictions on every seed (one model)."""
    return [
        f"{_where(m['dataset'], m['epsilon'])} · {m['constraint']}: {m['label']}'s knob values "
        f"{', '.join(f'{k:g}' for k in m['knobs'])} gave identical test predictions on all "
        f"{m['n_seeds']} seeds: one model, shown as one point (its γ met is the smallest "
        "value's)."
        for m in merged
    ]


def missing_hashes(trials: pd.DataFrame) -> list[str]:
    missing = int(trials["test_predictions_sha256"].isna().sum())
    if not missing:
        return []
    return [
        f"{missing} of {len(trials)} trials were stored before prediction hashes were recorded: "
        "knob values that trained one model cannot be detected among them; re-run to record "
        "them."
    ]


def untargeted(trials: pd.DataFrame) -> list[str]:
    """Methods with a fairness knob that ran without a value for it."""
    loose = trials[trials["knob_name"].notna() & trials["knob"].isna()]
    return [
        f"{label} ran without its fairness knob ({grp['knob_name'].iloc[0]}): it trained with "
        f"no fairness target on {grp['constraint'].iloc[0]}, so its points show its objective's "
        "own trade-off."
        for label, grp in loose.groupby("label", sort=True)
    ]


def preprocessing_not_private(trials: pd.DataFrame) -> list[str]:
    """Datasets whose rows say their preprocessing looked at the data (a user CSV without
    public bounds: `runner.trial.preprocessing_flag`)."""
    flagged = trials["info"].map(lambda i: isinstance(i, dict) and i.get("preprocessing"))
    datasets = sorted(set(trials.loc[flagged == "not private", "dataset"]))
    return [
        f"{dataset}: preprocessing not private: feature roles, standardisation, imputation and "
        "category lists came from the data (training split), outside the privacy accounting; "
        "declare public bounds (`bounds:`) to make them private."
        for dataset in datasets
    ]


def caveats(trials: pd.DataFrame, merged: list[dict]) -> list[str]:
    """Every caveat of a run, most consequential first."""
    return [
        *preprocessing_not_private(trials),
        *step_imbalance(trials),
        *calibration_bounds(trials),
        *identical_models(merged),
        *untargeted(trials),
        *missing_hashes(trials),
    ]
