"""The vectorised PLD builder is dp-accounting's construction to the last bit: every array,
offset and infinity mass of both adjacencies equal, over noise, sampling rates,
discretisations and both estimates (connect-the-dots pessimistic, privacy-buckets optimistic).
A dp-accounting release that changes its construction fails here, not silently in epsilons."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld.privacy_loss_mechanism import AdjacencyType, GaussianPrivacyLoss

from fairbench.privacy import pld_vectorised


def assert_identical(expected: pld_lib.PrivacyLossDistribution, got) -> None:
    for side in ("_pmf_remove", "_pmf_add"):
        want, have = vars(getattr(expected, side)), vars(getattr(got, side))
        assert want.keys() == have.keys()
        for name, value in want.items():
            if isinstance(value, np.ndarray):
                assert value.dtype == have[name].dtype
                assert np.array_equal(value, have[name]), (side, name)
            else:
                assert value == have[name], (side, name, value, have[name])


CASES = list(itertools.product([1.0, 0.5, 0.0364, 0.001], [0.6, 1.0, 4.0, 25.0], [True, False]))


@pytest.mark.parametrize(("q", "sigma", "pessimistic"), CASES)
def test_gaussian_is_dp_accountings_pld(q: float, sigma: float, pessimistic: bool) -> None:
    expected = pld_lib.from_gaussian_mechanism(
        sigma,
        value_discretization_interval=1e-3,
        sampling_prob=q,
        pessimistic_estimate=pessimistic,
        use_connect_dots=pessimistic,
    )
    assert_identical(expected, pld_vectorised.gaussian(sigma, 1e-3, q, pessimistic))


@pytest.mark.parametrize(("q", "scale", "pessimistic"), CASES)
def test_laplace_is_dp_accountings_pld(q: float, scale: float, pessimistic: bool) -> None:
    expected = pld_lib.from_laplace_mechanism(
        scale / 2,
        value_discretization_interval=1e-3,
        sampling_prob=q,
        pessimistic_estimate=pessimistic,
        use_connect_dots=pessimistic,
    )
    assert_identical(expected, pld_vectorised.laplace(scale / 2, 1e-3, q, pessimistic))


@pytest.mark.parametrize("pessimistic", [True, False])
def test_reporting_discretisation_at_epsilon_8_noise(pessimistic: bool) -> None:
    """The case that made accounting slow: a sampled Gaussian at noise 0.62, interval 1e-4."""
    expected = pld_lib.from_gaussian_mechanism(
        0.6172,
        value_discretization_interval=1e-4,
        sampling_prob=0.0364,
        pessimistic_estimate=pessimistic,
        use_connect_dots=pessimistic,
    )
    got = pld_vectorised.gaussian(0.6172, 1e-4, 0.0364, pessimistic)
    assert_identical(expected, got)
    assert got.get_epsilon_for_delta(1e-5) == expected.get_epsilon_for_delta(1e-5)


@pytest.mark.parametrize("adjacency", [AdjacencyType.ADD, AdjacencyType.REMOVE])
def test_inverse_privacy_loss_matches_the_scalar_one_at_the_edge(adjacency) -> None:
    """Losses at the sampled mechanism's edge (+-log(1 - q), compared with math.isclose) take
    the scalar code's special value; ordinary losses its formula, bit for bit."""
    q = 0.25
    mech = GaussianPrivacyLoss(0.8, sampling_prob=q, adjacency_type=adjacency)
    edge = -math.log(1 - q) if adjacency == AdjacencyType.ADD else math.log(1 - q)
    inside = -1 if adjacency == AdjacencyType.ADD else 1
    losses = np.array([edge, edge * (1 + 1e-12), edge + inside * 1e-3, inside * 0.5, 0.0])
    expected = [mech.inverse_privacy_loss(float(x)) for x in losses]
    assert pld_vectorised.inverse_privacy_loss(mech, losses).tolist() == expected


def test_a_loss_past_the_edge_is_refused_as_dp_accounting_does() -> None:
    mech = GaussianPrivacyLoss(0.8, sampling_prob=0.25, adjacency_type=AdjacencyType.ADD)
    with pytest.raises(ValueError):
        mech.inverse_privacy_loss(1.0)
    with pytest.raises(ValueError, match="larger"):
        pld_vectorised.inverse_privacy_loss(mech, np.array([0.1, 1.0]))
