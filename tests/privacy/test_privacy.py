"""The privacy plumbing: accountant against independent computations, calibration, ledgers,
clipping and noise."""

import math

import numpy as np
import pytest
import torch
from dp_accounting import dp_event as de
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from scipy.optimize import brentq

from fairbench.errors import CalibrationError, ConfigError
from fairbench.privacy import (
    PrivacyBudget,
    PrivacyLedger,
    calibrate_noise_multiplier,
    calibrate_steps,
    epsilon,
)
from fairbench.privacy.accountant import (
    MAX_STEPS,
    PLAIN,
    REPORT_DISCRETISATION,
    StepShape,
    _rdp_start,
    _sgd_epsilon,
    _solve_monotone,
)
from fairbench.privacy.contributions import Rows, StackedScattered, clipped_sum
from fairbench.privacy.crosscheck import rdp_epsilon
from fairbench.privacy.events import from_dict, sgd_steps, to_dict
from fairbench.privacy.pld import (
    SubstitutionSampledDpEvent,
    _gauss_laplace_curves,
    build,
    gaussian_delta,
)

DELTA = 1e-5
GRID = [  # (sampling rate, noise multiplier, steps, laplace scale)
    (512 / 31_136, 2.4, 1216, None),
    (0.01, 1.0, 3000, None),
    (0.05, 0.8, 200, None),
    (0.01, 1.0, 2000, 2.0),
    (0.02, 1.5, 500, 5.0),
]


def independent_pld(q, sigma, steps):
    """Built straight from dp-accounting, without any fairbench code."""
    accountant = pld_privacy_accountant.PLDAccountant()
    accountant.compose(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(sigma)), steps)
    return accountant.get_epsilon(DELTA)


@pytest.mark.parametrize(("q", "sigma", "steps"), [g[:3] for g in GRID if g[3] is None])
def test_epsilon_matches_independent_pld_and_sits_below_rdp(q, sigma, steps):
    ours = epsilon(sgd_steps(q, sigma, steps), DELTA)
    assert ours == pytest.approx(independent_pld(q, sigma, steps), rel=1e-3)
    rdp = rdp_privacy_accountant.RdpAccountant()  # an independent, looser upper bound
    rdp.compose(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(sigma)), steps)
    assert ours <= rdp.get_epsilon(DELTA) * (1 + 1e-6)
    assert ours >= 0.7 * rdp.get_epsilon(DELTA)


def test_gaussians_on_one_batch_are_one_gaussian_of_combined_noise():
    q, sigma, steps = 0.04, 1.5, 300
    ours = epsilon(sgd_steps(q, sigma, steps, gaussians=2), DELTA)
    assert ours == pytest.approx(independent_pld(q, sigma / math.sqrt(2), steps), rel=1e-3)


def test_a_count_vector_on_the_batch_composes_with_the_sums():
    """DPSGD-F's shape: a Gaussian count (l2 sensitivity 1) of another noise multiplier shares
    each batch with the sum; calibration solves the sum's noise with the count's fixed."""
    q, sigma, steps = 0.04, 1.5, 300
    event = sgd_steps(q, sigma, steps, count_noise=10.0)
    inner = de.ComposedDpEvent([de.GaussianDpEvent(sigma), de.GaussianDpEvent(10.0)])
    assert event == de.SelfComposedDpEvent(de.PoissonSampledDpEvent(q, inner), steps)
    merged = (sigma**-2 + 10.0**-2) ** -0.5
    assert epsilon(event, DELTA) == pytest.approx(independent_pld(q, merged, steps), rel=1e-3)
    shape = StepShape(count_noise=10.0)
    noise = calibrate_noise_multiplier(q, steps, 1.0, DELTA, shape=shape)
    assert noise > calibrate_noise_multiplier(q, steps, 1.0, DELTA)
    assert epsilon(sgd_steps(q, noise, steps, count_noise=10.0), DELTA) <= 1.0
    assert _rdp_start(q, sigma, None, DELTA, 1.0, shape) <= _rdp_start(
        q, sigma, None, DELTA, 1.0, PLAIN
    )
    with pytest.raises(CalibrationError, match="count releases alone"):
        calibrate_noise_multiplier(q, steps, 1.0, DELTA, shape=StepShape(count_noise=0.5))


