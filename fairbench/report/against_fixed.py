"""A fixed configuration against the tuned selection, on the tune's own fresh seeds (issue 40).

Does the tune give a method its best shot? Its space holds the method's paper configuration
as draw 0, so the tuned selection should be at least as good as that configuration on the
same splits. The fixed configuration runs as a plain `fairbench run` on the tune's datasets,
epsilons and final seeds; a seed fixes the split, so the tuned selection's row of the tune's
table on final seed s and the fixed run's trial of seed s are a matched pair.

Per (dataset, epsilon, method, target tau): the tuned selection and the fixed configuration's
mean test error and violation; the fixed configuration's mean validation violation on the
final seeds and, where the tune drew it (its space's defaults are always drawn), on the
tune's search seeds: the number the tune selected on (above tau, it could not choose it); the
paired test-error difference (tuned minus fixed)
with its 95% Student-t interval; and the verdict: "tuned better" (interval below 0), "fixed
better" (above 0) or "tie" (it contains 0). "At least as good" is every verdict but "fixed
better". Only free selections are paired (a private selection releases a different choice per
repeat).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from fairbench.errors import ConfigError
from fairbench.methods import get_method
from fairbench.report.aggregate import ci95
from fairbench.report.document import Document, Table
from fairbench.report.outputs import Csv, Doc, Output
from fairbench.report.paired import paired_verdict
from fairbench.rundir.store import finished_rows
from fairbench.rundir.tuning import TuneLayout, read_table

TUNED_BETTER, FIXED_BETTER, TIE = "tuned better", "fixed better", "tie"
NOT_SELECTED = "the tune selected none within τ"
COLUMNS = [
    "dataset",
    "epsilon",
    "method",
    "fixed_label",
    "tau",
    "selected",
    "n_pairs",
    "tuned_error",
    "fixed_error",
    "difference_mean",
    "difference_ci95",
    "verdict",
    "tuned_violation",
    "fixed_violation",
    "fixed_val_violation",
    "search_val_violation",
    "fixed_epsilon_spent",
]


def tuned_datasets(path: Path) -> set[tuple[str, str, float]]:
    """(dataset, its options as the trials record them, epsilon) of every final run of a tune:
    the options resolved as a run resolves them, so a fixed run's rows compare as equals."""
    return {
        (row["dataset"], json.dumps(row["dataset_options"] or {}, sort_keys=True), row["epsilon"])
        for run in sorted(TuneLayout(path).final.iterdir())
        if run.is_dir()
        for row in finished_rows(run, "compare")
    }


def _tune_for(tunes: dict[Path, set], name: str, options: dict, epsilon: float) -> Path:
    """The one tune that ran this dataset (same options) at this epsilon."""
    key = (name, json.dumps(options, sort_keys=True), epsilon)
    found = [path for path, runs in tunes.items() if key in runs]
    if len(found) != 1:
        which = "no tune" if not found else f"{len(found)} tunes ({', '.join(map(str, found))})"
        raise ConfigError(
            f"{which} ran {name} {options} at epsilon {epsilon}: give exactly one "
            "`fairbench tune --out` directory per dataset and epsilon of the fixed run"
        )
    if len({o for n, o, _ in tunes[found[0]] if n == name}) > 1:
        raise ConfigError(
            f"{found[0]} tunes {name} under two sets of options; its table cannot tell them apart"
        )
    return found[0]


def resolved(method: str, hparams: dict) -> str:
    """A configuration with every default filled in, as a key: two spellings of one
    configuration (a default left out, or written) are equal."""
    return json.dumps(get_method(method, **hparams).hparams.model_dump(), sort_keys=True)


def search_violation(search: pd.DataFrame, trials: pd.DataFrame) -> float:
    """The mean validation violation, over the tune's search seeds, of the search's draw with
    the fixed trials' configuration and knob (NaN where the tune never drew it)."""
    method, first = trials["method"].iloc[0], trials.iloc[0]
    if search.empty:
        return math.nan
    mine = search[
        (search["dataset"] == first["dataset"])
        & (search["epsilon"] == first["epsilon"])
        & (search["method"] == method)
        & (search["knob"] == first["knob"])
    ]
    key = resolved(method, first["hparams"] or {})
    same = mine[[resolved(method, h or {}) == key for h in mine["hparams"]]]
    return float(same["val_violation"].mean()) if len(same) else math.nan


