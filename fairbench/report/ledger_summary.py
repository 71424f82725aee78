"""The privacy ledger of a run, summarised for a reader: per method entry and target epsilon,
the epsilon the suite's accountant computed from the ledger, delta, and each accounted release
with its mechanism and noise scale (from the ledger's DpEvents, as the trials recorded them).

A row's `ledger` holds the dp-accounting events in their JSON form (`privacy.events.to_dict`);
rows stored before ledgers were kept show no releases.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

SUMMARY_KEYS = ["dataset", "constraint", "label", "privacy_notion", "epsilon", "delta"]
SUMMARY_COLUMNS = [*SUMMARY_KEYS, "trials", "epsilon_spent_mean", "epsilon_spent_max", "releases"]
RELEASE_COLUMNS = ["label", "group", "mechanism", "rounds", "sampling_rate", "noise"]


def mechanism(event: dict[str, Any]) -> tuple[str, dict[str, float]]:
    """An event's mechanism in words (`Poisson-sampled Gaussian`) and its parameters: `rounds`
    (self-composition count), `q` (sampling rate), `σ` (Gaussian noise multiplier), `b`
    (Laplace scale), `p` and `k` (randomized response's noise parameter and values), numbered
    when a composition holds several."""
    kind = event["type"]
    if kind == "RandomizedResponseDpEvent":
        return "randomized response", {"p": event["noise_parameter"], "k": event["num_buckets"]}
    if kind == "GaussianDpEvent":
        return "Gaussian", {"σ": event["noise_multiplier"]}
    if kind == "LaplaceDpEvent":
        return "Laplace", {"b": event["noise_multiplier"]}
    if kind in ("PoissonSampledDpEvent", "SubstitutionSampledDpEvent"):
        name, params = mechanism(event["event"])
        prefix = "Poisson-sampled" if kind.startswith("Poisson") else "substitution-sampled"
        return f"{prefix} {name}", {"q": event["sampling_probability"], **params}
    if kind == "SelfComposedDpEvent":
        name, params = mechanism(event["event"])
        return name, {"rounds": event["count"], **params}
    if kind == "ComposedDpEvent":
        names, params = [], {}
        for inner in event["events"]:
            name, inner_params = mechanism(inner)
            names.append(name)
            for key, value in inner_params.items():
                params[key if key not in params else f"{key}{len(names)}"] = value
        return " + ".join(names), params
    return kind.removesuffix("DpEvent"), {}


def _entries(ledger: dict[str, Any] | list | None) -> list[dict[str, Any]]:
    """A stored ledger's entries (a bare list in rows written before group tags existed)."""
    if isinstance(ledger, dict):
        return ledger.get("entries", [])
    return ledger if isinstance(ledger, list) else []


def ledger_releases(ledger: dict[str, Any] | list | None) -> pd.DataFrame:
    """One row per ledger entry of a trial: what was released, on which group (None: all
    records), how, over how many rounds, at what sampling rate, and its noise scales (a dict:
    `σ` Gaussian noise multiplier, `b` Laplace scale, numbered within a composition)."""
    rows = []
    for entry in _entries(ledger):
        name, params = mechanism(entry["event"])
        noise = {k: v for k, v in params.items() if k not in ("rounds", "q")}
        rows.append(
            {
                "label": entry["label"],
                "group": entry.get("group"),
                "mechanism": name,
                "rounds": params.get("rounds", 1),
                "sampling_rate": params.get("q"),
                "noise": noise,
            }
        )
    return pd.DataFrame(rows, columns=RELEASE_COLUMNS)


def _span(values: list[float]) -> str:
    low, high = min(values), max(values)
    return f"{low:.4g}" if f"{low:.4g}" == f"{high:.4g}" else f"{low:.4g}–{high:.4g}"


def _releases(ledgers: pd.Series) -> str:
    """The distinct releases of a group of trials, each with its parameters' range over them."""
    seen: dict[tuple[str, str], dict[str, list[float]]] = {}
    for ledger in ledgers:
        for entry in _entries(ledger):
            name, params = mechanism(entry["event"])
            ranges = seen.setdefault((entry["label"], name), {})
            for key, value in params.items():
                ranges.setdefault(key, []).append(float(value))
    return "; ".join(
        f"{label}: {name} ({', '.join(f'{k} {_span(v)}' for k, v in ranges.items())})"
        for (label, name), ranges in seen.items()
    )


def privacy_summary(trials: pd.DataFrame) -> pd.DataFrame:
    """Per (dataset, constraint, method entry, notion, target epsilon, delta): trials, epsilon
    spent (mean and largest, as the accountant computed it) and the releases behind it.
    Non-private entries (epsilon inf) spend nothing and release nothing."""
    ledgers = trials["ledger"] if "ledger" in trials else pd.Series(None, index=trials.index)
    grouped = trials.assign(ledger=ledgers).groupby(SUMMARY_KEYS, dropna=False, sort=True)
    rows = [
        {
            **dict(zip(SUMMARY_KEYS, key, strict=True)),
            "trials": len(grp),
            "epsilon_spent_mean": float(grp["epsilon_spent"].mean()),
            "epsilon_spent_max": float(grp["epsilon_spent"].max()),
            "releases": "" if math.isinf(key[4]) else _releases(grp["ledger"]),
        }
        for key, grp in grouped
    ]
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
