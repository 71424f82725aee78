"""Per-record contributions to a sum, in the shapes the methods produce them, and the suite's
one clipping rule.

A private sum is sum_i clip(v_i, C): each record's contribution scaled to l2 norm at most C.
Mechanisms (`fairbench.privacy.session`) clip; methods only say what the contributions are.
Three shapes cover every method:

- `Rows`: one array per record (or several arrays whose per-record parts form one vector,
  e.g. opacus per-sample gradients, one tensor per parameter), torch or numpy.
- `OuterProducts`: v_i = a_i (x) [x_i, 1], the gradient of a linear model's per-record loss
  (a_i = dloss_i / dlogits). Never materialised: ||v_i|| = ||a_i|| sqrt(||x_i||^2 + 1) and the
  clipped sum is one matrix product.
- `Scattered`: rows that add into one of `n_targets` slots by index (per-cell matrices).

`StackedOuterProducts` and `StackedScattered` hold the outer products (scattered rows) of
several trials at once (a leading trial axis, batches padded to one length): what a stacked
program (`fairbench.methods.engine`) hands its trials' mechanisms, each of which releases its
own trial's sum.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, overload

import numpy as np
import torch

Array = torch.Tensor | np.ndarray


@overload
def clip_factors(norms: torch.Tensor, max_norm: float | torch.Tensor) -> torch.Tensor: ...
@overload
def clip_factors(norms: np.ndarray, max_norm: float) -> np.ndarray: ...
def clip_factors(norms: Array, max_norm: float | torch.Tensor) -> Array:
    """Per-record scale factors min(1, C / ||v_i||): clipped contributions have norm <= C.
    `max_norm` a tensor: each trial's own C (T, 1) beside norms (T, B), computed as torch
    computes a float's C / norms (a reciprocal times C), so that a trial's factors are its
    factors alone."""
    if isinstance(norms, np.ndarray):
        return np.minimum(max_norm / (norms + 1e-12), 1.0)
    # a float's C / norms is torch's reciprocal times C (`Tensor.__rdiv__`), written out
    return ((norms + 1e-12).reciprocal() * max_norm).clamp(max=1.0)


A = TypeVar("A", bound=Array)


class Contributions(Protocol[A]):
    """What a clipped-sum mechanism needs: each record's norm and the weighted sum (`A`: the
    arrays they come in, the clip factors' too)."""

    @property
    def dtype(self) -> torch.dtype | np.dtype: ...

    def __len__(self) -> int: ...

    def norms(self) -> A: ...

    def weighted_sum(self, factors: A | None) -> list[A]:
        """sum_i f_i v_i, one array per part; `factors` None: unweighted."""
        ...


@dataclass(frozen=True)
class Rows:
    """`parts[j]` holds record i's j-th part at index i (batch first)."""

    parts: list[Array]

    @classmethod
    def of(cls, array: Array) -> Rows:
        return cls([array])

    def __len__(self) -> int:
        return len(self.parts[0])

    @property
    def dtype(self) -> torch.dtype | np.dtype:
        return self.parts[0].dtype

    def norms(self) -> Array:
        if arrays := [p for p in self.parts if isinstance(p, np.ndarray)]:  # numpy parts
            flat = np.concatenate(
                [p.reshape(len(p), p[0].size if len(p) else 0) for p in arrays], axis=1
            )
            return np.linalg.norm(flat, axis=1)
        tensors = [p for p in self.parts if isinstance(p, torch.Tensor)]
        return torch.cat([p.flatten(1) for p in tensors], dim=1).norm(dim=1)

    def weighted_sum(self, factors: Array | None) -> list[Array]:
        if factors is None:
            return [p.sum(0) for p in self.parts]
        if isinstance(self.parts[0], np.ndarray):
            return [np.tensordot(factors, p, axes=1) for p in self.parts]
        return [torch.einsum("b,b...->...", factors, p) for p in self.parts]


