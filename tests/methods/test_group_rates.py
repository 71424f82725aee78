"""The group-rate view of a constraint (`fairbench.constraints.group_rates`): its events, parts
and score, and what it reads from small histograms, every number worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairbench import constraints
from fairbench.constraints.builders import demographic_parity, equalized_odds
from fairbench.constraints.group_rates import group_gaps
from fairbench.errors import ConfigError

DP, EO, AP = "demographic_parity", "equalized_odds", "accuracy_parity"
FNRP = "false_negative_rate_parity"


def test_events_parts_and_score_per_constraint():
    dp, eo = constraints.group_rates(DP, 2, 3), constraints.group_rates(EO, 2, 3)
    ap, fnrp = constraints.group_rates(AP, 2, 3), constraints.group_rates(FNRP, 2, 3)
    assert (dp.events, eo.events, ap.events, fnrp.events) == (
        ((0, 1),),
        ((0,), (1,)),
        ((0, 1),),
        ((1,),),
    )
    assert [v.score for v in (dp, eo, ap, fnrp)] == [
        "prediction",
        "prediction",
        "error",
        "prediction",
    ]
    assert eo.event_matrix().tolist() == [[1, 0], [0, 1]] and dp.event_matrix().tolist() == [[1, 1]]
    assert fnrp.label_events().tolist() == [-1, 0]
    # the partition is the rate-constraint set's of the same constraint: groups; label x group
    assert np.array_equal(dp.part_table, [[0, 1, 2], [0, 1, 2]])
    assert np.array_equal(dp.part_table, demographic_parity(2, 3).part_table)
    assert np.array_equal(eo.part_table, [[0, 1, 2], [3, 4, 5]])
    assert np.array_equal(eo.part_table, equalized_odds(2, 3).part_table)
    assert np.array_equal(ap.part_table, dp.part_table)  # rows carry the label (1 - p_y, p_y)
    assert (dp.n_parts, eo.n_parts) == (3, 6)


def test_unknown_or_unsupported_views_are_refused():
    with pytest.raises(ConfigError, match="no group-rate view"):
        constraints.group_rates("bounded_group_loss", 2, 2)
    with pytest.raises(ConfigError, match="binary"):
        constraints.group_rates(FNRP, 3, 2)
    with pytest.raises(ConfigError, match="leave labels out"):
        _ = constraints.group_rates(FNRP, 2, 2).part_table


def test_records_cells_and_parts():
    y, s = torch.tensor([0, 1, 1]), torch.tensor([1, 0, 1])
    eo, dp = constraints.group_rates(EO, 2, 2), constraints.group_rates(DP, 2, 2)
    assert eo.cells(y).tolist() == [0, 1, 1] and eo.parts(y, s).tolist() == [1, 2, 3]
    assert dp.cells(y).tolist() == [0, 0, 0] and dp.parts(y, s).tolist() == [1, 0, 1]
    assert eo.on("cpu").of_label.tolist() == [0, 1] and dp.on("cpu").of_label.tolist() == [0, 0]


def test_score_rows_and_class_weights():
    binary = constraints.group_rates(DP, 2, 2)
    assert (binary.score_columns, binary.row_width, binary.n_scores) == (slice(1, 2), 2, 1)
    w = torch.tensor([[2.0]])
    assert binary.class_weights(w, torch.tensor([0])).tolist() == [[0.0, 2.0]]
    three = constraints.group_rates(EO, 3, 2)
    assert (three.score_columns, three.row_width, three.n_scores) == (slice(0, 3), 3, 3)
    error = constraints.group_rates(AP, 3, 2)
    assert (error.score_columns, error.row_width, error.n_scores) == (slice(0, 1), 2, 1)
    soft, y = torch.tensor([[0.5, 0.3, 0.2]]), torch.tensor([2])
    assert torch.allclose(error.rows(soft, y), torch.tensor([[0.8, 0.2]]))
    # s = 1 - p_y = p_0 + p_1: its weight goes to every class but the label
    assert error.class_weights(w, y).tolist() == [[2.0, 2.0, 0.0]]
    assert torch.equal(three.rows(soft, y), soft)


# a histogram over equalized odds' parts (y, g), binary softmax rows; two trials, the second
# the first doubled (gaps equal, counts doubled)
HIST = torch.tensor([[3.0, 1.0], [1.0, 1.0], [1.0, 3.0], [2.0, 0.0]], dtype=torch.float64)


def test_gaps_and_counts_from_a_histogram_over_the_parts():
    """Label 0: group 0 scores 1 in 4 records, group 1 1 in 2, population 2 in 6 (1/3): gaps
    -1/12, 1/6. Label 1: 3 in 4, 0 in 2, population 3 in 6: gaps 1/4, -1/2."""
    eo = constraints.group_rates(EO, 2, 2)
    hist = torch.stack([HIST, 2 * HIST])
    gaps = eo.gaps(hist, floor=1.0)
    assert gaps.shape == (2, 2, 2, 1)
    expected = torch.tensor([[-1 / 12, 1 / 6], [1 / 4, -1 / 2]], dtype=torch.float64)
    assert torch.allclose(gaps[..., 0], expected.expand(2, 2, 2))
    assert eo.counts(hist, floor=1.0)[1].tolist() == [[8.0, 4.0], [8.0, 4.0]]
    # a floor of 3 lifts the 2-record groups: group 1 of label 0 now has mean 1/3, its gap 0
    assert eo.counts(hist, floor=3.0)[0].tolist() == [[4.0, 3.0], [4.0, 3.0]]
    assert eo.gaps(hist, floor=3.0)[0, 0, 1, 0].item() == pytest.approx(0.0)


def test_label_resolved_counts_summed_into_events():
    counts = torch.tensor([[[5.0, 3.0], [2.0, 4.0]]])  # (trial, group, label)
    eo, dp = (
        constraints.group_rates(EO, 2, 2).on("cpu"),
        constraints.group_rates(DP, 2, 2).on("cpu"),
    )
    assert eo.per_event(counts).tolist() == [[[5.0, 2.0], [3.0, 4.0]]]
    assert dp.per_event(counts).tolist() == [[[8.0, 6.0]]]
    # group-vs-population gaps: positives [[1, 2], [0, 3]]: 3 of 8 and 3 of 6 against 6 of 14
    gap = dp.gaps(torch.tensor([[[1.0, 2.0], [0.0, 3.0]]]), counts, 1.0)
    assert torch.allclose(gap, torch.tensor([[[3 / 8 - 3 / 7, 1 / 2 - 3 / 7]]]))
    # by hand: group 0 of label 1 has 2 of 3, the label 2 + 3 of 7
    gap = eo.gaps(torch.tensor([[[1.0, 2.0], [0.0, 3.0]]]), counts, 1.0)
    assert torch.allclose(gap[0, 1], torch.tensor([2 / 3 - 5 / 7, 3 / 4 - 5 / 7]))


def test_group_gaps_floor_every_count():
    """Sums (1 event, 2 groups, 1 score) 1 and 1 over counts 0.5 and 3: floored at 1, the
    means are 1 and 1/3 and the event's 2 / 3.5."""
    gap = group_gaps(torch.tensor([[[1.0], [1.0]]]), torch.tensor([[0.5, 3.0]]), 1.0)
    assert torch.allclose(gap[..., 0], torch.tensor([[1 - 2 / 3.5, 1 / 3 - 2 / 3.5]]))


def test_positive_rates_per_event_and_group():
    """Positive predictions [[1, 2], [0, 3]] of records [[5, 3], [2, 4]] (group, label)."""
    positives, totals = np.array([[1.0, 2.0], [0.0, 3.0]]), np.array([[5.0, 3.0], [2.0, 4.0]])
    rate, size = constraints.group_rates(EO, 2, 2).positive_rates(positives, totals)
    assert np.allclose(rate, [[1 / 5, 0.0], [2 / 3, 3 / 4]]) and size.tolist() == [[5, 2], [3, 4]]
    rate, size = constraints.group_rates(DP, 2, 2).positive_rates(positives, totals)
    assert np.allclose(rate, [[3 / 8, 3 / 6]]) and size.tolist() == [[8, 6]]
    rate, size = constraints.group_rates(FNRP, 2, 2).positive_rates(
        np.stack([positives, positives]),
        np.stack([totals, totals]),  # a leading trial axis
    )
    assert np.allclose(rate, [[[2 / 3, 3 / 4]]] * 2) and size.tolist() == [[[3, 4]]] * 2
