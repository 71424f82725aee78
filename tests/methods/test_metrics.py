import numpy as np
import pytest

from fairbench import metrics


def test_binary_metrics_by_hand():
    y = np.array([1, 1, 0, 0, 1, 0, 0, 0])
    p = np.array([1, 0, 0, 1, 1, 1, 0, 0])
    s = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    assert metrics.error_rate(y, p) == pytest.approx(3 / 8)
    # P(ŷ=1|s=0) = 2/4, P(ŷ=1|s=1) = 2/4
    assert metrics.demographic_parity_difference(p, s) == pytest.approx(0.0)
    # TPR: s0 1/2, s1 1/1 -> 0.5; FPR: s0 1/2, s1 1/3 -> 1/6
    assert metrics.equalized_odds_difference(y, p, s) == pytest.approx(0.5)
    assert metrics.false_negative_rate(y, p) == pytest.approx([2 / 5, 1 / 3])
    # FNR of y = 1: s0 1/2, s1 0/1 -> 0.5 (the TPR gap); the FPR gap does not enter
    assert metrics.false_negative_rate_parity_difference(y, p, s) == pytest.approx(0.5)
    assert metrics.false_negative_rate_parity_difference(y, np.where(y == 1, 1, 1 - p), s) == 0.0
    assert metrics.group_error_rates(y, p, s, 2) == pytest.approx([0.5, 0.25])


def test_accuracy_parity_by_hand():
    # six records: group 0 errs on 2 of 3 (records 0, 2), group 1 on 0 of 2, group 2 on 1 of 1
    y = np.array([1, 0, 1, 0, 1, 1])
    p = np.array([0, 0, 0, 0, 1, 0])
    s = np.array([0, 0, 0, 1, 1, 2])
    assert metrics.accuracy_parity_difference(y, p, s) == pytest.approx(1.0)  # 1 - 0
    assert metrics.accuracy_parity_difference(y[:5], p[:5], s[:5]) == pytest.approx(2 / 3)
    assert metrics.accuracy_parity_difference(y, y, s) == 0.0
    weight = np.array([1, 1, 2, 1, 1, 1])  # record 2 counts twice: group 0 errs 3 of 4
    assert metrics.accuracy_parity_difference(y[:5], p[:5], s[:5], weight[:5]) == pytest.approx(
        3 / 4
    )
    assert metrics.VIOLATIONS["accuracy_parity"] is metrics.accuracy_parity_difference


def test_demographic_parity_pairwise_vs_one_vs_rest_with_three_groups():
    # positive rates: group0 1.0, group1 0.5, group2 0.0 (two members each)
    p = np.array([1, 1, 1, 0, 0, 0])
    s = np.array([0, 0, 1, 1, 2, 2])
    assert metrics.demographic_parity_difference(p, s) == pytest.approx(1.0)
    # one-vs-rest: group0 1.0 vs rest 0.25 -> 0.75; group2 0 vs 0.75 -> 0.75
    assert metrics.demographic_parity_difference_ovr(p, s) == pytest.approx(0.75)


def test_multiclass_generalisations():
    y = np.array([0, 1, 2, 0, 1, 2])
    p = np.array([0, 1, 2, 1, 1, 0])
    s = np.array([0, 0, 0, 1, 1, 1])
    # predicted-class rates: s0 (1/3,1/3,1/3), s1 (1/3,2/3,0) -> max gap 1/3
    assert metrics.demographic_parity_difference(p, s) == pytest.approx(1 / 3)
    # true class 0: s0 predicts 0, s1 predicts 1 -> gap 1
    assert metrics.equalized_odds_difference(y, p, s) == pytest.approx(1.0)
    assert metrics.false_negative_rate(y, p) == pytest.approx([0.5, 0.0, 0.5])


def test_empty_cells_are_ignored_not_counted_as_zero():
    y = np.array([1, 1, 0, 0])
    p = np.array([1, 1, 0, 1])
    s = np.array([0, 0, 0, 1])  # group 1 has no positive example
    assert metrics.equalized_odds_difference(y, p, s) == pytest.approx(1.0)  # FPR 0 vs 1
    assert np.isnan(metrics.group_error_rates(y, p, s, 3)[2])
    assert metrics.demographic_parity_difference(p, np.zeros(4, dtype=int)) == 0.0


def test_group_log_loss_and_length_checks():
    proba = np.array([[0.9, 0.1], [0.2, 0.8], [0.5, 0.5]])
    losses = metrics.group_log_losses(np.array([0, 1, 1]), proba, np.array([0, 0, 1]), 2)
    assert losses == pytest.approx([-(np.log(0.9) + np.log(0.8)) / 2, -np.log(0.5)])
    with pytest.raises(ValueError, match="different lengths"):
        metrics.error_rate(np.zeros(3), np.zeros(4))
