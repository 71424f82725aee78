"""The samplers: float64 noise whose support and tails are the distribution's, exact discrete
noise on a grid (secure_noise), each with fixed seeds and exact reference distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import special, stats

from fairbench.errors import ConfigError
from fairbench.privacy import noise
from fairbench.privacy.noise import (
    GAUSSIAN_SUPPORT,
    GRID_BITS,
    LAPLACE_SUPPORT,
    MAX_SECURE_RECORDS,
    SMALLEST_UNIFORM,
    TAIL_MASS,
    TAIL_START,
    FloatNoise,
    SecureNoise,
    fine_uniform,
    gaussian_tail,
    standard_gaussian,
    standard_laplace,
)

N = 200_000


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_gaussian_moments_and_distribution():
    z = standard_gaussian((N,), generator()).numpy()
    assert z.dtype == np.float64
    assert abs(z.mean()) < 4 / math.sqrt(N)
    assert z.var() == pytest.approx(1.0, abs=0.01)
    assert stats.kurtosis(z, fisher=False) == pytest.approx(3.0, abs=0.05)
    assert stats.kstest(z, "norm").pvalue > 0.01
    # 4 sigma: 2 Q(4) N = 12.7 expected beyond it
    beyond = int((np.abs(z) > 4).sum())
    assert stats.poisson(2 * stats.norm.sf(4) * N).cdf(beyond) > 0.001


def test_laplace_moments_and_distribution():
    z = standard_laplace((N,), generator()).numpy()
    assert abs(np.median(z)) < 0.02
    assert np.abs(z).mean() == pytest.approx(1.0, rel=0.01)  # E|X| = b
    assert z.var() == pytest.approx(2.0, rel=0.03)
    assert stats.kstest(z, "laplace").pvalue > 0.01


def test_the_tail_branch_is_selected_with_the_normal_tail_mass():
    assert pytest.approx(2 * stats.norm.sf(5), rel=1e-9) == TAIL_MASS
    assert (TAIL_MASS * 2.0**53).is_integer()  # one 53-bit uniform selects it exactly
    assert pytest.approx(-special.ndtri(TAIL_MASS / 2), rel=1e-15) == TAIL_START
    z = np.abs(standard_gaussian((4_000_000,), generator(3)).numpy())
    beyond = int((z > TAIL_START).sum())  # 2.3 expected
    assert stats.poisson(TAIL_MASS * len(z)).cdf(beyond) > 0.001
    assert stats.poisson(TAIL_MASS * len(z)).sf(beyond - 1) > 0.001


@pytest.mark.parametrize("t", [6.0, 8.0])
def test_gaussian_tail_beyond_t_sigma_is_the_normal_tail(t):
    """Tail draws beyond t sigma: their share is Q(t) / Q(5) and they are distributed as the
    normal conditioned on |Z| > t, so the sampler's mass beyond t is the normal's. A 53-bit
    uniform cannot do this at 8 sigma: 2 Q(8) is only 11 of its steps."""
    z = np.abs(gaussian_tail(400_000, generator(1)).numpy())
    assert z.min() > TAIL_START
    share = stats.norm.sf(t) / stats.norm.sf(TAIL_START)
    beyond = z[z > t]
    assert stats.binom(len(z), share).cdf(len(beyond)) > 0.001
    assert stats.binom(len(z), share).sf(len(beyond) - 1) > 0.001
    assert stats.kstest(z, stats.truncnorm(TAIL_START, np.inf).cdf).pvalue > 0.01
    if t == 6.0:  # enough draws beyond 6 for a KS test of their shape
        assert stats.kstest(beyond, stats.truncnorm(t, np.inf).cdf).pvalue > 0.01
    else:
        steps = math.floor(2 * stats.norm.sf(t) * 2.0**53)  # a 53-bit uniform's points there
        coarse = np.random.default_rng(1).integers(1, steps + 1, 20_000) * 2.0**-53
        conditional = stats.truncnorm(t, np.inf).cdf
        assert steps == 11 and stats.kstest(-special.ndtri(coarse / 2), conditional).pvalue < 1e-6


def test_deep_tail_shape_at_8_sigma(monkeypatch):
    """The tail sampler restricted to tail probabilities beneath 2 Q(8) gives the normal
    conditioned on |Z| > 8: the fine uniform resolves it."""
    real = noise._fine
    scale = stats.norm.sf(8) / stats.norm.sf(TAIL_START)
    monkeypatch.setattr(noise, "_fine", lambda words: real(words) * scale)
    z = np.abs(gaussian_tail(20_000, generator(4)).numpy())
    assert z.min() > 8
    assert stats.kstest(z, stats.truncnorm(8.0, np.inf).cdf).pvalue > 0.01


def test_supports_reach_past_15_sigma_and_110_scales(monkeypatch):
    """All words zero: the smallest uniform, 2^-160, maps to the largest |z| the samplers give;
    the mass they leave out (about 4e-55 per coordinate) is below the float64 resolution of
    delta."""
    monkeypatch.setattr(torch, "rand", lambda shape, **kw: torch.zeros(shape, dtype=kw["dtype"]))
    u = fine_uniform((1,), generator())
    assert u.item() == SMALLEST_UNIFORM == 2.0**-160
    support = -special.ndtri(TAIL_MASS / 2 * SMALLEST_UNIFORM)
    assert support == pytest.approx(GAUSSIAN_SUPPORT, rel=1e-8) and support > 15.6
    assert abs(gaussian_tail(1, generator()).item()) == pytest.approx(support, rel=1e-9)
    assert math.isclose(LAPLACE_SUPPORT, 160 * math.log(2))


@pytest.mark.parametrize("t", [20.0, 60.0])
def test_laplace_tail_beyond_t_scales_is_exponential_with_no_atom(monkeypatch, t):
    real = noise._fine
    monkeypatch.setattr(noise, "_fine", lambda words: real(words) * math.exp(-t))
    z = np.abs(standard_laplace((20_000,), generator(2)).numpy())
    assert stats.kstest(z - t, "expon").pvalue > 0.01
    assert len(np.unique(z)) == len(z)  # no atom: the old inverse-CDF clamp put mass at a point


def test_float_noise_has_the_requested_scales_and_adds_in_float64():
    values = torch.full((N,), 1e8, dtype=torch.float64)
    noisy = FloatNoise(generator()).gaussian(values, 2.5, 2.0, records=10) - 1e8
    assert noisy.std().item() == pytest.approx(5.0, rel=0.01)
    lap = FloatNoise(generator()).laplace(torch.zeros(N, dtype=torch.float64), 3.0, 1.0, 10)
    assert lap.var().item() == pytest.approx(2 * 9.0, rel=0.03)


def test_secure_gaussian_is_on_the_grid_with_the_inflated_scale():
    sensitivity, multiplier, d = 1.5, 2.0, 50_000
    grid = 2.0 ** (math.floor(math.log2(sensitivity)) - GRID_BITS)
    exact = torch.linspace(-3, 3, d, dtype=torch.float64)
    noisy = SecureNoise().gaussian(exact, multiplier, sensitivity, records=100)
    units = noisy / grid
    assert torch.equal(units, units.round())  # nothing below the grid: no low-order bits
    bound = sensitivity / grid + 1 + math.sqrt(d)  # the grid statistic's l2 sensitivity
    residual = (noisy - torch.round(exact / grid) * grid).numpy()
    assert residual.std() == pytest.approx(multiplier * bound * grid, rel=0.02)
    assert bound * grid / sensitivity - 1 == pytest.approx((1 + math.sqrt(d)) * grid / 1.5)
    assert stats.kstest(residual / (multiplier * bound * grid), "norm").pvalue > 0.001


def test_secure_laplace_is_on_the_grid_with_the_l1_inflated_scale():
    sensitivity, scale, d = 1.0, 2.0, 20_000
    grid = 2.0**-GRID_BITS
    noisy = SecureNoise().laplace(torch.zeros(d, dtype=torch.float64), scale, sensitivity, 10)
    b = scale * (sensitivity / grid + 1 + d) * grid
    assert torch.equal(noisy / grid, (noisy / grid).round())
    assert np.abs(noisy.numpy()).mean() == pytest.approx(b, rel=0.03)


def test_secure_noise_refuses_sums_too_long_for_its_error_bound():
    with pytest.raises(ConfigError, match="secure_noise"):
        SecureNoise().gaussian(
            torch.zeros(3, dtype=torch.float64), 1.0, 1.0, MAX_SECURE_RECORDS + 1
        )
