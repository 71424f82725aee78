"""Model classes shared by every method, so comparisons use the same hypothesis class."""

from __future__ import annotations

import math
from typing import Literal, overload

import torch
from torch import nn

ModelKind = Literal["logistic", "mlp"]


class LogisticRegression(nn.Module):
    """Multinomial logistic regression; binary classification is the two-class case."""

    def __init__(self, n_features: int, n_classes: int) -> None:
        super().__init__()
        self.linear = nn.Linear(n_features, n_classes)

    def forward(self, x):
        return self.linear(x)


class MLP(nn.Module):
    """One hidden layer with ReLU; per-sample gradients go through opacus's generic engine."""

    def __init__(self, n_features: int, n_classes: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(n_features, hidden), nn.ReLU(), nn.Linear(hidden, n_classes)
        )

    def forward(self, x):
        return self.net(x)


@overload
def build_model(
    kind: Literal["logistic"],
    n_features: int,
    n_classes: int,
    hidden: int = 32,
    generator: torch.Generator | None = None,
) -> LogisticRegression: ...


@overload
def build_model(
    kind: ModelKind,
    n_features: int,
    n_classes: int,
    hidden: int = 32,
    generator: torch.Generator | None = None,
) -> nn.Module: ...


def build_model(
    kind: ModelKind,
    n_features: int,
    n_classes: int,
    hidden: int = 32,
    generator: torch.Generator | None = None,
) -> nn.Module:
    """The model with torch's default initialisation drawn from `generator` (on its device):
    built on the meta device first, so the global torch RNG is neither read nor advanced."""
    generator = generator or torch.Generator()
    with torch.device("meta"):
        model = (
            LogisticRegression(n_features, n_classes)
            if kind == "logistic"
            else MLP(n_features, n_classes, hidden)
        )
    model = model.to_empty(device=generator.device)
    for layer in model.modules():
        if isinstance(layer, nn.Linear):
            reset_linear(layer, generator)
    return model


@torch.no_grad()
def reset_linear(layer: nn.Linear, generator: torch.Generator) -> None:
    """nn.Linear's own initialisation (uniform in +-1/sqrt(fan_in) for weights and bias),
    from `generator`."""
    bound = 1 / math.sqrt(layer.in_features) if layer.in_features else 0.0
    layer.weight.uniform_(-bound, bound, generator=generator)
    layer.bias.uniform_(-bound, bound, generator=generator)
