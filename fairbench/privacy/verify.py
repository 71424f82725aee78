"""Re-check a finished run's privacy claims from its stored ledgers alone (the rows of its
results store, which the caller reads: privacy knows no run directory)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fairbench.privacy import ledger_cache
from fairbench.privacy.ledger import PrivacyLedger

RECOMPUTE_TOLERANCE = 1e-6  # relative: the stored epsilon must be what the ledger gives


@dataclass(frozen=True)
class Finding:
    trial_id: str
    label: str
    target: float | None
    stored: float
    recomputed: float
    checks: dict[str, Any]
    problems: list[str]


def verify_rows(rows: list[dict[str, Any]]) -> list[Finding]:
    """One finding per private trial: its ledger re-accounted and cross-checked. A trial is
    flagged when its recomputed epsilon exceeds a target the suite calibrated to, differs from
    the stored one, or falls outside an independent bound. Each distinct ledger is accounted
    once (`ledger_cache`)."""
    findings = []
    for row in rows:
        if row.get("epsilon") is None:
            continue
        ledger = PrivacyLedger.from_json(row["ledger"])
        recomputed = ledger_cache.epsilon(ledger, row["delta"])  # as the runner accounts it
        checks = ledger_cache.cross_check(ledger, row["delta"])
        problems = list(checks["problems"])
        suite_target = row.get("target_accounting", "suite") == "suite"
        if suite_target and recomputed > row["epsilon"]:
            problems.append(f"epsilon {recomputed:.6g} above its target {row['epsilon']:g}")
        stored = row["epsilon_spent"]
        if not math.isclose(stored, recomputed, rel_tol=RECOMPUTE_TOLERANCE, abs_tol=1e-12):
            problems.append(f"stored epsilon {stored:.6g} but the ledger gives {recomputed:.6g}")
        findings.append(
            Finding(
                row["trial_id"], row["label"], row["epsilon"], stored, recomputed, checks, problems
            )
        )
    return findings
