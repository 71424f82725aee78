"""The test split's own standard error of a fairness gap (against hand computations on a tiny
split and a simulation), the meets / misses / cannot tell verdict at its boundaries, the
unstable rule, and the figure's marks for both."""

import math

import numpy as np
import pandas as pd
import pytest

from fairbench import metrics
from fairbench.constraints import builders
from fairbench.report.figure import new_figure
from fairbench.report.privacy_cost_plot import KEYS, RING, UNSTABLE, mark_keys, tau_panel
from fairbench.report.uncertainty import (
    CANNOT_TELL,
    MEETS,
    MISSES,
    Z95,
    error_se,
    exceeds,
    gap_se,
    split_counts,
    unstable,
    verdict,
)

BUILDERS = {
    "demographic_parity": builders.demographic_parity,
    "equalized_odds": builders.equalized_odds,
    "false_negative_rate_parity": builders.false_negative_rate_parity,
}
# group 0: 6 records (3 of label 1), group 1: 4 records (2 of label 1)
Y = np.array([1, 1, 1, 0, 0, 0, 1, 1, 0, 0])
S = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 1])
PRED = np.array([1, 1, 0, 1, 0, 0, 1, 0, 0, 0])


def _stored_se(constraint: str, y, pred, s, weight=None) -> float:
    """gap_se from exactly what a trial row stores for these predictions."""
    gaps = BUILDERS[constraint](2, 2).evaluate(y, pred, s, weight)
    violation = metrics.VIOLATIONS[constraint](y, pred, s, weight)
    class_errors = metrics.false_negative_rate(y, pred, weight).tolist()
    counts = np.bincount(s * 2 + y, minlength=4).reshape(2, 2)
    if weight is not None:  # a record's copies sum to one record
        counts = np.rint(np.bincount(s * 2 + y, weights=weight, minlength=4)).astype(int)
        counts = counts.reshape(2, 2)
    return gap_se(constraint, gaps, class_errors, violation, counts)


def test_demographic_parity_se_is_the_two_proportion_se_at_the_observed_rates():
    p0, p1 = 3 / 6, 1 / 4  # positive predictions per group, by hand
    hand = math.sqrt(p0 * (1 - p0) / 6 + p1 * (1 - p1) / 4)
    assert _stored_se("demographic_parity", Y, PRED, S) == pytest.approx(hand, abs=1e-12)


def test_equalized_odds_se_is_that_of_the_larger_gap_with_label_conditional_sizes():
    # TPR: group 0 2/3, group 1 1/2 (gap 1/6); FPR: group 0 1/3, group 1 0/2 (gap 1/3): FPR
    hand = math.sqrt((1 / 3) * (2 / 3) / 3 + 0.0 / 2)
    assert _stored_se("equalized_odds", Y, PRED, S) == pytest.approx(hand, abs=1e-12)
    # equal opportunity takes the TPR gap alone, over the label-1 records (3 and 2)
    tpr = math.sqrt((2 / 3) * (1 / 3) / 3 + 0.5 * 0.5 / 2)
    assert _stored_se("false_negative_rate_parity", Y, PRED, S) == pytest.approx(tpr, abs=1e-12)


def test_a_derived_predictors_weighted_rates_are_rebuilt_too():
    """Each record twice, output 1 and 0 weighted by its probability (runner.trial.decisions):
    the SE is taken at the expected rates."""
    proba = np.array([0.9, 0.8, 0.3, 0.6, 0.2, 0.1, 0.7, 0.4, 0.2, 0.1])
    y, s = np.tile(Y, 2), np.tile(S, 2)
    pred = np.concatenate([np.ones(10, int), np.zeros(10, int)])
    weight = np.concatenate([proba, 1 - proba])
    p0, p1 = proba[:6].mean(), proba[6:].mean()
    hand = math.sqrt(p0 * (1 - p0) / 6 + p1 * (1 - p1) / 4)
    assert _stored_se("demographic_parity", y, pred, s, weight) == pytest.approx(hand, abs=1e-12)


def test_the_se_matches_the_spread_of_the_gap_over_simulated_test_splits():
    """Parkinsons-like split: 1,000 and 470 records, positive rates 0.30 and 0.22. The gap's
    standard deviation over 4,000 simulated splits matches the SE of one split's estimate."""
    rng = np.random.default_rng(0)
    n0, n1, r0, r1 = 1000, 470, 0.30, 0.22
    gaps = rng.binomial(n0, r0, 4000) / n0 - rng.binomial(n1, r1, 4000) / n1
    s = np.repeat([0, 1], [n0, n1])
    y = rng.integers(0, 2, n0 + n1)
    pred = (rng.random(n0 + n1) < np.where(s == 0, r0, r1)).astype(int)
    se = _stored_se("demographic_parity", y, pred, s)
    assert se == pytest.approx(gaps.std(), rel=0.05)
    assert se == pytest.approx(0.0235, abs=0.002)  # not a loose bound: close to the truth


