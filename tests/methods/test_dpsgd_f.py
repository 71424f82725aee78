"""dpsgd-f and dpsgd-global-adapt: each ledger is the composition of its two releases on one
Poisson batch (checked against a hand-built DpEvent and the suite's epsilon), the count
releases' sensitivity, one step with the session's noise switched off equals the update by
hand (so every noisy value came from the session), and the clipping behaves as the papers say."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from dp_accounting import dp_event

from fairbench.datasets import get_dataset
from fairbench.methods import FairnessSpec, get_method
from fairbench.methods.dpsgd_f import count_cells, group_bounds
from fairbench.methods.dpsgd_global_adapt import global_factors
from fairbench.methods.engine import rounds
from fairbench.methods.plan import DataShape
from fairbench.methods.trial import Trial
from fairbench.privacy import PrivacyBudget, PrivacyLedger, epsilon
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.noise import observe_releases
from fairbench.privacy.session import PrivacySession, canonical
from fairbench.privacy.stacked import gaussian_counts

DP = "demographic_parity"
SMALL = {"epochs": 1, "batch_size": 64}
METHODS = ["dpsgd-f", "dpsgd-global-adapt"]


@pytest.fixture(scope="module")
def small():
    return get_dataset("synthetic", n_rows=600).load(seed=0)


def composed(q: float, sigma: float, sigma_c: float, steps: int) -> dp_event.DpEvent:
    """Both releases on one Poisson batch, `steps` times: the events built by hand."""
    inner = dp_event.ComposedDpEvent(
        [dp_event.GaussianDpEvent(sigma), dp_event.GaussianDpEvent(sigma_c)]
    )
    return dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, inner), steps)


@pytest.mark.parametrize("name", METHODS)
def test_the_ledger_composes_the_count_and_the_gradient_on_one_batch(name, small):
    fitted = get_method(name, **SMALL).fit(small, PrivacyBudget(1.0), FairnessSpec(DP), seed=0)
    q, sigma, steps = (fitted.info[k] for k in ("sampling_rate", "noise_multiplier", "steps"))
    assert (q, steps) == (64 / 382, 6)
    assert sigma == pytest.approx(2.172, abs=1e-3)
    event = composed(q, sigma, 10.0, steps)
    assert canonical(fitted.ledger) == canonical(PrivacyLedger.of(("by hand", event)))
    spent = fitted.ledger.epsilon(1e-5)
    assert spent == pytest.approx(epsilon(event, 1e-5), rel=1e-9) and spent <= 1.0
    # two Gaussians on one batch are one Gaussian of noise (sigma^-2 + sigma_c^-2)^(-1/2)
    merged = sgd_steps(q, (sigma**-2 + 10.0**-2) ** -0.5, steps)
    assert spent == pytest.approx(epsilon(merged, 1e-5), rel=1e-3)
    # the count costs something, and the authors' accounting (each release on a batch of its
    # own) under-reports it
    alone = epsilon(sgd_steps(q, sigma, steps), 1e-5)
    apart = epsilon(
        dp_event.ComposedDpEvent([sgd_steps(q, sigma, steps), sgd_steps(q, 10.0, steps)]), 1e-5
    )
    assert alone < apart < spent
    assert fitted.budget.noise == {"gradient": sigma, "counts": 10.0}


@pytest.mark.parametrize("name", METHODS)
def test_steps_calibration_fixes_both_noises(name, small):
    method = get_method(name, **SMALL, calibrate="steps", noise_multiplier=2.0)
    fitted = method.fit(small, PrivacyBudget(1.0), FairnessSpec(DP), seed=0)
    steps = fitted.info["steps"]
    assert steps == 4
    q = fitted.info["sampling_rate"]
    assert epsilon(composed(q, 2.0, 10.0, steps), 1e-5) <= 1.0
    assert epsilon(composed(q, 2.0, 10.0, steps + 1), 1e-5) > 1.0


def test_a_count_release_alone_beyond_the_target_is_refused(small):
    method = get_method("dpsgd-f", **SMALL, count_noise_multiplier=0.4)
    with pytest.raises(Exception, match="count releases alone"):
        method.fit(small, PrivacyBudget(1.0), FairnessSpec(DP), seed=0)


def test_count_vectors_move_by_at_most_one_in_l2_when_a_record_is_added_or_removed():
    """Exact counts (a non-private session) of a batch, and of the batch less each record."""
    gen = torch.Generator().manual_seed(0)
    group = torch.randint(0, 3, (1, 40), generator=gen)
    norms = torch.rand((1, 40), generator=gen) * 2
    counters = [PrivacySession(0).gaussian_counts("counts", 10.0)]
    everyone = torch.ones((1, 40), dtype=torch.bool)
    for cells, n_cells in ((count_cells(group, norms, 1.0), 6), (torch.zeros_like(group), 1)):
        full = gaussian_counts(counters, cells, everyone, n_cells, [None])  # type: ignore[list-item]
        assert float(full.sum()) == 40
        for i in range(40):
            less = everyone.clone()
            less[0, i] = False
            fewer = gaussian_counts(counters, cells, less, n_cells, [None])  # type: ignore[list-item]
            assert float(torch.linalg.norm(full - fewer)) == 1.0
    with pytest.raises(TypeError, match="bool mask"):
        gaussian_counts(counters, group, everyone.double(), 6, [None])  # type: ignore[list-item]


def test_group_bounds_follow_the_authors_rule():
    # group 0: 10 unclipped, 0 clipped; group 1: 5 and 5 (noise rounded down, floored at 0)
    noisy = torch.tensor([[10.7, -3.0, 5.2, 5.9]], dtype=torch.float64)
    bounds = group_bounds(noisy, 0.5)
    assert bounds.tolist()[0] == pytest.approx([0.5, 1.5])  # a = (0, 0.5), mean 0.25
    empty = group_bounds(torch.tensor([[0.0, 0.0, 4.0, 0.0]], dtype=torch.float64), 0.5)
    assert empty.tolist()[0] == pytest.approx([1.5, 0.5])  # no record: a = 1


def test_global_factors_scale_below_the_bound_and_clip_above():
    norms = torch.tensor([[0.1, 1.0, 2.0, 3.0]])
    factors = global_factors(norms, 0.5, torch.tensor([2.0]))
    assert factors.tolist()[0] == pytest.approx([0.25, 0.25, 0.25, 0.5 / 3])
    assert (norms * factors).tolist()[0] == pytest.approx([0.025, 0.25, 0.5, 0.5])
    below = global_factors(norms, 0.5, torch.tensor([0.25]))  # Z < C: plain clipping to C
    assert below.tolist()[0] == pytest.approx([1.0, 0.5, 0.25, 0.5 / 3])


def one_round(name: str, task, **hparams):
    """A one-trial program of `name` and its first Poisson round, the plan submitted."""
    method = get_method(name, **SMALL, **hparams)
    session = PrivacySession(0, budget=PrivacyBudget(1.0))
    trial = Trial(task, FairnessSpec(DP), session)
    plan = method.plan(DataShape.of(task), session.budget, trial.fairness, 0)
    session.submit_plan(plan.ledger, method.guarantee())
    program = method.program([trial], plan)
    return plan, program, rounds([session], len(task.train), plan)()


def by_hand(task, indices, weight, bias):
    """The batch's per-record gradients (flattened [dW, db]) by autograd, one at a time."""
    x = torch.as_tensor(task.train.X[indices], dtype=torch.float32)
    y = torch.as_tensor(task.train.y[indices], dtype=torch.int64)
    grads = []
    for i in range(len(indices)):
        w, b = weight.clone().requires_grad_(), bias.clone().requires_grad_()
        loss = F.cross_entropy((x[i] @ w.T + b).unsqueeze(0), y[i : i + 1])
        gw, gb = torch.autograd.grad(loss, (w, b))
        grads.append(torch.cat([gw.reshape(-1), gb]))
    return torch.stack(grads).double()


