"""The second model family: a one-hidden-layer MLP (`model: mlp`, width `hidden`, default 32)
for every method whose paper admits a non-linear model, and one clear refusal from the
linear-only ones (issue 16)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from dp_accounting import dp_event
from torch import nn

from fairbench.datasets import get_dataset
from fairbench.errors import ConfigError
from fairbench.methods import cgoo, dp_fermi, dp_sgd, get_method, method_class, pf_ld, raco_dp
from fairbench.methods.engine import init_model
from fairbench.models import MLP, build_model
from fairbench.privacy import PrivacyLedger, epsilon
from fairbench.privacy import session as session_module
from fairbench.privacy import stacked as stacked_module
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.session import PrivacySession
from fairbench.rundir.row import TrialRow
from fairbench.runner import trial
from fairbench.runner.trial import TrialSpec, run_trial

DELTA = 1e-5
TARGET = 2.0
WIDTH = 24  # not the default, so the configured width is what gets built
OPTIONS = get_dataset("synthetic").options.model_dump()

# (method, hyperparameters besides the model, knob, its module), small enough to train in
# seconds on the synthetic task
METHODS = {
    "dp-sgd": ({"epochs": 4}, None, dp_sgd),
    "sgda": ({"epochs": 8}, 0.05, raco_dp),
    "raco-dp": ({"calibrate": "noise", "epochs": 8, "batch_size": 512}, 0.05, raco_dp),
    "dp-fermi": ({"epochs": 8, "lr": 0.5}, 1.0, dp_fermi),
    "cgoo": ({"iterations": 8}, 0.05, cgoo),
    "pf-ld": ({"epochs": 8}, 0.05, pf_ld),
}


def expected_event(method: str, row: TrialRow) -> dp_event.DpEvent | None:
    """The mechanism the row says ran, rebuilt from its budget and info alone (not from the
    ledger): what an auditor would account by hand."""
    b, info = row.budget, row.info
    q, sigma = b["sampling_rate"], b["noise"].get("gradient")
    if method == "sgda":
        return None
    if method == "dp-sgd":
        return sgd_steps(q, sigma, b["steps"])
    if method == "raco-dp":
        return sgd_steps(q, sigma, b["steps"], info["laplace_scale"])
    if method == "dp-fermi":  # theta's and W's Gaussian sums per step, plus the group counts
        counts = dp_event.GaussianDpEvent(b["noise"]["count"])
        return dp_event.ComposedDpEvent([sgd_steps(q, sigma, b["steps"], None, 2), counts])
    if method == "pf-ld":  # the Lagrangian sum and the dual histogram per step, the counts
        counts = dp_event.LaplaceDpEvent(b["noise"]["count"])
        return dp_event.ComposedDpEvent(
            [sgd_steps(q, sigma, b["steps"], info["laplace_scale"]), counts]
        )
    counts = dp_event.GaussianDpEvent(b["noise"]["count"])  # cgoo
    return dp_event.ComposedDpEvent(
        [dp_event.SelfComposedDpEvent(counts, info["iterations"]), sgd_steps(q, sigma, b["steps"])]
    )


@pytest.fixture(autouse=True)
def _one_thread():
    """Models this small gain nothing from intra-op threads, and on a busy machine two threads
    make opacus's per-sample step several times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def spy(monkeypatch):
    """Keeps what `run_trial` fitted, and counts the Poisson batches training drew (one per
    optimisation step: each is one sampled release), by a session or a stacked program."""
    seen = {"fitted": [], "batches": 0}
    real_get_method = trial.get_method

    def get_method_keeping_fits(name, **hparams):
        method = real_get_method(name, **hparams)
        fit_stack = method.fit_stack

        def fit_and_keep(trials, methods=None):
            seen["fitted"] += fit_stack(trials, methods)
            return seen["fitted"][-len(trials) :]

        method.fit_stack = fit_and_keep
        return method

    monkeypatch.setattr(trial, "get_method", get_method_keeping_fits)
    real_batches = session_module.poisson_batches  # one-trial programs draw here

    def counted(*args, **kwargs):
        next_batch = real_batches(*args, **kwargs)

        def draw():
            seen["batches"] += 1
            return next_batch()

        return draw

    monkeypatch.setattr(session_module, "poisson_batches", counted)
    real_rounds = stacked_module.stacked_poisson_batches  # stacked programs draw rounds

    def counted_rounds(*args, **kwargs):
        next_round = real_rounds(*args, **kwargs)

        def draw():
            index, mask, sizes = next_round()
            seen["batches"] += len(index)
            return index, mask, sizes

        return draw

    monkeypatch.setattr(stacked_module, "stacked_poisson_batches", counted_rounds)
    return seen


