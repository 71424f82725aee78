"""RaCO-DP and SGDA: privacy plumbing, the per-step quantities, and behaviour on data."""

from dataclasses import replace

import numpy as np
import pytest
import torch

import fairbench.methods.raco_dp as raco
from fairbench import metrics
from fairbench.datasets import get_dataset
from fairbench.errors import ConfigError
from fairbench.methods import FairnessSpec, get_method
from fairbench.models import LogisticRegression
from fairbench.privacy import PrivacyBudget, PrivacyLedger, epsilon
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.noise import FloatNoise
from fairbench.privacy.session import PrivacySession
from tests.conftest import needs_adult
from tests.methods.clipping import ClippedGradients


@pytest.fixture(scope="module")
def task():
    return get_dataset("synthetic", n_rows=4000).load(seed=0)


def exact_histogram(contrib, parts, n_parts):
    """The session's histogram mechanism without noise (a non-private session)."""
    session = PrivacySession(0)
    session.submit_plan(PrivacyLedger())
    return session.laplace_histogram("histogram", 0.0)(contrib, parts, n_parts)


@pytest.mark.parametrize("hard", [False, True])
def test_histogram_l1_sensitivity_is_one_under_add_remove(hard):
    gen = torch.Generator().manual_seed(0)
    for trial in range(50):
        logits = torch.randn(33, 3, generator=gen) * (1 + trial)
        parts = torch.randint(0, 4, (33,), generator=gen)
        contrib = raco.rate_contributions(torch.softmax(2.0 * logits, dim=1), logits, hard)
        full = exact_histogram(contrib, parts, 4)
        for drop in (0, 17, 32):  # remove one record (equivalently: add it back)
            keep = torch.arange(33) != drop
            less = exact_histogram(contrib[keep], parts[keep], 4)
            assert (full - less).abs().sum().item() == pytest.approx(1.0, abs=1e-5)
    # the histogram's mass is the realised batch size: no padding, no truncation
    assert full.sum().item() == pytest.approx(33, abs=1e-4)


def test_laplace_noise_is_drawn_independently_for_every_cell():
    """The authors' code shared one draw across predicted classes; here cells are independent."""
    noise, zeros = FloatNoise(torch.Generator().manual_seed(0)), torch.zeros(4, 2).double()
    draws = torch.stack([noise.laplace(zeros, 5.0, 1.0, 1) for _ in range(4000)])
    assert (draws[:, :, 0] != draws[:, :, 1]).all()
    corr = np.corrcoef(draws[:, 0, 0].numpy(), draws[:, 0, 1].numpy())[0, 1]
    assert abs(corr) < 0.05
    assert draws.abs().mean().item() == pytest.approx(5.0, rel=0.03)


def test_lagrangian_logit_gradient_is_exact():
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(20, 3, generator=gen, requires_grad=True)
    y = torch.randint(0, 3, (20,), generator=gen)
    coef = torch.randn(20, 3, generator=gen) * 5
    for tau in (1.0, 2.5):
        loss = raco.RateLagrangian(y, coef, temperature=tau)
        (auto,) = torch.autograd.grad(loss(z).sum(), z)
        assert torch.allclose(loss.logit_grad(z.detach()), auto, atol=1e-5)
        known = torch.softmax(tau * z.detach(), dim=1)  # the step passes the softmax it has
        reused = raco.RateLagrangian(y, coef, tau, soft=known).logit_grad(z.detach())
        assert torch.allclose(reused, auto, atol=1e-5)


def test_clipped_per_sample_gradients_never_exceed_c_over_r_d():
    """In the paper's units each record's gradient is clipped to C / (r|D|); the code clips
    the r|D|-scaled gradient to C and divides the sum by r|D|."""
    torch.manual_seed(0)
    model = LogisticRegression(5, 2)
    engine = ClippedGradients(model)
    scale, clip = 0.03 * 4000, 0.7  # r|D|, C
    gen = torch.Generator().manual_seed(2)
    for i in range(30):
        x = torch.randn(1, 5, generator=gen) * 10 ** (i / 10)
        loss = raco.RateLagrangian(
            torch.tensor([i % 2]), torch.randn(1, 2, generator=gen) * 50, 1.0
        )
        grads = engine(x, loss, clip)
        norm = torch.sqrt(sum((g / scale).pow(2).sum() for g in grads))
        assert norm <= clip / scale * (1 + 1e-5)


