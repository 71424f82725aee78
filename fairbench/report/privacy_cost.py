"""`fig-privacy-cost`: what privacy costs at a fairness target, from `fairbench tune` outputs.

One job: turn tuned runs into the headline table of issue 16 (the notes beside it are
privacy_cost_notes', the drawing privacy_cost_plot's; `outputs` yields all three, written by
`registry.build` as `fairbench figure privacy-cost`). For each
(dataset, model, constraint, target tau, method, epsilon) the row describes the configuration
that tune selected on validation at tau, re-run on fresh seeds and evaluated once on test. A
method that no configuration brought within tau on validation has no row; the notes list it,
so a missing line is never mistaken for a line nobody drew.

It reads only what tune wrote under each output directory (`rundir.tuning`: the tune config,
the result table, the search run and the final runs, and the smaller budgets' tables of
`fairbench tune-budgets`), never re-running or re-selecting anything: the figure shows what
tune chose.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from fairbench.errors import ConfigError
from fairbench.privacy.session import PrivacyNotion
from fairbench.report.aggregate import ci95, trials_frame
from fairbench.report.budget_sensitivity import notions, sensitivity
from fairbench.report.outputs import Csv, Doc, Output, Plot
from fairbench.report.privacy_cost_notes import (
    ERROR_ONLY,
    WITHIN_TAU,
    by_model,
    dataset_document,
    unreached_text,
)
from fairbench.report.privacy_cost_plot import privacy_cost_figure
from fairbench.report.uncertainty import COLUMNS as UNCERTAINTY
from fairbench.report.uncertainty import cell
from fairbench.rundir.store import finished_rows
from fairbench.rundir.tuning import TuneLayout, read_table, read_tune_config

COLUMNS = [
    "dataset",
    "model",
    "constraint",
    "tau",
    "method",
    "epsilon",
    "n_seeds",
    "test_error_mean",
    "ci_low",
    "ci_high",
    "violation_mean",
    "satisfied_fraction",
    "steps_mean",
    "selected",
    "selection_rule",
    *UNCERTAINTY,  # violation interval, the splits' SEs, verdict, unstable (uncertainty.cell)
]
SPREAD_COLUMNS = [
    *COLUMNS[:6],  # dataset, model, constraint, tau, method, epsilon
    "draws",
    "n_configs",
    "n_infeasible",
    "n_feasible",
    "val_error_min",
    "val_error_max",
    "feasible_val_error_min",
    "feasible_val_error_max",
]
KEY = ["dataset", "model", "constraint", "tau", "method", "epsilon"]
SELECTION_KEY = ["dataset", "constraint", "epsilon", "target", "method"]


@dataclass
class TuneOutput:
    """What one `fairbench tune` output directory holds, read back."""

    path: Path
    config: dict[str, Any]  # tune.yaml
    selection: pd.DataFrame  # the result table, one row per (dataset, epsilon, target, method)
    search: pd.DataFrame  # the search's trials (trials_frame)
    final: pd.DataFrame  # every final run's trials (trials_frame); empty if none
    datasets: dict[str, tuple[str, str]]  # tune's dataset name -> (key, title)
    plugins: dict[str, str]  # method label -> plugin name
    models: dict[str, str]  # method label -> model family


def dataset_key(name: str, options: dict[str, Any]) -> tuple[str, str]:
    """A file-name key and a title for a dataset entry: subsampled variants are their own
    datasets (adult with n_train 5000 is `adult-n5000`), other options go to the title."""
    key = name + (f"-n{options['n_train']}" if options.get("n_train") is not None else "")
    shown = ", ".join(f"{k} {v}" for k, v in sorted(options.items()) if v is not None)
    return key, f"{name} ({shown})" if shown else name


def load_tune_output(path: Path) -> TuneOutput:
    """Read a tune output directory; one clear error when it is not one (or not finished)."""
    layout = TuneLayout(Path(path))
    config = read_tune_config(layout)
    table = read_table(layout)
    if set(table["selection"]) != {"free"}:
        raise ConfigError(
            f"{path}: tuned by private selection; this figure reads `selection: free` outputs "
            "(fig-tuning-cost reads private ones)"
        )
    # a free selection is made once and re-run on every final seed: one row per choice
    selection = table.drop_duplicates(SELECTION_KEY).reset_index(drop=True)
    datasets: dict[str, tuple[str, str]] = {}
    for entry in config["datasets"]:
        if entry["name"] in datasets:
            raise ConfigError(
                f"{layout.config}: two entries of dataset {entry['name']}; tune "
                "selects by dataset name: give each its own tune config"
            )
        datasets[entry["name"]] = dataset_key(entry["name"], entry.get("options") or {})
    finals = sorted(p for p in layout.final.glob("*") if p.is_dir())
    final_rows = [row for run in finals for row in finished_rows(run, "draw")]
    methods = config["methods"]
    return TuneOutput(
        path=layout.root,
        config=config,
        selection=selection,
        search=trials_frame(finished_rows(layout.search, "draw")),
        final=trials_frame(final_rows) if final_rows else pd.DataFrame(),
        datasets=datasets,
        plugins={m.get("label") or m["name"]: m["name"] for m in methods},
        models={
            m.get("label") or m["name"]: (m.get("hparams") or {}).get("model", "logistic")
            for m in methods
        },
    )


def final_trials(tuned: TuneOutput, row: pd.Series) -> pd.DataFrame:
    """The fresh-seed final trials of the configuration a selection row names (empty if its
    final run has not finished)."""
    final = tuned.final
    if final.empty:
        return final
    label = str(row["selected"]).replace("#", "-")
    return final[
        (final["label"] == label)
        & (final["dataset"] == row["dataset"])
        & (final["epsilon"] == row["epsilon"])
    ]


def search_trials(tuned: TuneOutput, row: pd.Series) -> pd.DataFrame:
    """The search trials a selection row chose its configuration on (its validation values)."""
    search = tuned.search
    return search[
        (search["label"] == row["selected"])
        & (search["dataset"] == row["dataset"])
        & (search["epsilon"] == row["epsilon"])
    ]


def _selected_json(row: pd.Series, trials: pd.DataFrame) -> str:
    """The chosen configuration as JSON: its search label, knob and every hyperparameter, as
    the final trials ran them (the result table's copy is the search's, as drawn)."""
    knob = None if row["knob"] is None or pd.isna(row["knob"]) else float(row["knob"])
    hparams = trials["hparams"].iloc[0]
    return json.dumps({"config": row["selected"], "knob": knob, **hparams}, sort_keys=True)


def cost_rows(tuned: TuneOutput) -> pd.DataFrame:
    """The figure's rows: one per selected (dataset, model, constraint, tau, method, epsilon),
    from the selected configuration's fresh-seed final trials."""
    free = unconstrained(tuned)
    rows = []
    for _, sel in tuned.selection.dropna(subset=["selected"]).iterrows():
        trials = final_trials(tuned, sel)
        if trials.empty:  # the final run has not finished: no row rather than a wrong one
            continue
        tau = float(sel["target"])
        errors = trials["test_error"].astype(float)
        half = ci95(errors)
        rows.append(
            {
                "dataset": tuned.datasets[sel["dataset"]][0],
                "model": sel["hparams"].get("model", "logistic"),
                "constraint": sel["constraint"],
                "tau": tau,
                "method": sel["method"],
                "epsilon": float(sel["epsilon"]),
                "n_seeds": int(trials["seed"].nunique()),
                "test_error_mean": float(errors.mean()),
                "ci_low": float(errors.mean() - half),
                "ci_high": float(errors.mean() + half),
                "violation_mean": float(trials["test_violation"].mean()),
                "satisfied_fraction": float((trials["test_violation"] <= tau).mean()),
                "steps_mean": float(trials["steps"].mean()),
                "selected": _selected_json(sel, trials),
                "selection_rule": ERROR_ONLY if sel["method"] in free else WITHIN_TAU,
                **cell(
                    trials,
                    search_trials(tuned, sel),
                    tau,
                    float(sel["val_violation"]),
                    float(sel["val_error"]),
                ),
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)


def unconstrained(tuned: TuneOutput) -> set[str]:
    """Labels of the methods tune selected on validation error alone (`unconstrained`)."""
    return {m.get("label") or m["name"] for m in tuned.config["methods"] if m.get("unconstrained")}


def check_one_notion(tuned: TuneOutput) -> None:
    """Refuse a tune with a method under local DP of the attribute: this figure's rows have no
    notion column, so its epsilon would sit beside whole-record DP's as if the same promise
    (fig-literature draws that notion apart)."""
    local = PrivacyNotion.LOCAL_ATTRIBUTE.value
    for label, notion in notions(tuned.config).items():
        if notion == local:
            raise ConfigError(
                f"{tuned.path}: method {label} is private under {local} only; fig-privacy-cost "
                "does not keep notions apart: drop it from the tune or draw it with "
                "fig-literature"
            )


def unreachable(tuned: TuneOutput) -> pd.DataFrame:
    """(dataset, model, constraint, tau, method, epsilon, candidates, infeasible) for every
    method and epsilon where no configuration was within tau on validation."""
    missing = tuned.selection[tuned.selection["selected"].isna()]
    return pd.DataFrame(
        {
            "dataset": [tuned.datasets[d][0] for d in missing["dataset"]],
            "model": [tuned.models.get(m, "logistic") for m in missing["method"]],
            "constraint": missing["constraint"].to_numpy(),
            "tau": missing["target"].astype(float).to_numpy(),
            "method": missing["method"].to_numpy(),
            "epsilon": missing["epsilon"].to_numpy(),
            "candidates": missing["candidates"].astype(int).to_numpy(),
            "infeasible": missing["infeasible"].astype(int).to_numpy(),
        }
    )


def search_spread(tuned: TuneOutput) -> pd.DataFrame:
    """How much the choice of configuration mattered: per (tau, method, epsilon), the range of
    mean validation error over all the search's configurations and over those within tau."""
    search = tuned.search.copy()
    search["method_label"] = search["label"].str.rsplit("#", n=1).str[0]
    means = (
        search.groupby(["dataset", "epsilon", "method_label", "label"])
        .agg(val_error=("val_error", "mean"), val_violation=("val_violation", "mean"))
        .reset_index()
    )
    infeasible = {
        (r.dataset, r.epsilon, r.method): int(r.infeasible)
        for r in tuned.selection.itertuples(index=False)
    }
    free = unconstrained(tuned)
    rows = []
    for tau in tuned.config["targets"]:
        for (dataset, eps, label), group in means.groupby(["dataset", "epsilon", "method_label"]):
            within = group if label in free else group[group["val_violation"] <= tau]
            rows.append(
                {
                    "dataset": tuned.datasets[dataset][0],
                    "model": tuned.models.get(label, "logistic"),
                    "constraint": tuned.config["constraint"],
                    "tau": float(tau),
                    "method": label,
                    "epsilon": float(eps),
                    "draws": int(tuned.config["draws"]),
                    "n_configs": len(group),
                    "n_infeasible": infeasible.get((dataset, eps, label), 0),
                    "n_feasible": len(within),
                    "val_error_min": group["val_error"].min(),
                    "val_error_max": group["val_error"].max(),
                    "feasible_val_error_min": within["val_error"].min()
                    if len(within)
                    else math.nan,
                    "feasible_val_error_max": within["val_error"].max()
                    if len(within)
                    else math.nan,
                }
            )
    return pd.DataFrame(rows, columns=SPREAD_COLUMNS)


def budget_rows(tuned: TuneOutput) -> pd.DataFrame:
    """The budget-sensitivity rows of the tune output (`budget_sensitivity.COLUMNS`, the
    dataset as the figure names it, after it the tune's model)."""
    frame = sensitivity(tuned.path)
    frame["dataset"] = [tuned.datasets[d][0] for d in frame["dataset"]]
    frame.insert(1, "model", ", ".join(sorted({tuned.models[m] for m in tuned.plugins})))
    return frame


def _meta(tuned: TuneOutput, name: str) -> dict[str, Any]:
    finite = [float(e) for e in tuned.config["epsilons"]]
    models = sorted({tuned.models[m] for m in tuned.plugins})
    return {
        "title": tuned.datasets[name][1],
        "constraint": tuned.config["constraint"],
        "delta": float(tuned.config.get("delta", 1e-5)),
        "model": ", ".join(models),
        "draws": tuned.config["draws"],
        "search_seeds": len(tuned.config["search_seeds"]),
        "final_seeds": len(tuned.config["final_seeds"]),
        "epsilons": sorted(finite),
        "low": min(finite),
        "high": max(finite),
        "path": str(tuned.path),
    }


def outputs(inputs: list[Path]) -> Iterator[Output]:
    """Per dataset: `<key>.csv` (COLUMNS), `<key>-search-spread.csv` (SPREAD_COLUMNS),
    `<key>-budgets.csv` (`budget_rows`), a figure per model (`<key>-<model>.png/.pdf`) and the
    notes `<key>.md` (and `.tex`)."""
    if not inputs:
        raise ConfigError("give at least one `fairbench tune` output directory")
    tuned = [load_tune_output(p) for p in inputs]
    for t in tuned:
        check_one_notion(t)
    rows = pd.concat([cost_rows(t) for t in tuned], ignore_index=True)
    clash = rows[rows.duplicated(KEY, keep=False)]
    if len(clash):
        r = clash.iloc[0]
        raise ConfigError(
            f"two tune outputs both hold {r['method']} on {r['dataset']} "
            f"({r['model']}, τ {r['tau']:g}, ε {r['epsilon']:g}): give each "
            "method one output per dataset and model"
        )
    missing = pd.concat([unreachable(t) for t in tuned], ignore_index=True)
    spread = pd.concat([search_spread(t) for t in tuned], ignore_index=True)
    budgets = pd.concat([budget_rows(t) for t in tuned], ignore_index=True)
    plugins = {label: name for t in tuned for label, name in t.plugins.items()}
    order = {"by": ["model", "tau", "method", "epsilon"], "ascending": [True, False, True, True]}
    keys = sorted({key for t in tuned for key, _ in t.datasets.values()})
    for key in keys:
        meta = [_meta(t, name) for t in tuned for name, (k, _) in t.datasets.items() if k == key]
        mine = rows[rows["dataset"] == key].sort_values(**order)
        yield Csv(f"{key}.csv", mine[COLUMNS])
        yield Csv(f"{key}-search-spread.csv", spread[spread["dataset"] == key].sort_values(**order))
        yield Csv(f"{key}-budgets.csv", budgets[budgets["dataset"] == key])
        figures: list[str] = []
        for model, m in by_model(meta).items():
            gone = missing[(missing["dataset"] == key) & (missing["model"] == model)]
            stem = f"{key}-{model}"
            yield Plot(stem, privacy_cost_figure(mine, model, plugins, m, unreached_text(gone)))
            figures.append(f"{stem}.png")
        yield Doc(
            key,
            dataset_document(
                key,
                meta,
                mine,
                missing[missing["dataset"] == key],
                spread[spread["dataset"] == key],
                budgets[budgets["dataset"] == key],
                figures,
            ),
        )
