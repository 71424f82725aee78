"""Generalized rate constraints: builders, declared sets, evaluation, and the Eq. (10)/(12)
quantities the methods compute from a histogram."""

import numpy as np
import pytest
import torch

from fairbench import constraints, metrics
from fairbench.constraints import CustomConstraintSet, TorchRates
from fairbench.constraints.builders import custom
from fairbench.errors import ConfigError


def random_predictions(n=600, k=2, g=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, k, n), rng.integers(0, k, n), rng.integers(0, g, n)


@pytest.mark.parametrize(
    ("name", "k", "g", "j", "q"),
    [
        ("demographic_parity", 2, 2, 4, 2),
        ("demographic_parity", 3, 5, 15, 5),
        ("equalized_odds", 2, 2, 8, 4),
        ("equalized_odds", 3, 4, 36, 12),
        ("false_negative_rate", 2, 2, 1, 2),
        ("false_negative_rate", 3, 2, 3, 3),
        ("false_negative_rate_parity", 2, 2, 4, 4),
        ("false_negative_rate_parity", 3, 2, 12, 6),
        ("accuracy_parity", 2, 2, 4, 4),
        ("accuracy_parity", 3, 4, 8, 12),
    ],
)
def test_builders_have_the_paper_sizes(name, k, g, j, q):
    cs = constraints.build(name, None, k, g, 0.05)
    assert cs.n_constraints == j and cs.n_parts == q
    assert np.all(cs.gamma == 0.05)


def test_evaluation_agrees_with_the_metrics():
    y, p, s = random_predictions(k=2, g=2)
    dp = constraints.build("demographic_parity", None, 2, 2, 0.05).evaluate(y, p, s)
    largest = max(c["value"] for c in dp)
    assert largest == pytest.approx(metrics.demographic_parity_difference(p, s))
    eo = constraints.build("equalized_odds", None, 2, 2, 0.05).evaluate(y, p, s)
    largest = max(c["value"] for c in eo)
    assert largest == pytest.approx(metrics.equalized_odds_difference(y, p, s))
    (fnr,) = constraints.build("false_negative_rate", None, 2, 2, 0.3).evaluate(y, p, s)
    assert fnr["value"] == pytest.approx(metrics.false_negative_rate(y, p)[1])
    assert fnr["satisfied"] == (fnr["value"] <= 0.3)
    assert fnr["violation"] == pytest.approx(max(0.0, fnr["value"] - 0.3))
    parity = constraints.build("false_negative_rate_parity", None, 2, 2, 0.05).evaluate(y, p, s)
    gap = metrics.false_negative_rate_parity_difference(y, p, s)
    assert max(c["value"] for c in parity) == pytest.approx(gap)
    assert sorted(c["value"] for c in parity)[:2] == pytest.approx([-gap, -gap])  # both signs
    accuracy = constraints.build("accuracy_parity", None, 2, 2, 0.05).evaluate(y, p, s)
    gap = metrics.accuracy_parity_difference(y, p, s)
    assert max(c["value"] for c in accuracy) == pytest.approx(gap)
    assert min(c["value"] for c in accuracy) == pytest.approx(-gap)  # both signs
    y, p, s = random_predictions(k=3, g=4, seed=1)
    dp = constraints.build("demographic_parity", None, 3, 4, 0.0).evaluate(y, p, s)
    ovr = metrics.demographic_parity_difference_ovr(p, s)
    assert max(c["value"] for c in dp) == pytest.approx(ovr)


def test_no_stated_gamma_reports_values_only():
    y, p, s = random_predictions()
    cs = constraints.build("demographic_parity", None, 2, 2, 0.0).with_gamma(float("nan"))
    assert all(c["satisfied"] is None and c["violation"] is None for c in cs.evaluate(y, p, s))


def declared(**changes):
    spec = {
        "name": "dp_by_hand",
        "partition": "group",
        "constraints": [
            {
                "name": "women_vs_men",
                "terms": [{"parts": [1], "weights": [0, 1]}, {"parts": [0], "weights": [0, -1]}],
            },
            {
                "name": "men_vs_women",
                "gamma": 0.5,
                "terms": [{"parts": [0], "weights": [0, 1]}, {"parts": [1], "weights": [0, -1]}],
            },
        ],
    }
    spec.update(changes)
    return spec


def test_a_declared_set_matches_the_builder():
    y, p, s = random_predictions(seed=3)
    cs = constraints.build("dp_by_hand", declared(), 2, 2, 0.05)
    values = {c["name"]: c for c in cs.evaluate(y, p, s)}
    reference = constraints.build("demographic_parity", None, 2, 2, 0.05)
    builder = {c["name"]: c["value"] for c in reference.evaluate(y, p, s)}
    assert values["women_vs_men"]["value"] == pytest.approx(builder["P(ŷ=1|s=1) - P(ŷ=1|s≠1)"])
    assert values["men_vs_women"]["value"] == pytest.approx(builder["P(ŷ=1|s=0) - P(ŷ=1|s≠0)"])
    assert values["women_vs_men"]["gamma"] == 0.05 and values["men_vs_women"]["gamma"] == 0.5


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"partition": "label_x_groups"}, "partition"),
        (
            {"constraints": [{"name": "c", "terms": [{"parts": [2], "weights": [0, 1]}]}]},
            r"part 2 is outside the group partition, whose parts are 0\.\.1",
        ),
        (
            {"constraints": [{"name": "c", "terms": [{"parts": [0], "weights": [1, 0, 0]}]}]},
            "3 weights given, the task has 2 classes",
        ),
        ({"constraints": [{"name": "c", "terms": []}]}, "terms"),
    ],
)
def test_ill_formed_declared_sets_are_refused(change, message):
    with pytest.raises((ConfigError, ValueError), match=message):
        constraints.build("x", declared(**change), 2, 2, 0.05)


