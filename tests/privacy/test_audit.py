"""The canary audit: a sound one-run bound, canaries that each method's releases show alone,
correct DP-SGD within its claim, and both broken copies of it flagged."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from dp_accounting import dp_event

from fairbench.audit.bound import bound_from_scores, epsilon_lower_bound, p_value
from fairbench.audit.canary import (
    CANARY_VALUE,
    audit,
    audit_method,
    canary_task,
    with_canaries,
)
from fairbench.audit.whitebox import (
    BROKEN,
    WATCHED,
    AuditSession,
    Observation,
    Watch,
    canary_scores,
)
from fairbench.cli.checks import Broken
from fairbench.methods.trial import FairnessSpec
from fairbench.privacy import PrivacyBudget, epsilon
from fairbench.privacy.contributions import clipped_sum

SHARE = CANARY_VALUE / math.sqrt(CANARY_VALUE**2 + 1)
KNOBS = {"dp-sgd": None, "raco-dp": 0.05, "dp-fermi": 1.0, "cgoo": 0.05}


def test_lower_bound_numbers():
    # delta = 0: r right guesses of r reject epsilon while p^r < 0.05, p = e^eps / (1 + e^eps)
    p = 0.05 ** (1 / 100)
    assert epsilon_lower_bound(500, 100, 100, 0.0, 0.95) == pytest.approx(
        math.log(p / (1 - p)), abs=2e-4
    )
    assert epsilon_lower_bound(500, 100, 100, 0.0, 0.95) == pytest.approx(3.49, abs=0.01)
    assert epsilon_lower_bound(500, 100, 100, 1e-5, 0.95) == pytest.approx(3.48, abs=0.01)
    assert p_value(500, 100, 50, 0.0, 1e-5) > 0.5  # a coin's accuracy rejects nothing
    assert epsilon_lower_bound(500, 100, 55, 1e-5, 0.95) == 0.0
    more = [epsilon_lower_bound(500, 100, v, 1e-5, 0.95) for v in (70, 80, 90, 100)]
    assert more == sorted(more) and more[0] > 0


def test_bound_is_sound_and_has_power_on_a_known_gaussian_mechanism():
    """2000 canaries, each released as N(2 b, 1) (b: in or out, a Gaussian of noise
    multiplier 1/2 per canary): the bound stays below the true epsilon in every one of 40
    repetitions (95% confidence: about 2 may exceed) and is far from 0."""
    true_eps = epsilon(dp_event.GaussianDpEvent(0.5), 1e-5)
    rng = np.random.default_rng(0)
    tuning = np.arange(2000) < 1000
    bounds = []
    for _ in range(40):
        member = rng.random(2000) < 0.5
        bounds.append(
            bound_from_scores(2 * member + rng.normal(size=2000), member, tuning, 1e-5, 0.95)[0]
        )
    assert sum(b > true_eps for b in bounds) <= 2
    assert 2.3 < np.median(bounds) < true_eps - 5  # the one-run bound is far from tight


def test_scores_are_the_likelihood_ratio_at_the_noise_the_releases_show():
    rng = np.random.default_rng(1)
    noise = rng.normal(size=(300, 50)) / 2  # 300 releases of 50 canaries, claimed std 1/2
    spikes = np.zeros_like(noise)
    spikes[[7, 100, 200], 0] = 1.0  # canary 0 sampled three times, clipped contribution 1
    q = 0.01

    def scores(z: np.ndarray) -> np.ndarray:
        return canary_scores([Observation(torch.as_tensor(row), 0.5, 1.0, q) for row in z])

    z = noise + spikes
    s = np.median(np.abs(z)) / 0.6744897501960817
    expected = np.log(1 - q + q * np.exp(-1 / (2 * s**2)) * np.cosh(z[:, 0] / s**2)).sum()
    assert s == pytest.approx(0.5, abs=0.02)
    assert scores(z)[0] == pytest.approx(expected, rel=1e-9)
    assert scores(z)[0] < np.max(scores(z)[1:])  # 3 spikes of 2 standard deviations hide
    # a third of the noise is read off the releases, not taken from the claim: the same
    # spikes (6 actual standard deviations) then stand out
    third = scores(noise / 3 + spikes)
    assert third[0] > 20 and np.max(third[1:]) < 1


@pytest.mark.parametrize("method", list(WATCHED))
def test_each_canary_shows_alone_in_its_column_of_the_watched_releases(method):
    """The exact (noise-free) watched releases: non-member canaries' columns are exactly 0
    (no other record adds anything there) and a member's is 0 or its clipped contribution."""
    task, m = canary_task(100, 20), 20
    overrides = {"iterations": 2} if method == "cgoo" else {"epochs": 0.5}
    watch = Watch(WATCHED[method], slice(task.n_features - m, task.n_features), SHARE)
    member = np.arange(m) % 2 == 0
    exact = []

    class Exact(AuditSession):
        def gaussian_sum(self, label, clip, noise_multiplier, group=None):
            inner = super().gaussian_sum(label, clip, noise_multiplier, group)

            def release(contributions, batch=None):
                if label in watch.labels:
                    cols = clipped_sum(contributions, clip)[0][:, watch.columns].double()
                    exact.append(((cols[0] - cols[1]) / math.sqrt(2) / (clip * SHARE)).numpy())
                return inner(contributions, batch)

            return release

    privacy = PrivacyBudget(1.0, 1e-5)
    audit_method(method, overrides).fit(
        with_canaries(task, member),
        privacy,
        FairnessSpec("demographic_parity", KNOBS[method]),
        3,
        session=Exact(3, privacy, watch),
    )
    exact = np.array(exact)
    assert len(exact) >= 36 and np.all(exact[:, ~member] == 0)
    shown = np.abs(exact[:, member])
    assert np.count_nonzero(shown) >= 3
    assert np.allclose(shown[shown > 0], 1.0, atol=1e-5)  # the canary, clipped, alone


