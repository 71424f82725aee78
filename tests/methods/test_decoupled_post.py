"""`decoupled-post` (Ghoukasian-Asoodeh 2024, Algorithm 2): the parity flips on exact examples
by hand, the ledger against hand-built DpEvents (parallel across groups), the Laplace
releases' sensitivity and scale, noise drawn through the session, the non-private twin's exact
parity, and the sensitive-at-test marking. The conformance kit runs on it in
tests/contract/test_testing.py (`TINY`)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from dp_accounting import dp_event

from fairbench.datasets import get_dataset
from fairbench.errors import ConfigError
from fairbench.methods import FairnessSpec, get_method
from fairbench.methods.decoupled_post import (
    RATES,
    group_counts,
    parity_flips,
    parity_targets,
    positive_rates,
)
from fairbench.methods.engine import fit_trials
from fairbench.methods.trial import Trial
from fairbench.privacy import PrivacyBudget, PrivacyLedger, epsilon
from fairbench.privacy.noise import observe_releases
from fairbench.privacy.session import PrivacySession, canonical
from fairbench.runner.config import expand, parse_config
from fairbench.runner.trial import run_trial
from fairbench.task import Split

DP = "demographic_parity"
FAST = {"epochs": 2, "batch_size": 64}


@pytest.fixture(scope="module")
def task():
    return get_dataset("synthetic", n_rows=1500, n_groups=3).load(0)


def fit(task, gamma=0.0, eps=1.0, **hparams):
    method = get_method("decoupled-post", **{**FAST, **hparams})
    return method.fit(task, PrivacyBudget(eps), FairnessSpec(DP, gamma), 0)


def flipped_rates(rates: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Each group's positive rate after the derived predictor p[yhat, a]."""
    return rates * p[1] + (1 - rates) * p[0]


def test_two_groups_meet_halfway_by_hand():
    """Rates 0.8 and 0.2, gamma 0.1: the band around 0.5 is [0.45, 0.55]; group 0 keeps a
    positive with probability 0.55 / 0.8, group 1 turns a negative positive with 0.25 / 0.8."""
    rates = np.array([0.8, 0.2])
    p = parity_flips(rates, 0.1)
    assert np.allclose(p, [[0.0, 0.3125], [0.6875, 1.0]])
    assert np.allclose(flipped_rates(rates, p), [0.55, 0.45])
    # gamma 0 is the authors' rule: both to (alpha + beta) / 2, with their flip probabilities
    exact = parity_flips(rates, 0.0)
    assert exact[1, 0] == pytest.approx((0.8 + 0.2) / (2 * 0.8))
    assert exact[0, 1] == pytest.approx((0.8 - 0.2) / (2 * (1 - 0.2)))


def test_the_flips_are_the_fewest_for_the_tolerance():
    """No pair of rates within gamma flips a smaller largest share of any group's predictions
    (a grid of every reachable pair), and only one kind of prediction flips in each group."""
    rates, gamma = np.array([0.7, 0.25]), 0.15
    ours = np.abs(parity_targets(rates, gamma) - rates).max()
    assert ours == pytest.approx((0.7 - 0.25 - 0.15) / 2)
    grid = np.linspace(0, 1, 401)
    best = min(
        max(abs(a - rates[0]), abs(b - rates[1]))
        for a, b in itertools.product(grid, grid)
        if abs(a - b) <= gamma + 1e-12
    )
    assert ours <= best + 1e-12
    p = parity_flips(rates, gamma)
    assert p[0, 0] == 0 and p[1, 1] == 1  # the high group only loses, the low only gains


def test_more_groups_and_rates_already_within_gamma():
    rates = np.array([0.7, 0.5, 0.1])
    assert np.allclose(parity_targets(rates, 0.2), [0.5, 0.5, 0.3])
    assert np.allclose(flipped_rates(rates, parity_flips(rates, 0.2)), [0.5, 0.5, 0.3])
    close = np.array([0.5, 0.45])
    assert np.array_equal(parity_flips(close, 0.1), [[0.0, 0.0], [1.0, 1.0]])  # no flips