@dataclass(frozen=True)
class OuterProducts:
    """v_i = a_i (x) [x_i, 1] for a (B, K) and x (B, d): the weight and bias gradients of a
    linear layer, summed as [(f a)^T x, sum f a]."""

    a: torch.Tensor
    x: torch.Tensor

    def __len__(self) -> int:
        return len(self.a)

    @property
    def dtype(self) -> torch.dtype:
        return self.a.dtype

    def norms(self) -> torch.Tensor:
        return self.a.norm(dim=1) * torch.sqrt((self.x * self.x).sum(dim=1) + 1.0)

    def weighted_sum(self, factors: torch.Tensor | None) -> list[torch.Tensor]:
        a = self.a if factors is None else self.a * factors[:, None]
        return [a.T @ self.x, a.sum(dim=0)]


@dataclass(frozen=True)
class StackedOuterProducts:
    """T trials' outer products: a (T, B, K), x (T, B, d), trial t's records in the first
    `sizes[t]` rows. Padding rows must have a = 0 (`masked`): norm 0, nothing added."""

    a: torch.Tensor
    x: torch.Tensor
    sizes: list[int]  # or, where they were not read (on a device), B for every trial
    x_sq: torch.Tensor | None = None  # (T, B) ||x_i||^2 if known (a record's is constant)

    @classmethod
    def masked(
        cls,
        a: torch.Tensor,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        sizes: list[int] | None,
        x_sq: torch.Tensor | None = None,
    ) -> StackedOuterProducts:
        """`mask` (T, B) marks real rows; None: no padding. `sizes` None: not read."""
        a = a if mask is None else a * mask.unsqueeze(-1).to(a.dtype)
        return cls(a, x, [a.shape[1]] * a.shape[0] if sizes is None else sizes, x_sq)

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def dtype(self) -> torch.dtype:
        return self.a.dtype

    def norms(self) -> torch.Tensor:
        x_sq = (self.x * self.x).sum(dim=-1) if self.x_sq is None else self.x_sq
        # not a.norm(dim=-1): on the class-major layout `class_softmax` leaves, torch's norm
        # takes a strided path 80x slower than this sum of squares
        return torch.sqrt((self.a * self.a).sum(dim=-1) * (x_sq + 1.0))

    def weighted_sum(self, factors: torch.Tensor | None) -> list[torch.Tensor]:
        """Per trial [(f a)^T x, sum f a]: (T, K, d) and (T, K)."""
        a = self.a if factors is None else self.a * factors.unsqueeze(-1)
        return [a.transpose(1, 2) @ self.x, a.sum(dim=1)]

    def trial(self, t: int) -> OuterProducts:
        """Trial t's own contributions, unpadded."""
        size = self.sizes[t]
        return OuterProducts(self.a[t, :size], self.x[t, :size])


@dataclass(frozen=True)
class Scattered:
    """Record i's row `rows[i]` adds into slot `index[i]` of an (n_targets, ...) array."""

    rows: torch.Tensor
    index: torch.Tensor
    n_targets: int

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def dtype(self) -> torch.dtype:
        return self.rows.dtype

    def norms(self) -> torch.Tensor:
        return self.rows.flatten(1).norm(dim=1)

    def weighted_sum(self, factors: torch.Tensor | None) -> list[torch.Tensor]:
        rows = self.rows
        if factors is not None:
            rows = rows * factors.reshape(-1, *([1] * (rows.dim() - 1)))
        out = torch.zeros((self.n_targets, *rows.shape[1:]), dtype=rows.dtype, device=rows.device)
        return [out.index_add_(0, self.index, rows)]


