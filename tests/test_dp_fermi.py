"""DP-FERMI: the ERMI objective and its gradients, clipping, privacy plumbing, and behaviour."""

import math

import numpy as np
import pytest
import torch

import fairbench.methods.dp_fermi as fermi
from fairbench import metrics
from fairbench.datasets import get_dataset
from fairbench.errors import ConfigError
from fairbench.methods import FairnessSpec, get_method
from fairbench.models import LogisticRegression
from fairbench.privacy import PrivacyBudget, epsilon
from fairbench.privacy.contributions import clip_factors
from fairbench.privacy.events import sgd_steps
from tests.clipping import ClippedGradients


@pytest.fixture(scope="module")
def task():
    return get_dataset("synthetic", n_rows=4000).load(seed=0)


def random_inputs(seed, b=24, k=3, l=4):  # noqa: E741
    gen = torch.Generator().manual_seed(seed)
    z = torch.randn(b, l, generator=gen) * 2
    y = torch.randint(0, l, (b,), generator=gen)
    s = torch.randint(0, k, (b,), generator=gen)
    w_rows = torch.randn(b, k, l, generator=gen)
    inv_sqrt_p = torch.rand(b, generator=gen) * 3 + 1
    return z, y, s, w_rows, inv_sqrt_p


def psi(z, s, w_rows, inv_sqrt_p):
    """psi_i of Theorem C.1 written out literally, for autograd."""
    f = torch.softmax(z, dim=1)
    quad = torch.einsum("brj,bj,brj->b", w_rows, f, w_rows)  # Tr(W diag(F) W^T)
    onehot = torch.nn.functional.one_hot(s, w_rows.shape[1]).to(z.dtype)
    cross = torch.einsum("brj,bj,br->b", w_rows, f, onehot * inv_sqrt_p[:, None])
    return -quad + 2 * cross - 1


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_psi_and_its_gradients_match_autograd(seed):
    z, y, s, w_rows, ip = random_inputs(seed)
    lam = 0.7
    z.requires_grad_(True)
    w_rows.requires_grad_(True)
    reference = torch.nn.functional.cross_entropy(z, y, reduction="none") + lam * psi(
        z, s, w_rows, ip
    )
    objective = fermi.FermiObjective(y, s, w_rows.detach(), ip, lam)
    assert torch.allclose(objective(z), reference, atol=1e-5)
    dz, dw = torch.autograd.grad(reference.sum(), [z, w_rows])
    assert torch.allclose(objective.logit_grad(z.detach()), dz, atol=1e-5)
    public, group = fermi.w_gradients(torch.softmax(z.detach(), 1), s, w_rows.detach(), ip)
    assert torch.allclose(lam * (public + group), dw, atol=1e-5)
    # the parts add up, and only the group part depends on s
    pub = fermi.FermiObjective(y, s, w_rows.detach(), ip, lam, "public")
    grp = fermi.FermiObjective(y, s, w_rows.detach(), ip, lam, "sensitive")
    zd = z.detach()
    assert torch.allclose(pub.logit_grad(zd) + lam * grp.logit_grad(zd), dz, atol=1e-5)
    other = fermi.FermiObjective(y, (s + 1) % 3, w_rows.detach(), ip, lam, "public")
    assert torch.allclose(other.logit_grad(zd), pub.logit_grad(zd))


def test_maximising_over_w_gives_ermi_and_its_conditional_version():
    """Theorem C.1: max_W mean psi_i = ERMI(Yhat; S); with one W per label, the average
    maximises to the conditional ERMI of Eq. (5)."""
    gen = torch.Generator().manual_seed(3)
    n, k, l = 500, 3, 2  # noqa: E741
    f = torch.softmax(torch.randn(n, l, generator=gen) * 2, dim=1).double()
    s = torch.randint(0, k, (n,), generator=gen)
    y = torch.randint(0, l, (n,), generator=gen)

    def ermi(f, s):
        joint = torch.zeros(l, k, dtype=torch.float64).index_add_(1, s, f.T) / len(s)
        return (joint**2 / (joint.sum(1, keepdim=True) * joint.sum(0, keepdim=True))).sum() - 1

    def best_mean_psi(f, s):
        joint = torch.zeros(l, k, dtype=torch.float64).index_add_(1, s, f.T) / len(s)
        p_s, p_y = joint.sum(0), joint.sum(1)
        w = (joint / (p_s.sqrt()[None, :] * p_y[:, None])).T.requires_grad_(True)  # W*_rj
        value = psi(f.log(), s, w.expand(len(s), k, l), p_s.rsqrt()[s]).mean()
        (grad,) = torch.autograd.grad(value, w)  # psi is strongly concave in W: W* is its max
        assert grad.abs().max().item() < 1e-7
        return value.item()

    assert best_mean_psi(f, s) == pytest.approx(ermi(f, s).item(), rel=1e-5)
    conditional = sum((y == c).double().mean() * ermi(f[y == c], s[y == c]) for c in range(l))
    mixed = sum((y == c).double().mean() * best_mean_psi(f[y == c], s[y == c]) for c in range(l))
    assert mixed.item() == pytest.approx(conditional.item(), rel=1e-5)


