"""Clipped per-sample gradient sums for tests: the session's clipping rule applied to a
model's per-sample gradients (what a `gaussian_sum` mechanism computes before its noise)."""

from __future__ import annotations

from fairbench.models.grad_sample import PerSampleGradients
from fairbench.privacy.contributions import clipped_sum


class ClippedGradients:
    def __init__(self, model, engine="auto") -> None:
        self.per_sample = PerSampleGradients(model, engine)

    def __call__(self, x, loss, max_norm, logits=None):
        return clipped_sum(self.per_sample(x, loss, logits=logits), max_norm)
