"""The canary audit: sound Clopper-Pearson bounds, below the claim for a correct method, above
it when the noise is silently switched off (through the release observer, a test-only hook)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from dp_accounting import dp_event

from fairbench.audit.canary import (
    CANARY_VALUE,
    audit,
    audit_method,
    audit_task,
    bound_from_scores,
    epsilon_lower_bound,
    gaussian_noise_disabled,
)
from fairbench.privacy import epsilon


def test_lower_bound_numbers():
    # perfect separation of 100 held-out fits: both Clopper-Pearson ends at (alpha/2)^(1/100)
    edge = 0.025 ** (1 / 100)
    expected = math.log((edge - 1e-5) / (1 - edge))
    assert epsilon_lower_bound(100, 0, 100, 1e-5, 0.95) == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx(3.28, abs=0.01)
    assert epsilon_lower_bound(50, 50, 100, 1e-5, 0.95) == 0.0
    assert epsilon_lower_bound(0, 0, 100, 1e-5, 0.95) == 0.0
    more = [epsilon_lower_bound(tp, 5, 100, 1e-5, 0.95) for tp in (40, 60, 80, 100)]
    assert more == sorted(more) and more[0] > 0


def test_bound_is_sound_and_has_power_on_a_known_gaussian_mechanism():
    """Scores from N(0, 1) vs N(2, 1) (one Gaussian release, noise multiplier 1/2): the bound
    stays below the mechanism's true epsilon in (nearly) every repetition and is far from 0."""
    true_eps = epsilon(dp_event.GaussianDpEvent(0.5), 1e-5)
    rng = np.random.default_rng(0)
    bounds = [
        bound_from_scores(2 + rng.normal(size=400), rng.normal(size=400), 1e-5, 0.95)[0]
        for _ in range(40)
    ]
    assert sum(b > true_eps for b in bounds) <= 2  # 95% confidence: ~5% may exceed at most
    assert np.median(bounds) > 1.0 and max(bounds) < true_eps + 0.5


def test_audit_task_isolates_the_canary():
    out, inside = audit_task(n_rows=200)
    assert len(inside.train) == len(out.train) + 1
    assert np.all(out.train.X[:, -1] == 0) and np.all(out.test.X[:, -1] == 0)
    canary = inside.train.X[-1]
    assert canary[-1] == CANARY_VALUE and np.all(canary[:-1] == 0)
    assert inside.train.y[-1] == 1 and inside.train.s[-1] == inside.n_groups - 1


def test_dp_sgd_passes_and_disabled_noise_is_caught_with_the_same_budget():
    method = audit_method("dp-sgd")
    honest = audit(method, 1.0, trials=60, n_rows=200)
    assert honest.consistent and honest.epsilon_lower_bound < 0.5
    with gaussian_noise_disabled():
        broken = audit(method, 1.0, trials=60, n_rows=200)
    assert not broken.consistent and broken.epsilon_lower_bound > 1.5


def test_audit_cli(cli):
    code, out, _ = cli("audit", "--method", "dp-sgd", "--epsilon", "2", "--trials", "6",
                       "--set", "epochs=2", "--json")  # fmt: skip
    result = json.loads(out)["audit"]
    assert code == 0 and result["consistent"] and result["trials"] == 6
    assert result["claimed_epsilon"] == 2.0 and result["held_out"] == 3
    # six fits per world cannot catch missing noise at epsilon 1: the power check says so
    code, out, _ = cli("audit", "--method", "dp-sgd", "--epsilon", "1", "--trials", "6",
                       "--set", "epochs=2", "--power-check")  # fmt: skip
    assert code == 1 and "noise off" in out and "NOT caught: raise --trials" in out
    code, _, err = cli("audit", "--method", "erm", "--epsilon", "1")
    assert code == 2 and "not private" in err
    code, _, err = cli("audit", "--method", "raco-dp", "--epsilon", "1")
    assert code == 2 and "--knob" in err
    code, _, err = cli("audit", "--method", "raco-dp", "--epsilon", "1", "--knob", "-0.1")
    assert code == 2 and "knob gamma = -0.1 is outside its valid range [0, inf)" in err
    code, _, err = cli("audit", "--method", "dp-sgd", "--epsilon", "-1")
    assert code == 2 and "epsilon must be" in err
