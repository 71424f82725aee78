"""A third-party plugin, registered through the entry-point group, runs through the runner."""

import sys
from importlib.metadata import EntryPoint

import pytest

import fairbench.methods as methods
from fairbench.runner.config import expand, parse_config
from fairbench.runner.trial import load_task, run_trial
from tests.conftest import REPO


@pytest.fixture
def with_majority_plugin(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "examples"))
    builtin = list(methods.entry_points(group=methods.GROUP))
    plugin = EntryPoint("majority", "majority_plugin:Majority", methods.GROUP)
    monkeypatch.setattr(methods, "entry_points", lambda group: [*builtin, plugin])
    methods.registry.cache_clear()
    yield
    methods.registry.cache_clear()
    sys.modules.pop("majority_plugin", None)


def test_a_third_party_method_runs_through_the_runner(with_majority_plugin):
    assert "majority" in methods.registry() and "dp-sgd" in methods.registry()
    config = parse_config(
        {
            "name": "plugin",
            "datasets": [{"name": "synthetic", "options": {"n_rows": 600}}],
            "methods": [{"name": "majority", "hparams": {"confidence": 0.8}}],
            "seeds": 2,
        }
    )
    specs = expand(config, warn=lambda _: None)
    assert len(specs) == 2
    row = run_trial(specs[0])
    assert row.info["majority_class"] == 0
    assert row.test["demographic_parity"] == 0.0  # a constant predictor is perfectly "fair"
    assert row.privacy_notion == "non-private" and row.epsilon_spent == 0.0
    task = load_task(specs[0])
    assert row.test["error"] == pytest.approx((task.test.y != 0).mean())
