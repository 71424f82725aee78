"""The results store: one SQLite file per run directory, one row per trial.

A single writer (the process that runs the grid) commits each trial as it finishes, so a run
killed at any moment loses only trials still in flight, and re-running skips finished ones.
Rows are JSON as Python writes it (Infinity and NaN included, which Python reads back).
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

from fairbench.errors import ConfigError

SCHEMA = """
CREATE TABLE IF NOT EXISTS trials (
    trial_id TEXT PRIMARY KEY,
    status   TEXT NOT NULL CHECK (status IN ('done', 'failed')),
    spec     TEXT NOT NULL,
    result   TEXT,
    error    TEXT,
    finished REAL NOT NULL DEFAULT (julianday('now'))
)
"""


class ResultStore:
    """Trials keyed by their spec hash; `done` rows hold the full result."""

    FILENAME = "results.sqlite"

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / self.FILENAME
        self._db = sqlite3.connect(self.path)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(SCHEMA)
        self._db.commit()

    def done_ids(self) -> set[str]:
        return {r[0] for r in self._db.execute("SELECT trial_id FROM trials WHERE status='done'")}

    def record_done(self, trial_id: str, spec: dict[str, Any], result: dict[str, Any]) -> None:
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO trials (trial_id, status, spec, result, error) "
                "VALUES (?, 'done', ?, ?, NULL)",
                (trial_id, json.dumps(spec), json.dumps(result)),
            )

    def record_failed(self, trial_id: str, spec: dict[str, Any], error: str) -> None:
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO trials (trial_id, status, spec, result, error) "
                "VALUES (?, 'failed', ?, NULL, ?)",
                (trial_id, json.dumps(spec), error),
            )

    def results(self) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT result FROM trials WHERE status='done' ORDER BY trial_id")
        return [json.loads(r[0]) for r in rows]

    def failures(self) -> list[tuple[str, str]]:
        return list(self._db.execute("SELECT trial_id, error FROM trials WHERE status='failed'"))

    def close(self) -> None:
        self._db.close()


EXPORT = "trials.csv"  # the report's flat copy of the store: what committed results keep


def _decoded(value: Any) -> Any:
    """A cell of trials.csv back as Python: nested values were written as JSON text."""
    if isinstance(value, str) and value[:1] in "[{":
        return json.loads(value)
    return None if isinstance(value, float) and math.isnan(value) else value


def exported_rows(path: Path) -> list[dict[str, Any]]:
    """Trial rows read back from a run's trials.csv, for run directories whose SQLite store
    was not kept (committed results keep trials.csv only)."""
    import pandas as pd  # only this fallback needs it

    frame = pd.read_csv(path)
    return [{k: _decoded(v) for k, v in row.items()} for row in frame.to_dict("records")]


def finished_rows(run_dir: Path, purpose: str) -> list[dict[str, Any]]:
    """Every finished trial's row of a run directory, from its store, or from its trials.csv
    when the store was not kept; one clear error when there is neither or nothing finished
    yet (`purpose` names what the caller wanted to do)."""
    if not Path(run_dir).is_dir():
        raise ConfigError(f"{run_dir}: no such run directory; give a `fairbench run --out` folder")
    if not (Path(run_dir) / ResultStore.FILENAME).is_file():
        if (Path(run_dir) / EXPORT).is_file():
            return exported_rows(Path(run_dir) / EXPORT)
        raise ConfigError(f"{run_dir} has no results store; run `fairbench run` into it first")
    store = ResultStore(run_dir)
    try:
        rows = store.results()
    finally:
        store.close()
    if not rows:
        raise ConfigError(f"{run_dir} has no finished trials yet; nothing to {purpose}")
    return rows
