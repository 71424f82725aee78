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
from tests.methods.clipping import ClippedGradients


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


# ----- parity switches (the authors' choices; module docstring) -------------------------------

AUTHORS_NOISE = {"noise": "closed-form", "rho": 0.3, "parity_unaccounted": True}


def test_ermi_first_group_is_the_authors_one_by_one_w():
    """ermi: first-group keeps W's (group 0, positive class) entry only: psi_i is then the
    authors' -Tr(W p_yhat W^T) + 2 Tr(W p_yhat_s P_s^(-1/2)) - 1 with a 1 x 1 W (their trace
    of a 1 x 2 matrix keeps group 0 only), and with class 0's logit at 0 (logits: sigmoid)
    the loss and its logit gradient are their BCE + lambda psi."""
    gen = torch.Generator().manual_seed(7)
    b, lam, w, p = 16, 0.8, 0.6, torch.tensor([0.7, 0.3])
    z = torch.randn(b, generator=gen) * 2
    y = torch.randint(0, 2, (b,), generator=gen)
    s = torch.randint(0, 2, (b,), generator=gen)
    theirs = []
    zr = z.clone().requires_grad_(True)
    for i in range(b):  # their script, one record at a time
        y_hat = torch.sigmoid(zr[i]).view(1, 1)
        onehot = torch.nn.functional.one_hot(s[i], 2).double().view(1, 2)
        big_w, p_s = torch.tensor([[w]], dtype=torch.float64), torch.diag(p.double().rsqrt())
        p_yhat, p_yhat_s = torch.diag(y_hat.view(1)).double(), y_hat.double().T @ onehot
        fermi_loss = (
            -torch.trace(big_w @ p_yhat @ big_w.T) + 2 * torch.trace(big_w @ p_yhat_s @ p_s) - 1
        )
        bce = torch.nn.functional.binary_cross_entropy_with_logits(zr[i], y[i].float())
        theirs.append(bce + lam * fermi_loss)
    theirs = torch.stack(theirs)
    (dz,) = torch.autograd.grad(theirs.sum(), zr)
    w_rows = torch.zeros(b, 2, 2)
    w_rows[:, 0, 1] = w
    logits = torch.stack([torch.zeros(b), z], dim=1)
    ours = fermi.FermiObjective(y, s, w_rows, p.rsqrt()[s], lam, trained=torch.tensor([0.0, 1.0]))
    assert torch.allclose(ours(logits).double(), theirs.detach(), atol=1e-5)
    assert torch.allclose(ours.logit_grad(logits)[:, 1], dz, atol=1e-5)
    assert torch.equal(ours.logit_grad(logits)[:, 0], torch.zeros(b))  # class 0 never trains


def test_ermi_first_group_trains_only_that_entry(task):
    spec = FairnessSpec("equalized_odds", 2.0)
    fitted = get_method("dp-fermi", epochs=2, ermi="first-group", w_diameter=100.0).fit(
        task, PrivacyBudget(2.0), spec, seed=0
    )
    entries, norms = fitted.info["w_first_group"], fitted.info["w_norm"]
    assert len(entries) == task.n_classes  # one 1 x 1 W per label cell
    assert all(e != 0 for e in entries)
    assert norms == pytest.approx([abs(e) for e in entries])  # every other entry stayed 0
    assert fitted.info["ermi"] == "first-group" and fitted.ledger.epsilon(1e-5) <= 2.0
    from fairbench.methods.plan import DataShape

    for switch in ({"ermi": "first-group"}, {"logits": "sigmoid"}):
        with pytest.raises(ConfigError, match="binary"):  # a three-class task
            get_method("dp-fermi", **switch).plan(DataShape(900, 5, 3, 2), PrivacyBudget(1.0), spec)


