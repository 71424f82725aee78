"""Model classes shared by every method, so comparisons use the same hypothesis class."""

from __future__ import annotations

from typing import Literal

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


def build_model(kind: ModelKind, n_features: int, n_classes: int, hidden: int = 32) -> nn.Module:
    if kind == "logistic":
        return LogisticRegression(n_features, n_classes)
    return MLP(n_features, n_classes, hidden)
