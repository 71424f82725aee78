"""Models of several trials trained as one tensor program (a leading trial axis T).

`StackedLinear` holds T logistic regressions as one (T, K, d) weight and (T, K) bias; each
trial's own `nn.Linear` keeps views into them, so an update of the stack trains every trial's
model in place and the trained models need no copying out. Its per-sample gradients are the
closed-form outer products (`StackedOuterProducts`) of `fairbench.models.grad_sample`. A
round of fewer trials than the stack (the first k: a stack of several configurations, whose
shorter plans are done) reads and updates the first k trials' parameters only.
`OneModel` is any other model, one trial at a time (opacus's per-sample gradients), behind
the same interface, so a method's step is written once for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from fairbench.models import LogisticRegression, ModelKind
from fairbench.models.grad_sample import PerSampleGradients
from fairbench.privacy.contributions import Contributions, StackedOuterProducts


@dataclass(frozen=True)
class OneTrial:
    """The contributions of a stack of one trial, in any shape (`trial(0)` gives them)."""

    contributions: Contributions

    def trial(self, t: int) -> Contributions:
        assert t == 0
        return self.contributions


class StackedLinear:
    """T logistic regressions trained together (see the module docstring)."""

    def __init__(self, models: list[LogisticRegression]) -> None:
        layers = [m.linear for m in models]
        self.weight = torch.stack([layer.weight.detach() for layer in layers])
        self.bias = torch.stack([layer.bias.detach() for layer in layers])
        for t, layer in enumerate(layers):
            layer.weight.data = self.weight[t]
            layer.bias.data = self.bias[t]

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """(k, B, d) -> (k, B, K): the first k trials' (all T where k = T)."""
        k = x.shape[0]
        return torch.baddbmm(
            first(self.bias, k).unsqueeze(1), x, first(self.weight, k).transpose(1, 2)
        )

    def contributions(self, x, loss, logits, rows, x_sq=None) -> StackedOuterProducts:
        """Each record's gradient of `loss` (whose `logit_grad` maps (T, B, K) logits to
        dloss/dlogits) as outer products; padding rows (`rows.mask` False) contribute nothing.
        `x_sq`: the rows' squared norms, if known."""
        return StackedOuterProducts.masked(loss.logit_grad(logits), x, rows.mask, rows.sizes, x_sq)

    @torch.no_grad()
    def descend(self, sums: list[torch.Tensor], step: float | torch.Tensor) -> None:
        """parameters -= step * sums, per trial, for the first k trials (the sums' (k, ...));
        `step` one float, or each trial's own (k,)."""
        k = sums[0].shape[0]
        first(self.weight, k).sub_(trial_axis(step, 3) * sums[0])
        first(self.bias, k).sub_(trial_axis(step, 2) * sums[1])


def first(values: torch.Tensor, k: int) -> torch.Tensor:
    """The first k trials' rows of `values` (a round's trials): `values` itself when it has
    k rows, so a round of every trial slices nothing."""
    return values if values.shape[0] == k else values[:k]


def trial_axis(value: float | torch.Tensor, dims: int) -> float | torch.Tensor:
    """A float as it is; per-trial values (k,) shaped (k, 1, ...) to broadcast over `dims`
    dimensions."""
    if isinstance(value, torch.Tensor):
        return value.view(-1, *[1] * (dims - 1))
    return value


class OneModel:
    """One trial's model of any kind behind `StackedLinear`'s interface (T = 1)."""

    def __init__(self, model: nn.Module, engine: Literal["auto", "opacus"] = "auto") -> None:
        self.model = model
        self.per_sample = PerSampleGradients(model, engine)
        self.params = list(model.parameters())

    @torch.no_grad()
    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x[0]).unsqueeze(0)

    def contributions(self, x, loss, logits, rows, x_sq=None) -> OneTrial:
        """Each record's gradient; a padding row (`rows.mask` False: a device's fixed-size
        batch) has its loss multiplied by 0, so its gradient is exactly 0 and it contributes
        nothing to a clipped sum (a copy of a real record would otherwise count again)."""
        mask = None if rows.mask is None else rows.mask[0].to(logits.dtype)

        def per_record(z: torch.Tensor) -> torch.Tensor:
            losses = loss(z.unsqueeze(0)).squeeze(0)
            return losses if mask is None else losses * mask

        return OneTrial(self.per_sample(x[0], per_record, logits=logits[0]))

    @torch.no_grad()
    def descend(self, sums: list[torch.Tensor], step: float | torch.Tensor) -> None:
        scale = step[0] if isinstance(step, torch.Tensor) else step
        for p, g in zip(self.params, sums, strict=True):
            p.sub_(scale * g[0])


def stack_models(models: list[nn.Module], engine: Literal["auto", "opacus"] = "auto"):
    """`StackedLinear` for logistic regressions on the closed-form path, else `OneModel`
    (which takes one trial: `stackable` says whether a stack may hold more)."""
    logistic = [m for m in models if isinstance(m, LogisticRegression)]
    if engine == "auto" and len(logistic) == len(models) > 0:
        return StackedLinear(logistic)
    if len(models) != 1:
        raise ValueError(f"{type(models[0]).__name__} models train one trial at a time")
    return OneModel(models[0], engine)


def stackable(kind: ModelKind, engine: Literal["auto", "opacus"] = "auto") -> bool:
    """Whether models of `kind` train in stacks of more than one trial."""
    return kind == "logistic" and engine == "auto"