def test_batch_mean_clipping_clips_at_the_batch_size_times_the_clip(task, monkeypatch):
    """clipping: batch-mean clips each record's gradient divided by B to clip_norm: a record
    may contribute up to clip_norm B to the sum, so the per-record bound is not clip_norm; the
    mechanisms say so (their sensitivity) and the run stays accounted (same ledger, calibrated
    noise B-fold on the mean gradient)."""
    from fairbench.privacy.session import PrivacySession

    clips = []
    real = PrivacySession.gaussian_sum

    def spy(self, label, clip, noise_multiplier, group=None):
        clips.append((label, clip))
        return real(self, label, clip, noise_multiplier, group)

    monkeypatch.setattr(PrivacySession, "gaussian_sum", spy)
    hp = {"epochs": 2, "batch_size": 50, "clip_norm": 1.5, "clip_norm_w": 0.5}
    spec = FairnessSpec("demographic_parity", 1.0)
    fits = [
        get_method("dp-fermi", **hp, clipping=c).fit(task, PrivacyBudget(1.0), spec, seed=0)
        for c in ("per-sample", "batch-mean")
    ]
    batch = 50 / len(task.train) * len(task.train)
    assert [c for _, c in clips] == pytest.approx([1.5, 0.5, 1.5 * batch, 0.5 * batch])
    assert fits[1].ledger.to_json() == fits[0].ledger.to_json()
    assert fits[1].target_accounting == "suite" and fits[1].ledger.epsilon(1e-5) <= 1.0
    # one record with a gradient of norm 10: kept whole under batch-mean, cut to 1.5 otherwise
    from fairbench.privacy.contributions import Rows, clipped_sum

    record = Rows.of(torch.tensor([[6.0, 8.0]]))
    clip_ps, _ = get_method("dp-fermi", **hp).hparams.clips(batch)
    clip_bm, _ = get_method("dp-fermi", **hp, clipping="batch-mean").hparams.clips(batch)
    assert clipped_sum(record, clip_ps)[0].norm().item() == pytest.approx(1.5)
    assert clipped_sum(record, clip_bm)[0].norm().item() == pytest.approx(10.0)


