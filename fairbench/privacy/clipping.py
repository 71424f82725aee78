"""Per-sample clipping: bounding each record's contribution before noise is added."""

from __future__ import annotations

import torch


def clip_factors(norms: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Per-sample scale factors min(1, C / ||g_i||): clipped gradients have norm <= C."""
    return (max_norm / (norms + 1e-12)).clamp(max=1.0)


def clip_and_sum(per_sample: list[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    """Sum of per-sample gradients, each clipped to joint l2 norm `max_norm` across all
    parameters. `per_sample[j]` has the batch on its first axis."""
    if per_sample[0].shape[0] == 0:
        return [torch.zeros_like(g[0]) for g in per_sample]
    flat = torch.cat([g.reshape(g.shape[0], -1) for g in per_sample], dim=1)
    factors = clip_factors(flat.norm(dim=1), max_norm)
    return [torch.einsum("b,b...->...", factors, g) for g in per_sample]
