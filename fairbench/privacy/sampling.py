"""Batch samplers: Poisson sampling (what the accountant's amplification assumes) and shuffled
epochs (non-private trials). Reached through the privacy session, which numbers the batches."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from fairbench.errors import FairbenchError
from fairbench.privacy.sync import DeviceChecks, host_reads_free


class PoissonShortfall(FairbenchError):
    """A device-side Poisson chunk did not reach the end of the data (see `poisson_batches`)."""


def shuffled_batches(
    n: int, batch_size: int, gen: torch.Generator, device: torch.device, drop_last: bool = False
) -> Callable[[], torch.Tensor]:
    """Index batches from a fresh permutation each epoch (non-private trials, or private ones
    declared not accounted: `PrivacySession.shuffled`). The last batch of an epoch has the
    n mod batch_size records left, or with `drop_last` is skipped: every batch then has
    batch_size records and those records sit the epoch out."""
    perm, pos = torch.empty(0, dtype=torch.int64, device=device), 0
    end = n - n % batch_size if drop_last else n
    if drop_last and end == 0:
        raise ValueError(f"no full batch of {batch_size} in {n} records")

    def next_batch() -> torch.Tensor:
        nonlocal perm, pos
        if pos >= min(end, len(perm)):  # the epoch is done (or not begun)
            perm = torch.randperm(n, generator=gen, device=device)
            pos = 0
        batch = perm[pos : pos + batch_size]
        pos += batch_size
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
    if host_reads_free(device):
        return lambda: _included(_positions(-1.0, chunk, sampling_rate, gen), n, sampling_rate, gen)

    checks = DeviceChecks() if checks is None else checks

    def shortfall() -> PoissonShortfall:
        return PoissonShortfall(
            f"a Poisson batch's chunk of {chunk} geometric gaps fell short of the {n} records "
            "(probability below 1e-9 per batch), so that batch left out its last records; the "
            "trial is refused rather than stored: run it again on the CPU, which draws on"
        )

    def next_device_batch() -> torch.Tensor:
        positions = _positions(-1.0, chunk, sampling_rate, gen)
        checks.fail_if("poisson chunk", positions[-1] < n, shortfall)
        return positions[positions < n].long()

    next_device_batch.checks = checks  # type: ignore[attr-defined]  # a function attribute, for tests
    return next_device_batch


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
    n: int,
    sampling_rate: float | Sequence[float],
    generators: list[torch.Generator],
    device: torch.device,
    checks: list[DeviceChecks] | None = None,
) -> Callable[[], tuple[torch.Tensor, torch.Tensor | None, list[int] | None]]:
    """T trials' Poisson batches at once, row t drawn from `generators[t]` at its own rate
    (`sampling_rate`: one for all, or one per trial) exactly as `poisson_batches` draws it:
    (index (T, W), mask (T, W) or None when no row is padded, sizes), trial t's batch in the
    first sizes[t] entries of its row, zeros after. Row t's chunk of gaps is its own rate's
    (`poisson_chunk`); a shorter chunk's row is filled with infinite gaps, which reach no
    record. On a device (`host_reads_free` false) nothing is read: W is the longest chunk,
    sizes are None, and a short chunk is recorded in the trial's `checks`, as
    `poisson_batches` does."""
    n_trials = len(generators)
    rates = (
        [float(sampling_rate)] * n_trials
        if isinstance(sampling_rate, float | int)
        else [float(r) for r in sampling_rate]
    )
    if all(rate >= 1.0 for rate in rates):
        everyone = torch.arange(n, device=device).expand(n_trials, n)
        return lambda: (everyone, None, [n] * n_trials)
    checks = checks or [DeviceChecks() for _ in generators]
    if any(rate >= 1.0 for rate in rates):  # full passes beside sampled ones: row by row
        draws = [
            poisson_batches(n, r, g, device, c)
            for r, g, c in zip(rates, generators, checks, strict=True)
        ]
        return lambda: _padded([draw() for draw in draws], device)
    chunks = [poisson_chunk(n, rate) for rate in rates]
    chunk = max(chunks)
    last = torch.tensor(chunks, device=device) - 1  # each row's own last gap
    on_host = host_reads_free(device)
    rows = torch.arange(n_trials, device=device)

    def next_batches() -> tuple[torch.Tensor, torch.Tensor | None, list[int] | None]:
        gaps = torch.empty((n_trials, chunk), dtype=torch.float64, device=device)
        for row, rate, size, generator in zip(gaps, rates, chunks, generators, strict=True):
            row[:size].geometric_(rate, generator=generator)
            if size < chunk:
                row[size:] = math.inf
        positions = torch.cumsum(gaps, dim=1).add_(-1.0)
        ends = positions[:, -1] if min(chunks) == chunk else positions[rows, last]
        if not on_host:
            for check, end in zip(checks, ends, strict=True):
                check.fail_if(
                    "poisson chunk",
                    end < n,
                    lambda: PoissonShortfall(
                        f"a Poisson batch's chunk of {chunk} gaps fell short of the {n} records"
                    ),
                )
            inside = positions < n
            return positions.long().masked_fill_(~inside, 0), inside, None
        if bool((ends < n).any()):  # rare: a row needs another chunk
            more = [
                _included(row[:size], n, rate, g)
                for row, size, rate, g in zip(positions, chunks, rates, generators, strict=True)
            ]
            return _padded(more, device)
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
