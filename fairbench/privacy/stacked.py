"""Several trials' releases in one pass: what a stacked program (`fairbench.methods.engine`)
calls where a one-trial program calls its session's mechanism.

Each trial keeps its own mechanism, session, plan, ledger and noise stream; stacking only
shares the arithmetic before the noise. When every trial's mechanism is the session's plain
one, the stack is clipped (or summed) in one tensor program, each trial at its own clip, and
each mechanism then releases its own trial's exact statistic at its own noise multiplier or
scale (`record`: the plan check and the ledger entry are the mechanism's, as in a one-trial
call). A round may hold fewer trials than the stack (those whose plans run more rounds: a
stack of several configurations, `fairbench.methods.engine`): the mechanisms of its
trials are the first `len(batches)`, and the others draw nothing.
Otherwise (a wrapped or modified mechanism, e.g. the audit's, or exact discrete noise, which
sums in float64) each trial's mechanism is called on its own trial's slice, which is the
reference semantics the fast path is tested against.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from fairbench.privacy.contributions import StackedOuterProducts, StackedScattered, clipped_sum
from fairbench.privacy.noise import stacked_noisy_sums
from fairbench.privacy.sampling import stacked_poisson_batches
from fairbench.privacy.session import (
    Batch,
    GaussianCounts,
    GaussianSum,
    LaplaceHistogram,
    PrivacySession,
    check_l1_rows,
)


@dataclass(frozen=True)
class StackedBatches:
    """One round of T trials' Poisson batches: each trial's `Batch` (numbered by its own
    session) and their indices as one block: `index` (T, W), trial t's batch in the first
    `sizes[t]` entries of its row, zeros after (`mask` marks real entries; None: no padding).
    On a device the sizes are not read: each `Batch` then holds its padded row."""

    batches: list[Batch]
    index: torch.Tensor
    mask: torch.Tensor | None
    sizes: list[int] | None  # None on a device: reading them would sync the host


def poisson_rounds(
    sessions: list[PrivacySession], n: int, rate: float | Sequence[float]
) -> Callable[[], StackedBatches]:
    """Each session's Poisson batches from its own "sampling" stream (as `session.poisson`
    draws them) at its own rate (one for all, or one per session), drawn together."""
    device = sessions[0].device
    rates = [float(rate)] * len(sessions) if isinstance(rate, float | int) else list(rate)
    draw = stacked_poisson_batches(
        n, rate, [s.stream("sampling") for s in sessions], device, [s.checks for s in sessions]
    )

    def next_round() -> StackedBatches:
        index, mask, sizes = draw()
        rows = index if sizes is None else [r[:size] for r, size in zip(index, sizes, strict=True)]
        batches = [s.numbered(row, r) for s, row, r in zip(sessions, rows, rates, strict=True)]
        return StackedBatches(batches, index, mask, sizes)

    return next_round


def shuffled_rounds(
    sessions: list[PrivacySession],
    n: int,
    batch_size: int | Sequence[int],
    drop_last: bool = False,
) -> Callable[[], StackedBatches]:
    """Each session's shuffled mini-batches (`session.shuffled`: a fresh permutation of its
    "sampling" stream each epoch; non-private sessions, or private ones declared not
    accounted) of its own size (one for all, or one per session), one round at a time."""
    sizes_ = [batch_size] * len(sessions) if isinstance(batch_size, int) else list(batch_size)
    draws = [s.shuffled(n, size, drop_last) for s, size in zip(sessions, sizes_, strict=True)]

    def next_round() -> StackedBatches:
        batches = [draw() for draw in draws]
        sizes = [len(b.indices) for b in batches]
        width = max(sizes)
        index = torch.zeros((len(batches), width), dtype=torch.int64, device=sessions[0].device)
        for t, batch in enumerate(batches):
            index[t, : sizes[t]] = batch.indices
        mask = None
        if len(set(sizes)) > 1:
            mask = torch.arange(width, device=index.device) < torch.tensor(
                sizes, device=index.device
            ).unsqueeze(1)
        return StackedBatches(batches, index, mask, sizes)

    return next_round


def _plain(mechanisms: list, kind: type[GaussianSum | LaplaceHistogram]) -> bool:
    """Every mechanism is the session's own `kind` with float noise, and all share their
    privacy: the stack can be released in one pass (each at its own parameters)."""
    first = mechanisms[0]
    return all(
        type(m) is kind and not m.secure and m.session.private == first.session.private
        for m in mechanisms
    )


def per_trial(values: list[float], like: torch.Tensor) -> float | torch.Tensor:
    """The trials' values of one parameter: the float where all are equal (one
    configuration's arithmetic, unchanged), else a (T, 1) column in `like`'s dtype."""
    if len(set(values)) == 1:
        return values[0]
    return torch.tensor(values, dtype=like.dtype, device=like.device).unsqueeze(1)


def gaussian_sums(mechanisms: list, contributions, batches: list[Batch]) -> list[torch.Tensor]:
    """Trial t's noisy clipped sum of `contributions.trial(t)` from `mechanisms[t]`, for the
    round's trials (the first `len(batches)` mechanisms), each part stacked on a leading
    trial axis ([(T, K, d), (T, K)] for outer products, [(T, n_targets, ...)] for scattered
    rows)."""
    mechanisms = mechanisms[: len(batches)]
    plain = isinstance(contributions, StackedOuterProducts | StackedScattered) and _plain(
        mechanisms, GaussianSum
    )
    if not plain:
        per_trial_sums = [m(contributions.trial(t), batches[t]) for t, m in enumerate(mechanisms)]
        return [torch.stack(parts) for parts in zip(*per_trial_sums, strict=True)]
    like = (
        contributions.a if isinstance(contributions, StackedOuterProducts) else contributions.rows
    )
    exact = clipped_sum(contributions, per_trial([m.clip for m in mechanisms], like))
    sources = [m.record(b, exact[0].device) for m, b in zip(mechanisms, batches, strict=True)]
    if sources[0] is None:  # non-private trials: exact sums
        return exact
    return stacked_noisy_sums(
        "gaussian",
        sources,
        exact,
        [m.noise_multiplier for m in mechanisms],
        [m.sensitivity for m in mechanisms],
        contributions.sizes,
    )


def laplace_histograms(
    mechanisms: list,
    rows: torch.Tensor,
    parts: torch.Tensor,
    n_parts: int,
    sizes: list[int] | None,
    batches: Sequence[Batch | None],
) -> torch.Tensor:
    """Trial t's noisy histogram from `mechanisms[t]` (the round's trials: the first
    `len(batches)`): rows (T, B, K) of l1 norm <= 1 summed into `n_parts` parts by `parts`
    (T, B); padding rows (beyond `sizes[t]`, or marked by the round's mask when the sizes
    were not read) must be zero. A batch None: a full pass. Returns (T, n_parts, K)."""
    n_trials, width = rows.shape[0], rows.shape[-1]
    mechanisms = mechanisms[:n_trials]
    first = mechanisms[0]
    sizes = [rows.shape[1]] * n_trials if sizes is None else sizes  # bounds: padding is zero
    if not _plain(mechanisms, LaplaceHistogram):
        return torch.stack(
            [
                m(rows[t, :size], parts[t, :size], n_parts, batches[t])
                for t, (m, size) in enumerate(zip(mechanisms, sizes, strict=True))
            ]
        )
    if first.session.private:
        check_l1_rows(first.label, rows, first.session.checks)
    if n_trials > 1:  # each trial's own parts
        parts = parts + torch.arange(n_trials, device=rows.device).unsqueeze(1) * n_parts
    hist = torch.zeros((n_trials * n_parts, width), dtype=rows.dtype, device=rows.device)
    hist.index_add_(0, parts.reshape(-1), rows.reshape(-1, width))
    hist = hist.view(n_trials, n_parts, width)
    sources = [m.record(b, rows.device) for m, b in zip(mechanisms, batches, strict=True)]
    if sources[0] is None:
        return hist
    scales, sensitivities = [m.scale for m in mechanisms], [m.sensitivity for m in mechanisms]
    return stacked_noisy_sums("laplace", sources, [hist], scales, sensitivities, sizes)[0]


def gaussian_counts(
    mechanisms: list[GaussianCounts],
    cells: torch.Tensor,
    counted: torch.Tensor,
    n_cells: int,
    batches: Sequence[Batch],
) -> torch.Tensor:
    """Trial t's noisy counts from `mechanisms[t]`: how many of its batch's records with
    `counted` True (T, B; a bool, so a record adds 1 or nothing, and padding rows must be
    False) fall in each of `n_cells` cells (`cells` (T, B)). A record lies in one cell, so the
    count vector moves by at most 1 in l2 norm when a record is added or removed. Returns
    (T, n_cells) float64."""
    if counted.dtype != torch.bool:
        raise TypeError(f"counted must be a bool mask (one count per record), got {counted.dtype}")
    n_trials, width = cells.shape
    offsets = torch.arange(n_trials, device=cells.device).unsqueeze(1) * n_cells
    counts = torch.zeros(n_trials * n_cells, dtype=torch.float64, device=cells.device)
    counts.index_add_(0, (cells + offsets).reshape(-1), counted.reshape(-1).to(torch.float64))
    counts = counts.view(n_trials, n_cells)
    return torch.stack([m.release(counts[t], width, batches[t]) for t, m in enumerate(mechanisms)])
