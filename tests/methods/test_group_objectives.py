"""CGOO's group statistics, objectives and cost-sensitive reduction: gradients against finite
differences, exactness of the relabelling, sensitivity of the count vector."""

from __future__ import annotations

import numpy as np
import pytest

from fairbench.constraints import group_objectives as go
from fairbench.metrics import demographic_parity_difference, equalized_odds_difference

RNG = np.random.default_rng(0)
N, K = 500, 3
Y = RNG.integers(0, 2, N)
S = RNG.integers(0, K, N)
PROBA = RNG.uniform(size=N)

OBJECTIVES = {
    "error": go.error,
    "balanced_error": go.balanced_error,
    "negative_gmean": go.negative_gmean,
    "demographic_parity": go.demographic_parity(0.05),
    "smoothed_equalized_odds": go.smoothed_equalized_odds(0.05, eta=20.0),
    "bounded_group_loss": go.bounded_group_loss(0.2),
}


@pytest.mark.parametrize("name", OBJECTIVES)
def test_gradients_match_finite_differences(name):
    """Along directions that keep the data's group sizes fixed (moving mass between the two
    predictions of a cell), as every classifier change does."""
    objective = OBJECTIVES[name]
    stats = go.statistics(Y, S, PROBA, K)
    sizes = go.Sizes.of(stats)
    _, grad = objective(stats, sizes)
    rng = np.random.default_rng(1)
    for _ in range(5):
        move = rng.normal(size=(K, 2)) * 1e-3
        direction = np.stack([-move, move], axis=-1)  # (K, 2, 2): rows keep their sums
        h = 1e-4
        up = objective(stats + h * direction, sizes)[0]
        down = objective(stats - h * direction, sizes)[0]
        assert (up - down) / (2 * h) == pytest.approx((grad * direction).sum(), rel=1e-4, abs=1e-9)


def test_constraints_at_hard_predictions_equal_the_suites_metrics():
    hard = (PROBA > 0.5).astype(float)
    stats = go.statistics(Y, S, hard, K)
    sizes = go.Sizes.of(stats)
    dp = go.demographic_parity(0.0)(stats, sizes)[0]
    assert dp == pytest.approx(demographic_parity_difference(hard.astype(int), S))
    eo_hard = go.smoothed_equalized_odds(0.0, eta=1e4)(stats, sizes)[0]
    assert eo_hard == pytest.approx(equalized_odds_difference(Y, hard.astype(int), S), abs=1e-3)
    eo_smooth = go.smoothed_equalized_odds(0.0, eta=5.0)(stats, sizes)[0]
    assert eo_smooth < eo_hard  # the smooth maximum sits below the maximum
    error = go.error(stats, sizes)[0]
    assert error == pytest.approx(np.mean(hard != Y))
    bgl = go.bounded_group_loss(0.0)(stats, sizes)[0]
    assert bgl == pytest.approx(max(np.mean(hard[a == S] != Y[a == S]) for a in range(K)))


def test_statistics_are_fractions_and_counts_have_sensitivity_one():
    hard = (PROBA > 0.5).astype(float)
    stats = go.statistics(Y, S, hard, K)
    assert stats.sum() == pytest.approx(1.0) and stats.min() >= 0
    counts = stats * N
    # remove one record: exactly one cell moves, by exactly 1
    fewer = go.statistics(Y[1:], S[1:], hard[1:], K) * (N - 1)
    diff = np.abs(counts - fewer)
    assert diff.sum() == pytest.approx(1.0) and diff.max() == pytest.approx(1.0)


def test_cost_sensitive_relabelling_reproduces_the_linear_objective_exactly():
    costs = np.random.default_rng(2).normal(size=(K, 2, 2))
    z, w, offset = go.cost_sensitive(costs, Y, S, N)
    assert np.all(w >= 0)
    for seed in range(5):
        predictions = np.random.default_rng(seed).integers(0, 2, N).astype(float)
        linear = (costs * go.statistics(Y, S, predictions, K)).sum()
        weighted = offset + (w * (predictions != z)).sum()
        assert weighted == pytest.approx(linear, rel=1e-12, abs=1e-12)
    best = z.astype(float)  # predicting every record's cheaper label attains the minimum
    assert (costs * go.statistics(Y, S, best, K)).sum() == pytest.approx(offset)


def test_smooth_max_tends_to_the_max_and_its_gradient_sums_to_one():
    values = np.array([0.1, 0.3, 0.25])
    for eta in (1.0, 10.0):
        value, grad = go.smooth_max(values, eta)
        assert value < 0.3 and grad.sum() == pytest.approx(1.0)
    assert go.smooth_max(values, 1e4)[0] == pytest.approx(0.3, abs=1e-6)