def test_unsampled_gaussians_compose_to_one_gaussian_exactly():
    """DPSE's ledgers: many plain Gaussian releases. Their composition is one Gaussian of
    summed 1/sigma^2; the analytic Gaussian curve (Balle and Wang) pins its epsilon, and
    dp-accounting composing the parts separately must agree within its discretisation."""
    parts = de.ComposedDpEvent(
        [
            de.GaussianDpEvent(3),
            de.GaussianDpEvent(4.0),
            de.SelfComposedDpEvent(de.GaussianDpEvent(10.0), 50),
        ]
    )
    sigma = (1 / 9 + 1 / 16 + 50 / 100) ** -0.5
    analytic = brentq(lambda e: gaussian_delta(np.array([e]), sigma)[0] - DELTA, 1e-6, 50)
    ours = epsilon(parts, DELTA)
    assert analytic <= ours <= analytic * (1 + 1e-3)
    accountant = pld_privacy_accountant.PLDAccountant()
    accountant.compose(parts)
    assert ours == pytest.approx(accountant.get_epsilon(DELTA), rel=2e-3)
    # a sampled part keeps the general composition path
    mixed = de.ComposedDpEvent([parts, de.PoissonSampledDpEvent(0.01, de.GaussianDpEvent(1.0))])
    assert epsilon(mixed, DELTA) > ours


def monte_carlo_delta(q, sigma, scale, eps, remove, n=400_000, seed=0):
    """Hockey-stick divergence of one Poisson batch carrying a Gaussian(sigma) and a
    Laplace(scale) release, by sampling outputs and their exact privacy loss."""
    rng = np.random.default_rng(seed)
    member = rng.random(n) < q if remove else np.zeros(n, dtype=bool)
    g = rng.normal(0.0, sigma, n) + member
    lap = rng.laplace(0.0, scale, n) + member
    unsampled = (2 * g - 1) / (2 * sigma**2) + (np.abs(lap) - np.abs(lap - 1)) / scale
    loss = np.log1p(q * np.expm1(unsampled))  # log((1-q) + q e^L)
    loss = loss if remove else -loss
    values = np.maximum(0.0, 1 - np.exp(eps - loss))
    return values.mean(), values.std() / math.sqrt(n)


@pytest.mark.parametrize("remove", [True, False])
def test_gaussian_and_laplace_on_one_batch_match_monte_carlo(remove):
    q, sigma, scale = 0.05, 1.0, 2.0
    curve = _gauss_laplace_curves(q, sigma, scale)[0 if remove else 1]
    for eps in [0.0, 0.03, 0.1]:
        mc, se = monte_carlo_delta(q, sigma, scale, eps, remove)
        assert curve(np.array([eps]))[0] == pytest.approx(mc, abs=5 * se + 1e-6)


def test_gaussian_and_laplace_on_one_batch_reduce_to_each_alone():
    q, steps = 0.03, 400

    def dp_accounting(inner):
        accountant = pld_privacy_accountant.PLDAccountant()
        accountant.compose(de.PoissonSampledDpEvent(q, inner), steps)
        return accountant.get_epsilon(DELTA)

    no_laplace = epsilon(sgd_steps(q, 2.0, steps, laplace_scale=1e6), DELTA)
    assert no_laplace == pytest.approx(dp_accounting(de.GaussianDpEvent(2.0)), rel=1e-3)
    no_gauss = epsilon(sgd_steps(q, 100.0, steps, laplace_scale=5.0), DELTA)
    assert no_gauss == pytest.approx(dp_accounting(de.LaplaceDpEvent(5.0)), rel=2e-3)


@pytest.mark.parametrize(("q", "sigma", "steps", "laplace"), [g for g in GRID if g[3]])
def test_releases_sharing_a_batch_cost_more_than_independent_batches(q, sigma, steps, laplace):
    """The composition of separately sampled releases (an earlier version's accounting)
    under-reports: sharing the batch makes the releases' privacy losses coincide."""
    separate = de.ComposedDpEvent(
        [
            de.PoissonSampledDpEvent(q, de.GaussianDpEvent(sigma)),
            de.PoissonSampledDpEvent(q, de.LaplaceDpEvent(laplace)),
        ]
    )
    shared = epsilon(sgd_steps(q, sigma, steps, laplace), DELTA)
    assert shared > epsilon(de.SelfComposedDpEvent(separate, steps), DELTA) * 1.01


def test_substitution_sampling_scales_delta_but_not_epsilon():
    """One step: delta(eps) = q delta_G(eps) for eps >= 0, so at delta the epsilon solves
    q delta_G(eps) = delta (checked by root finding, independently of the PLD)."""
    q, sigma = 0.05, 2.0
    one = epsilon(sgd_steps(q, sigma, 1, substitution=True), DELTA)
    root = brentq(lambda e: q * gaussian_delta(np.array([e]), sigma)[0] - DELTA, 0.0, 20.0)
    assert one == pytest.approx(root, rel=1e-3)
    add_remove = epsilon(sgd_steps(q, sigma, 100), DELTA)
    assert epsilon(sgd_steps(q, sigma, 100, substitution=True), DELTA) > 2 * add_remove


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