def test_fit_records_one_accounted_mechanism_and_meets_the_target(task):
    fitted = get_method("raco-dp", batch_size=256).fit(
        task, PrivacyBudget(2.0), FairnessSpec("demographic_parity", 0.05), seed=0
    )
    info = fitted.info
    q = 256 / len(task.train)
    assert info["sampling_rate"] == pytest.approx(q)
    assert info["noise_multiplier"] == 4.0 and info["laplace_scale"] == 5.0
    (entry,) = fitted.ledger.entries
    assert entry.event == sgd_steps(q, 4.0, info["steps"], 5.0)
    spent = fitted.ledger.epsilon(1e-5)
    assert spent <= 2.0 < epsilon(sgd_steps(q, 4.0, int(info["steps"] * 1.05) + 2, 5.0), 1e-5)
    assert len(info["lambda"]) == 4 and all(0 <= v <= 20 for v in info["lambda"])


def test_calibrating_noise_instead_of_steps(task):
    method = get_method("raco-dp", calibrate="noise", epochs=3, batch_size=256)
    fitted = method.fit(task, PrivacyBudget(1.0), FairnessSpec("demographic_parity", 0.1), 0)
    q = fitted.info["sampling_rate"]
    assert fitted.info["steps"] == round(3 / q)
    assert 0.98 < fitted.ledger.epsilon(1e-5) <= 1.0
    with pytest.raises(ConfigError, match="noise_multiplier is calibrated"):
        get_method("raco-dp", calibrate="noise", noise_multiplier=3.0)


def test_batches_are_poisson_not_padded(task, monkeypatch):
    sizes = []
    real = raco.rate_contributions

    def spy(soft, logits, hard):  # one trial: soft is (1, B, K)
        sizes.append(soft.shape[1])
        return real(soft, logits, hard)

    monkeypatch.setattr(raco, "rate_contributions", spy)
    fitted = get_method("raco-dp", batch_size=128).fit(
        task, PrivacyBudget(1.0), FairnessSpec("demographic_parity", 0.1), seed=0
    )
    expected = 128 / len(task.train) * len(task.train)
    assert len(sizes) == fitted.info["steps"] and len(set(sizes)) > 10
    assert np.mean(sizes) == pytest.approx(expected, rel=0.05)


def test_fairness_is_enforced_against_dp_sgd(task):
    spec, budget = FairnessSpec("demographic_parity", 0.05), PrivacyBudget(3.0)
    results = {}
    for name in ("raco-dp", "dp-sgd"):
        errs, gaps = [], []
        for seed in range(2):
            fit = get_method(name, batch_size=256).fit(task, budget, spec, seed)
            pred = fit.predict(task.test.X)
            errs.append(metrics.error_rate(task.test.y, pred))
            gaps.append(metrics.demographic_parity_difference(pred, task.test.s))
        results[name] = (np.mean(errs), np.mean(gaps))
    assert results["dp-sgd"][1] > 0.15  # the task has a real disparity to remove
    assert results["raco-dp"][1] <= 0.05 + 0.03
    # and it does better than the trivial fair classifier (a constant: gap 0)
    constant_error = min(task.test.y.mean(), 1 - task.test.y.mean())
    assert results["raco-dp"][0] < constant_error - 0.03