def test_shuffled_batches_have_fixed_size_and_drop_the_remainder(task, monkeypatch):
    from fairbench.methods import engine
    from fairbench.privacy.sampling import shuffled_batches

    draw = shuffled_batches(10, 3, torch.Generator().manual_seed(0), torch.device("cpu"), True)
    for _ in range(2):  # two epochs: 3 batches of 3 distinct records each, one record out
        epoch = [draw() for _ in range(3)]
        assert [len(b) for b in epoch] == [3, 3, 3]
        assert len(set(torch.cat(epoch).tolist())) == 9
    sizes = []
    real = engine.shuffled_rounds

    def spy(sessions, n, batch_size, drop_last=False):
        next_round = real(sessions, n, batch_size, drop_last)

        def wrapped():
            round_ = next_round()
            sizes.append(round_.sizes[0])
            return round_

        return wrapped

    monkeypatch.setattr(engine, "shuffled_rounds", spy)
    n, batch = len(task.train), 700
    hp = {"epochs": 2, "batch_size": batch, "batches": "shuffled", "parity_unaccounted": True}
    fitted = get_method("dp-fermi", **hp).fit(
        task, PrivacyBudget(1.0), FairnessSpec("demographic_parity", 1.0), seed=0
    )
    assert fitted.info["steps"] == 2 * (n // batch) == len(sizes)
    assert set(sizes) == {batch}  # the n mod B records left over sit each epoch out
    assert fermi.shuffled_steps(2.0, n, batch) == 2 * (n // batch)


def test_closed_form_noise_is_theorem_3_3_as_the_authors_compute_it(task):
    n, batch, epochs, delta, rho = 4406, 1024, 200, 1 / 4406**2, 1405 / 4406
    std_theta, std_w, steps = fermi.closed_form_noise(n, batch, epochs, 1.0, delta, rho, 5.0, 5.0)
    assert steps == epochs * math.ceil(n / batch) == 1000
    expected = math.sqrt(16 * steps * math.log(1 / delta) / (n**2 * rho))
    assert std_w == pytest.approx(expected)
    assert std_theta == pytest.approx(5.0 * 5.0 * expected)
    # the authors' own run on Parkinsons (parity/authors_fermi.py): their Args.calculate_noise
    assert std_theta == pytest.approx(5.206600660494394, rel=1e-12)
    assert std_w == pytest.approx(0.2082640264197758, rel=1e-12)
    # fairbench puts that noise on the mean gradient: sigma clip / (q n) = std_theta
    lam, hp = 0.5, {"epochs": 2, "batch_size": 100, "clip_norm": 2.0, "w_diameter": 6.0}
    for clipping in ("per-sample", "batch-mean"):
        fitted = get_method("dp-fermi", **hp, **AUTHORS_NOISE, clipping=clipping).fit(
            task, PrivacyBudget(1.0), FairnessSpec("demographic_parity", lam), seed=0
        )
        info, q_n = fitted.info, 100.0
        clip_theta, clip_w = get_method("dp-fermi", **hp, clipping=clipping).hparams.clips(q_n)
        theirs = fermi.closed_form_noise(len(task.train), 100, 2, 1.0, 1e-5, 0.3, 2.0, 3.0)
        assert info["closed_form_std_theta"] == pytest.approx(theirs[0])
        assert info["noise_multiplier"] * clip_theta / q_n == pytest.approx(theirs[0])
        w_sigma = fitted.budget.noise["w_gradient"]
        assert lam * w_sigma * clip_w / q_n == pytest.approx(theirs[1])


@pytest.mark.parametrize(
    ("hparams", "message"),
    [
        ({"batches": "shuffled"}, "parity_unaccounted"),
        ({"noise": "closed-form", "rho": 0.3}, "parity_unaccounted"),
        ({"parity_unaccounted": True}, "goes with batches"),
        ({"noise": "closed-form", "parity_unaccounted": True}, "needs rho"),
        ({"rho": 0.3}, "read only with noise"),
        ({**AUTHORS_NOISE, "calibrate": "steps", "noise_multiplier": 2.0}, "calibrate: noise"),
    ],
)
def test_unaccounted_switches_are_refused_without_the_labelled_option(hparams, message):
    with pytest.raises(ConfigError, match=message):
        get_method("dp-fermi", **hparams)


def test_unaccounted_runs_say_so_and_report_an_infinite_epsilon(task):
    from dp_accounting import dp_event

    from fairbench.privacy import ledger_cache

    hp = {"epochs": 2, "batches": "shuffled", **AUTHORS_NOISE, "marginals": "public"}
    fitted = get_method("dp-fermi", **hp).fit(
        task, PrivacyBudget(1.0), FairnessSpec("demographic_parity", 1.0), seed=0
    )
    assert fitted.privacy_notion == (
        "full+public-marginals (not accounted: shuffled batches, closed-form noise)"
    )
    assert fitted.target_accounting == "not accounted"
    assert any(isinstance(e.event, dp_event.NonPrivateDpEvent) for e in fitted.ledger.entries)
    assert fitted.ledger.epsilon(1e-5) == math.inf
    assert ledger_cache.epsilon(fitted.ledger, 1e-5) == math.inf  # as the runner accounts it
    assert ledger_cache.cross_check(fitted.ledger, 1e-5)["problems"] == []
    # the same run without the marker would not be refused by epsilon alone: the session
    # itself refuses shuffled batches to a private trial whose plan does not declare it
    assert fitted.info["batches"] == "shuffled" and fitted.info["noise"] == "closed-form"


def test_logits_sigmoid_is_the_one_output_model(task):
    fitted = get_method("dp-fermi", epochs=2, logits="sigmoid").fit(
        task, PrivacyBudget(1.0), FairnessSpec("demographic_parity", 1.0), seed=0
    )
    linear = fitted.model.linear
    assert torch.count_nonzero(linear.weight[0]) == 0 and linear.bias[0].item() == 0.0
    x = torch.as_tensor(task.test.X[:50])
    expected = torch.sigmoid(x @ linear.weight[1] + linear.bias[1]).detach().numpy()
    assert np.allclose(fitted.predict_proba(task.test.X[:50])[:, 1], expected, atol=1e-6)
    assert fitted.target_accounting == "suite" and fitted.ledger.epsilon(1e-5) <= 1.0


def test_w_init_normal_starts_w_from_the_trials_stream(task):
    from fairbench.streams import torch_stream

    hp = {"epochs": 1, "lr_w": 1e-9, "w_diameter": 100.0}
    spec = FairnessSpec("demographic_parity", 1.0)
    zero = get_method("dp-fermi", **hp).fit(task, PrivacyBudget(1.0), spec, seed=3)
    normal = get_method("dp-fermi", **hp, w_init="normal").fit(
        task, PrivacyBudget(1.0), spec, seed=3
    )
    start = torch.randn((1, task.n_groups, task.n_classes), generator=torch_stream(3, "w_init"))
    assert zero.info["w_norm"][0] < 1e-3
    assert normal.info["w_norm"] == pytest.approx(start.flatten(1).norm(dim=1).tolist(), rel=1e-4)
