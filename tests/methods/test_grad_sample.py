"""The linear fast path must equal opacus's per-sample gradients, clipped the same way."""

import pytest
import torch
import torch.nn.functional as F

from fairbench.models import MLP, LogisticRegression
from fairbench.models.grad_sample import CrossEntropy
from tests.methods.clipping import ClippedGradients


def _model(cls, *args):
    torch.manual_seed(0)
    model = cls(*args)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    return model


def _data(n=48, d=7, k=3):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(n, d, generator=gen) * torch.linspace(0.1, 5, n)[:, None]
    y = torch.randint(0, k, (n,), generator=gen)
    return x, y


def per_sample_reference(model, x, loss, max_norm):
    """A plain loop: one backward per sample, clip, sum."""
    total = [torch.zeros_like(p) for p in model.parameters()]
    for i in range(len(x)):
        grads = torch.autograd.grad(loss(model(x[i : i + 1]), i).sum(), list(model.parameters()))
        norm = torch.sqrt(sum((g * g).sum() for g in grads))
        factor = min(1.0, max_norm / (norm.item() + 1e-12))
        total = [t + factor * g for t, g in zip(total, grads, strict=True)]
    return total


@pytest.mark.parametrize("max_norm", [0.01, 1.0, 1e6])
@pytest.mark.parametrize("loss_kind", ["cross_entropy", "weighted_logits"])
def test_linear_fast_path_equals_opacus_and_the_loop(max_norm, loss_kind):
    x, y = _data()
    weights = torch.linspace(-1, 2, 3)

    def loss(logits, rows):
        if loss_kind == "cross_entropy":
            return F.cross_entropy(logits, y[rows], reduction="none")
        return (torch.softmax(logits / 0.7, dim=1) * weights).sum(dim=1) ** 2

    fast = ClippedGradients(_model(LogisticRegression, 7, 3))(
        x, lambda z: loss(z, slice(None)), max_norm
    )
    generic = ClippedGradients(_model(LogisticRegression, 7, 3), engine="opacus")(
        x, lambda z: loss(z, slice(None)), max_norm
    )
    loop = per_sample_reference(
        _model(LogisticRegression, 7, 3), x, lambda z, i: loss(z, slice(i, i + 1)), max_norm
    )
    for a, b, c in zip(fast, generic, loop, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
        assert torch.allclose(a, c, rtol=1e-4, atol=1e-6)


def test_clipped_contributions_never_exceed_the_bound():
    x, y = _data(n=1)
    engine = ClippedGradients(_model(LogisticRegression, 7, 3))
    for i in range(20):
        xi = x * (10.0**i / 1e4)
        grads = engine(xi, lambda z: F.cross_entropy(z, y, reduction="none"), 0.3)
        assert torch.sqrt(sum((g * g).sum() for g in grads)) <= 0.3 + 1e-6


def test_generic_engine_handles_an_mlp_and_an_empty_batch():
    x, y = _data()
    engine = ClippedGradients(_model(MLP, 7, 3, 5))
    ours = engine(x, lambda z: F.cross_entropy(z, y, reduction="none"), 0.5)
    loop = per_sample_reference(
        _model(MLP, 7, 3, 5),
        x,
        lambda z, i: F.cross_entropy(z, y[i : i + 1], reduction="none"),
        0.5,
    )
    for a, b in zip(ours, loop, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    empty = engine(x[:0], lambda z: F.cross_entropy(z, y[:0], reduction="none"), 1)
    assert all(torch.count_nonzero(g) == 0 for g in empty)


@pytest.mark.parametrize("max_norm", [0.05, 1e6])
def test_closed_form_cross_entropy_equals_opacus(max_norm):
    x, y = _data()
    loss = CrossEntropy(y)
    z = torch.randn(len(y), 3, requires_grad=True)
    (auto,) = torch.autograd.grad(loss(z).sum(), z)
    assert torch.allclose(loss.logit_grad(z.detach()), auto, atol=1e-6)
    fast = ClippedGradients(_model(LogisticRegression, 7, 3))(x, loss, max_norm)
    generic = ClippedGradients(_model(LogisticRegression, 7, 3), engine="opacus")(x, loss, max_norm)
    for a, b in zip(fast, generic, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
