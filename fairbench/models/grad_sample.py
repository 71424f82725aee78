"""Per-sample gradients, as contributions for the privacy session's clipped sums.

Linear models take a closed-form fast path: for any per-sample loss that depends on a sample
only through its logits z_i = W x_i + b, the per-sample gradient is g_i (x) [x_i, 1] with
g_i = dloss_i/dz_i, so ||grad_i|| = ||g_i|| sqrt(||x_i||^2 + 1) and the clipped sum is one
matrix product (`OuterProducts`); no per-sample gradient is ever materialised. Other models
use opacus's hook-based per-sample gradients (the generic engine, and the oracle the fast path
is tested against).
A loss object may offer `logit_grad(logits)`, the closed form of dloss_i/dz_i; otherwise one
autograd pass over the logits computes it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Literal

import torch
import torch.nn.functional as F
from opacus import GradSampleModule
from torch import nn

from fairbench.models import LogisticRegression
from fairbench.privacy.contributions import Contributions, OuterProducts, Rows

# opacus's hooks fire on a module whose inputs need no gradient (the data); torch warns each
# time, though the per-sample parameter gradients are exactly what is wanted.
warnings.filterwarnings("ignore", message="Full backward hook is firing", category=UserWarning)

PerSampleLoss = Callable[[torch.Tensor], torch.Tensor]  # logits (B, K) -> losses (B,)


def class_softmax(logits: torch.Tensor) -> torch.Tensor:
    """softmax over the class axis (the last) of (..., B, K) logits, computed with the classes
    on a leading axis: torch's last-axis softmax is ten times slower for a handful of classes."""
    return torch.softmax(logits.transpose(-1, -2).contiguous(), dim=-2).transpose(-1, -2)


def one_hot(labels: torch.Tensor, classes: int, dtype: torch.dtype) -> torch.Tensor:
    """(..., B) integer labels -> (..., B, classes) one-hot rows."""
    return (labels.unsqueeze(-1) == torch.arange(classes, device=labels.device)).to(dtype)


class CrossEntropy:
    """Per-sample cross-entropy against integer labels y (..., B), with its closed-form logit
    gradient softmax(z) - onehot(y), which spares the linear fast path an autograd pass."""

    def __init__(self, y: torch.Tensor) -> None:
        self.y = y

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """logits (..., B, K) -> losses (..., B)."""
        losses = F.cross_entropy(logits.flatten(0, -2), self.y.flatten(), reduction="none")
        return losses.view(self.y.shape)

    def logit_grad(self, logits: torch.Tensor) -> torch.Tensor:
        return class_softmax(logits) - one_hot(self.y, logits.shape[-1], logits.dtype)


class PerSampleGradients:
    """Each record's gradient of its loss for one model, as `Contributions` for a clipped-sum
    mechanism: factored outer products on the linear fast path, opacus's per-sample gradients
    (one tensor per parameter, in `parameters()` order) otherwise."""

    def __init__(self, model: nn.Module, engine: Literal["auto", "opacus"] = "auto") -> None:
        self.model = model
        self.linear = (
            model.linear if engine == "auto" and isinstance(model, LogisticRegression) else None
        )
        self._gsm = (
            None if self.linear is not None else GradSampleModule(model, loss_reduction="sum")
        )

    def __call__(
        self, x: torch.Tensor, per_sample_loss: PerSampleLoss, logits: torch.Tensor | None = None
    ) -> Contributions:
        """`logits`, when the caller already has them for `x` at the current parameters, spare
        the linear path a forward pass."""
        if self.linear is not None:
            return self._linear(self.linear, x, per_sample_loss, logits)
        if x.shape[0] == 0:  # a Poisson batch may be empty: no record contributes
            return Rows([p.new_zeros((0, *p.shape)) for p in self.model.parameters()])
        return self._generic(self._gsm, x, per_sample_loss)

    def _linear(self, linear: nn.Linear, x, per_sample_loss, logits) -> OuterProducts:
        if logits is None:
            with torch.no_grad():
                logits = linear(x)
        logits = logits.detach()
        closed_form = getattr(per_sample_loss, "logit_grad", None)
        if closed_form is not None:
            g = closed_form(logits)
        else:
            logits.requires_grad_(True)
            (g,) = torch.autograd.grad(per_sample_loss(logits).sum(), logits)
        return OuterProducts(g, x)

    def _generic(self, gsm: GradSampleModule, x, per_sample_loss) -> Rows:
        params = [p for p in gsm.parameters() if p.requires_grad]
        for p in params:
            p.grad = None
            p.grad_sample = None
        per_sample_loss(gsm(x)).sum().backward()
        rows = Rows([p.grad_sample for p in params])
        for p in params:
            p.grad = None
            p.grad_sample = None
        return rows