@dataclass(frozen=True)
class StackedScattered:
    """T trials' scattered rows: rows (T, B, ...), index (T, B) into each trial's own
    `n_targets` slots, trial t's records in the first `sizes[t]` rows. Padding rows must be
    zero (`masked`): norm 0, nothing added."""

    rows: torch.Tensor
    index: torch.Tensor
    n_targets: int
    sizes: list[int]  # or, where they were not read (on a device), B for every trial

    @classmethod
    def masked(
        cls,
        rows: torch.Tensor,
        index: torch.Tensor,
        n_targets: int,
        mask: torch.Tensor | None,
        sizes: list[int] | None,
    ) -> StackedScattered:
        """`mask` (T, B) marks real rows; None: no padding. `sizes` None: not read."""
        if mask is not None:
            rows = rows * mask.view(*mask.shape, *[1] * (rows.dim() - 2)).to(rows.dtype)
        return cls(
            rows, index, n_targets, [rows.shape[1]] * rows.shape[0] if sizes is None else sizes
        )

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def dtype(self) -> torch.dtype:
        return self.rows.dtype

    def norms(self) -> torch.Tensor:
        return torch.linalg.vector_norm(self.rows.flatten(2), dim=-1)  # `Tensor.norm`'s kernel

    def weighted_sum(self, factors: torch.Tensor | None) -> list[torch.Tensor]:
        """Per trial the (n_targets, ...) sum: (T, n_targets, ...)."""
        rows = self.rows
        if factors is not None:
            rows = rows * factors.reshape(*factors.shape, *([1] * (rows.dim() - 2)))
        n_trials, width = rows.shape[0], rows.shape[2:]
        out = torch.zeros((n_trials * self.n_targets, *width), dtype=rows.dtype, device=rows.device)
        index = self.index
        if n_trials > 1:
            offsets = torch.arange(n_trials, device=index.device).unsqueeze(1) * self.n_targets
            index = index + offsets
        out.index_add_(0, index.reshape(-1), rows.flatten(0, 1))
        return [out.view(n_trials, self.n_targets, *width)]

    def trial(self, t: int) -> Scattered:
        """Trial t's own contributions, unpadded."""
        size = self.sizes[t]
        return Scattered(self.rows[t, :size], self.index[t, :size], self.n_targets)


def scaled(contributions: Any, factors: torch.Tensor) -> Any:
    """Each record's contribution multiplied by its factor ((T, B) for a stack, (B,) for rows):
    a method's own per-record weighting, e.g. a per-group clip below the mechanism's (DPSGD-F)
    or a global scaling (DPSGD-Global-Adapt). The mechanism still clips what it receives, so
    the release's sensitivity is its own bound whatever the factors."""
    if isinstance(contributions, StackedOuterProducts):
        c = contributions
        return StackedOuterProducts(c.a * factors.unsqueeze(-1), c.x, c.sizes, c.x_sq)
    if isinstance(contributions, Rows):
        return Rows([_times(p, factors) for p in contributions.parts])
    raise TypeError(f"no per-record scaling for {type(contributions).__name__}")


def _times(part: Array, factors: torch.Tensor) -> Array:
    """Record i's row of `part` (records first) times factors[i]."""
    if isinstance(part, np.ndarray):
        return part * factors.cpu().numpy().reshape(-1, *[1] * (part.ndim - 1))
    return part * factors.reshape(-1, *[1] * (part.dim() - 1))


def as_float64(contributions: Contributions) -> Contributions:
    """The same contributions in float64, for sums whose rounding error must be bounded."""
    if isinstance(contributions, Rows):
        return Rows(
            [
                p.astype(np.float64) if isinstance(p, np.ndarray) else p.double()
                for p in contributions.parts
            ]
        )
    if isinstance(contributions, OuterProducts):
        return OuterProducts(contributions.a.double(), contributions.x.double())
    if isinstance(contributions, Scattered):
        c = contributions
        return Scattered(c.rows.double(), c.index, c.n_targets)
    raise TypeError(f"unknown contributions {type(contributions).__name__}")


@overload
def clipped_sum(
    contributions: Contributions[torch.Tensor], max_norm: float | torch.Tensor
) -> list[torch.Tensor]: ...


@overload
def clipped_sum(contributions: Contributions[Array], max_norm: float) -> list[Array]: ...


def clipped_sum(contributions: Contributions[Any], max_norm: float | torch.Tensor) -> list[Any]:
    """sum_i clip(v_i, max_norm): the one clipping implementation (inf: no clipping). A
    tensor `max_norm` is a stack's per-trial clip (T, 1) (`clip_factors`)."""
    if not isinstance(max_norm, torch.Tensor) and not np.isfinite(max_norm):
        return contributions.weighted_sum(None)
    return contributions.weighted_sum(clip_factors(contributions.norms(), max_norm))
