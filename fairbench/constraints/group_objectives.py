"""Group statistics and the convex objectives over them that CGOO optimises (Alabi et al.).

The statistics vector of a binary classifier c on a dataset of n records is the confusion
matrix split by group, as fractions of n:

    l[a, y, p] = #{i : s_i = a, y_i = y, c(x_i) = p} / n        shape (groups, 2, 2)

so l lies in [0, 1]^K with K = 4 * groups, and each record falls in exactly one cell: the
count vector n * l has sensitivity 1 under add/remove of a record. A randomized or soft
classifier gives the expected l, linear in its predicted probabilities.

For every classifier the row sums over p are the same (they count the data), so rates divide
by those *fixed* group sizes (`Sizes`): P_a = #positives in group a, N_a = #negatives,
n_a = P_a + N_a. With the sizes fixed, each objective is a convex function of l, and its
gradient is given in closed form. In CGOO the sizes come from the noisy counts of the current
iterate.

Objectives f: `error`, `balanced_error`, `negative_gmean`. Constraints g (feasible when
g <= 0), each with its bound alpha: `demographic_parity` (largest gap in positive-prediction
rate between groups, the suite's metric), `smoothed_equalized_odds` (Definition 8.8: a smooth
maximum, parameter eta, over group pairs of the gaps in true- and false-positive rate; the
paper's inner max is folded into the smooth maximum, and |.| keeps its subgradient), and
`bounded_group_loss` (largest group error rate).

Everything is torch, so CGOO plays its game on the trial's device: values are 0-dim tensors
and no value is read on the host (maxima and argmaxima enter as one-hot weights, loops run
over the groups, which are known, never over data). Given numpy statistics, the same
functions return numpy gradients and float values (tests, notebooks); `statistics` is numpy.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

NEG, POS = 0, 1
GMEAN_FLOOR = 1e-6  # keeps -sqrt(TPR TNR) Lipschitz where a rate reaches 0


def _tensor(array: np.ndarray | torch.Tensor) -> torch.Tensor:
    """numpy as float64 torch (on the CPU); torch as it is."""
    if isinstance(array, np.ndarray):
        return torch.from_numpy(np.asarray(array, dtype=np.float64))
    return array


@dataclass(frozen=True)
class Sizes:
    """Fractions of records per group and label: positives[a], negatives[a] (each over n)."""

    positives: torch.Tensor
    negatives: torch.Tensor

    @classmethod
    def of(cls, stats: np.ndarray | torch.Tensor, floor: float = 1e-12) -> Sizes:
        """From a statistics vector (noisy ones included; floored to stay positive)."""
        stats = _tensor(stats)
        return cls(
            stats[:, POS].sum(dim=1).clamp(min=floor), stats[:, NEG].sum(dim=1).clamp(min=floor)
        )

    @property
    def groups(self) -> torch.Tensor:
        return self.positives + self.negatives


# (value, gradient); numpy statistics give (float, numpy gradient)
Objective = Callable[[torch.Tensor, Sizes], tuple[torch.Tensor, torch.Tensor]]


def numpy_compatible(fn: Callable) -> Callable:
    """`fn` on torch statistics as it is; on numpy ones, converted in and out (floats for
    0-dim results, numpy arrays for the rest)."""

    @functools.wraps(fn)
    def wrapper(stats, *args):
        if not isinstance(stats, np.ndarray):
            return fn(stats, *args)
        out = fn(_tensor(stats), *args)
        return tuple(float(v) if v.dim() == 0 else v.numpy() for v in out)

    return wrapper


def statistics(y: np.ndarray, s: np.ndarray, p_positive: np.ndarray, n_groups: int) -> np.ndarray:
    """l(c, D) for predictions given as P(c(x_i) = 1) (0/1 for a deterministic classifier)."""
    stats = np.zeros((n_groups, 2, 2))
    # numpy's stubs type ufunc.at's indices as one array, not the tuple of arrays it takes
    np.add.at(stats, (s, y, POS), p_positive)  # type: ignore[arg-type]
    np.add.at(stats, (s, y, NEG), 1.0 - p_positive)  # type: ignore[arg-type]
    return stats / len(y)


def _one_hot(index: torch.Tensor, k: int, like: torch.Tensor) -> torch.Tensor:
    """The indicator of a device-side index (an argmax) as weights: no host read."""
    return F.one_hot(index, k).to(like.dtype)


@numpy_compatible
def error(stats: torch.Tensor, sizes: Sizes) -> tuple[torch.Tensor, torch.Tensor]:
    grad = torch.zeros_like(stats)
    grad[:, NEG, POS] = grad[:, POS, NEG] = 1.0
    return (grad * stats).sum(), grad


@numpy_compatible
def balanced_error(stats: torch.Tensor, sizes: Sizes) -> tuple[torch.Tensor, torch.Tensor]:
    """(FNR + FPR) / 2 over the whole population."""
    grad = torch.zeros_like(stats)
    grad[:, POS, NEG] = 0.5 / sizes.positives.sum()
    grad[:, NEG, POS] = 0.5 / sizes.negatives.sum()
    return (grad * stats).sum(), grad


@numpy_compatible
def negative_gmean(stats: torch.Tensor, sizes: Sizes) -> tuple[torch.Tensor, torch.Tensor]:
    """-sqrt(TPR * TNR), convex (the geometric mean is concave)."""
    p, q = sizes.positives.sum(), sizes.negatives.sum()
    tpr = (stats[:, POS, POS].sum() / p).clamp(min=GMEAN_FLOOR)
    tnr = (stats[:, NEG, NEG].sum() / q).clamp(min=GMEAN_FLOOR)
    grad = torch.zeros_like(stats)
    grad[:, POS, POS] = -0.5 * torch.sqrt(tnr / tpr) / p
    grad[:, NEG, NEG] = -0.5 * torch.sqrt(tpr / tnr) / q
    return -torch.sqrt(tpr * tnr), grad


def demographic_parity(alpha: float) -> Objective:
    @numpy_compatible
    def g(stats: torch.Tensor, sizes: Sizes) -> tuple[torch.Tensor, torch.Tensor]:
        rates = stats[:, :, POS].sum(dim=1) / sizes.groups
        k = len(rates)
        hi = _one_hot(rates.argmax(), k, rates) / sizes.groups
        lo = _one_hot(rates.argmin(), k, rates) / sizes.groups
        grad = torch.zeros_like(stats)
        grad[:, :, POS] = (hi - lo)[:, None]
        return rates.max() - rates.min() - alpha, grad

    return g


def bounded_group_loss(alpha: float) -> Objective:
    @numpy_compatible
    def g(stats: torch.Tensor, sizes: Sizes) -> tuple[torch.Tensor, torch.Tensor]:
        errors = (stats[:, NEG, POS] + stats[:, POS, NEG]) / sizes.groups
        worst = _one_hot(errors.argmax(), len(errors), errors) / sizes.groups
        grad = torch.zeros_like(stats)
        grad[:, NEG, POS] = grad[:, POS, NEG] = worst
        return errors.max() - alpha, grad

    return g


@numpy_compatible
def smooth_max(values: torch.Tensor, eta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """smax_eta(v) = sum v_i e^(eta v_i) / sum e^(eta v_i) and its gradient
    e^(eta v_i) / sum_j e^(eta v_j) * (1 + eta (v_i - smax))."""
    weights = torch.exp(eta * (values - values.max()))
    weights = weights / weights.sum()
    value = weights @ values
    return value, weights * (1.0 + eta * (values - value))


def smoothed_equalized_odds(alpha: float, eta: float) -> Objective:
    @numpy_compatible
    def g(stats: torch.Tensor, sizes: Sizes) -> tuple[torch.Tensor, torch.Tensor]:
        k = len(stats)
        tpr = stats[:, POS, POS] / sizes.positives
        fpr = stats[:, NEG, POS] / sizes.negatives
        terms = []  # (gap, label, group a, group b)
        for a in range(k):
            for b in range(a + 1, k):
                terms.append((tpr[a] - tpr[b], POS, a, b))
                terms.append((fpr[a] - fpr[b], NEG, a, b))
        gaps = torch.stack([t[0] for t in terms])
        value, weights = smooth_max(gaps.abs(), eta)
        grad = torch.zeros_like(stats)
        for (gap, label, a, b), w in zip(terms, weights, strict=True):
            size = sizes.positives if label == POS else sizes.negatives
            grad[a, label, POS] += w * torch.sign(gap) / size[a]
            grad[b, label, POS] -= w * torch.sign(gap) / size[b]
        return value - alpha, grad

    return g


def cost_sensitive(costs, y, s, n: int):
    """The linear subproblem min_c <costs, l(c, D)> as weighted classification: record i
    costs costs[s_i, y_i, p] / n for predicting p, so it is relabelled to its cheaper
    prediction z_i with weight |cost of 1 - cost of 0| / n. For every classifier,
    <costs, l(c, D)> = sum_i min cost_i + sum_i w_i [c(x_i) != z_i]. Returns (z, w, offset):
    torch for torch costs (y and s on their device), numpy for numpy ones."""
    if isinstance(costs, np.ndarray):
        z, w, offset = cost_sensitive(_tensor(costs), torch.as_tensor(y), torch.as_tensor(s), n)
        return z.numpy(), w.numpy(), float(offset)
    own = costs[s, y] / n  # (records, 2): cost of predicting 0 and 1
    z = (own[:, POS] < own[:, NEG]).long()
    return z, (own[:, POS] - own[:, NEG]).abs(), own.min(dim=1).values.sum()


def constraint_pieces(
    name: str, alpha: float, stats: torch.Tensor, sizes: Sizes
) -> tuple[torch.Tensor, torch.Tensor]:
    """The linear pieces whose maximum is the (unsmoothed) constraint: (values (m,),
    gradients (m, groups, 2, 2)). Demographic parity: r_a - r_b - alpha for every ordered
    pair of groups; equalized odds: the same for true- and false-positive rates; bounded
    group loss: each group's error minus alpha. A multiplier per piece is what a Lagrangian
    player needs (a gap's sign flips, its pieces' do not)."""
    if isinstance(stats, np.ndarray):
        values, grads = constraint_pieces(name, alpha, _tensor(stats), sizes)
        return values.numpy(), grads.numpy()
    k = len(stats)
    grads = []

    def rate_grad(a: int, label: int | None) -> torch.Tensor:
        grad = torch.zeros_like(stats)
        if label is None:
            grad[a, :, POS] = 1.0 / sizes.groups[a]
        else:
            size = sizes.positives if label == POS else sizes.negatives
            grad[a, label, POS] = 1.0 / size[a]
        return grad

    if name == "bounded_group_loss":
        for a in range(k):
            grad = torch.zeros_like(stats)
            grad[a, NEG, POS] = grad[a, POS, NEG] = 1.0 / sizes.groups[a]
            grads.append(grad)
    else:
        labels = [None] if name == "demographic_parity" else [POS, NEG]
        grads = [
            rate_grad(a, label) - rate_grad(b, label)
            for label in labels
            for a in range(k)
            for b in range(k)
            if a != b
        ]
    stacked = torch.stack(grads)
    return (stacked * stats).sum(dim=(1, 2, 3)) - alpha, stacked