def exact_step(program, round_):
    """Run one step with every release returned exact; the (kind, exact, noisy) releases."""
    released: list = []

    def exact(kind, value, noisy):
        released.append((kind, value, noisy))
        return value

    with observe_releases(exact):
        program.step(round_)
    return released


def test_dpsgd_f_step_without_noise_is_the_per_group_clipped_sum(small):
    plan, program, round_ = one_round("dpsgd-f", small)
    model = program.models[0]
    weight, bias = model.linear.weight.detach().clone(), model.linear.bias.detach().clone()
    released = exact_step(program, round_)
    indices = round_.batches[0].indices.numpy()
    grads = by_hand(small, indices, weight, bias)
    norms = grads.norm(dim=1).numpy()
    groups = small.train.s[indices]
    clipped = np.array(
        [
            [np.sum((groups == k) & (norms <= 0.5)), np.sum((groups == k) & (norms > 0.5))]
            for k in range(2)
        ]
    )
    share = clipped[:, 1] / clipped.sum(axis=1)
    bounds = 0.5 * (1 + share / (share.mean() + 1e-8))
    factors = np.minimum(1.0, bounds[groups] / norms)
    total = (torch.as_tensor(factors).unsqueeze(1) * grads).sum(dim=0)
    step = 1.0 / (plan.loop.sampling_rate * len(small.train))
    expected_w = weight.double() - step * total[:-2].view_as(weight)
    expected_b = bias.double() - step * total[-2:]
    assert torch.allclose(model.linear.weight.double(), expected_w, atol=1e-5)
    assert torch.allclose(model.linear.bias.double(), expected_b, atol=1e-5)
    # the counts, then the gradient sum, each drawn by its mechanism (exact: the observer's)
    (kind_c, counts, noisy_counts), (kind_g, _, _) = released
    assert (kind_c, kind_g) == ("gaussian", "gaussian")
    assert counts[0].tolist() == clipped.reshape(-1).tolist()
    assert not torch.equal(noisy_counts[0], counts[0])
    assert sorted(clipped.sum(axis=1)) == sorted(np.bincount(groups, minlength=2))


