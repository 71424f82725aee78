"""`fairlearn-eg`: the plugin is fairlearn's ExponentiatedGradient, its weighted mixture
evaluated exactly by the runner, deterministic, registered, and it refuses what fairlearn
cannot express."""

from __future__ import annotations

import numpy as np
import pytest

from fairbench.datasets import get_dataset
from fairbench.errors import ConfigError
from fairbench.methods import FairnessSpec, get_method
from fairbench.runner.config import expand, parse_config
from fairbench.runner.trial import run_trial

reductions = pytest.importorskip("fairlearn.reductions")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fairlearn on pandas 3

SYNTHETIC = {"n_rows": 2000}


@pytest.fixture(scope="module")
def task():
    return get_dataset("synthetic", **SYNTHETIC).load(seed=0)


def fairlearn_directly(task, bound: float) -> tuple[float, float]:
    """(test error, test DP gap) of fairlearn's own randomized predictor, from its pmf."""
    from sklearn.linear_model import LogisticRegression

    eg = reductions.ExponentiatedGradient(
        LogisticRegression(max_iter=1000),
        reductions.DemographicParity(difference_bound=bound),
        eps=bound,
    )
    eg.fit(task.train.X, task.train.y, sensitive_features=task.train.s)
    p = eg._pmf_predict(task.test.X)[:, 1]
    error = float(np.mean(np.where(task.test.y == 1, 1 - p, p)))
    rates = [p[task.test.s == g].mean() for g in range(task.n_groups)]
    return error, float(max(rates) - min(rates))


def test_held_out_gap_matches_fairlearn_used_directly(task):
    """Through the runner (exact weighted-mixture evaluation) at difference_bound 0.02."""
    config = {
        "name": "eg",
        "datasets": [{"name": "synthetic", "options": SYNTHETIC}],
        "methods": [{"name": "fairlearn-eg", "knobs": [0.02]}],
        "seeds": [0],
    }
    (spec,) = expand(parse_config(config), warn=lambda _: None)
    row = run_trial(spec)
    error, gap = fairlearn_directly(task, 0.02)
    assert row.test["demographic_parity"] == pytest.approx(gap, abs=1e-6)
    assert row.test["violation"] == pytest.approx(gap, abs=1e-6)
    assert row.test["error"] == pytest.approx(error, abs=1e-6)
    assert row.epsilon is None and row.epsilon_spent == 0.0
    assert sum(row.info["weights"]) == pytest.approx(1.0)


def test_fit_is_deterministic_and_a_weighted_mixture(task):
    spec = FairnessSpec("demographic_parity", 0.02)
    a, b = (get_method("fairlearn-eg").fit(task, None, spec, seed=3) for _ in range(2))
    assert a.info["weights"] == b.info["weights"]
    for m, n in zip(a.components or [a.model], b.components or [b.model], strict=True):
        assert np.array_equal(m.w.numpy(), n.w.numpy()) and float(m.b) == float(n.b)
    assert a.randomized and len(a.weights) == len(a.components) >= 2
    proba = a.predict_proba(task.test.X)
    assert np.allclose(proba.sum(axis=1), 1) and ((proba > 0) & (proba < 1)).any()


def test_equalized_odds_runs_and_unsupported_constraints_are_refused(task):
    fitted = get_method("fairlearn-eg", max_iter=10).fit(
        task, None, FairnessSpec("equalized_odds", 0.05), seed=0
    )
    assert fitted.info["difference_bound"] == 0.05
    with pytest.raises(
        ConfigError, match="supports the constraints demographic_parity, equalized_odds"
    ):
        get_method("fairlearn-eg").fit(task, None, FairnessSpec("false_negative_rate", 0.1), 0)
    with pytest.raises(ConfigError, match="difference_bound"):
        get_method("fairlearn-eg").fit(task, None, FairnessSpec("demographic_parity"), 0)
    with pytest.raises(ConfigError, match="'model'"):
        get_method("fairlearn-eg", model="mlp")


def test_listed_among_the_methods(cli):
    code, out, _ = cli("list", "methods")
    assert code == 0 and "fairlearn-eg" in out and "knob: difference_bound" in out