def comparison(
    fixed: pd.DataFrame,
    tables: dict[Path, pd.DataFrame],
    tunes: dict,
    searches: dict[Path, pd.DataFrame] | None = None,
) -> pd.DataFrame:
    """One row per (dataset, epsilon, fixed label, target) of the fixed run (rows of
    `finished_rows` as a frame) against the tunes' tables (`read_table`); `tunes` maps each
    tune to its `tuned_datasets`, `searches` to its search's rows (where it kept them)."""
    rows = []
    for (name, eps, label), trials in fixed.groupby(["dataset", "epsilon", "label"], sort=True):
        options = dict(trials["dataset_options"].iloc[0] or {})
        path = _tune_for(tunes, name, options, float(eps))
        method = trials["method"].iloc[0]
        table = tables[path]
        mine = table[
            (table["dataset"] == name)
            & (table["epsilon"] == float(eps))
            & (table["method"] == method)
            & (table["selection"] == "free")
        ]
        if mine.empty:
            raise ConfigError(f"{path} selected no {method} at epsilon {eps} on {name}")
        by_seed = trials.set_index("seed")
        searched = search_violation((searches or {}).get(path, pd.DataFrame()), trials)
        for tau, tuned in mine.groupby("target", sort=True):
            tuned = tuned.dropna(subset=["test_error"]).set_index("repeat")
            seeds = sorted(set(tuned.index) & set(by_seed.index))
            difference = tuned.loc[seeds, "test_error"] - by_seed.loc[seeds, "test_error"]
            half, mean = ci95(difference), float(difference.mean())  # NaN without pairs
            rows.append(
                {
                    "dataset": name,
                    "epsilon": float(eps),
                    "method": method,
                    "fixed_label": label,
                    "tau": float(tau),
                    "selected": tuned["selected"].iloc[0] if len(tuned) else None,
                    "n_pairs": len(seeds),
                    "tuned_error": float(tuned.loc[seeds, "test_error"].mean()),
                    "fixed_error": float(by_seed.loc[seeds, "test_error"].mean()),
                    "difference_mean": mean,
                    "difference_ci95": half,
                    "verdict": verdict(mean, half) if seeds else NOT_SELECTED,
                    "tuned_violation": float(tuned.loc[seeds, "test_violation"].mean()),
                    "fixed_violation": float(by_seed.loc[seeds, "test_violation"].mean()),
                    "fixed_val_violation": float(trials["val_violation"].mean()),
                    "search_val_violation": searched,
                    "fixed_epsilon_spent": float(trials["epsilon_spent"].mean()),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


def verdict(mean: float, half: float) -> str:
    """Tuned minus fixed, read as `paired_verdict` reads A minus B (A the tune)."""
    return {"win": TUNED_BETTER, "loss": FIXED_BETTER, "tie": TIE}[paired_verdict(mean, half)]


def document(table: pd.DataFrame) -> Document:
    def pm(mean: float, half: float) -> str:
        if math.isnan(mean):
            return "—"
        return f"{mean:+.4f} ± {half:.4f}" if not math.isnan(half) else f"{mean:+.4f}"

    def num(value: float, digits: int) -> str:
        return "—" if math.isnan(value) else f"{value:.{digits}f}"

    doc = Document().heading(1, "A fixed configuration against the tuned selection")
    doc.add(
        "Test error on the tune's final seeds (a seed fixes the split, so each seed is a "
        "matched pair): the tuned selection at each target τ against the fixed configuration. "
        "Difference = tuned − fixed, mean ± 95% Student-t half-width over the pairs; "
        "'tie' where the interval contains 0. The fixed configuration's validation violation "
        "on the final seeds, and on the tune's search seeds where the tune drew it (the "
        "number it selected on; 'not drawn' otherwise): the tune could choose it at τ only "
        "where the search's is ≤ τ."
    )
    cells = [
        [
            r.dataset,
            f"{r.epsilon:g}",
            r.fixed_label,
            f"{r.tau:g}",
            r.selected if isinstance(r.selected, str) else "—",
            str(r.n_pairs),
            num(r.tuned_error, 4),
            num(r.fixed_error, 4),
            pm(r.difference_mean, r.difference_ci95),
            r.verdict,
            f"{num(r.tuned_violation, 3)} / {num(r.fixed_violation, 3)}",
            f"{r.fixed_val_violation:.3f} / {num(r.search_val_violation, 3)}".replace(
                "—", "not drawn"
            ),
            f"{r.fixed_epsilon_spent:.3f}",
        ]
        for r in table.itertuples()
    ]
    doc.add(
        Table(
            [
                "dataset",
                "ε",
                "fixed",
                "τ",
                "tuned selection",
                "pairs",
                "tuned error",
                "fixed error",
                "tuned − fixed",
                "verdict",
                "test violation tuned / fixed",
                "fixed val violation: final / search seeds",
                "fixed ε spent",
            ],
            cells,
            "lllllrrrrllrr",
        )
    )
    return doc


def outputs(inputs: list[Path]) -> Iterator[Output]:
    """From one or more fixed `fairbench run` directories and the `fairbench tune --out`
    directories they are compared with (a directory with a tune.yaml is a tune)."""
    tune_paths = [p for p in inputs if TuneLayout(p).config.is_file()]
    run_paths = [p for p in inputs if p not in tune_paths]
    if not tune_paths or not run_paths:
        raise ConfigError(
            "give the fixed configuration's `fairbench run --out` directory and the "
            "`fairbench tune --out` directories it is compared with"
        )
    tunes = {p: tuned_datasets(p) for p in tune_paths}
    tables = {p: read_table(TuneLayout(p)) for p in tune_paths}
    searches = {p: _search_rows(TuneLayout(p).search) for p in tune_paths}
    fixed = pd.DataFrame([row for p in run_paths for row in finished_rows(p, "compare")])
    table = comparison(fixed, tables, tunes, searches)
    yield Csv("comparison.csv", table)
    yield Doc("comparison", document(table))


def _search_rows(search: Path) -> pd.DataFrame:
    """The search's finished trials (empty where the tune output kept none)."""
    try:
        return pd.DataFrame(finished_rows(search, "compare"))
    except ConfigError:
        return pd.DataFrame()
