"""A fixed configuration paired against the tuned selection by final seed: numbers by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from fairbench.errors import ConfigError
from fairbench.report.against_fixed import (
    FIXED_BETTER,
    NOT_SELECTED,
    TIE,
    TUNED_BETTER,
    comparison,
    verdict,
)

TUNE = Path("tune")
# what `tuned_datasets` reads off the tune's final runs: (dataset, options as JSON, epsilon)
TUNES = {TUNE: {("parkinsons", '{"task": "classification"}', e) for e in (0.1, 1.0)}}


def _table(errors: dict[float, list[float]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "dataset": "parkinsons",
                "epsilon": 1.0,
                "method": "raco-dp",
                "selection": "free",
                "target": tau,
                "repeat": seed,
                "selected": "raco-dp#4",
                "test_error": error,
                "test_violation": 0.03,
            }
            for tau, column in errors.items()
            for seed, error in enumerate(column)
        ]
    )


def _fixed(errors: list[float], options: dict | None = None) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "dataset": "parkinsons",
                "dataset_options": options or {"task": "classification"},
                "epsilon": 1.0,
                "label": "raco-dp (paper)",
                "method": "raco-dp",
                "seed": seed,
                "test_error": error,
                "test_violation": 0.04,
                "val_violation": 0.045,
                "epsilon_spent": 0.9,
                "knob": 0.02,
                "hparams": {"lr": 0.1, "laplace_scale": 10.0},
            }
            for seed, error in enumerate(errors)
        ]
    )


def test_pairs_by_seed_and_labels_the_interval():
    table = _table({0.02: [0.10, 0.12, 0.11], 0.05: [0.10, 0.129, 0.101]})
    out = comparison(_fixed([0.12, 0.15, 0.12]), {TUNE: table}, TUNES).set_index("tau")
    # tau 0.02: differences -0.02, -0.03, -0.01: mean -0.02, sd 0.01, t(0.975, 2) = 4.3027
    assert out.loc[0.02, "difference_mean"] == pytest.approx(-0.02)
    assert out.loc[0.02, "difference_ci95"] == pytest.approx(4.302653 * 0.01 / math.sqrt(3))
    assert out.loc[0.02, "verdict"] == TIE
    # tau 0.05: differences -0.02, -0.021, -0.019: sd 0.001, the interval below 0
    assert out.loc[0.05, "difference_mean"] == pytest.approx(-0.02)
    assert out.loc[0.05, "verdict"] == TUNED_BETTER
    assert out.loc[0.05, "tuned_error"] == pytest.approx((0.10 + 0.129 + 0.101) / 3)
    assert out.loc[0.05, "fixed_error"] == pytest.approx(0.13)
    assert out.loc[0.05, "n_pairs"] == 3
    assert out.loc[0.05, "fixed_val_violation"] == pytest.approx(0.045)


def test_the_search_seeds_validation_violation_is_the_candidates_as_the_tune_saw_it():
    """The fixed configuration drawn by the tune (the same configuration once defaults are
    filled in, the same knob): its mean validation violation over the search seeds, the
    number the tune selected on; NaN where the tune never drew it."""
    base = {"dataset": "parkinsons", "epsilon": 1.0, "method": "raco-dp"}
    search = pd.DataFrame(
        [  # the same configuration, one spelled with a default written out
            {
                **base,
                "knob": 0.02,
                "hparams": {"lr": 0.1, "laplace_scale": 10.0},
                "val_violation": 0.06,
            },
            {
                **base,
                "knob": 0.02,
                "hparams": {"lr": 0.1, "laplace_scale": 10.0, "temperature": 1.0},
                "val_violation": 0.04,
            },
            {
                **base,
                "knob": 0.05,
                "hparams": {"lr": 0.1, "laplace_scale": 10.0},
                "val_violation": 0.9,
            },
            {
                **base,
                "knob": 0.02,
                "hparams": {"lr": 0.2, "laplace_scale": 10.0},
                "val_violation": 0.9,
            },
        ]
    )
    table = _table({0.05: [0.10, 0.12, 0.11]})
    out = comparison(_fixed([0.12, 0.15, 0.12]), {TUNE: table}, TUNES, {TUNE: search})
    assert out.loc[0, "search_val_violation"] == pytest.approx(0.05)
    alone = comparison(_fixed([0.12, 0.15, 0.12]), {TUNE: table}, TUNES, {TUNE: search[2:]})
    assert math.isnan(alone.loc[0, "search_val_violation"])


def test_only_shared_seeds_are_paired():
    out = comparison(_fixed([0.12, 0.15]), {TUNE: _table({0.05: [0.10, 0.12, 0.11]})}, TUNES)
    assert out["n_pairs"].tolist() == [2]
    assert out["difference_mean"].iloc[0] == pytest.approx(-0.025)


def test_verdict_signs():
    assert verdict(-0.02, 0.01) == TUNED_BETTER
    assert verdict(0.02, 0.01) == FIXED_BETTER
    assert verdict(0.005, 0.01) == TIE
    assert verdict(-0.02, math.nan) == TIE  # one pair has no interval


def test_a_fixed_run_no_tune_covers_is_one_clear_error():
    with pytest.raises(ConfigError, match="no tune ran parkinsons"):
        comparison(_fixed([0.1], {"task": "regression"}), {TUNE: _table({0.05: [0.1]})}, TUNES)


def test_a_target_the_tune_met_with_no_selection_is_named_not_paired():
    table = _table({0.05: [0.10, 0.12]})
    table.loc[:, ["selected", "test_error"]] = [None, float("nan")]
    out = comparison(_fixed([0.12, 0.15]), {TUNE: table}, TUNES)
    assert out["verdict"].tolist() == [NOT_SELECTED] and out["n_pairs"].tolist() == [0]
