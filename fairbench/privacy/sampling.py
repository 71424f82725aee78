"""Batch samplers: Poisson sampling (what the accountant's amplification assumes) and shuffled
epochs (non-private trials). Reached through the privacy session, which numbers the batches."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch


def shuffled_batches(
    n: int, batch_size: int, gen: torch.Generator, device: torch.device
) -> Callable[[], torch.Tensor]:
    """Index batches from a fresh permutation each epoch (non-private sampling)."""
    state = {"perm": torch.empty(0, dtype=torch.int64, device=device), "pos": 0}

    def next_batch() -> torch.Tensor:
        if state["pos"] >= len(state["perm"]):
            state["perm"] = torch.randperm(n, generator=gen, device=device)
            state["pos"] = 0
        batch = state["perm"][state["pos"] : state["pos"] + batch_size]
        state["pos"] += batch_size
        return batch

    return next_batch


def poisson_batches(
    n: int, sampling_rate: float, gen: torch.Generator, device: torch.device
) -> Callable[[], torch.Tensor]:
    """Poisson sampling: every record joins each batch independently with `sampling_rate`,
    as the accountant's PoissonSampledDpEvent assumes (batch size varies; may be empty).

    Drawn in O(batch) rather than O(n): the gaps between included indices of a Bernoulli(q)
    process are i.i.d. Geometric(q), so cumulative sums of geometric draws are exactly the
    included indices.
    """
    if sampling_rate >= 1.0:
        everyone = torch.arange(n, device=device)
        return lambda: everyone
    chunk = math.ceil(n * sampling_rate + 6 * math.sqrt(n * sampling_rate) + 16)

    def next_batch() -> torch.Tensor:
        parts, last = [], -1.0
        while last < n:
            gaps = torch.empty(chunk, dtype=torch.float64, device=device)
            positions = last + torch.cumsum(gaps.geometric_(sampling_rate, generator=gen), 0)
            parts.append(positions)
            last = positions[-1].item()
        positions = parts[0] if len(parts) == 1 else torch.cat(parts)
        return positions[positions < n].long()

    return next_batch
