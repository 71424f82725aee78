"""One tiny `fairbench tune` for the figure builders' tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairbench.privacy import ledger_cache
from fairbench.workflows.tune import TuneConfig, run_tune


def quick_tune(config: dict, out: Path) -> None:
    """Tune `config` into `out`. Reports and the ledgers' independent cross-checks are skipped
    for speed: the builders read neither (they read the stores)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("fairbench.workflows.tune.write_report", lambda run_dir: None)
        patch.setattr("fairbench.privacy.ledger_cache.check_ledger", lambda *args: {})
        try:
            _, failures = run_tune(
                TuneConfig.model_validate(config),
                out,
                workers=1,
                quiet=True,
                charge=False,
                warn=lambda _: None,
            )
        finally:  # no skipped cross-check may stay cached for later tests
            ledger_cache.cache_clear()
    assert failures == []  # infeasible draws are not failures
