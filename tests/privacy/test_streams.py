"""Random streams: named and independent, no global RNG touched, same seed same result."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fairbench.datasets import get_dataset
from fairbench.methods import FairnessSpec, get_method, method_class, registry
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.session import PrivacySession
from fairbench.runner.trial import TrialSpec, run_trial
from fairbench.streams import numpy_stream, seed_sequence, torch_stream

FAST = {"epochs": 1, "steps": 5, "max_iter": 3, "iterations": 3, "T": 3}


@pytest.fixture(scope="module")
def task():
    return get_dataset("synthetic", n_rows=300).load(0)


def test_streams_are_named_reproducible_and_independent():
    a, b = numpy_stream(7, "split").random(10_000), numpy_stream(7, "split").random(10_000)
    assert np.array_equal(a, b)
    other = numpy_stream(7, "noise/gradient sum").random(10_000)
    assert abs(np.corrcoef(a, other)[0, 1]) < 0.05
    assert not np.array_equal(numpy_stream(8, "split").random(3), a[:3])
    assert seed_sequence(7, "init").entropy == 7
    t1 = torch.rand(5, generator=torch_stream(7, "init"))
    assert torch.equal(t1, torch.rand(5, generator=torch_stream(7, "init")))
    assert not torch.equal(t1, torch.rand(5, generator=torch_stream(7, "sampling")))


def test_session_mechanisms_draw_from_their_own_streams_and_never_replay():
    session = PrivacySession(0, budget=PrivacyBudget(1.0))
    session.submit_plan(PrivacyLedger())
    session.plan = None  # draw outside a plan: this test looks at the noise only
    zeros = torch.zeros(1000, dtype=torch.float64)

    def draw(label: str) -> torch.Tensor:
        return session.noise(label, None, torch.device("cpu")).gaussian(zeros, 1.0, 1.0, 1)

    first, again, other = draw("counts"), draw("counts"), draw("gradient")
    assert not torch.equal(first, again)  # the same mechanism continues its stream
    assert abs(np.corrcoef(first.numpy(), other.numpy())[0, 1]) < 0.1
    fresh = PrivacySession(0, budget=PrivacyBudget(1.0))
    replay = fresh.noise("counts", None, torch.device("cpu")).gaussian(zeros, 1.0, 1.0, 1)
    assert torch.equal(first, replay)  # same seed, same name: same noise
    batch = session.poisson(1000, 0.5)().indices
    assert not torch.equal(
        batch, PrivacySession(1, budget=PrivacyBudget(1.0)).poisson(1000, 0.5)().indices
    )


def fast_method(name: str):
    fields = method_class(name).Hparams.model_fields
    return get_method(name, **{k: v for k, v in FAST.items() if k in fields})


@pytest.mark.parametrize("name", sorted(registry()))
def test_a_fit_leaves_global_rngs_alone_and_repeats_bit_for_bit(task, name):
    torch.manual_seed(1234)
    np.random.seed(99)
    torch_state, numpy_state = torch.random.get_rng_state(), np.random.get_state()[1].copy()
    method = fast_method(name)
    budget = PrivacyBudget(2.0) if method.private else None
    fairness = FairnessSpec("demographic_parity", None if method.knob is None else 0.1)
    if name in ("dpse", "dpnose"):  # bounded group loss is their only constraint
        fairness = FairnessSpec("bounded_group_loss", 1.0)
    runs = [
        method.fit(task, budget, fairness, seed=5).predict_proba(task.test.X, task.test.s)
        for _ in range(2)
    ]
    assert np.array_equal(runs[0], runs[1])
    assert torch.equal(torch.random.get_rng_state(), torch_state)
    assert np.array_equal(np.random.get_state()[1], numpy_state)


def test_secure_noise_trials_keep_the_ledger_and_change_only_the_noise():
    spec = TrialSpec(
        "synthetic",
        {"n_rows": 400},
        "dp-sgd",
        "dp-sgd",
        {"epochs": 1},
        "demographic_parity",
        None,
        2.0,
        1e-5,
        0,
    )
    secure = dataclasses.replace(spec, secure_noise=True)
    assert spec.trial_id != secure.trial_id
    plain, exact = run_trial(spec), run_trial(secure)
    assert plain.ledger == exact.ledger and plain.epsilon_spent == exact.epsilon_spent
    assert exact.info["noise_sampler"].startswith("exact discrete")
    assert plain.info["noise_sampler"] == "float64, seeded"