@pytest.mark.parametrize(
    ("q", "sigma", "target", "laplace"), [(0.066, 2.0, 4.0, 10.0), (0.01, 2.0, 1.0, None)]
)
def test_step_search_from_the_rdp_start_returns_what_the_search_from_one_step_does(
    q, sigma, target, laplace
):
    start = _rdp_start(q, sigma, laplace, DELTA, target, PLAIN)
    assert start > 1 and start & (start - 1) == 0  # taken, and on the doubling path from 1

    def eps(steps, interval):
        return _sgd_epsilon(q, sigma, int(steps), laplace, DELTA, interval, PLAIN)

    from_one = _solve_monotone(
        eps,
        target,
        increasing=True,
        start=1,
        limits=(1, MAX_STEPS),
        integer=True,
        start_meets=True,
        cap=True,
    )
    assert calibrate_steps.__wrapped__(q, sigma, target, DELTA, laplace) == from_one
    assert _rdp_start(q, sigma, None, DELTA, target, StepShape(substitution=True)) == 1


def _synthetic_epsilon(boundary, increasing, report_factor=1.0):
    """Monotone in the parameter, exactly 1 at `boundary`; the reporting discretisation can be
    made stricter than the search one by `report_factor`."""

    def eps(x, interval):
        ratio = x / boundary if increasing else boundary / x
        return ratio * (report_factor if interval == REPORT_DISCRETISATION else 1.0)

    return eps


@pytest.mark.parametrize("increasing", [False, True])
@pytest.mark.parametrize("integer", [False, True])
def test_monotone_solver_returns_the_boundary(increasing, integer):
    eps, rel_tol = _synthetic_epsilon(123.4, increasing), 1e-3
    limits = (1, 10**6) if integer else (1e-3, 1e4)
    found = _solve_monotone(
        eps,
        1.0,
        increasing=increasing,
        start=1 if integer else 1.0,
        limits=limits,
        integer=integer,
        rel_tol=rel_tol,
    )
    if integer:
        assert isinstance(found, int)
        further = found + 1 if increasing else found - 1
    else:
        further = found * (1 + rel_tol) if increasing else found / (1 + rel_tol)
    assert eps(found, REPORT_DISCRETISATION) <= 1.0 < eps(further, REPORT_DISCRETISATION)


def test_monotone_solver_tightens_caps_and_refuses():
    stricter = _synthetic_epsilon(123.4, False, report_factor=1.01)
    sigma = _solve_monotone(stricter, 1.0, increasing=False, start=1.0, limits=(1e-3, 1e4))
    # past the search boundary (123.4) to the reporting one, and no further than one step
    assert stricter(sigma, REPORT_DISCRETISATION) <= 1.0
    assert stricter(sigma / (1 + 1e-3), REPORT_DISCRETISATION) > 1.0
    past_cap = _synthetic_epsilon(1e9, True)
    kwargs = {"start": 1, "limits": (1, 1000), "integer": True, "start_meets": True}
    assert _solve_monotone(past_cap, 1.0, increasing=True, cap=True, **kwargs) == 1000
    with pytest.raises(CalibrationError, match=r"^never$"):
        _solve_monotone(
            _synthetic_epsilon(1e9, False),
            1.0,
            increasing=False,
            start=1.0,
            limits=(1e-3, 1e4),
            infeasible="never",
        )


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


def test_clipped_sum_bounds_every_contribution():
    torch.manual_seed(0)
    grads = [torch.randn(64, 3, 5) * torch.logspace(-2, 2, 64)[:, None, None], torch.randn(64, 3)]
    total = clipped_sum(Rows(grads), max_norm=1.5)
    flat = torch.cat([g.reshape(64, -1) for g in grads], dim=1)
    factors = torch.clamp(1.5 / flat.norm(dim=1), max=1.0)
    assert torch.all((flat * factors[:, None]).norm(dim=1) <= 1.5 + 1e-5)
    expected = (flat * factors[:, None]).sum(dim=0)
    assert torch.allclose(torch.cat([t.reshape(-1) for t in total]), expected, atol=1e-5)


def test_scattered_rows_whose_sizes_were_not_read_are_all_rows():
    """Found by mypy: sizes None (a device's round) was stored as None, so a trial's own
    contributions (`trial(t)`, the per-trial release path) raised a TypeError."""
    rows = torch.ones(2, 3, 1)
    stacked = StackedScattered.masked(rows, torch.zeros(2, 3, dtype=torch.long), 4, None, None)
    assert stacked.sizes == [3, 3] and len(stacked.trial(1)) == 3


def test_a_batch_without_a_gaussian_is_refused_by_name():
    """Found by mypy: no Gaussian among one batch's releases reached float(None) (crosscheck)
    and None * float (the substitution PLD)."""
    empty = de.ComposedDpEvent([])
    assert rdp_epsilon(de.PoissonSampledDpEvent(0.1, empty), 1e-5) is None
    with pytest.raises(ConfigError, match="without a Gaussian"):
        build(SubstitutionSampledDpEvent(0.1, empty), REPORT_DISCRETISATION)
