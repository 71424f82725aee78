"""`mozannar`: the corrected constraint is the true-attribute constraint in expectation (exact
on a small case, close on a large one, the paper's two-group factor), the moment is
fairlearn's own where the groups are exact, and a trial releases one randomized response at
epsilon_A, labelled local-dp-attribute, whose ledger the pure-DP closed form checks."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from dp_accounting import dp_event

import fairbench.methods as methods
from fairbench.datasets import get_dataset
from fairbench.methods import FairnessSpec
from fairbench.methods.mozannar import (
    RELEASE,
    Mozannar,
    channel_inverse,
    correct,
    corrected_indicators,
    corrected_moment,
)
from fairbench.privacy import PrivacyBudget
from fairbench.privacy.accountant import epsilon
from fairbench.privacy.events import keep_probability, randomized_response_epsilon
from fairbench.privacy.events import randomized_response as rr_event
from fairbench.runner.config import expand, parse_config
from fairbench.runner.trial import run_trial

reductions = pytest.importorskip("fairlearn.reductions")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fairlearn on pandas 3


def channel(event) -> np.ndarray:
    """Q[z, a] = P(Z = z | A = a), from the mechanism's definition."""
    k, keep = event.num_buckets, keep_probability(event)
    return np.where(np.eye(k, dtype=bool), keep, (1 - keep) / (k - 1))


@pytest.mark.parametrize(("eps", "k"), [(0.3, 2), (1.0, 3)])
def test_corrected_statistics_equal_the_true_ones_in_expectation_exactly(eps, k):
    """Every response of 4 records enumerated (k^4 outcomes, weighted by their probability):
    E[w_i(a)] = 1[A_i = a], so the corrected P(A = a, Y = y) and the corrected count of
    positive predictions in each (group, label) cell, the numerator and denominator of each
    corrected rate of the constraint, equal the true-attribute ones."""
    event = rr_event(eps, k)
    q = channel(event)
    a = np.array([0, 1, k - 1, 1])
    y = np.array([1, 0, 1, 1])
    h = np.array([1.0, 1.0, 0.0, 1.0])
    expected_w = np.zeros((4, k))
    for z in itertools.product(range(k), repeat=4):
        prob = np.prod([q[z_i, a_i] for z_i, a_i in zip(z, a, strict=True)])
        expected_w += prob * corrected_indicators(np.array(z), event)
    assert np.allclose(expected_w, np.eye(k)[a], atol=1e-12)
    for label in (0, 1):
        cell = y == label
        assert np.allclose(expected_w[cell].sum(0), np.bincount(a[cell], minlength=k))
        assert np.allclose(
            (h[cell, None] * expected_w[cell]).sum(0), [h[cell & (a == g)].sum() for g in range(k)]
        )
    assert np.allclose(channel_inverse(event) @ q, np.eye(k))


def loaded(name: str, groups: np.ndarray, y: np.ndarray, event=None):
    X = np.zeros((len(y), 1))
    if event is None:
        moment = getattr(reductions, name)(difference_bound=0.1)
    else:
        moment = corrected_moment(
            {"DemographicParity": "demographic_parity"}.get(name, "equalized_odds"), 0.1, event
        )
    moment.load_data(X, pd.Series(y), sensitive_features=groups)
    return moment


@pytest.mark.parametrize("name", ["DemographicParity", "EqualizedOdds"])
def test_with_exact_groups_the_moment_is_fairlearns(name, monkeypatch):
    """`correct` with the identity channel (w = one-hot groups) leaves fairlearn 0.15's moment
    as it built it: the rewrite reads fairlearn's internals, this pins them."""
    rng = np.random.default_rng(0)
    s, y = rng.integers(0, 3, 300), rng.integers(0, 2, 300)
    plain = loaded(name, s, y)
    mine = loaded(name, s, y)
    monkeypatch.setattr("fairbench.methods.mozannar.channel_inverse", lambda event: np.eye(3))
    correct(mine, rr_event(1.0, 3))
    pd.testing.assert_frame_equal(plain.U.astype(float), mine.U, check_exact=False, rtol=1e-12)
    pd.testing.assert_series_equal(plain.prob_group_event, mine.prob_group_event, rtol=1e-12)
    h = lambda X: (np.arange(len(X)) % 3 == 0).astype(float)  # noqa: E731
    pd.testing.assert_series_equal(plain.gamma(h), mine.gamma(h), rtol=1e-12)


def large_sample(eps: float, k: int = 2, n: int = 200_000):
    rng = np.random.default_rng(1)
    a = (rng.random(n) < 0.3).astype(np.int64) if k == 2 else rng.integers(0, k, n)
    y = (rng.random(n) < 0.25 + 0.2 * (a == 0)).astype(np.int64)
    h = (rng.random(n) < 0.2 + 0.3 * a / (k - 1) + 0.3 * y).astype(float)
    event = rr_event(eps, k)
    keep = keep_probability(event)
    flip = rng.random(n) >= keep
    z = np.where(flip, (a + 1 + rng.integers(0, k - 1, n)) % k, a)
    return a, y, h, z, event


