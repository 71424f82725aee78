"""k-ary randomized response: the session's mechanism flips at the closed-form rates, draws
from the trial's seeded stream, stays inside the local-dp-attribute notion, and the suite's
accountant composes its releases as pure DP (k releases: k times one) where dp-accounting's
own PLD accountant drops the count."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld.privacy_loss_distribution import NeighborRel

from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.accountant import calibrate_randomized_response, epsilon
from fairbench.privacy.events import (
    keep_probability,
    randomized_response,
    randomized_response_epsilon,
)
from fairbench.privacy.session import (
    PrivacyContractError,
    PrivacyNotion,
    PrivacySession,
    check_plan,
)

LABEL = "attribute"


def session(event, seed=0, notion=PrivacyNotion.LOCAL_ATTRIBUTE, secure=False):
    s = PrivacySession(seed, budget=PrivacyBudget(1.0, 1e-5), secure_noise=secure)
    s.submit_plan(PrivacyLedger.of((LABEL, event)), notion)
    return s


@pytest.mark.parametrize(("eps", "k"), [(0.5, 2), (1.0, 3), (3.0, 4)])
def test_the_channel_is_the_mechanisms_definition(eps, k):
    """dp-accounting's form (uniform over all k with probability p) keeps the value with
    e^eps / (e^eps + k - 1); each other value gets 1 / (e^eps + k - 1): ratio e^eps, pure eps."""
    event = randomized_response(eps, k)
    keep, other = keep_probability(event), event.noise_parameter / k
    assert keep == pytest.approx(math.exp(eps) / (math.exp(eps) + k - 1), rel=1e-12)
    assert keep + (k - 1) * other == pytest.approx(1.0, rel=1e-12)
    assert math.log(keep / other) == pytest.approx(eps, rel=1e-12)
    assert randomized_response_epsilon(event) == pytest.approx(eps, rel=1e-12)


def test_flip_rates_match_the_closed_form():
    """400,000 records per true value, k = 3, eps = 1: each rate within 5 standard errors
    (at most 0.0039) of e/(e+2) = 0.5761 kept and 1/(e+2) = 0.2119 for each other value."""
    k, n = 3, 400_000
    event = randomized_response(1.0, k)
    values = np.repeat(np.arange(k), n)
    out = session(event, seed=7).randomized_response(LABEL, event)(values)
    keep, other = keep_probability(event), event.noise_parameter / k
    for a in range(k):
        rates = np.bincount(out[values == a], minlength=k) / n
        for z in range(k):
            p = keep if z == a else other
            assert abs(rates[z] - p) < 5 * math.sqrt(p * (1 - p) / n)


def test_secure_sampler_flips_at_the_closed_form_rate():
    pytest.importorskip("opendp")
    n, event = 4_000, randomized_response(0.5, 2)  # OpenDP: ~0.3 ms a value
    values = np.zeros(n, dtype=np.int64)
    out = session(event, secure=True).randomized_response(LABEL, event)(values)
    keep = keep_probability(event)
    assert abs(np.mean(out == 0) - keep) < 5 * math.sqrt(keep * (1 - keep) / n)


def test_the_response_is_seeded_per_trial_and_recorded_once():
    event = randomized_response(1.0, 2)
    values = np.arange(1000) % 2
    a, b, c = (session(event, seed=s) for s in (0, 0, 1))
    first = a.randomized_response(LABEL, event)(values)
    assert np.array_equal(first, b.randomized_response(LABEL, event)(values))
    assert not np.array_equal(first, c.randomized_response(LABEL, event)(values))
    check_plan("m", a.plan, a.ledger())
    assert a.ledger().entries[0].event == event and a.notion is PrivacyNotion.LOCAL_ATTRIBUTE
    with pytest.raises(PrivacyContractError, match="beyond the plan"):
        a.randomized_response(LABEL, event)(values)  # a second release of the same records


def test_notions_do_not_mix_mechanisms():
    event = randomized_response(1.0, 2)
    with pytest.raises(PrivacyContractError, match="local-dp-attribute notion's mechanism"):
        session(event, notion=PrivacyNotion.FULL).randomized_response(LABEL, event)(np.zeros(3))
    local = session(dp_event.GaussianDpEvent(1.0))
    with pytest.raises(PrivacyContractError, match="central release"):
        local.gaussian_counts(LABEL, 1.0)(np.zeros(3, dtype=np.int64), 2)


@pytest.mark.parametrize(("eps", "k"), [(0.5, 2), (1.0, 3), (2.0, 2)])
@pytest.mark.parametrize("count", [1, 3, 10])
def test_composing_releases_gives_count_times_the_pure_epsilon(eps, k, count):
    """Pure DP composes additively, and the PLD of `count` releases attains it as delta -> 0
    (every release at its largest loss at once, probability keep^count). At delta 1e-10 (not
    0: dp-accounting moves tail mass below ~1e-15 to +infinity, so delta 0 reads infinite
    past a few compositions) it is within 1e-6 of count * eps; the pessimistic PLD rounds each
    loss up by at most one interval (1e-4)."""
    one = randomized_response(eps, k)
    composed = epsilon(dp_event.SelfComposedDpEvent(one, count), 1e-10)
    assert count * eps - 1e-6 <= composed <= count * (eps + 1e-4)
    assert epsilon(dp_event.ComposedDpEvent([one] * count), 1e-10) == pytest.approx(composed)


def test_dp_accountings_own_accountant_drops_the_count():
    """The dp-accounting 0.6.0 bug the suite's `pld.build` avoids: its PLDAccountant composes
    one randomized response whatever the self-composition's count."""
    one = randomized_response(1.0, 2)
    theirs = pld_privacy_accountant.PLDAccountant(NeighborRel.REPLACE_ONE)
    theirs.compose(dp_event.SelfComposedDpEvent(one, 3))
    assert theirs.get_epsilon(1e-10) == pytest.approx(1.0, abs=1e-3)  # should be 3
    assert epsilon(dp_event.SelfComposedDpEvent(one, 3), 1e-10) == pytest.approx(3.0, abs=1e-3)


@pytest.mark.parametrize(("target", "k"), [(0.01, 3), (0.1, 2), (1.0, 2), (10.0, 2)])
def test_calibration_meets_the_target_within_one_interval(target, k):
    pure = calibrate_randomized_response(target, 1e-5, k)
    assert target - 2e-4 <= pure <= target
    assert epsilon(randomized_response(pure, k), 1e-5) <= target