def test_ledger_is_the_parallel_composition_of_the_releases(task):
    """Per group: its Laplace count, T Poisson-sampled Gaussian rounds and its Laplace rate
    histogram, hand-built; the trial's epsilon is one group's (groups compose in parallel),
    well below the sequential composition of all groups' releases."""
    fitted = fit(task, eps=1.0)
    info, delta = fitted.info, 1e-5
    rounds = dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(
            info["sampling_rate"], dp_event.GaussianDpEvent(info["noise_multiplier"])
        ),
        info["steps"],
    )
    count = dp_event.LaplaceDpEvent(info["count_scale"])
    rates = dp_event.LaplaceDpEvent(info["rate_scale"])
    one_group = dp_event.ComposedDpEvent([count, rounds, rates])
    assert canonical(fitted.ledger) == canonical(fitted.plan)
    assert fitted.ledger.parallel_groups and fitted.ledger.groups == [0, 1, 2]
    for g in range(3):
        mine = sorted(repr(e.event) for e in fitted.ledger.entries if e.group == g)
        assert mine == sorted(repr(e) for e in (count, rounds, rates))
    spent = fitted.ledger.epsilon(delta)
    assert spent == pytest.approx(epsilon(one_group, delta), abs=1e-9)
    assert 0.99 < spent <= 1.0
    sequential = epsilon(dp_event.ComposedDpEvent([one_group] * 3), delta)
    assert sequential == pytest.approx(1.729, abs=0.01)  # measured: parallel saves 42%
    assert fitted.budget.noise == {
        "gradient": info["noise_multiplier"],
        "count": info["count_scale"],
        "laplace": info["rate_scale"],
    }


def test_laplace_scales_meet_their_shares(task):
    fitted = fit(task, eps=2.0, count_share=0.05, rate_share=0.2)
    laplace = [dp_event.LaplaceDpEvent(fitted.info[k]) for k in ("count_scale", "rate_scale")]
    assert [epsilon(e, 1e-5) for e in laplace] == pytest.approx([0.1, 0.4], abs=1e-3)


def test_each_laplace_release_has_l1_sensitivity_one_in_its_own_group():
    """Adding one record changes its own group's count by 1 and one cell of its own group's
    prediction histogram by 1, and no other group's release at all (exact statistics)."""
    models = [torch.nn.Linear(2, 2) for _ in range(2)]
    with torch.no_grad():
        models[0].bias.copy_(torch.tensor([0.0, 1.0]))  # group 0's classifier says 1
        models[1].bias.copy_(torch.tensor([1.0, 0.0]))  # group 1's says 0
        for m in models:
            m.weight.zero_()
    x = np.zeros((5, 2), np.float32)
    before = Split(x, np.zeros(5, np.int64), np.array([0, 0, 1, 1, 1]))
    after = Split(np.zeros((6, 2), np.float32), np.zeros(6, np.int64), np.array([0, 0, 1, 1, 1, 0]))
    exact = PrivacySession(0)
    assert group_counts(before, 2, exact, np.inf) == [2.0, 3.0]
    assert group_counts(after, 2, exact, np.inf) == [3.0, 3.0]
    counts = [np.bincount((m(torch.zeros(1, 2)).argmax(1)).numpy(), minlength=2) for m in models]
    assert counts[0].tolist() == [0, 1] and counts[1].tolist() == [1, 0]
    assert positive_rates(models, before, exact, np.inf).tolist() == [1.0, 0.0]
    plan = PrivacyLedger(parallel_groups=True)
    for g in (0, 1):
        plan.record(RATES, dp_event.LaplaceDpEvent(1.0), g)
    observed = []

    def spy(kind, exact_value, noisy):
        observed.append(exact_value[0].reshape(-1).tolist())
        return noisy

    with observe_releases(spy):
        for split in (before, after):
            session = PrivacySession(0, budget=PrivacyBudget(1.0))
            session.submit_plan(plan)
            positive_rates(models, split, session, 1.0)
    hist_before, hist_after = observed[:2], observed[2:]
    diff = [np.abs(np.subtract(a, b)).sum() for a, b in zip(hist_after, hist_before, strict=True)]
    assert diff == [1.0, 0.0]  # group 0's histogram moved by one record, group 1's not at all