def test_dp_sgd_passes_and_both_broken_copies_are_flagged():
    method = audit_method("dp-sgd")
    results = {
        broken: audit(method, 1.0, trials=1, canaries=1000, n_rows=100, broken=broken)
        for broken in (None, *BROKEN)
    }
    assert not results[None].flagged and results[None].epsilon_lower_bound < 0.5
    assert results[None].releases > 250  # every step of the run was watched
    for broken in BROKEN:
        assert results[broken].flagged and results[broken].epsilon_lower_bound > 2.0
        assert results[broken].variant == f"broken: {broken}"


def test_audit_cli(cli):
    assert {b.value for b in Broken} == set(BROKEN)
    code, out, _ = cli(
        "audit",
        "--method",
        "dp-sgd",
        "--epsilon",
        "2",
        "--trials",
        "1",
        "--canaries",
        "40",
        "--set",
        "epochs=0.5",
        "--json",
    )
    record = json.loads(out)["audit"]
    assert code == 0 and not record["flagged"] and record["trials"] == 1
    assert record["method"] == "dp-sgd" and record["claimed_epsilon"] == 2.0
    assert record["name"] == "dp-sgd" and "epsilon_lower_bound" in record
    # 40 canaries cannot show a third of the noise at epsilon 1: the broken run says so
    code, out, _ = cli(
        "audit",
        "--method",
        "dp-sgd",
        "--epsilon",
        "1",
        "--trials",
        "1",
        "--canaries",
        "40",
        "--set",
        "epochs=0.5",
        "--broken",
        "one-third-noise",
    )
    assert code == 1 and "broken: one-third-noise" in out and "NOT flagged" in out
    code, _, err = cli("audit", "--method", "erm", "--epsilon", "1")
    assert code == 2 and "not private" in err
    code, _, err = cli("audit", "--method", "dpse", "--epsilon", "1")
    assert code == 2 and "no locator" in err
    code, _, err = cli("audit", "--method", "dp-sgd", "--epsilon", "1", "--set", "model=mlp")
    assert code == 2 and "model must be logistic" in err
    code, _, err = cli("audit", "--method", "raco-dp", "--epsilon", "1")
    assert code == 2 and "--knob" in err
    code, _, err = cli("audit", "--method", "raco-dp", "--epsilon", "1", "--knob", "-0.1")
    assert code == 2 and "knob gamma = -0.1 is outside its valid range [0, inf)" in err
    code, _, err = cli("audit", "--method", "dp-sgd", "--epsilon", "-1")
    assert code == 2 and "epsilon must be" in err
