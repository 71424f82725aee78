"""Where a run stands (`fairbench status`) and what a config would run (`--dry-run`)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from fairbench.rundir.store import ResultStore
from fairbench.runner.trial import TrialSpec


@dataclass(frozen=True)
class LabelProgress:
    label: str
    done: int
    failed: int
    pending: int


@dataclass(frozen=True)
class RunProgress:
    labels: list[LabelProgress]
    failures: list[tuple[str, str]]  # (trial_id, last line of the error) of the grid's trials

    @property
    def done(self) -> int:
        return sum(p.done for p in self.labels)

    @property
    def failed(self) -> int:
        return sum(p.failed for p in self.labels)

    @property
    def pending(self) -> int:
        return sum(p.pending for p in self.labels)


def _statuses(run_dir: Path) -> dict[str, tuple[str, str | None]]:
    """trial_id -> (status, error), read-only (a missing store means nothing ran yet)."""
    path = run_dir / ResultStore.FILENAME
    if not path.is_file():
        return {}
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {t: (s, e) for t, s, e in db.execute("SELECT trial_id, status, error FROM trials")}
    finally:
        db.close()


def run_progress(specs: list[TrialSpec], run_dir: Path) -> RunProgress:
    """Done, failed and pending trials of the grid `specs`, per method label."""
    statuses = _statuses(run_dir)
    counts: dict[str, Counter] = {}
    failures = []
    for spec in specs:
        status, error = statuses.get(spec.trial_id, ("pending", None))
        counts.setdefault(spec.label, Counter())[status] += 1
        if status == "failed":
            lines = (error or "").strip().splitlines()
            failures.append((spec.trial_id, lines[-1] if lines else ""))
    labels = [
        LabelProgress(label, c["done"], c["failed"], c["pending"]) for label, c in counts.items()
    ]
    return RunProgress(labels, failures)