def linear_widths(model: nn.Module) -> list[tuple[int, int]]:
    return [(m.in_features, m.out_features) for m in model.modules() if isinstance(m, nn.Linear)]


@pytest.mark.parametrize("method", sorted(METHODS))
def test_mlp_path_trains_and_its_epsilon_is_the_accountants(method, spy):
    extra, knob, _ = METHODS[method]
    private = get_method(method).private
    spec = TrialSpec(
        dataset="synthetic",
        dataset_options=OPTIONS,
        method=method,
        label=method,
        hparams={"model": "mlp", "hidden": WIDTH, **extra},
        constraint="demographic_parity",
        knob=knob,
        epsilon=TARGET if private else None,
        delta=DELTA,
        seed=0,
    )
    row = run_trial(spec)
    task = trial.load_task(spec)

    # an MLP of the configured width, every mixture component too
    (fitted,) = spy["fitted"]
    models = fitted.components or [fitted.model]
    for model in models:
        assert isinstance(model, MLP)
        assert linear_widths(model) == [(task.n_features, WIDTH), (WIDTH, task.n_classes)]
        assert any(isinstance(m, nn.ReLU) for m in model.modules())

    # it trained: clearly better than always predicting the majority class
    majority_error = 1 - np.bincount(task.test.y).max() / len(task.test)
    assert majority_error > 0.35
    assert row.test["error"] < majority_error - 0.1, (row.test["error"], majority_error)

    # every optimisation step drew one Poisson batch, and the budget says so
    assert spy["batches"] == row.budget["steps"] > 0

    # the recorded epsilon is the accountant's, recomputed from the stored ledger, and the
    # stored ledger is the mechanism the budget says ran
    ledger = PrivacyLedger.from_json(row.ledger)
    if not private:
        assert row.epsilon is None and row.epsilon_spent == 0.0 and not ledger.entries
        assert row.budget["noise"] == {}
        return
    recomputed = epsilon(ledger.event, DELTA)
    assert row.epsilon_spent == recomputed
    assert epsilon(expected_event(method, row), DELTA) == pytest.approx(recomputed, rel=1e-9)
    assert 0.9 * TARGET < row.epsilon_spent <= TARGET
    assert row.epsilon_checks["problems"] == []


@pytest.mark.parametrize("method", sorted(METHODS))
def test_the_mlp_width_defaults_to_32(method):
    hp = get_method(method, model="mlp").hparams
    assert hp.hidden == 32
    task = get_dataset("synthetic", n_rows=200).load(seed=0)
    assert linear_widths(init_model(hp, task, PrivacySession(0)))[0][1] == 32
    assert linear_widths(build_model("mlp", 5, 2))[0] == (5, 32)


@pytest.mark.parametrize("method", ["dpse", "dpnose", "fairlearn-eg", "mozannar"])
def test_linear_only_methods_refuse_an_mlp_with_one_clear_error(method):
    with pytest.raises(ConfigError, match=f"{method} is linear-only") as refused:
        get_method(method, model="mlp")
    assert "model: mlp" in str(refused.value)
    assert "Linear only" in sys.modules[method_class(method).__module__].__doc__