def test_clipped_per_sample_gradients_respect_their_bounds():
    z, y, s, w_rows, ip = random_inputs(4, b=40)
    x = torch.randn(40, 6) * 5
    model = LogisticRegression(6, 4)
    clipped = ClippedGradients(model)
    objective = fermi.FermiObjective(y, s, w_rows, ip, 2.0)
    for i in range(40):  # one record at a time: its clipped gradient's norm
        one = clipped(
            x[i : i + 1],
            fermi.FermiObjective(y[i : i + 1], s[i : i + 1], w_rows[i : i + 1], ip[i : i + 1], 2.0),
            0.5,
        )
        assert math.sqrt(sum((g**2).sum().item() for g in one)) <= 0.5 + 1e-5
    total = clipped(x, objective, 0.5)
    assert math.sqrt(sum((g**2).sum().item() for g in total)) <= 40 * 0.5
    public, group = fermi.w_gradients(torch.softmax(z, 1), s, w_rows, ip)
    rows = public + group
    norms = (rows * clip_factors(rows.flatten(1).norm(dim=1), 0.3)[:, None, None]).flatten(1)
    norms = norms.norm(dim=1)
    assert norms.max().item() <= 0.3 + 1e-6
    assert norms.min().item() > 0.29  # these gradients are all larger than the clip


def test_projection_keeps_each_cell_in_its_ball():
    w = torch.randn(3, 2, 2) * torch.tensor([0.1, 3.0, 10.0])[:, None, None]
    projected = fermi.project_rows(w, 1.5)
    norms = projected.flatten(1).norm(dim=1)
    assert norms.max().item() <= 1.5 + 1e-6
    assert torch.equal(projected[0], w[0])  # already inside: untouched


def test_full_notion_accounts_two_releases_per_batch_and_the_counts(task):
    fitted = get_method("dp-fermi", epochs=3).fit(
        task, PrivacyBudget(2.0), FairnessSpec("demographic_parity", 1.0), seed=0
    )
    info = fitted.info
    assert fitted.privacy_notion == "full"
    assert info["releases_per_step"] == 2
    assert len(fitted.ledger.entries) == 2  # the steps, and the group counts
    assert fitted.ledger.epsilon(1e-5) <= 2.0
    steps_only = epsilon(
        sgd_steps(info["sampling_rate"], info["noise_multiplier"], info["steps"], None, 2), 1e-5
    )
    assert steps_only < fitted.ledger.epsilon(1e-5)  # the counts cost something
    # the marginals were noised: close to, but not exactly, the true shares
    true = np.bincount(task.train.s, minlength=task.n_groups) / len(task.train)
    noisy = np.array(info["marginals"][0])
    assert np.abs(noisy - true).max() < 0.1
    assert not np.allclose(noisy, true)


def test_lambda_zero_releases_no_w_and_no_counts(task):
    full = get_method("dp-fermi", epochs=2).fit(
        task, PrivacyBudget(1.0), FairnessSpec("demographic_parity", 0.0), seed=0
    )
    assert full.info["releases_per_step"] == 1 and len(full.ledger.entries) == 1
    sensitive = get_method("dp-fermi", epochs=2, privacy_notion="sensitive-attribute").fit(
        task, PrivacyBudget(1.0), FairnessSpec("demographic_parity", 0.0), seed=0
    )
    assert sensitive.ledger.epsilon(1e-5) == 0.0  # nothing group-dependent was released