def test_global_adapt_step_without_noise_scales_by_c_over_z_and_adapts_z(small):
    hp = {"clip_norm": 0.2, "initial_bound": 0.5}
    plan, program, round_ = one_round("dpsgd-global-adapt", small, **hp)
    model = program.models[0]
    weight, bias = model.linear.weight.detach().clone(), model.linear.bias.detach().clone()
    released = exact_step(program, round_)
    indices = round_.batches[0].indices.numpy()
    grads = by_hand(small, indices, weight, bias)
    norms = grads.norm(dim=1).numpy()
    above = int(np.sum(norms > 0.5))
    assert 0 < above < len(indices)  # both branches run
    factors = np.where(norms <= 0.5, 0.2 / 0.5, np.minimum(1.0, 0.2 / norms))
    total = (torch.as_tensor(factors).unsqueeze(1) * grads).sum(dim=0)
    expected = plan.loop.sampling_rate * len(small.train)
    expected_w = weight.double() - total[:-2].view_as(weight) / expected
    assert torch.allclose(model.linear.weight.double(), expected_w, atol=1e-5)
    counts = released[0][1][0]
    assert counts.tolist() == [above]
    final = program.outcomes()[0].info["final_bound"]
    assert final == pytest.approx(0.5 * math.exp(above / expected - 0.1))


def label_noise(task, group: int, share: float, seed: int = 0):
    """`task` with a share of `group`'s training labels flipped: its gradients are larger."""
    rng = np.random.default_rng(seed)
    y = task.train.y.copy()
    flip = (task.train.s == group) & (rng.random(len(y)) < share)
    y[flip] = 1 - y[flip]
    return replace(task, train=replace(task.train, y=y))


def test_dpsgd_f_gives_the_group_with_more_clipped_gradients_a_larger_bound(small):
    noisy = label_noise(small, group=1, share=0.4)
    fitted = get_method("dpsgd-f", epochs=5, batch_size=64, base_clip=2.0).fit(
        noisy, PrivacyBudget(4.0), FairnessSpec(DP), seed=0
    )
    bounds = fitted.info["mean_group_clip"]
    assert bounds == pytest.approx([3.199, 4.801], abs=1e-3)  # within [C0, 3 C0]: two groups


def test_global_adapt_moves_z_to_the_top_of_the_gradient_norms(small):
    fitted = get_method("dpsgd-global-adapt", epochs=10, batch_size=128).fit(
        small, PrivacyBudget(4.0), FairnessSpec(DP), seed=0
    )
    z = fitted.info["final_bound"]
    model = fitted.model
    indices = np.arange(len(small.train))
    grads = by_hand(small, indices, model.linear.weight.detach(), model.linear.bias.detach())
    top = float(np.quantile(grads.norm(dim=1).numpy(), 0.9))
    assert z < 50.0 / 10  # from Z_0 = 50
    assert top / 2 < z < top * 2


@pytest.mark.parametrize("name", METHODS)
def test_an_mlp_trains_through_opacus_gradients_with_the_same_ledger(name, small):
    method = get_method(name, **SMALL, model="mlp")
    fitted = method.fit(small, PrivacyBudget(1.0), FairnessSpec(DP), seed=0)
    linear = get_method(name, **SMALL).fit(small, PrivacyBudget(1.0), FairnessSpec(DP), seed=0)
    assert canonical(fitted.ledger) == canonical(linear.ledger)
    error = float((fitted.predict(small.test.X) != small.test.y).mean())
    assert error < 0.5
