"""The group accuracy cost of privacy: each trial's per-group accuracy drop from the run's erm
trial on the same split, the gap of those drops, in trials.csv, the Pareto points and table."""

from __future__ import annotations

import json
import math

import pytest

from fairbench.methods.dpsgd_f import ACCURACY_COST
from fairbench.report.accuracy_cost import DROPS, GAP, drop_gap
from fairbench.report.aggregate import merge_identical_knobs, pareto_points, trials_frame
from fairbench.report.tables import flat_trials, pareto_document
from tests.report.test_reports import row


def grouped(label, seed, errors, *, epsilon=1.0, options=None, model="logistic") -> dict:
    """A trial row with per-group test errors (groups a, b) on dataset d."""
    base = row(label, seed=seed, knob=None, epsilon=epsilon)
    return {
        **base,
        "hparams": {**base["hparams"], "model": model},
        "dataset_options": options or {},
        "group_names": ["a", "b"],
        "test_group_error": errors,
    }


RUN = [
    grouped("erm", 0, [0.10, 0.20], epsilon=None),
    grouped("erm", 1, [0.12, 0.18], epsilon=None),
    grouped("dp-sgd", 0, [0.11, 0.26]),
    grouped("dp-sgd", 1, [0.12, 0.22]),
    grouped("dpsgd-f", 0, [0.11, 0.22]),
    grouped("dpsgd-f", 1, [0.13, 0.19]),
    grouped("dp-sgd", 2, [0.11, 0.26]),  # no erm on seed 2
    grouped("dp-sgd", 0, [0.11, 0.26], options={"n_rows": 10}),  # another split
    grouped("dp-sgd", 0, [0.11, 0.26], model="mlp"),  # another model family
]


def test_each_trial_drops_from_the_erm_trial_on_its_own_split():
    trials = trials_frame(RUN).set_index(["label", "seed"], drop=False)
    first = trials.iloc[2]
    assert first["test_group_accuracy_drop"] == pytest.approx({"a": 0.01, "b": 0.06})
    assert first["test_accuracy_drop_gap"] == pytest.approx(0.05)
    assert first["accuracy_reference"] == "erm"
    assert trials.iloc[5]["test_group_accuracy_drop"] == pytest.approx({"a": 0.01, "b": 0.01})
    assert trials.iloc[0]["test_group_accuracy_drop"] == {"a": 0.0, "b": 0.0}
    for unmatched in (6, 7, 8):
        assert trials.iloc[unmatched]["test_group_accuracy_drop"] is None
        assert math.isnan(trials.iloc[unmatched]["test_accuracy_drop_gap"])
    flat = flat_trials(trials_frame(RUN))  # trials.csv: the drops as JSON by group name
    assert json.loads(flat["test_group_accuracy_drop"].iloc[2]) == pytest.approx(
        {"a": 0.01, "b": 0.06}
    )


def test_pareto_points_and_table_carry_the_mean_drops_and_gap():
    points = pareto_points(merge_identical_knobs(trials_frame(RUN[:6]))[0])
    dp = points[points["label"] == "dp-sgd"].iloc[0]
    assert dp["group_accuracy_drop_mean"] == pytest.approx({"a": 0.005, "b": 0.05})
    assert dp["accuracy_drop_gap_mean"] == pytest.approx((0.05 + 0.04) / 2)
    f = points[points["label"] == "dpsgd-f"].iloc[0]
    assert f["group_accuracy_drop_mean"] == pytest.approx({"a": 0.01, "b": 0.015})
    table = pareto_document(points, "t", []).markdown()
    assert "| accuracy drop by group (points) | drop gap |" in table
    assert "| a +0.50 · b +5.00 | 4.50 |" in table and "| a +1.00 · b +1.50 | 0.50 |" in table
    alone = pareto_points(trials_frame(RUN[2:4]))  # no erm in the run: no such columns
    assert "| drop gap |" not in pareto_document(alone, "t", []).markdown()


def test_the_gap_leaves_out_empty_groups():
    assert drop_gap([0.01, math.nan, 0.04]) == pytest.approx(0.03)
    assert math.isnan(drop_gap([0.01, math.nan]))


def test_the_methods_name_the_columns_this_module_writes():
    assert GAP in ACCURACY_COST and DROPS in ACCURACY_COST
