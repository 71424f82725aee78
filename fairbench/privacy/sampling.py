"""Batch samplers: Poisson sampling (what the accountant's amplification assumes) and shuffled
epochs (non-private trials). Reached through the privacy session, which numbers the batches."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from fairbench.errors import FairbenchError
from fairbench.privacy.sync import DeviceChecks, host_reads_free


class PoissonShortfall(FairbenchError):
    """A device-side Poisson chunk did not reach the end of the data (see `poisson_batches`)."""


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


def poisson_chunk(n: int, sampling_rate: float) -> int:
    """Geometric gaps drawn per chunk: the expected batch size plus 6 standard deviations and
    16, so that one chunk reaches past n but with probability below 1e-9."""
    return math.ceil(n * sampling_rate + 6 * math.sqrt(n * sampling_rate) + 16)


def poisson_batches(
    n: int,
    sampling_rate: float,
    gen: torch.Generator,
    device: torch.device,
    checks: DeviceChecks | None = None,
) -> Callable[[], torch.Tensor]:
    """Poisson sampling: every record joins each batch independently with `sampling_rate`,
    as the accountant's PoissonSampledDpEvent assumes (batch size varies; may be empty).

    Drawn in O(batch) rather than O(n): the gaps between included indices of a Bernoulli(q)
    process are i.i.d. Geometric(q), so cumulative sums of geometric draws are exactly the
    included indices, drawn in chunks of `poisson_chunk` gaps.

    Whether a chunk reached past n is a value the host would have to read every step. On the
    CPU, where that is free, a chunk that falls short is followed by another (exact). On
    other devices the sampler makes the same draws, one chunk per batch, and records on the
    device whether it fell short, in `checks` (the session's; a fresh one, reachable as the
    sampler's `checks`, when None). `DeviceChecks.verify`, which `Method.fit` calls once
    after training, then refuses the trial (`PoissonShortfall`), so a truncated batch is
    never stored. Whenever one chunk suffices (all but about 1e-9 of the batches), both paths
    return the same indices from the same stream. The selection `positions < n` still lets
    the host learn the batch's size on an accelerator; only padded batches avoid that.
    """
    if sampling_rate >= 1.0:
        everyone = torch.arange(n, device=device)
        return lambda: everyone
    chunk = poisson_chunk(n, sampling_rate)

    def draw(last: float) -> torch.Tensor:
        gaps = torch.empty(chunk, dtype=torch.float64, device=device)
        return last + torch.cumsum(gaps.geometric_(sampling_rate, generator=gen), 0)

    if host_reads_free(device):

        def next_batch() -> torch.Tensor:
            parts, last = [], -1.0
            while last < n:
                positions = draw(last)
                parts.append(positions)
                last = positions[-1].item()
            positions = parts[0] if len(parts) == 1 else torch.cat(parts)
            return positions[positions < n].long()

        return next_batch

    checks = DeviceChecks() if checks is None else checks

    def shortfall() -> PoissonShortfall:
        return PoissonShortfall(
            f"a Poisson batch's chunk of {chunk} geometric gaps fell short of the {n} records "
            "(probability below 1e-9 per batch), so that batch left out its last records; the "
            "trial is refused rather than stored: run it again on the CPU, which draws on"
        )

    def next_device_batch() -> torch.Tensor:
        positions = draw(-1.0)
        checks.fail_if("poisson chunk", positions[-1] < n, shortfall)
        return positions[positions < n].long()

    next_device_batch.checks = checks  # type: ignore[attr-defined]
    return next_device_batch