@pytest.mark.parametrize("name", ["DemographicParity", "EqualizedOdds"])
def test_corrected_gamma_recovers_the_true_attributes_on_a_large_sample(name):
    """200,000 records, eps 2: the corrected moment's gamma on Z is within 0.015 of the
    exact-group moment's gamma on A (over seeds of the response its largest error was 0.0004
    to 0.0062, sampling error); fairlearn's moment on Z alone is attenuated (off by > 0.05)."""
    a, y, h, z, event = large_sample(2.0)
    predict = lambda X: h  # noqa: E731
    true = loaded(name, a, y).gamma(predict)
    corrected = loaded(name, z, y, event).gamma(predict)
    naive = loaded(name, z, y).gamma(predict)
    assert (corrected - true).abs().max() < 0.015
    assert (naive - true).abs().max() > 0.05


def test_two_groups_the_correction_is_the_papers_factor():
    """Two groups: the corrected gap (in each label) is the gap on Z divided by
    C_y = P(A=0 | Z=0, y) - P(A=0 | Z=1, y), the P(A | Z, y) from the inverted P(A, y)."""
    _, y, h, z, event = large_sample(0.8, n=20_000)
    q = channel(event)
    w = corrected_indicators(z, event)
    for label in (0, 1):
        cell = y == label
        on_z = [h[cell & (z == g)].mean() for g in (0, 1)]
        corrected = (h[cell, None] * w[cell]).sum(0) / w[cell].sum(0)
        p_a = w[cell].sum(0)  # P(A = a, y) up to the common 1/n
        p_z = q @ p_a  # P(Z = z, y)
        factor = q[0, 0] * p_a[0] / p_z[0] - q[1, 0] * p_a[0] / p_z[1]
        assert on_z[0] - on_z[1] == pytest.approx(factor * (corrected[0] - corrected[1]), rel=1e-9)


@pytest.fixture(scope="module")
def task():
    return get_dataset("synthetic", n_rows=1500).load(seed=0)


def test_a_trial_releases_one_randomized_response_in_its_own_notion(task):
    target = PrivacyBudget(1.0, 1e-5)
    fitted = Mozannar(max_iter=5).fit(task, target, FairnessSpec("equalized_odds", 0.05), seed=0)
    assert fitted.privacy_notion == "local-dp-attribute" and not fitted.sensitive_at_test
    (entry,) = fitted.ledger.entries
    assert entry.label == RELEASE and entry.group is None
    assert entry.event == rr_event(fitted.info["epsilon_A"], task.n_groups)
    # the ledger against the closed form: pure epsilon_A-DP, k releases k epsilon_A
    pure = randomized_response_epsilon(entry.event)
    assert pure == pytest.approx(fitted.info["epsilon_A"], rel=1e-12) and pure <= 1.0
    assert fitted.ledger.epsilon(1e-5) <= 1.0
    assert epsilon(entry.event, 1e-10) == pytest.approx(pure, abs=1e-4)
    three = dp_event.SelfComposedDpEvent(entry.event, 3)
    assert epsilon(three, 1e-10) == pytest.approx(3 * pure, abs=3e-4)


def test_the_response_is_the_trials_own(task):
    """Fits differ with the seed (a new response) and repeat under it."""
    target, spec = PrivacyBudget(0.5, 1e-5), FairnessSpec("demographic_parity", 0.02)
    a, b, c = (Mozannar(max_iter=5).fit(task, target, spec, seed=s) for s in (0, 0, 1))
    assert a.info["weights"] == b.info["weights"] and a.info["weights"] != c.info["weights"]


def test_the_runner_labels_its_rows(monkeypatch):
    methods.register(Mozannar)
    config = {
        "name": "mozannar",
        "datasets": [{"name": "synthetic", "options": {"n_rows": 1500}}],
        "methods": [{"name": "mozannar", "hparams": {"max_iter": 5}, "knobs": [0.05]}],
        "epsilons": [2.0],
        "seeds": [0],
    }
    (spec,) = expand(parse_config(config), warn=lambda _: None)
    row = run_trial(spec)
    assert row.privacy_notion == "local-dp-attribute"
    assert row.epsilon_spent <= 2.0 and row.epsilon_checks["problems"] == []
    assert row.info["epsilon_A"] == 2.0 and row.info["floored_cells"] == 0


def test_private_selection_refuses_it():
    from fairbench.workflows.private_selection import whole_record_problem

    problem = whole_record_problem(Mozannar())
    assert problem is not None and "local-dp-attribute notion only" in problem
    assert problem.endswith("private selection releases whole-record DP only: leave the method out")
