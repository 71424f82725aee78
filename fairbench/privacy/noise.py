"""Noise for the suite's mechanisms, drawn from a seeded torch generator.

The noise comes from torch's seeded PRNG so that trials are reproducible; a deployment that
must resist an adversary who knows the seed (or floating-point attacks on the samplers) needs a
cryptographic sampler instead.
"""

from __future__ import annotations

import torch


def add_gaussian_noise(
    sums: list[torch.Tensor], std: float, generator: torch.Generator
) -> list[torch.Tensor]:
    """Each sum plus i.i.d. N(0, std^2) noise in every coordinate."""
    return [
        s + std * torch.randn(s.shape, generator=generator, device=s.device, dtype=s.dtype)
        for s in sums
    ]


def add_laplace_noise(
    values: torch.Tensor, scale: float, generator: torch.Generator
) -> torch.Tensor:
    """`values` plus i.i.d. Laplace(0, scale) noise, by inverse-CDF sampling."""
    u = torch.rand(values.shape, generator=generator, device=values.device, dtype=values.dtype)
    u = (u - 0.5).clamp(-0.5 + 1e-7, 0.5 - 1e-7)
    return values - scale * torch.sign(u) * torch.log1p(-2.0 * u.abs())