def test_an_empty_subset_is_refused_at_evaluation():
    one_cell = [{"name": "c", "terms": [{"parts": [3], "weights": [0, 1]}]}]
    spec = declared(partition="label_x_group", constraints=one_cell)
    cs = custom(CustomConstraintSet.model_validate(spec), 2, 2, 0.1)
    y, p, s = np.zeros(10, int), np.zeros(10, int), np.zeros(10, int)
    with pytest.raises(ConfigError, match="empty subset"):
        cs.evaluate(y, p, s)


@pytest.mark.parametrize("name", ["equalized_odds", "accuracy_parity"])  # per-class, per-part
def test_histogram_post_processing_matches_eq_12_and_eq_10(name):
    """Gamma_post from a histogram equals exact rates; the coefficient matrix equals the
    gradient of a naive, loop-by-loop Eq. (10) regularizer."""
    cs = constraints.build(name, None, 2, 3, 0.05)
    rng = np.random.default_rng(0)
    hist = rng.uniform(1, 20, size=(cs.n_parts, 2))
    rates = TorchRates(cs, torch.device("cpu"))
    h = torch.as_tensor(hist, dtype=torch.float32)
    sizes = rates.sizes(h, floor=1.0)
    assert rates.values(h, sizes).numpy() == pytest.approx(cs.values_from_histogram(hist), rel=1e-5)

    lam = torch.as_tensor(rng.uniform(0, 2, cs.n_constraints), dtype=torch.float32)
    coef = rates.coefficients(lam, sizes).numpy()
    naive = np.zeros((cs.n_parts, 2))
    for t in range(len(cs.term_owner)):
        members = np.flatnonzero(cs.term_parts[t])
        size = hist[members].sum()
        for q in members:
            alpha = cs.term_weights[t] if cs.term_weights.ndim == 2 else cs.term_weights[t, q]
            naive[q] += lam[cs.term_owner[t]].item() * alpha / size
    assert coef == pytest.approx(naive, rel=1e-5)


def test_accuracy_parity_counts_each_parts_wrong_class():
    """Group 0's error rate against the rest's, from a (label x group) histogram by hand:
    part (y, z) counts predictions of the class that is not y."""
    cs = constraints.build("accuracy_parity", None, 2, 2, 0.0)
    hist = np.zeros((4, 2))  # parts: (y=0,s=0) 0, (y=0,s=1) 1, (y=1,s=0) 2, (y=1,s=1) 3
    hist[0] = [3, 1]  # 1 error of 4
    hist[2] = [2, 4]  # 2 errors of 6: group 0 errs 3 / 10
    hist[1] = [5, 0]
    hist[3] = [0, 5]  # group 1 errs 0 / 10
    values = dict(zip(cs.constraint_names, cs.values_from_histogram(hist), strict=True))
    assert values["err(s=0) - err(s≠0)"] == pytest.approx(0.3)
    assert values["err(s≠0) - err(s=0)"] == pytest.approx(-0.3)
    assert values["err(s=1) - err(s≠1)"] == pytest.approx(-0.3)


def test_equalized_odds_lambda_acts_on_its_own_label_and_group():
    """The authors' code swapped the dual variable's axes in the EO loss: here lambda for
    (y=1, s=0, k=1) must push only on parts (y=1, s=0) (+) and (y=1, s=1) (-), class 1."""
    cs = constraints.build("equalized_odds", None, 2, 2, 0.05)
    j = cs.constraint_names.index("P(ŷ=1|y=1,s=0) - P(ŷ=1|y=1,s≠0)")
    lam = torch.zeros(cs.n_constraints)
    lam[j] = 1.0
    rates = TorchRates(cs, torch.device("cpu"))
    coef = rates.coefficients(lam, torch.full((len(cs.term_owner),), 10.0)).numpy()
    expected = np.zeros((4, 2))
    expected[cs.part_table[1, 0], 1] = 0.1
    expected[cs.part_table[1, 1], 1] = -0.1
    assert coef == pytest.approx(expected)


def test_noisy_denominators_are_floored_without_data():
    cs = constraints.build("demographic_parity", None, 2, 2, 0.05)
    rates = TorchRates(cs, torch.device("cpu"))
    hist = torch.tensor([[-3.0, -2.0], [4.0, 1.0]])  # noise drove part 0 negative
    sizes = rates.sizes(hist, floor=1.0)
    assert torch.all(sizes >= 1.0) and torch.isfinite(rates.values(hist, sizes)).all()