def test_sgda_is_the_noiseless_unclipped_twin(task):
    spec = FairnessSpec("demographic_parity", 0.05)
    a = get_method("sgda", batch_size=256).fit(task, None, spec, seed=0)
    b = get_method("sgda", batch_size=256).fit(task, None, spec, seed=0)
    assert a.ledger.entries == [] and a.info["noise_multiplier"] == 0.0
    assert a.info["clip_norm"] == float("inf")
    assert all(
        torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True)
    )
    gap = metrics.demographic_parity_difference(a.predict(task.test.X), task.test.s)
    assert gap <= 0.05 + 0.03


def test_configuration_errors(task):
    with pytest.raises(ConfigError, match="needs gamma values"):
        get_method("raco-dp").fit(task, PrivacyBudget(1.0), FairnessSpec("demographic_parity"), 0)
    with pytest.raises(ConfigError, match="is private"):
        get_method("raco-dp").fit(task, None, FairnessSpec("demographic_parity", 0.1), 0)
    three = get_dataset("synthetic", n_rows=600, n_groups=3).load(0)
    y = np.where(three.train.s == 2, 0, three.train.y)  # group 2 has no positive example
    lonely = replace(three, train=replace(three.train, y=y))
    with pytest.raises(ConfigError, match="part 5 has no training record"):
        get_method("sgda").fit(lonely, None, FairnessSpec("equalized_odds", 0.1), 0)


@needs_adult
def test_real_adult_demographic_parity_at_epsilon_one():
    """A quick look at the paper's Fig. 2/3 claim (the 10-seed numbers: make fig-adult-dp)."""
    task = get_dataset("adult").load(0)
    fit = get_method("raco-dp").fit(
        task, PrivacyBudget(1.0), FairnessSpec("demographic_parity", 0.05), 0
    )
    pred = fit.predict(task.test.X)
    assert metrics.demographic_parity_difference(pred, task.test.s) <= 0.05 + 0.015
    assert metrics.error_rate(task.test.y, pred) <= 0.168


def test_the_authors_clipped_dual_update_is_post_processing_that_moves_lambda(task):
    """`dual_update: clipped` (the authors' code) clips each noisy constraint value to [0, 1]
    before the ascent: the same plan and ledger (post-processing), different multipliers. At
    gamma = 1 a clipped value never exceeds gamma, so lambda never leaves 0, whereas the
    paper's signed update still reacts to noisy values above 1."""
    spec, budget = FairnessSpec("demographic_parity", 1.0), PrivacyBudget(1.0)
    fits = {
        update: get_method("raco-dp", batch_size=256, laplace_scale=20.0, dual_update=update).fit(
            task, budget, spec, seed=0
        )
        for update in ("signed", "clipped")
    }
    signed, clipped = fits["signed"], fits["clipped"]
    assert clipped.ledger.entries == signed.ledger.entries
    assert clipped.info["steps"] == signed.info["steps"] == 98
    assert clipped.info["lambda"] == [0.0] * 4
    assert max(signed.info["lambda"]) > 1.0


def test_frozen_denominators_are_one_accounted_count_release(task):
    """`denominators: frozen` (the authors' code): the part counts are released once, on a
    Poisson batch of their own, at the histogram's Laplace scale, and held; the plan, the
    calibration and the ledger cover that release, so the trial still meets its target."""
    method = get_method("raco-dp", batch_size=256, laplace_scale=20.0, denominators="frozen")
    fitted = method.fit(task, PrivacyBudget(1.0), FairnessSpec("demographic_parity", 0.05), 0)
    q = fitted.info["sampling_rate"]
    frozen, steps = fitted.ledger.entries
    assert frozen.label == raco.DENOMINATORS
    assert frozen.event == raco.frozen_counts(q, 20.0)
    assert steps.event == sgd_steps(q, 4.0, fitted.info["steps"], 20.0)
    assert fitted.ledger.epsilon(1e-5) <= 1.0
    per_step = get_method("raco-dp", batch_size=256, laplace_scale=20.0).fit(
        task, PrivacyBudget(1.0), FairnessSpec("demographic_parity", 0.05), 0
    )
    assert fitted.info["lambda"] != per_step.info["lambda"]