def test_no_se_where_the_row_does_not_determine_it():
    gaps = builders.demographic_parity(2, 2).evaluate(Y, PRED, S)
    errors = metrics.false_negative_rate(Y, PRED).tolist()
    counts = np.bincount(S * 2 + Y, minlength=4).reshape(2, 2)
    violation = metrics.demographic_parity_difference(PRED, S)
    assert not math.isnan(gap_se("demographic_parity", gaps, errors, violation, counts))
    # a violation the stored gaps do not rebuild (a declared constraint set measures another)
    assert math.isnan(gap_se("demographic_parity", gaps, errors, violation + 0.01, counts))
    assert math.isnan(gap_se("accuracy_parity", gaps, errors, violation, counts))
    assert math.isnan(gap_se("demographic_parity", gaps[:1], errors, violation, counts))
    three = np.zeros((2, 3), dtype=int) + 5  # three classes
    assert math.isnan(gap_se("demographic_parity", gaps, errors, violation, three))


def test_error_se_is_binomial():
    assert error_se(0.2, 400) == pytest.approx(0.02)


def test_split_counts_follow_the_trial_seed_or_the_split_seed_option():
    options = {"n_rows": 400}
    by_seed = split_counts("synthetic", options, 3, "test")
    assert by_seed is not None and by_seed.shape == (2, 2)
    fixed = split_counts("synthetic", {**options, "split_seed": 3}, 7, "test")
    assert fixed is not None and (fixed == by_seed).all()
    assert split_counts("synthetic", options, 3, "val").sum() < by_seed.sum()


def test_verdict_boundaries():
    tau = 0.05
    # an SE of exactly tau / 2 still lets the interval decide; just above it cannot tell
    assert verdict(tau, tau / 2, 0.01, 0.04) == MEETS
    assert verdict(tau, np.nextafter(tau / 2, 1.0), 0.01, 0.04) == CANNOT_TELL
    assert verdict(tau, 0.01, 0.01, tau) == MEETS  # upper end at tau: within it
    assert verdict(tau, 0.01, 0.04, 0.06) == CANNOT_TELL  # straddles tau
    assert verdict(tau, 0.01, tau, 0.07) == CANNOT_TELL  # lower end at tau: not above it
    assert verdict(tau, 0.01, 0.051, 0.07) == MISSES
    assert verdict(tau, 0.01, math.nan, math.nan) == CANNOT_TELL  # one seed: no interval
    assert verdict(tau, math.nan, 0.01, 0.02) == ""  # no SE: no verdict


def test_unstable_when_test_exceeds_validation_beyond_both_splits_noise():
    margin = Z95 * math.hypot(0.03, 0.04)  # = 1.96 * 0.05
    assert exceeds(0.01, 0.03, 0.01 + margin * 1.001, 0.04) is True
    assert exceeds(0.01, 0.03, 0.01 + margin * 0.999, 0.04) is False
    assert exceeds(0.20, 0.03, 0.01, 0.04) is False  # better on test is never unstable
    assert exceeds(0.01, math.nan, 0.5, 0.04) is None
    assert unstable([False, True]) is True
    assert unstable([None, False]) is False
    assert unstable([None, None]) is None


def _row(method, eps, verdict_, flag):
    return {
        "model": "logistic",
        "tau": 0.05,
        "method": method,
        "epsilon": eps,
        "test_error_mean": 0.2,
        "ci_low": 0.19,
        "ci_high": 0.21,
        "selection_rule": "within_tau",
        "verdict": verdict_,
        "unstable": flag,
    }


def test_the_figure_fills_points_by_verdict_and_rings_unstable_ones():
    rows = pd.DataFrame(
        [
            _row("cgoo", 0.5, MEETS, False),
            _row("cgoo", 1.0, MISSES, None),
            _row("cgoo", 8.0, CANNOT_TELL, True),
        ]
    )
    _fig, axes = new_figure(1, 1, (4.8, 4.2))
    ax = axes[0][0]
    tau_panel(ax, rows, "logistic", 0.05, {}, [0.5, 1.0, 8.0], "")
    marks = [line for line in ax.lines if line.get_linestyle() == "None"]
    looks = {
        (line.get_fillstyle(), line.get_markerfacecolor() == "white")
        for line in marks
        if line.get_markersize() == 5
    }
    assert looks == {("full", False), ("full", True), ("bottom", False)}
    rings = [line for line in marks if line.get_markersize() == RING]
    assert len(rings) == 1 and rings[0].get_xdata()[0] == pytest.approx(8.0)
    assert list(mark_keys(rows)) == [*KEYS.values(), UNSTABLE]
    assert list(mark_keys(rows.iloc[[0]])) == [KEYS["filled"]]
