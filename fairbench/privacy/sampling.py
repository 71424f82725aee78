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
    chunk = _chunk(n, sampling_rate)
    return lambda: _included(_positions(-1.0, chunk, sampling_rate, gen), n, sampling_rate, gen)


def _chunk(n: int, rate: float) -> int:
    """Gaps drawn at once: enough to pass n but in about 1e-9 of the batches."""
    return math.ceil(n * rate + 6 * math.sqrt(n * rate) + 16)


def _positions(last: float, chunk: int, rate: float, gen: torch.Generator) -> torch.Tensor:
    """The next `chunk` included positions after `last`."""
    gaps = torch.empty(chunk, dtype=torch.float64, device=gen.device)
    return last + torch.cumsum(gaps.geometric_(rate, generator=gen), 0)


def _included(first: torch.Tensor, n: int, rate: float, gen: torch.Generator) -> torch.Tensor:
    """The batch whose first chunk of positions is `first`: more chunks from `gen` until
    one passes n, then the positions below n."""
    parts, last = [first], first[-1].item()
    while last < n:
        parts.append(_positions(last, len(first), rate, gen))
        last = parts[-1][-1].item()
    positions = parts[0] if len(parts) == 1 else torch.cat(parts)
    return positions[positions < n].long()


def stacked_poisson_batches(
    n: int, sampling_rate: float, generators: list[torch.Generator], device: torch.device
) -> Callable[[], tuple[torch.Tensor, torch.Tensor | None, list[int]]]:
    """T trials' Poisson batches at once, row t drawn from `generators[t]` exactly as
    `poisson_batches` draws it: (index (T, W), mask (T, W) or None when no row is padded,
    sizes), trial t's batch in the first sizes[t] entries of its row, zeros after."""
    n_trials = len(generators)
    if sampling_rate >= 1.0:
        everyone = torch.arange(n, device=device).expand(n_trials, n)
        return lambda: (everyone, None, [n] * n_trials)
    chunk = _chunk(n, sampling_rate)

    def next_batches() -> tuple[torch.Tensor, torch.Tensor | None, list[int]]:
        gaps = torch.empty((n_trials, chunk), dtype=torch.float64, device=device)
        for row, generator in zip(gaps, generators, strict=True):
            row.geometric_(sampling_rate, generator=generator)
        positions = torch.cumsum(gaps, dim=1).add_(-1.0)
        if bool((positions[:, -1] < n).any()):  # rare: a row needs another chunk
            rows = [_included(row, n, sampling_rate, g) for row, g in zip(positions, generators,
                                                                        strict=True)]  # fmt: skip
            return _padded(rows, device)
        inside = positions < n
        sizes = inside.sum(dim=1).tolist()
        width = max(sizes)
        index = positions[:, :width].long()
        if min(sizes) == width:
            return index, None, sizes
        mask = inside[:, :width]
        return index.masked_fill_(~mask, 0), mask, sizes

    return next_batches


def _padded(rows: list[torch.Tensor], device: torch.device):
    """(index, mask or None, sizes) of index rows padded with zeros to the longest."""
    sizes = [len(r) for r in rows]
    index = torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
    if min(sizes) == index.shape[1]:
        return index, None, sizes
    size = torch.tensor(sizes, device=device).unsqueeze(1)
    return index, torch.arange(index.shape[1], device=device).unsqueeze(0) < size, sizes
