"""A `fairbench tune` output directory: its file names and its one result table.

Every tuning path (free selection, private selection and its uncharged twin) writes the same
table, one `TuningRow` per (dataset, epsilon, method, target, repeat, selection rule), and
every reader (the figures, advise, the CLI) reads it back here, so that no two modules agree
on a file's name or columns by copying them. Below both the workflows that write a tune
output and the report that reads it.

The table is JSON as Python writes it, one row per line: the non-private epsilon stays
Infinity and a missing number NaN (Python reads both back), as in the results store.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from fairbench.errors import ConfigError

SELECTION_RULES = ("free", "private", "uncharged")


@dataclass(frozen=True)
class TuneLayout:
    """Where a tune output keeps each of its parts, under `root` (tune's --out)."""

    root: Path

    @property
    def config(self) -> Path:
        """The validated tune config, so that readers know its targets, budget and seeds."""
        return self.root / "tune.yaml"

    @property
    def table(self) -> Path:
        return self.root / "tuning.json"

    @property
    def notes(self) -> Path:
        """The table for people (tuning.md)."""
        return self.root / "tuning.md"

    @property
    def search(self) -> Path:
        """Free selection's search: one run directory of every drawn configuration."""
        return self.root / "search"

    @property
    def final(self) -> Path:
        """Free selection's re-runs on fresh seeds: a run directory per `final_run` stem."""
        return self.root / "final"

    def final_run(self, stem: str) -> Path:
        return self.final / stem

    @property
    def selected(self) -> Path:
        """Free selection's choices as run configs, one per `final_run` stem."""
        return self.root / "selected"

    def selected_config(self, stem: str) -> Path:
        return self.selected / f"{stem}.yaml"

    @property
    def private(self) -> Path:
        """Private (or uncharged) selection's candidates and its analysis."""
        return self.root / "private"

    def private_run(self, dataset: str, epsilon: float) -> Path:
        return self.private / f"{dataset}-eps{epsilon:g}"

    @property
    def budgets(self) -> Path:
        """Budget sensitivity (`fairbench tune-budgets`): per smaller budget the table a tune
        of that many draws would have written, and the final runs it needed that tune had not
        made (`budget_final_run`)."""
        return self.root / "budgets"

    def budget_table(self, draws: int) -> Path:
        return self.budgets / f"tuning-draws{draws}.json"

    def budget_final_run(self, stem: str) -> Path:
        return self.budgets / "final" / stem

    @property
    def analysis(self) -> Path:
        """Private selection's per-method analysis (law, K per repeat, every candidate)."""
        return self.private / "selections.json"


@dataclass(frozen=True)
class TuningRow:
    """One selection's outcome. Free selection chooses once per (dataset, epsilon, method,
    target) on the search seeds and re-runs the choice on every final seed: a row per final
    seed (`repeat`), the same choice in each. Private and uncharged selection run the whole
    procedure once per repeat (the final seed is its split): a row per repeat with what that
    repeat released. `selected` is None where nothing was (no candidate within the target,
    K = 0, a method left out); its numbers are then NaN."""

    dataset: str
    constraint: str
    epsilon: float  # inf: non-private
    method: str  # the tune config's label
    target: float  # the allowed validation violation
    selection: str  # SELECTION_RULES
    repeat: int  # the final seed
    selected: str | None  # the chosen candidate's label, `method#i`
    hparams: dict[str, Any] | None
    knob: float  # NaN: none
    val_error: float  # free: mean over the search seeds; private: the noisy score
    val_violation: float
    test_error: float  # this repeat's model on test
    test_violation: float
    candidates: int  # free: configurations searched; private and uncharged: K this repeat
    feasible: int  # of the candidates, those whose validation violation is within the target
    infeasible: int  # of the candidates, those no calibration meets at this epsilon
    uses_sensitive_at_test: bool  # the method (any of its candidates) reads the group at test
    tuning: str  # what tuning was charged, in words
    tuning_epsilon: float  # the whole procedure's epsilon at delta; NaN where not accounted
    candidate_epsilon: float  # private and uncharged: each candidate's budget; NaN for free
    training_epsilon: float  # private and uncharged: its training's share
    score_laplace_scale: float  # private: the Laplace scale of each validation count
    accountant: str | None  # private: which accountant gave tuning_epsilon
    left_out: str | None  # private: why no candidate of the method could be calibrated


COLUMNS = [f.name for f in fields(TuningRow)]
_FLOATS = [f.name for f in fields(TuningRow) if f.type == "float"]
_INTS = [f.name for f in fields(TuningRow) if f.type == "int"]
_BOOLS = [f.name for f in fields(TuningRow) if f.type == "bool"]


def write_table(layout: TuneLayout, rows: list[TuningRow]) -> None:
    """The table, atomically (a reader never sees half of it)."""
    _write_rows(layout.table, rows)


def write_budget_table(layout: TuneLayout, draws: int, rows: list[TuningRow]) -> None:
    """The table a tune of `draws` draws would have written (`TuneLayout.budget_table`)."""
    layout.budgets.mkdir(parents=True, exist_ok=True)
    _write_rows(layout.budget_table(draws), rows)


def _write_rows(path: Path, rows: list[TuningRow]) -> None:
    lines = [json.dumps(asdict(row)) for row in rows]
    _replace(path, "[\n" + ",\n".join(lines) + "\n]\n" if lines else "[]\n")


def read_table(layout: TuneLayout) -> pd.DataFrame:
    """The table as a frame with COLUMNS (missing numbers NaN); one clear error when the
    output has none yet or it is not one."""
    if not layout.table.is_file():
        raise ConfigError(
            f"{layout.root} has no {layout.table.name} yet: let `fairbench tune` finish first"
        )
    return _read_rows(layout.table)


def read_budget_table(layout: TuneLayout, draws: int) -> pd.DataFrame | None:
    """The budget table of `draws` draws (read as `read_table`); None where
    `fairbench tune-budgets` has not written it."""
    path = layout.budget_table(draws)
    return _read_rows(path) if path.is_file() else None


def _read_rows(path: Path) -> pd.DataFrame:
    try:
        records = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a tuning table (malformed JSON: {exc})") from None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ConfigError(f"{path}: not a tuning table (a JSON list of rows)")
    for i, record in enumerate(records):
        if set(record) != set(COLUMNS):
            odd = sorted(set(COLUMNS) ^ set(record))[0]
            what = "lacks" if odd in COLUMNS else "has an unknown"
            raise ConfigError(f"{path}: row {i} {what} column {odd!r}; rerun `fairbench tune`")
        if record["selection"] not in SELECTION_RULES:
            raise ConfigError(
                f"{path}: row {i}: selection {record['selection']!r}, not one of "
                f"{', '.join(SELECTION_RULES)}"
            )
    frame = pd.DataFrame(records, columns=COLUMNS, dtype=object)  # a missing label stays None
    try:
        frame[_FLOATS] = frame[_FLOATS].astype(float)
        frame[_INTS] = frame[_INTS].astype(int)
        frame[_BOOLS] = frame[_BOOLS].astype(bool)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: not a tuning table (a number column holds {exc})") from None
    return frame


def write_analysis(layout: TuneLayout, records: list[dict[str, Any]]) -> None:
    """Private selection's analysis beside the table: per (dataset, epsilon, method) the
    count law, the budget and its plans, and per repeat K and every candidate's scores."""
    layout.private.mkdir(parents=True, exist_ok=True)
    _replace(layout.analysis, json.dumps(records, indent=1))


def read_analysis(layout: TuneLayout) -> list[dict[str, Any]]:
    """The analysis records; [] when the output has none (free selection, or not run)."""
    path = layout.analysis
    if not path.is_file():
        return []
    try:
        records = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a selection analysis (malformed JSON: {exc})") from None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise ConfigError(f"{path}: not a selection analysis (a JSON list of records)")
    return records


def read_tune_config(layout: TuneLayout) -> dict[str, Any]:
    """tune.yaml as YAML data (validated when tune wrote it); one clear error without it."""
    if not layout.config.is_file():
        raise ConfigError(
            f"{layout.root} has no {layout.config.name}: give a `fairbench tune --out` directory"
        )
    return yaml.safe_load(layout.config.read_text())


def write_tune_config(layout: TuneLayout, data: dict[str, Any]) -> None:
    layout.root.mkdir(parents=True, exist_ok=True)
    _replace(layout.config, yaml.safe_dump(data, sort_keys=False))


def nan_if_none(value: Any) -> float:
    """A number of the table from a value that may be missing (None)."""
    return math.nan if value is None else float(value)


def _replace(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
