"""`fairbench tune-budgets`: what a free-selection tune would have chosen with fewer draws
(issue 40 item 2), so that a verdict can be called stable only when it does not hang on the
budget (`fairbench.report.budget_sensitivity` reads what this writes).

Nested draws. Tune draws each method's configurations from one seeded generator per method,
so the first k of its draws are exactly the draws of a k-draw tune with the same seed, and
every search seed fits the same configurations (`workflows.tune.sample_configurations`).
The selection at budget k is therefore tune's own `select` (mean validation over every search
seed, its one rule) on the search trials of draws #0 .. #k-1: nothing is fitted again to
choose, and nothing about the rule is restated here.

Final trials (the choice made here). A budget-k selection's fresh-seed test numbers exist
only where tune ran that configuration, i.e. where the full budget chose it too (at some
target). The others are run, not left out: through tune's own `final_configs`,
`prepare_run` and `execute`, into OUT/budgets/final/<stem>. Trials are seeded and
deterministic, so these are the trials a k-draw tune would have run; a rerun resumes
(finished trials are kept) and runs only what is missing. It costs at most one final run
(`final_seeds` fits) per method, epsilon, target and smaller budget, and usually far fewer,
since most small-budget choices are also the full budget's; the search it re-selects from
cost draws x search seeds fits per method and epsilon. The finals of a tune whose trials
predate a code change are run by today's code: pairing them with the tune's own finals then
compares code versions, which the caller must say (the committed tune outputs of issue 40).

Outputs: per smaller budget k in BUDGETS, OUT/budgets/tuning-draws<k>.json, the table
(`rundir.tuning.TuningRow`) a k-draw tune would have written; the tune's own table is the
full budget's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pandas as pd

from fairbench.errors import ConfigError
from fairbench.methods.base import SENSITIVE_MARK
from fairbench.report import write_report
from fairbench.rundir.lock import run_lock
from fairbench.rundir.store import finished_rows
from fairbench.rundir.tuning import TuneLayout, read_tune_config, write_budget_table
from fairbench.runner.config import parse_config
from fairbench.runner.execute import RunSummary, execute, prepare_run
from fairbench.runner.trial import TrialSpec
from fairbench.workflows.tune import (
    TuneConfig,
    final_configs,
    result_rows,
    select,
    summarise,
)

BUDGETS = (4, 8, 16)  # the draws a verdict is re-selected at (issue 40 item 2)


def draw_index(label: str) -> int:
    """The draw a search trial's label `method#i` names: i (the label as the runner stores
    it, marked where the method reads the group at test)."""
    return int(label.rsplit("#", 1)[1].removesuffix(SENSITIVE_MARK))


def first_draws(search_rows: list[dict], draws: int) -> list[dict]:
    """The search trials of each method's first `draws` configurations."""
    return [row for row in search_rows if draw_index(row["label"]) < draws]


def budget_selection(config: TuneConfig, search_rows: list[dict], draws: int) -> pd.DataFrame:
    """Tune's selection table had it drawn `draws` configurations per method."""
    return select(config, first_draws(search_rows, draws))


def smaller_budgets(config: TuneConfig, budgets: tuple[int, ...] = BUDGETS) -> list[int]:
    """The budgets below the tune's own draws (the full budget is the tune itself)."""
    return [k for k in budgets if k < config.draws]


def load_tuned_config(out: Path) -> TuneConfig:
    """The tune config a free-selection tune output was tuned under (OUT/tune.yaml)."""
    config = TuneConfig.model_validate(read_tune_config(TuneLayout(out)))
    if config.selection != "free":
        raise ConfigError(
            f"{out}: tuned by selection: {config.selection}, which draws its own candidates "
            "per repeat; budget sensitivity re-selects free selection's search"
        )
    return config


def run_budgets(
    config: TuneConfig,
    out: Path,
    workers: int,
    quiet: bool,
    warn: Callable[[str], None] = print,
    budgets: list[int] | None = None,
) -> tuple[dict[int, pd.DataFrame], list[str]]:
    """Re-select at each of `budgets` (default `smaller_budgets`), run the selections' missing
    final trials, write each budget's table. Returns the selections per budget and the failed
    final trials' messages."""
    run = partial(execute, workers=workers, quiet=quiet)
    with run_lock(out):
        return _budgets(config, TuneLayout(out), budgets or smaller_budgets(config), run, warn)


def _budgets(
    config: TuneConfig,
    layout: TuneLayout,
    budgets: list[int],
    run: Callable[[list[TrialSpec], Path], RunSummary],
    warn: Callable[[str], None],
) -> tuple[dict[int, pd.DataFrame], list[str]]:
    if not budgets:  # a tune of at most the smallest budget's draws
        return {}, []
    search_rows = finished_rows(layout.search, "re-select from")
    tuned = [row for run_dir in _run_dirs(layout.final) for row in finished_rows(run_dir, "pair")]
    ran = {(r["dataset"], _eps(r["epsilon"]), r["label"]) for r in tuned}
    selections = {k: budget_selection(config, search_rows, k) for k in budgets}
    chosen = pd.concat(selections.values(), ignore_index=True).dropna(subset=["selected"])
    missing = chosen[
        [
            (r.dataset, float(r.epsilon), r.selected.replace("#", "-")) not in ran
            for r in chosen.itertuples(index=False)
        ]
    ]
    failures: list[str] = []
    added: list[dict] = []
    for stem, data in final_configs(config, missing).items():
        run_dir = layout.budget_final_run(stem)
        specs = prepare_run(parse_config(data, stem), run_dir, warn, extend=True)
        done = run(specs, run_dir)
        failures += [f"final {trial}: {error.splitlines()[-1]}" for trial, error in done.failed]
        write_report(run_dir)  # as tune's finals: trials.csv is what committed results keep
        added += finished_rows(run_dir, "pair")
    for k, selection in selections.items():
        summary = summarise(selection, tuned + added, search_rows, charge=False)
        write_budget_table(layout, k, result_rows(config, summary, tuned + added))
    return selections, failures


def _run_dirs(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*") if p.is_dir())


def _eps(value: float | None) -> float:
    """A trial row's epsilon as the selection table holds it (non-private: inf)."""
    return math.inf if value is None or math.isnan(value) else float(value)