def test_sensitive_attribute_notion_is_labelled_and_its_paper_analysis_reported(task):
    spec = FairnessSpec("demographic_parity", 1.0)
    worst = get_method("dp-fermi", epochs=3, privacy_notion="sensitive-attribute")
    fitted = worst.fit(task, PrivacyBudget(1.0), spec, seed=0)
    assert fitted.privacy_notion == "sensitive-attribute"
    assert fitted.target_accounting == "suite"
    assert fitted.ledger.epsilon(1e-5) <= 1.0
    # the paper's analysis would claim much less for the same noise
    assert fitted.info["epsilon_paper_analysis"] < 0.6
    paper_method = get_method(
        "dp-fermi", epochs=3, privacy_notion="sensitive-attribute", sensitive_accounting="paper"
    )
    paper = paper_method.fit(task, PrivacyBudget(1.0), spec, seed=0)
    assert paper.privacy_notion == "sensitive-attribute (paper analysis)"
    assert paper.target_accounting == "paper-analysis"
    assert paper.info["noise_multiplier"] < 0.75 * fitted.info["noise_multiplier"]
    assert paper.info["epsilon_paper_analysis"] <= 1.0 + 1e-3
    assert paper.ledger.epsilon(1e-5) > 1.0  # the truth is reported, not the claim


def test_public_marginals_are_exact_and_say_so(task):
    fitted = get_method("dp-fermi", epochs=2, marginals="public").fit(
        task, PrivacyBudget(1.0), FairnessSpec("equalized_odds", 1.0), seed=0
    )
    assert fitted.privacy_notion == "full+public-marginals"
    assert len(fitted.ledger.entries) == 1
    y, s = task.train.y, task.train.s
    for label, row in enumerate(fitted.info["marginals"]):  # p(s | y), one row per label
        true = np.bincount(s[y == label], minlength=task.n_groups) / (y == label).sum()
        assert np.allclose(row, true)
    assert len(fitted.info["w_norm"]) == task.n_classes  # one W per label


def test_lambda_buys_fairness_at_a_loose_budget(task):
    gaps = []
    for lam in (0.0, 8.0):
        fitted = get_method("dp-fermi", lr=0.5, lr_w=0.5, epochs=30).fit(
            task, PrivacyBudget(50.0), FairnessSpec("demographic_parity", lam), seed=0
        )
        pred = fitted.predict(task.test.X)
        gaps.append(metrics.demographic_parity_difference(pred, task.test.s))
    assert gaps[1] < 0.5 * gaps[0]


def test_random_iterate_is_reproducible_and_recorded(task):
    method = get_method("dp-fermi", epochs=2, iterate="random")
    spec = FairnessSpec("demographic_parity", 1.0)
    a = method.fit(task, PrivacyBudget(1.0), spec, seed=5)
    b = method.fit(task, PrivacyBudget(1.0), spec, seed=5)
    assert 1 <= a.info["returned_iterate"] <= a.info["steps"]
    assert a.info["returned_iterate"] == b.info["returned_iterate"]
    assert np.array_equal(a.predict_proba(task.test.X), b.predict_proba(task.test.X))


@pytest.mark.parametrize(
    ("hparams", "spec", "message"),
    [
        ({}, FairnessSpec("false_negative_rate", 1.0), "supports the constraints"),
        ({}, FairnessSpec("demographic_parity", None), "lambda values"),
        ({}, FairnessSpec("demographic_parity", -1.0), "outside its valid range"),
    ],
)
def test_bad_setups_are_config_errors(task, hparams, spec, message):
    with pytest.raises(ConfigError, match=message):
        get_method("dp-fermi", **hparams).fit(task, PrivacyBudget(1.0), spec, seed=0)


def test_paper_accounting_without_the_sensitive_notion_is_refused():
    with pytest.raises(ConfigError, match="sensitive_accounting"):
        get_method("dp-fermi", sensitive_accounting="paper")


def test_a_random_iterate_is_drawn_within_the_budget_of_noisy_counts(task):
    """With `calibrate: steps` the count release leaves fewer steps; the iterate is drawn
    among those, so no draw overspends (the runner would refuse such a trial)."""
    method = get_method(
        "dp-fermi",
        iterate="random",
        calibrate="steps",
        noise_multiplier=2.0,
        marginal_noise=5.0,
        batch_size=64,
    )
    spec = FairnessSpec("demographic_parity", 1.0)
    for seed in range(8):
        fitted = method.fit(task, PrivacyBudget(1.0), spec, seed=seed)
        assert fitted.info["returned_iterate"] <= fitted.info["steps"]
        assert fitted.ledger.epsilon(1e-5) <= 1.0
