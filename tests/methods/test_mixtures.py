"""Randomized classifiers (mixtures, as reductions output them): class probabilities are
(weighted) vote shares, predictions need a seed, and the runner evaluates them exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairbench import metrics
from fairbench.methods.trial import Fitted
from fairbench.models import LogisticRegression
from fairbench.privacy import PrivacyLedger
from fairbench.runner.trial import decisions
from fairbench.task import Split


def threshold_model(feature: int, sign: float) -> LogisticRegression:
    """Predicts class 1 where sign * x[feature] > 0."""
    model = LogisticRegression(2, 2)
    with torch.no_grad():
        model.linear.weight.zero_()
        model.linear.bias.zero_()
        model.linear.weight[1, feature] = sign
    return model


@pytest.fixture
def mixture() -> Fitted:
    parts = [threshold_model(0, 1.0), threshold_model(1, 1.0), threshold_model(0, -1.0)]
    return Fitted(parts[-1], torch.device("cpu"), PrivacyLedger(), components=parts)


@pytest.fixture
def split() -> Split:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 2)).astype(np.float32)
    return Split(X=X, y=(X[:, 0] > 0).astype(np.int64), s=(X[:, 1] > 0.5).astype(np.int64))


def test_probabilities_are_vote_shares_and_predictions_need_a_seed(mixture, split):
    votes = np.stack([(split.X[:, 0] > 0), (split.X[:, 1] > 0), (split.X[:, 0] < 0)])
    proba = mixture.predict_proba(split.X)
    assert np.allclose(proba[:, 1], votes.mean(axis=0)) and np.allclose(proba.sum(axis=1), 1)
    with pytest.raises(ValueError, match="seed"):
        mixture.predict(split.X)
    drawn = mixture.predict(split.X, seed=3)
    assert np.array_equal(drawn, mixture.predict(split.X, seed=3))
    # each record gets one component's answer, and contested records are not all majority
    assert np.all((drawn == 1) <= votes.any(axis=0)) and np.all((drawn == 0) <= ~votes.all(axis=0))
    contested = votes.any(axis=0) & ~votes.all(axis=0)
    majority = votes.mean(axis=0) > 0.5
    assert 0.2 < np.mean(drawn[contested] != majority[contested]) < 0.5


def test_the_runner_evaluates_mixtures_exactly(mixture, split):
    """Expected error is the components' mean error; the demographic-parity gap is the gap of
    the expected group rates, not the mean of the components' gaps."""
    y, s, pred, proba, weight = decisions(mixture, split)
    assert len(y) == 3 * len(split) and proba.shape == (3 * len(split), 2) and weight is None
    parts = [m for m in mixture.components]
    each = [Fitted(m, torch.device("cpu"), PrivacyLedger()).predict(split.X) for m in parts]
    errors = [metrics.error_rate(split.y, p) for p in each]
    assert metrics.error_rate(y, pred) == pytest.approx(np.mean(errors))
    rates = np.mean([[p[split.s == a].mean() for a in (0, 1)] for p in each], axis=0)
    gap = metrics.demographic_parity_difference(pred, s)
    assert gap == pytest.approx(abs(rates[0] - rates[1]))
    mean_of_gaps = np.mean([metrics.demographic_parity_difference(p, split.s) for p in each])
    assert gap != pytest.approx(mean_of_gaps)
    deterministic = Fitted(parts[0], torch.device("cpu"), PrivacyLedger())
    y1, _, pred1, _, _ = decisions(deterministic, split)
    assert len(y1) == len(split) and np.array_equal(pred1, each[0])


def test_weighted_mixtures_are_evaluated_exactly(split):
    """Non-uniform weights (fairlearn's ExponentiatedGradient): every rate is the weighted
    mean of the components' rates, draws follow the weights, and the gap is that of the
    expected group rates."""
    parts = [threshold_model(0, 1.0), threshold_model(1, 1.0), threshold_model(0, -1.0)]
    w = np.array([0.7, 0.25, 0.05])
    mixture = Fitted(
        parts[-1], torch.device("cpu"), PrivacyLedger(), components=parts, weights=w.tolist()
    )
    each = [Fitted(m, torch.device("cpu"), PrivacyLedger()).predict(split.X) for m in parts]
    y, s, pred, _, weight = decisions(mixture, split)
    assert weight is not None and len(weight) == len(y) == 3 * len(split)
    errors = [metrics.error_rate(split.y, p) for p in each]
    assert metrics.error_rate(y, pred, weight) == pytest.approx(np.dot(w, errors))
    rates = w @ np.array([[p[split.s == a].mean() for a in (0, 1)] for p in each])
    gap = metrics.demographic_parity_difference(pred, s, weight)
    assert gap == pytest.approx(abs(rates[0] - rates[1]))
    positives = mixture.predict_proba(split.X)[:, 1]
    assert np.allclose(positives, w @ np.stack(each))
    only_first = (each[0] == 1) & (each[1] == 0) & (each[2] == 0)  # positive w.p. 0.7
    assert np.mean(mixture.predict(split.X, seed=0)[only_first]) == pytest.approx(0.7, abs=0.15)
    with pytest.raises(ValueError, match="weights"):
        Fitted(parts[-1], torch.device("cpu"), PrivacyLedger(), components=parts, weights=[1.0])
