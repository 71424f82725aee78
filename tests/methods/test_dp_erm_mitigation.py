"""dp-erm-mitigation: lambda = 0 is dp-sgd bit for bit, the regulariser's closed-form
gradients, the privacy plumbing (histogram rows, noise scales, ledger = plan with the count
release) and the knob's effect on synthetic data."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from dp_accounting import dp_event

import fairbench.methods.dp_erm_mitigation as dperm
from fairbench.datasets import get_dataset
from fairbench.errors import ConfigError
from fairbench.methods import FairnessSpec, get_method
from fairbench.methods.plan import DataShape
from fairbench.models import MLP, LogisticRegression
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.contributions import clipped_sum
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.session import canonical

DP = "demographic_parity"
SHARED = {"epochs": 2, "batch_size": 64, "lr": 0.5, "clip_norm": 0.8}  # dp-sgd's fields


@pytest.fixture(scope="module")
def small():
    return get_dataset("synthetic", n_rows=600).load(seed=0)


def parameters(fitted) -> list[torch.Tensor]:
    return [p.detach() for p in fitted.model.parameters()]


@pytest.mark.parametrize("model", ["logistic", "mlp"])
def test_lambda_zero_is_dp_sgd_bit_for_bit(small, model):
    hp = {**SHARED, "model": model}
    ours = get_method("dp-erm-mitigation", **hp).fit(
        small, PrivacyBudget(1.0), FairnessSpec(DP, 0.0), seed=3
    )
    theirs = get_method("dp-sgd", **hp).fit(small, PrivacyBudget(1.0), FairnessSpec(DP), seed=3)
    assert all(torch.equal(p, q) for p, q in zip(parameters(ours), parameters(theirs), strict=True))
    assert ours.ledger.entries == theirs.ledger.entries  # one Gaussian sum per step, same label
    assert ours.budget == theirs.budget
    positive = get_method("dp-erm-mitigation", **hp).fit(
        small, PrivacyBudget(1.0), FairnessSpec(DP, 1.0), seed=3
    )
    assert not torch.equal(parameters(positive)[0], parameters(ours)[0])


def autograd_terms(x, y, theta, norm_clip):
    """u_i, c_i and their parameter gradients, one record at a time, by double backward."""
    model = LogisticRegression(x.shape[1], theta[0].shape[0])
    with torch.no_grad():
        model.linear.weight.copy_(theta[0])
        model.linear.bias.copy_(theta[1])
    params = list(model.parameters())
    out = []
    for i in range(len(x)):
        z = model(x[i : i + 1])
        g = torch.autograd.grad(F.cross_entropy(z, y[i : i + 1]), params, create_graph=True)
        u = torch.sqrt(sum((v * v).sum() for v in g)).clamp(max=norm_clip)
        p = torch.softmax(z, dim=1)
        c = 1 - (p * p).sum()
        du = torch.autograd.grad(u, params, retain_graph=True)
        dc = torch.autograd.grad(c, params)
        out.append((u.detach(), c.detach(), du, dc))
    return out


def test_closed_form_gradients_of_u_and_c_match_autograd():
    gen = torch.Generator().manual_seed(0)
    b, d, k = 12, 5, 3
    x = torch.randn(b, d, generator=gen) * torch.linspace(0.1, 2, b)[:, None]
    y = torch.randint(0, k, (b,), generator=gen)
    theta = (torch.randn(k, d, generator=gen), torch.randn(k, generator=gen))
    logits = x @ theta[0].T + theta[1]
    norm_clip = 1.5
    coef_u, coef_c = torch.randn(b, generator=gen), torch.randn(b, generator=gen)
    objective = dperm.Regularised(y, coef_u, coef_c, (x * x).sum(1), norm_clip)
    u, c, du, dc, _ = objective.terms(logits)
    reference = autograd_terms(x, y, theta, norm_clip)
    clipped = 0
    for i, (u_i, c_i, du_i, dc_i) in enumerate(reference):
        assert u[i] == pytest.approx(float(u_i), abs=1e-5)
        assert c[i] == pytest.approx(float(c_i), abs=1e-6)
        assert torch.allclose(torch.outer(du[i], x[i]), du_i[0], atol=1e-5)  # weight
        assert torch.allclose(du[i], du_i[1], atol=1e-5)  # bias
        assert torch.allclose(torch.outer(dc[i], x[i]), dc_i[0], atol=1e-5)
        assert torch.allclose(dc[i], dc_i[1], atol=1e-5)
        clipped += float(u_i) == norm_clip
    assert 0 < clipped < b  # both branches of min(||grad||, C_u) are exercised
    # the logit gradient of the whole per-record objective, against autograd
    z = logits.clone().requires_grad_(True)
    (dz,) = torch.autograd.grad(objective(z).sum(), z)
    assert torch.allclose(objective.logit_grad(logits), dz, atol=1e-5)
    # the MLP path (torch.func), run on the logistic model, gives the same per-record gradients
    model = LogisticRegression(d, k)
    with torch.no_grad():
        model.linear.weight.copy_(theta[0])
        model.linear.bias.copy_(theta[1])
    weight = torch.ones(b)
    fu, fc, rows = dperm.functional_terms(model, x, y, weight, coef_u, coef_c, norm_clip)
    assert torch.allclose(fu, u, atol=1e-5) and torch.allclose(fc, c, atol=1e-6)
    g = objective.logit_grad(logits)
    assert torch.allclose(rows.parts[0], g[:, :, None] * x[:, None, :], atol=1e-4)
    assert torch.allclose(rows.parts[1], g, atol=1e-5)
    # a zero weight silences a padding row
    weight[0] = 0
    fu, _, rows = dperm.functional_terms(model, x, y, weight, coef_u, coef_c, norm_clip)
    assert fu[0] == 0 and not rows.parts[0][0].any()


def test_functional_terms_on_an_mlp_match_double_backward():
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randn(6, 4, generator=gen), torch.randint(0, 2, (6,), generator=gen)
    model = MLP(4, 2, 8)
    coef_u, coef_c = torch.full((6,), 0.7), torch.full((6,), -0.4)
    u, _, rows = dperm.functional_terms(model, x, y, torch.ones(6), coef_u, coef_c, 100.0)
    params = list(model.parameters())
    for i in range(6):
        z = model(x[i : i + 1])
        loss = F.cross_entropy(z, y[i : i + 1])
        g = torch.autograd.grad(loss, params, create_graph=True)
        norm = torch.sqrt(sum((v * v).sum() for v in g))
        p = torch.softmax(z, 1)
        total = loss + 0.7 * norm - 0.4 * (1 - (p * p).sum())
        expected = torch.autograd.grad(total, params)
        assert u[i] == pytest.approx(float(norm.detach()), rel=1e-5)
        for part, e in zip(rows.parts, expected, strict=True):
            assert torch.allclose(part[i], e, atol=1e-5)


def test_signs_compare_each_groups_noisy_mean_with_the_population():
    hist = torch.tensor([[[2.0, 1.0, 10.0], [9.0, 0.5, 30.0], [0.0, 3.0, -4.0]]])  # (1, 3, 3)
    signs = dperm.gap_signs(hist, 1.0)
    # means u: 0.2, 0.3, 0 (count floored at 1); population 11/36; c: 0.1, 1/60, 3 vs 4.5/36
    assert signs[0].tolist() == [[-1.0, -1.0, -1.0]]
    assert signs[1].tolist() == [[-1.0, -1.0, 1.0]]


class Spy:
    """Wraps the module's mechanisms' stacked releases: records each release's noise (noisy
    minus exact) and the histogram rows."""

    def __init__(self, monkeypatch):
        self.gaussian, self.laplace, self.rows, self.norms = [], [], [], []
        hist_release, sum_release = dperm.laplace_histograms, dperm.gaussian_sums

        def histograms(mechanisms, rows, parts, n_parts, sizes, batches):
            noisy = hist_release(mechanisms, rows, parts, n_parts, sizes, batches)
            exact = torch.zeros_like(noisy[0]).index_add_(0, parts[0], rows[0])
            self.rows.append(rows.detach().clone())
            self.laplace.append((noisy[0] - exact).flatten())
            return noisy

        def sums(mechanisms, contributions, batches):
            noisy = sum_release(mechanisms, contributions, batches)
            exact = clipped_sum(contributions.trial(0), mechanisms[0].clip)
            self.norms.append(contributions.trial(0).norms())
            noise = [(n[0] - e).flatten() for n, e in zip(noisy, exact, strict=True)]
            self.gaussian.append(torch.cat(noise))
            return noisy

        monkeypatch.setattr(dperm, "laplace_histograms", histograms)
        monkeypatch.setattr(dperm, "gaussian_sums", sums)


def test_ledger_equals_plan_with_the_count_release_and_noise_has_its_scale(monkeypatch):
    task = get_dataset("synthetic", n_rows=4000).load(seed=0)
    spy = Spy(monkeypatch)
    hp = {
        "epochs": 8,
        "batch_size": 256,
        "clip_norm": 0.5,
        "norm_clip": 2.0,
        "histogram_scale": 12.0,
        "count_scale": 40.0,
    }
    method = get_method("dp-erm-mitigation", **hp)
    fitted = method.fit(task, PrivacyBudget(2.0), FairnessSpec(DP, 5.0), seed=1)
    info, q, steps = fitted.info, fitted.info["sampling_rate"], fitted.info["steps"]
    sigma = info["noise_multiplier"]
    rounds = sgd_steps(q, sigma, steps, 12.0)  # Poisson(q, Composed[Gaussian, Laplace]) x T
    assert canonical(fitted.ledger) == canonical(fitted.plan)
    assert canonical(fitted.ledger) == canonical(_ledger(rounds, dp_event.LaplaceDpEvent(40.0)))
    spent = fitted.ledger.epsilon(1e-5)
    assert 1.95 <= spent <= 2.0  # calibrated: the whole ledger meets the target
    dp_sgd = method.plan(DataShape.of(task), PrivacyBudget(2.0), FairnessSpec(DP, 0.0))
    assert sigma > dp_sgd.schedule.noise_multiplier
    # histogram rows: l1 <= 1, and some reach it (the count column alone is 1/3)
    l1 = torch.cat([r.abs().sum(-1).flatten() for r in spy.rows])
    assert float(l1.max()) <= 1 + 1e-6 and float(l1.max()) > 0.6
    # per-record gradients exceed the clip (the bound is doing work); noise std sigma C
    assert float(torch.cat(spy.norms).max()) > 0.5
    gaussian = torch.cat(spy.gaussian)
    assert float(gaussian.std()) == pytest.approx(sigma * 0.5, rel=0.06)
    laplace = torch.cat(spy.laplace)  # scale b on sensitivity 1: std b sqrt 2
    assert float(laplace.std()) == pytest.approx(12.0 * math.sqrt(2), rel=0.1)
    assert len(spy.laplace) == len(spy.gaussian) == steps
    assert info["group_counts"][0] == pytest.approx(float((task.train.s == 0).sum()), abs=400)


def _ledger(*events):
    ledger = PrivacyLedger()
    for event in events:
        ledger.record("x", event)
    return ledger


def test_calibrate_steps_meets_the_target_with_the_histogram(small):
    fitted = get_method(
        "dp-erm-mitigation", batch_size=64, calibrate="steps", noise_multiplier=3.0
    ).fit(small, PrivacyBudget(1.0), FairnessSpec(DP, 1.0), seed=0)
    assert fitted.info["noise_multiplier"] == 3.0 and fitted.info["steps"] > 1
    assert fitted.ledger.epsilon(1e-5) <= 1.0


def test_only_evaluated_constraints_and_a_lambda_are_accepted(small):
    method = get_method("dp-erm-mitigation", epochs=1)
    with pytest.raises(ConfigError, match="lambda values"):
        method.fit(small, PrivacyBudget(1.0), FairnessSpec(DP), seed=0)
    with pytest.raises(ConfigError, match="supports the constraints"):
        method.fit(small, PrivacyBudget(1.0), FairnessSpec("bounded_group_loss", 1.0), seed=0)


def test_a_larger_lambda_lowers_demographic_parity_on_synthetic():
    """Two seeds, test split: lambda 0 (dp-sgd) against lambda 10 at epsilon 1."""
    gaps = {0.0: [], 10.0: []}
    for seed in (0, 1):
        task = get_dataset("synthetic", n_rows=4000).load(seed=seed)
        for lam in gaps:
            fitted = get_method("dp-erm-mitigation", epochs=10).fit(
                task, PrivacyBudget(1.0), FairnessSpec(DP, lam), seed=seed
            )
            pred = fitted.predict(task.test.X)
            rates = [pred[task.test.s == a].mean() for a in range(task.n_groups)]
            gaps[lam].append(max(rates) - min(rates))
    assert np.mean(gaps[10.0]) < np.mean(gaps[0.0]) - 0.03, gaps
