"""The privacy plumbing: accountant against independent computations, calibration, ledgers,
clipping and noise."""

import math

import numpy as np
import pytest
import torch
from dp_accounting import dp_event as de
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from fairbench.errors import ConfigError
from fairbench.privacy import (
    PrivacyBudget,
    PrivacyLedger,
    calibrate_noise_multiplier,
    calibrate_steps,
    epsilon,
)
from fairbench.privacy.clipping import clip_and_sum
from fairbench.privacy.events import from_dict, sgd_steps, to_dict
from fairbench.privacy.noise import add_gaussian_noise, add_laplace_noise

DELTA = 1e-5
GRID = [  # (sampling rate, noise multiplier, steps, laplace scale)
    (512 / 31_136, 2.4, 1216, None),
    (0.01, 1.0, 3000, None),
    (0.05, 0.8, 200, None),
    (0.01, 1.0, 2000, 2.0),
    (0.02, 1.5, 500, 5.0),
]


def independent_pld(q, sigma, steps, laplace):
    """Built straight from dp-accounting, without any fairbench code."""
    step = de.PoissonSampledDpEvent(q, de.GaussianDpEvent(sigma))
    if laplace is not None:
        step = de.ComposedDpEvent([step, de.PoissonSampledDpEvent(q, de.LaplaceDpEvent(laplace))])
    accountant = pld_privacy_accountant.PLDAccountant()
    accountant.compose(step, steps)
    return accountant.get_epsilon(DELTA)


@pytest.mark.parametrize(("q", "sigma", "steps", "laplace"), GRID)
def test_epsilon_matches_independent_pld_and_sits_below_rdp(q, sigma, steps, laplace):
    ours = epsilon(sgd_steps(q, sigma, steps, laplace), DELTA)
    assert ours == pytest.approx(independent_pld(q, sigma, steps, laplace), rel=1e-3)
    if laplace is None:  # RDP is an independent, looser upper bound
        rdp = rdp_privacy_accountant.RdpAccountant()
        rdp.compose(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(sigma)), steps)
        assert ours <= rdp.get_epsilon(DELTA) * (1 + 1e-6)
        assert ours >= 0.7 * rdp.get_epsilon(DELTA)


def test_pure_laplace_composition_respects_its_closed_form():
    # T steps of Laplace(b) at sensitivity 1 are (T/b, 0)-DP; PLD must not exceed that bound
    # and, at a tiny delta, must come close to it for few steps.
    eps = epsilon(de.SelfComposedDpEvent(de.LaplaceDpEvent(2.0), 3), 1e-12)
    assert eps <= 3 / 2.0 + 1e-3
    assert eps > 1.2


@pytest.mark.parametrize(
    ("q", "steps", "target", "laplace"),
    [(0.0164, 1216, 1.0, None), (0.01, 2000, 3.0, 2.0), (0.1, 50, 0.5, None)],
)
def test_calibrated_noise_meets_the_target_tightly(q, steps, target, laplace):
    sigma = calibrate_noise_multiplier(q, steps, target, DELTA, laplace)
    assert epsilon(sgd_steps(q, sigma, steps, laplace), DELTA) <= target
    assert epsilon(sgd_steps(q, sigma * 0.99, steps, laplace), DELTA) > target


def test_calibrated_steps_meet_the_target_tightly():
    q, sigma, target = 0.0164, 1.2, 1.0
    steps = calibrate_steps(q, sigma, target, DELTA)
    assert epsilon(sgd_steps(q, sigma, steps), DELTA) <= target
    assert epsilon(sgd_steps(q, sigma, math.ceil(steps * 1.03) + 1), DELTA) > target


def test_infeasible_calibrations_are_config_errors():
    with pytest.raises(ConfigError, match="even one step exceeds"):
        calibrate_steps(1.0, 0.5, 0.01, DELTA)
    with pytest.raises(ConfigError, match="raise the Laplace scale"):
        calibrate_noise_multiplier(0.5, 1000, 0.5, DELTA, laplace_scale=0.5)


@pytest.mark.parametrize(
    ("eps", "delta"),
    [(0, 1e-5), (-1, 1e-5), (math.inf, 1e-5), (math.nan, 1e-5), (1, 0), (1, 1), (1, 1.5)],
)
def test_invalid_budgets_are_refused(eps, delta):
    with pytest.raises(ConfigError):
        PrivacyBudget(eps, delta)


def test_ledger_round_trips_through_json_with_the_same_epsilon():
    ledger = PrivacyLedger()
    assert ledger.epsilon(DELTA) == 0.0
    ledger.record("histogram", sgd_steps(0.01, 1.0, 100, 2.0))
    ledger.record("counts", de.LaplaceDpEvent(10.0))
    again = PrivacyLedger.from_json(ledger.to_json())
    assert [e.label for e in again.entries] == ["histogram", "counts"]
    assert again.epsilon(DELTA) == pytest.approx(ledger.epsilon(DELTA), rel=1e-12)
    event = sgd_steps(0.01, 1.0, 100, 2.0)
    assert from_dict(to_dict(event)) == event


def test_clip_and_sum_bounds_every_contribution():
    torch.manual_seed(0)
    grads = [torch.randn(64, 3, 5) * torch.logspace(-2, 2, 64)[:, None, None], torch.randn(64, 3)]
    total = clip_and_sum(grads, max_norm=1.5)
    flat = torch.cat([g.reshape(64, -1) for g in grads], dim=1)
    factors = torch.clamp(1.5 / flat.norm(dim=1), max=1.0)
    assert torch.all((flat * factors[:, None]).norm(dim=1) <= 1.5 + 1e-5)
    expected = (flat * factors[:, None]).sum(dim=0)
    assert torch.allclose(torch.cat([t.reshape(-1) for t in total]), expected, atol=1e-5)


def test_gaussian_noise_has_the_requested_scale():
    gen = torch.Generator().manual_seed(0)
    (noisy,) = add_gaussian_noise([torch.zeros(200_000)], std=2.5, generator=gen)
    assert noisy.std().item() == pytest.approx(2.5, rel=0.01)
    assert abs(noisy.mean().item()) < 0.02
    assert np.isfinite(noisy.numpy()).all()


def test_laplace_noise_has_the_requested_scale():
    gen = torch.Generator().manual_seed(0)
    noisy = add_laplace_noise(torch.zeros(400_000), scale=3.0, generator=gen)
    assert noisy.abs().mean().item() == pytest.approx(3.0, rel=0.01)  # E|X| = b
    assert noisy.var().item() == pytest.approx(2 * 9.0, rel=0.02)  # Var = 2 b^2
    assert abs(noisy.median().item()) < 0.03
