"""CGOO: the reduction reproduces an independent reductions library on real Adult without
noise, its private version accounts every release, and its output is a proper mixture."""

from __future__ import annotations

import numpy as np
import pytest

from fairbench import metrics
from fairbench.constraints import group_objectives as go
from fairbench.datasets import get_dataset
from fairbench.methods import FairnessSpec, get_method
from fairbench.methods.plan import DataShape
from fairbench.privacy import PrivacyBudget
from fairbench.privacy.session import canonical
from fairbench.runner.trial import decisions
from tests.conftest import needs_adult


@pytest.fixture(scope="module")
def synthetic():
    return get_dataset("synthetic", n_rows=2000).load(seed=0)


def expected_metrics(fitted, split):
    y, s, pred, _, _ = decisions(fitted, split)
    return metrics.error_rate(y, pred), metrics.demographic_parity_difference(pred, s)


@pytest.mark.slow
@needs_adult
def test_non_private_cgoo_matches_fairlearn_exponentiated_gradient_on_adult():
    """Same split, demographic parity: the mixture's held-out gap is within alpha + 0.02 and
    its error within 0.01 of fairlearn's (whose own gap is reported beside it)."""
    fairlearn = pytest.importorskip("fairlearn.reductions")
    from sklearn.linear_model import LogisticRegression

    task = get_dataset("adult").load(seed=0)
    for alpha in (0.02, 0.05):
        eg = fairlearn.ExponentiatedGradient(
            LogisticRegression(max_iter=1000),
            fairlearn.DemographicParity(difference_bound=alpha),
            eps=alpha,
        )
        eg.fit(task.train.X, task.train.y, sensitive_features=task.train.s)
        p = eg._pmf_predict(task.test.X)[:, 1]  # the randomized predictor's exact rates
        eg_error = float(np.mean(np.where(task.test.y == 1, 1 - p, p)))
        fitted = get_method("cgoo-nonprivate").fit(
            task, None, FairnessSpec("demographic_parity", alpha), seed=0
        )
        error, gap = expected_metrics(fitted, task.test)
        assert gap <= alpha + 0.02, (alpha, gap)
        assert abs(error - eg_error) <= 0.01, (alpha, error, eg_error)


def test_private_cgoo_spends_its_budget_on_counts_and_oracle(synthetic):
    method = get_method("cgoo", iterations=5, epochs=1, batch_size=128)
    fitted = method.fit(
        synthetic, PrivacyBudget(1.0), FairnessSpec("demographic_parity", 0.05), seed=0
    )
    labels = [entry.label for entry in fitted.ledger.entries]  # sampled rounds first
    assert len(labels) == 2 and "oracle" in labels[0] and "confusion counts" in labels[1]
    assert 0.99 <= fitted.ledger.epsilon(1e-5) <= 1.0
    plan = method.plan(
        DataShape.of(synthetic), PrivacyBudget(1.0), FairnessSpec("demographic_parity", 0.05)
    )
    assert fitted.info["count_noise"] == plan.info["count_noise"] > 0
    assert fitted.info["noise_multiplier"] == plan.schedule.noise_multiplier > 0
    assert canonical(fitted.ledger) == canonical(plan.ledger)
    # the counts alone spend the configured share of epsilon
    counts_only = fitted.ledger.entries[1].event
    from fairbench.privacy import epsilon

    assert epsilon(counts_only, 1e-5) == pytest.approx(0.1, rel=0.02)
    assert len(fitted.components) == 5 and fitted.randomized


def test_dual_multipliers_settle_and_the_constraint_tightens(synthetic):
    fitted = get_method("cgoo-nonprivate", iterations=30).fit(
        synthetic, None, FairnessSpec("demographic_parity", 0.05), seed=0
    )
    trace = fitted.info["trace"]
    assert trace[0]["lambda"] == 0.0 and trace[-1]["lambda"] > 0
    assert trace[-1]["g"] < trace[1]["g"]  # the mixture moves towards feasibility
    erm = get_method("erm").fit(synthetic, None, FairnessSpec("demographic_parity"), seed=0)
    assert expected_metrics(fitted, synthetic.test)[1] < metrics.demographic_parity_difference(
        erm.predict(synthetic.test.X), synthetic.test.s
    )


def test_constraint_pieces_are_the_linear_parts_of_the_constraints(synthetic):
    rng = np.random.default_rng(0)
    stats = go.statistics(
        synthetic.train.y, synthetic.train.s, rng.uniform(size=len(synthetic.train)), 2
    )
    sizes = go.Sizes.of(stats)
    for name, g in (
        ("demographic_parity", go.demographic_parity(0.03)),
        ("bounded_group_loss", go.bounded_group_loss(0.03)),
    ):
        values, grads = go.constraint_pieces(name, 0.03, stats, sizes)
        assert values.max() == pytest.approx(g(stats, sizes)[0])
        assert np.allclose((grads * stats).sum(axis=(1, 2, 3)) - 0.03, values)
    values, _ = go.constraint_pieces("equalized_odds", 0.0, stats, sizes)
    eo = go.smoothed_equalized_odds(0.0, eta=1e5)(stats, sizes)[0]
    assert values.max() == pytest.approx(eo, abs=1e-4) and len(values) == 4


def test_cgoo_refuses_what_it_cannot_do(synthetic):
    from fairbench.errors import ConfigError

    with pytest.raises(ConfigError, match="alpha"):
        get_method("cgoo").fit(
            synthetic, PrivacyBudget(1.0), FairnessSpec("demographic_parity"), seed=0
        )
    with pytest.raises(ConfigError, match="constraints"):
        get_method("cgoo").fit(
            synthetic, PrivacyBudget(1.0), FairnessSpec("false_negative_rate", 0.1), seed=0
        )
    with pytest.raises(ConfigError, match="private"):
        get_method("cgoo").fit(synthetic, None, FairnessSpec("demographic_parity", 0.1), seed=0)


def test_the_runner_reports_cgoo_mixtures_and_alpha_satisfaction(cli, tmp_path):
    import pandas as pd
    import yaml

    config = {
        "name": "c",
        "datasets": [{"name": "synthetic", "options": {"n_rows": 1500}}],
        "constraint": "demographic_parity",
        "epsilons": [2.0],
        "seeds": 2,
        "methods": [{"name": "cgoo", "hparams": {"iterations": 4}, "knobs": [0.05, 0.5]}],
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    code, _, err = cli(
        "run", str(path), "--out", str(tmp_path / "run"), "--workers", "1", "--quiet"
    )
    assert code == 0, err
    pareto = pd.read_csv(tmp_path / "run" / "pareto.csv").set_index("knob")
    assert pareto.loc[0.5, "satisfied_fraction"] == 1.0  # a loose alpha always holds
    assert 0.0 <= pareto.loc[0.05, "satisfied_fraction"] <= 1.0
    assert (pareto["epsilon_spent_max"] <= 2.0).all()
