"""Each trial's training budget as flat columns, so that every table shows the effort behind a
point: steps, epochs, expected batch size, noise, and which quantity the accountant solved for.

Rows carry the method's `TrainingBudget` (fairbench.methods.base). Rows stored before it existed are
read from their `info` and hyperparameters instead (`_legacy_budget`), so that committed runs
can be re-reported without re-running them.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from fairbench.privacy.accountant import at_search_bound

BUDGET_COLUMNS = [
    "steps",
    "epochs",
    "batch_size",
    "noise_multiplier",
    "noise",
    "calibrated",
    "calibration_at_bound",
]


def _legacy_budget(row: pd.Series) -> dict[str, Any]:
    """The budget of a row stored before methods reported one, from the keys they did record."""
    info, hparams = row["info"], row["hparams"]
    if "rho" in info:  # DPSE / DPNoSE: full-batch rounds at a calibrated zCDP budget
        return {
            "steps": info["steps"],
            "sampling_rate": None,
            "noise": {"rho": info["rho"]},
            "calibrated": "rho",
            "at_bound": False,
        }
    # CGOO counted oracle steps per iteration
    steps = info["oracle_steps"] * info["iterations"] if "oracle_steps" in info else info["steps"]
    sigma = float(info.get("noise_multiplier") or 0.0)
    noise = {}
    if sigma > 0:
        noise = {"gradient": sigma}
        for key, name in (("laplace_scale", "laplace"), ("count_noise", "count")):
            if info.get(key):
                noise[name] = float(info[key])
        if hparams.get("marginals") == "private":  # DP-FERMI's group counts
            noise["count"] = float(hparams["marginal_noise"])
    calibrated = None
    if sigma > 0:
        calibrated = "steps" if hparams.get("calibrate") == "steps" else "noise_multiplier"
    at_bound = sigma > 0 and at_search_bound(steps, sigma)
    return {
        "steps": int(steps),
        "sampling_rate": info.get("sampling_rate"),
        "noise": noise,
        "calibrated": calibrated,
        "at_bound": at_bound,
    }


def _columns(row: pd.Series) -> dict[str, Any]:
    budget = row.get("budget")
    if not isinstance(budget, dict):
        budget = _legacy_budget(row)
    q = budget["sampling_rate"]
    n = row["n_train"]
    noise = budget["noise"]
    return {
        "steps": budget["steps"],
        "epochs": budget["steps"] * (1.0 if q is None else q),
        "batch_size": n if q is None else q * n,
        "noise_multiplier": noise.get("gradient", math.nan),
        "noise": ", ".join(f"{k} {v:.4g}" for k, v in noise.items()),
        "calibrated": budget["calibrated"] or "",
        "calibration_at_bound": bool(budget["at_bound"]),
    }


def budget_columns(trials: pd.DataFrame) -> pd.DataFrame:
    """One row per trial with `BUDGET_COLUMNS`, aligned with `trials`' index."""
    return pd.DataFrame(
        [_columns(row) for _, row in trials.iterrows()], index=trials.index, columns=BUDGET_COLUMNS
    )
