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


def test_padded_size_is_the_authors_poisson_bound():
    """Their get_poisson_upper_bound(n, B / n, 0.001): 307 at B = 256 (checked with their
    scipy), the smallest k with P(Poisson(B) <= k) >= 0.999."""
    assert raco.padded_size(256.0) == 307
    assert raco.padded_size(0.5) == 4  # P(<= 3) = 0.99825, P(<= 4) = 0.99983


def test_truncation_keeps_each_batchs_first_records():
    index = torch.tensor([[3, 5, 8, 9], [1, 2, 0, 0]])
    mask = torch.tensor([[True, True, True, True], [True, True, False, False]])
    round_ = raco.StackedBatches([], index, mask, [4, 2])
    cut = raco.truncated(round_, 3)
    assert cut.index.tolist() == [[3, 5, 8], [1, 2, 0]] and cut.sizes == [3, 2]
    assert cut.mask.tolist() == [[True, True, True], [True, True, False]]
    assert raco.truncated(round_, 4) is round_


@pytest.mark.parametrize("clip", [1e3, 0.05])
def test_padding_rows_push_the_bias_as_the_authors_zero_rows_do(clip):
    """The authors' per-sample loss (training/loss.py, demographic parity) on a zero row:
    cross-entropy 0 (no label) and z = 0, so OUT = 1 - z puts it in every group's other-groups
    term: B sum_{z,k} lam[k, z] (-1 / N_neq_z) softmax(tau b)_k, its gradient clipped at C.
    Written here from their formula (autograd), against the port's closed form."""
    torch.manual_seed(0)
    n_groups, n_classes, tau, batch, pads = 3, 3, 2.0, 256.0, 4
    cs = raco.constraints.build("demographic_parity", None, n_classes, n_groups, 0.1)
    rates = raco.constraints.TorchRates(cs, torch.device("cpu"))
    lam = torch.rand(1, cs.n_constraints)  # constraint j = z K + k: their lam[k, z]
    counts = torch.rand(n_groups) * 80 + 10  # noisy group sizes
    hist = counts.view(1, n_groups, 1) * torch.full((1, 1, n_classes), 1.0 / n_classes)
    sizes = rates.sizes(hist, 1.0)
    n_neq = counts.sum() - counts  # their N_neq_z
    bias, weight = torch.randn(1, n_classes), torch.randn(n_classes, 5)
    grads = []
    for _ in range(pads):
        w, b = weight.clone().requires_grad_(), bias[0].clone().requires_grad_()
        z = torch.zeros(n_groups)
        probs = torch.softmax(tau * (w @ torch.zeros(5) + b), dim=-1)
        weights = z / counts - (1.0 - z) / n_neq
        lagrangian = (lam.view(n_groups, n_classes) * weights[:, None] * probs[None, :]).sum()
        (batch * lagrangian).backward()
        assert w.grad.abs().max() == 0.0  # a zero row moves only the bias
        grads.append(b.grad / max(b.grad.norm() / clip, 1.0))
    outside = raco.outside_coefficients(rates, lam, sizes) * batch
    ours = raco.padding_sum(bias, outside, tau, clip, torch.tensor([pads]))
    assert torch.allclose(ours[0], torch.stack(grads).sum(dim=0), rtol=1e-5, atol=1e-7)
    assert (ours.norm() < pads * clip * 0.99) == (clip > 1)  # the clip acts only at 0.05


def test_padded_batches_are_refused_unless_declared_not_accounted(task):
    with pytest.raises(ConfigError, match=r"batches: padded .* parity_unaccounted: true"):
        get_method("raco-dp", batches="padded")
    with pytest.raises(ConfigError, match="goes with batches: padded"):
        get_method("raco-dp", parity_unaccounted=True)
    padded = get_method("raco-dp", batch_size=256, batches="padded", parity_unaccounted=True)
    with pytest.raises(ConfigError, match="demographic-parity loss"):
        padded.fit(task, PrivacyBudget(1.0), FairnessSpec("equalized_odds", 0.05), 0)
    mlp = get_method("raco-dp", model="mlp", batches="padded", parity_unaccounted=True)
    with pytest.raises(ConfigError, match="model: logistic"):
        mlp.fit(task, PrivacyBudget(1.0), FairnessSpec("demographic_parity", 0.05), 0)


def test_padded_batches_run_labelled_not_accounted_and_move_the_model(task):
    """The schedule is calibrated as for Poisson batches; the ledger adds one NonPrivateDpEvent,
    so epsilon_spent is inf and the row says why. With lambda > 0 the padding rows change the
    model; everything else (batches, noise) is drawn alike."""
    spec, budget = FairnessSpec("demographic_parity", 0.01), PrivacyBudget(1.0)
    fits = {
        b: get_method("raco-dp", batch_size=256, dual_update="clipped", batches=b,
                      parity_unaccounted=b == "padded").fit(task, budget, spec, 0)
        for b in ("poisson", "padded")
    }  # fmt: skip
    poisson, padded = fits["poisson"], fits["padded"]
    assert padded.info["steps"] == poisson.info["steps"] and padded.info["padded_batch"] == 307
    accounted, marker = padded.ledger.entries
    assert accounted == poisson.ledger.entries[0] and marker.label == raco.UNACCOUNTED
    assert padded.ledger.epsilon(1e-5) == float("inf") and poisson.ledger.epsilon(1e-5) <= 1.0
    assert padded.privacy_notion.endswith("(not accounted: padded batches)")
    assert max(padded.info["lambda"]) > 0
    assert not torch.equal(padded.model.linear.bias, poisson.model.linear.bias)
    assert torch.equal(padded.model.linear.bias, get_method(
        "raco-dp", batch_size=256, dual_update="clipped", batches="padded",
        parity_unaccounted=True).fit(task, budget, spec, 0).model.linear.bias)  # fmt: skip


def test_max_steps_caps_the_solved_step_count_and_the_trial_spends_less_than_its_target():
    from fairbench.methods.plan import DataShape

    shape, target = DataShape(2_000, 5, 2, 2), PrivacyBudget(8.0, 1e-5)
    spec = FairnessSpec("demographic_parity", 0.05)
    free = get_method("raco-dp", batch_size=64).plan(shape, target, spec)
    capped = get_method("raco-dp", batch_size=64, max_steps=500).plan(shape, target, spec)
    assert free.loop_rounds > 500 and capped.loop_rounds == 500
    assert capped.ledger.epsilon(1e-5) < 0.5 * free.ledger.epsilon(1e-5) <= 4.0
    with pytest.raises(ConfigError, match="max_steps caps calibrate: steps"):
        get_method("raco-dp", calibrate="noise", max_steps=500)
