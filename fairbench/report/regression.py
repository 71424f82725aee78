"""Regression checks of a run against a committed baseline (`fairbench check`).

A baseline summarises a run per series (dataset, constraint, privacy notion, epsilon, method
label): the Pareto error at fixed violation levels (read off the series' own frontier, as for
published curves), the fraction of seeds whose held-out violation met the method's stated
target (methods with a gamma knob), and the largest epsilon spent. A later run regresses when
a series' error at a level rises by more than the tolerance (or the level is no longer
reached), its satisfaction falls by more than the tolerance, or it spends more epsilon.
Baselines are written by `fairbench check RUN_DIR --write-baseline FILE`, never by hand.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairbench.errors import ConfigError
from fairbench.report.aggregate import pareto_points, trials_frame
from fairbench.report.references import error_at

SERIES = ["dataset", "constraint", "privacy_notion", "epsilon", "label"]
DEFAULT_LEVELS = [0.02, 0.05, 0.10, 0.20]
DEFAULT_TOLERANCE = {"error": 0.01, "satisfaction": 0.2, "epsilon": 1e-6}


@dataclass(frozen=True)
class Regression:
    series: str
    what: str
    baseline: float | None
    now: float | None

    def __str__(self) -> str:
        def fmt(v: float | None) -> str:
            return "not reached" if v is None or math.isnan(v) else f"{v:.4f}"

        return f"{self.series}: {self.what}: baseline {fmt(self.baseline)}, now {fmt(self.now)}"


def _name(key: tuple) -> str:
    dataset, constraint, notion, eps, label = key
    budget = "non-private" if eps is None else f"ε={eps:g}"
    return f"{label} · {dataset} · {constraint} · {notion} · {budget}"


def summarise(rows: list[dict[str, Any]], levels: list[float]) -> list[dict[str, Any]]:
    """The baseline entries of a run's finished trials."""
    points = pareto_points(trials_frame(rows))
    entries = []
    for key, series in points.groupby(SERIES, dropna=False, sort=True):
        satisfied = series["satisfied_fraction"].dropna()
        fields = dict(zip(SERIES, key, strict=True))
        if not math.isfinite(fields["epsilon"]):  # non-private rows: JSON has no infinity
            fields["epsilon"] = None
        entries.append(
            {
                **fields,
                "error_at": {f"{v:g}": _finite(error_at(v, series)) for v in levels},
                "satisfaction": float(satisfied.mean()) if len(satisfied) else None,
                "epsilon_spent_max": _finite(float(series["epsilon_spent_max"].max())),
            }
        )
    return entries


def _finite(value: float) -> float | None:
    return None if math.isnan(value) else value


def write_baseline(
    rows: list[dict[str, Any]], path: Path, name: str, levels: list[float] | None = None
) -> dict[str, Any]:
    levels = levels or DEFAULT_LEVELS
    baseline = {
        "name": name,
        "levels": levels,
        "tolerance": DEFAULT_TOLERANCE,
        "entries": summarise(rows, levels),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(baseline, indent=1, sort_keys=True) + "\n")
    return baseline


def load_baseline(path: Path) -> dict[str, Any]:
    try:
        baseline = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"baseline {path} not found; write one with --write-baseline") from None
    except json.JSONDecodeError:
        baseline = None
    required = {"entries", "levels", "tolerance"}
    if not isinstance(baseline, dict) or not required <= set(baseline):
        raise ConfigError(
            f"baseline {path} is malformed (needs {', '.join(sorted(required))}); "
            "regenerate it with `fairbench check RUN --write-baseline`"
        )
    return baseline


def compare(rows: list[dict[str, Any]], baseline: dict[str, Any]) -> list[Regression]:
    """Every way the run is worse than the baseline beyond its tolerances."""
    tol = {**DEFAULT_TOLERANCE, **baseline["tolerance"]}
    now = {_key(e): e for e in summarise(rows, baseline["levels"])}
    found = []
    for old in baseline["entries"]:
        key = _key(old)
        name = _name(key)
        new = now.get(key)
        if new is None:
            found.append(Regression(name, "series missing from the run", None, None))
            continue
        for level, before in old["error_at"].items():
            after = new["error_at"].get(level)
            if before is not None and (after is None or after > before + tol["error"]):
                found.append(Regression(name, f"error at violation {level}", before, after))
        if old["satisfaction"] is not None and (
            new["satisfaction"] is None
            or new["satisfaction"] < old["satisfaction"] - tol["satisfaction"]
        ):
            found.append(
                Regression(
                    name, "constraint satisfaction", old["satisfaction"], new["satisfaction"]
                )
            )
        before, after = old["epsilon_spent_max"], new["epsilon_spent_max"]
        if before is not None and after is not None and after > before + tol["epsilon"]:
            found.append(Regression(name, "epsilon spent", before, after))
    return found


def _key(entry: dict[str, Any]) -> tuple:
    """A series' identity; `summarise` writes non-private series with epsilon None."""
    return tuple(entry[field] for field in SERIES)
