"""The one-step PLD cache in `pld.build`: a hit is the PLD a fresh build gives, and the key
tells apart every event, discretisation and rounding direction that builds a different PLD."""

import math

import numpy as np
import pytest
from dp_accounting import dp_event as de

from fairbench.privacy import epsilon, pld
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.pld import SubstitutionSampledDpEvent, build, event_key

DELTA = 1e-5
STEPS = 40
ROUNDS = [  # one round of each kind `sgd_steps` writes: Gaussian, Gaussian + Laplace, two on
    # one batch, substitution-sampled
    sgd_steps(0.05, 1.5, 1).event,
    sgd_steps(0.05, 1.5, 1, 10.0).event,
    sgd_steps(0.05, 1.5, 1, gaussians=2).event,
    sgd_steps(0.05, 1.5, 1, substitution=True).event,
]


@pytest.fixture(autouse=True)
def _empty_cache():
    pld.clear_cache()
    yield
    pld.clear_cache()


@pytest.mark.parametrize("round_", ROUNDS, ids=["gauss", "gauss+laplace", "two", "subst"])
def test_a_cache_hit_gives_the_epsilon_of_a_fresh_build(round_):
    interval = 1e-3
    fresh = pld._build_one(round_, interval, True).self_compose(STEPS)
    expected = fresh.get_epsilon_for_delta(DELTA)
    event = de.SelfComposedDpEvent(round_, STEPS)
    first = build(event, interval).get_epsilon_for_delta(DELTA)  # miss: builds and stores
    assert build(round_, interval) is build(round_, interval)  # then hits
    assert build(event, interval).get_epsilon_for_delta(DELTA) == first == expected
    assert epsilon(event, DELTA, _interval=interval) == expected


def test_intervals_and_rounding_directions_never_share_an_entry():
    round_ = ROUNDS[0]
    coarse, fine = build(round_, 1e-3), build(round_, 1e-4)
    optimistic = build(round_, 1e-4, pessimistic=False)
    assert len({id(coarse), id(fine), id(optimistic)}) == 3
    eps = [p.self_compose(STEPS).get_epsilon_for_delta(DELTA) for p in (coarse, fine, optimistic)]
    assert eps[0] > eps[1] > eps[2]  # each its own discretisation: looser when coarser
    with pytest.raises(pld.NoOptimisticBound):  # not served a cached pessimistic PLD
        build(ROUNDS[1], 1e-3, pessimistic=False)


def test_composed_events_key_by_their_parts_in_order():
    g, lap = de.GaussianDpEvent(2.0), de.LaplaceDpEvent(10.0)
    keys = [
        event_key(de.ComposedDpEvent([g, lap])),
        event_key(de.ComposedDpEvent([lap, g])),
        event_key(de.ComposedDpEvent([g, g, lap])),
        event_key(de.ComposedDpEvent([de.ComposedDpEvent([g, lap])])),
        event_key(de.PoissonSampledDpEvent(0.05, de.ComposedDpEvent([g, lap]))),
        event_key(SubstitutionSampledDpEvent(0.05, de.ComposedDpEvent([g, lap]))),
    ]
    assert None not in keys and len(set(keys)) == len(keys)
    rebuilt = de.ComposedDpEvent([de.GaussianDpEvent(2.0), de.LaplaceDpEvent(10.0)])
    assert event_key(rebuilt) == keys[0]  # equal events, distinct objects: one entry


def test_keys_are_exact_for_floats_and_refuse_arrays():
    sigma = 1.5
    assert event_key(de.GaussianDpEvent(sigma)) != event_key(
        de.GaussianDpEvent(math.nextafter(sigma, 2.0))
    )
    assert event_key(de.GaussianDpEvent(1)) != event_key(de.GaussianDpEvent(1.0))
    assert event_key(de.GaussianDpEvent(0.0)) != event_key(de.GaussianDpEvent(-0.0))
    mixture = de.MixtureOfGaussiansDpEvent(1.0, np.zeros(2000), np.full(2000, 1 / 2000))
    assert event_key(mixture) is None  # an array's repr elides values: never cached


def test_the_cache_is_bounded_least_recently_used_out(monkeypatch):
    monkeypatch.setattr(pld, "MAX_CACHED_PLDS", 2)
    a, b, c = (de.PoissonSampledDpEvent(0.05, de.GaussianDpEvent(s)) for s in (1.0, 2.0, 3.0))
    first_a = build(a, 1e-3)
    build(b, 1e-3)
    assert build(a, 1e-3) is first_a  # a is now the most recently used
    build(c, 1e-3)  # evicts b
    assert build(a, 1e-3) is first_a
    assert len(pld._cache) == 2 and event_key(b) not in {k[0] for k in pld._cache}