def test_noise_comes_from_the_session_at_the_declared_scales(task):
    """Every release goes through the session's mechanisms: per group one Laplace count, one
    Laplace rate histogram and one Gaussian sum per round, the Laplace noise at its scale."""
    seen = []

    def spy(kind, exact_value, noisy):
        seen.append((kind, exact_value[0].double(), noisy[0].double()))
        return noisy

    with observe_releases(spy):
        fitted = fit(task, eps=0.5)
    laplace = [(e, n) for kind, e, n in seen if kind == "laplace"]
    assert len(laplace) == 2 * 3
    assert len(seen) - len(laplace) == fitted.info["steps"] * 3  # Gaussian sums
    for cells, scale in ((1, fitted.info["count_scale"]), (2, fitted.info["rate_scale"])):
        noise = torch.cat([(n - e).reshape(-1) for e, n in laplace if e.numel() == cells])
        assert len(noise) == 3 * cells and bool((noise != 0).all())
        # a few draws cannot pin the scale; their mean absolute value is b within a loose factor
        assert 0.2 * scale < float(noise.abs().mean()) < 3 * scale


def test_non_private_twin_meets_parity_exactly_on_its_post_processing_records(task):
    method = get_method("decoupled-post", **FAST)
    trial = Trial(task, FairnessSpec(DP, 0.0), PrivacySession(0))  # no budget: exact
    (fitted,) = fit_trials(method, [trial])
    assert trial.session.ledger().entries == []
    _, post = method._stages(task.train, 0)
    proba = fitted.predict_proba(post.X, post.s)[:, 1]
    achieved = [proba[post.s == g].mean() for g in range(task.n_groups)]
    assert np.allclose(achieved, fitted.info["target_rates"], atol=1e-12)
    assert np.ptp(achieved) == pytest.approx(0.0, abs=1e-12)


def test_predictions_read_each_groups_own_classifier(task):
    fitted = fit(task, gamma=1.0)  # gamma 1: no flips, the base classifiers' own predictions
    assert fitted.sensitive_at_test and len(fitted.group_models) == 3
    with pytest.raises(ValueError, match="sensitive attribute"):
        fitted.predict_proba(task.test.X)
    proba = fitted.predict_proba(task.test.X, task.test.s)[:, 1]
    for g, model in enumerate(fitted.group_models):
        own = task.test.s == g
        with torch.no_grad():
            base = model(torch.as_tensor(task.test.X[own])).argmax(1).numpy()
        assert np.array_equal(proba[own], base.astype(float))


def test_rejects_what_it_cannot_do(task):
    with pytest.raises(ConfigError, match="supports the constraints"):
        get_method("decoupled-post", **FAST).fit(
            task, PrivacyBudget(1.0), FairnessSpec("equalized_odds", 0.0), 0
        )
    with pytest.raises(ConfigError, match="gamma"):
        fit(task, None)
    with pytest.raises(ConfigError, match="gamma"):
        fit(task, 1.5)


def test_rows_and_labels_mark_the_sensitive_attribute_at_test():
    config = parse_config(
        {
            "name": "t",
            "constraint": DP,
            "epsilons": [1.0],
            "seeds": 1,
            "datasets": [{"name": "synthetic", "options": {"n_rows": 600}}],
            "methods": [{"name": "decoupled-post", "hparams": FAST, "knobs": [0.0]}],
        }
    )
    (spec,) = expand(config)
    assert spec.label == "decoupled-post (A at test)"
    row = run_trial(spec)
    assert row.uses_sensitive_at_test is True and row.privacy_notion == "full"
    assert row.epsilon_spent <= 1.0 and len(row.model_state["components"]) == 2
