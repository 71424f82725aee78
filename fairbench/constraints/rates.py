"""Generalized rate constraints (RaCO-DP, Eq. 6), as vectorised data.

A constraint set is a global partition of the data into Q parts, given as a lookup table over
(true label, group), and J constraints
    Gamma_j = sum_{I in I_j} sum_k alpha_{j,I,k} P_k(union of parts in I) <= gamma_j,
where P_k(S) is the (soft or hard) rate of predicting class k on S. Every (j, I) pair is one
*term*: a 0/1 membership row over the Q parts and a weight vector over the K classes (or, a
small extension of the paper's form, one weight vector per part, alpha_{j,I,q,k}: a rate whose
counted classes depend on the part, such as a group's error rate over (label, group) parts).
All quantities the methods need are then matrix products over a Q x K histogram of predictions.
Methods that compare each group's rate with a reference rather than train on terms (PF-LD,
dp-fermi, the Jagielski et al. methods) read the same constraints through their group-rate
view (`group_rates.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from fairbench.errors import ConfigError


@dataclass(frozen=True)
class RateConstraintSet:
    """Q-part partition, J constraints made of terms, and their slacks."""

    name: str
    part_table: np.ndarray  # (K labels, G groups) -> part index in [0, Q)
    n_parts: int
    term_parts: np.ndarray  # (T, Q) 0/1: which parts a term's subset I unites
    # (T, K) alpha_{j,I,k}, or (T, Q, K) when a term weighs each of its parts' classes apart
    # (accuracy parity: the wrong classes of a part depend on its label)
    term_weights: np.ndarray
    term_owner: np.ndarray  # (T,) the constraint j a term belongs to
    constraint_names: tuple[str, ...]
    gamma: np.ndarray  # (J,)

    def __post_init__(self) -> None:
        n_classes = self.part_table.shape[0]
        checks = [
            (
                self.part_table.min() >= 0 and self.part_table.max() < self.n_parts,
                "the partition table names a part outside [0, Q)",
            ),
            (
                set(np.unique(self.part_table)) == set(range(self.n_parts)),
                "every part of the partition must be reachable from some (label, group)",
            ),
            (
                self.term_parts.shape == (len(self.term_owner), self.n_parts),
                f"term part masks must have shape (terms, {self.n_parts})",
            ),
            (
                self.term_weights.shape[-1] == n_classes
                and self.term_weights.shape[:-1]
                in ((len(self.term_owner),), (len(self.term_owner), self.n_parts)),
                f"term weights must have shape (terms, {n_classes}) or (terms, parts, "
                f"{n_classes}): one weight per class",
            ),
            (self.term_parts.any(axis=1).all(), "every term must name at least one part"),
            (
                set(np.unique(self.term_owner)) == set(range(len(self.constraint_names))),
                "every constraint needs at least one term",
            ),
            (self.gamma.shape == (len(self.constraint_names),), "one gamma per constraint"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"rate constraint set {self.name!r}: {message}")

    @property
    def n_constraints(self) -> int:
        return len(self.constraint_names)

    @property
    def n_classes(self) -> int:
        return self.part_table.shape[0]

    def parts_of(self, y: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Part index of every record."""
        return self.part_table[y, s]

    def with_gamma(self, gamma: float) -> RateConstraintSet:
        return RateConstraintSet(
            self.name,
            self.part_table,
            self.n_parts,
            self.term_parts,
            self.term_weights,
            self.term_owner,
            self.constraint_names,
            np.full(self.n_constraints, float(gamma)),
        )

    def histogram(
        self, parts: np.ndarray, predictions: np.ndarray, weight: np.ndarray | None = None
    ) -> np.ndarray:
        """Q x K counts (or summed weights) of hard predictions per part."""
        hist = np.zeros((self.n_parts, self.n_classes))
        np.add.at(hist, (parts, predictions), 1.0 if weight is None else weight)
        return hist

    def values_from_histogram(self, hist: np.ndarray) -> np.ndarray:
        """Gamma_j for every constraint from a Q x K histogram (Eq. 12 on exact counts)."""
        sizes = self.term_parts @ hist.sum(axis=1)
        if (sizes == 0).any():
            empty = self.constraint_names[self.term_owner[np.argmax(sizes == 0)]]
            raise ConfigError(
                f"rate constraint {empty!r} averages over an empty subset of the data; "
                "check the partition against the groups and labels present"
            )
        if self.term_weights.ndim == 2:
            rates = (self.term_parts @ hist) / sizes[:, None]
            per_term = (self.term_weights * rates).sum(axis=1)
        else:
            weighted = self.term_parts[:, :, None] * self.term_weights
            per_term = np.einsum("tqk,qk->t", weighted, hist) / sizes
        return np.bincount(self.term_owner, weights=per_term, minlength=self.n_constraints)

    def evaluate(
        self, y: np.ndarray, pred: np.ndarray, s: np.ndarray, weight: np.ndarray | None = None
    ) -> list[dict]:
        """Per constraint: value on hard predictions (`weight`ed per record if given), gamma,
        violation and whether satisfied (the last two None where gamma is NaN, i.e. no target
        was stated)."""
        values = self.values_from_histogram(self.histogram(self.parts_of(y, s), pred, weight))
        out = []
        for name, v, g in zip(self.constraint_names, values, self.gamma, strict=True):
            stated = not np.isnan(g)
            out.append(
                {
                    "name": name,
                    "value": float(v),
                    "gamma": float(g) if stated else None,
                    "violation": float(max(0.0, v - g)) if stated else None,
                    "satisfied": bool(v <= g) if stated else None,
                }
            )
        return out


class TorchRates:
    """The constraint set's matrices on a device, for use inside a training step. Built from
    one set, or from a stack of sets that differ only in gamma (one per trial: trials of a
    stack at different knob values); every method takes optional leading trial axes."""

    def __init__(
        self, sets: RateConstraintSet | list[RateConstraintSet], device: torch.device
    ) -> None:
        stack = sets if isinstance(sets, list) else [sets]
        cs = stack[0]
        for other in stack[1:]:
            if not all(
                np.array_equal(getattr(cs, k), getattr(other, k))
                for k in ("term_parts", "term_weights", "term_owner")
            ):
                raise ValueError("stacked constraint sets must differ only in gamma")
        as_t = lambda a: torch.as_tensor(a, dtype=torch.float32, device=device)  # noqa: E731
        self.parts = as_t(cs.term_parts)
        self.parts_t = self.parts.T  # the same view every step, taken once
        per_part = cs.term_weights.ndim == 3  # masked to each term's own parts
        self.weights = as_t(
            cs.term_parts[:, :, None] * cs.term_weights if per_part else cs.term_weights
        )
        self.owner = torch.as_tensor(cs.term_owner, dtype=torch.int64, device=device)
        self.gamma = as_t(
            np.stack([c.gamma for c in stack]) if isinstance(sets, list) else cs.gamma
        )
        self.n_constraints = cs.n_constraints

    def sizes(self, hist: torch.Tensor, floor: float) -> torch.Tensor:
        """|B ∩ I| per term read from the histogram (..., Q, K), floored at a public constant
        so that noise can never make a denominator non-positive (post-processing only)."""
        return (hist.sum(dim=-1) @ self.parts_t).clamp(min=floor)

    def values(self, hist: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        """Gamma_post_j (Eq. 12)."""
        if self.weights.dim() == 2:
            per_term = (self.weights * (self.parts @ hist)).sum(dim=-1) / sizes
        else:
            per_term = torch.einsum("tqk,...qk->...t", self.weights, hist) / sizes
        out = torch.zeros((*per_term.shape[:-1], self.n_constraints), device=hist.device)
        return out.index_add_(-1, self.owner, per_term)

    def coefficients(self, lam: torch.Tensor, sizes: torch.Tensor) -> torch.Tensor:
        """Q x K matrix c with
        c[q, k] = sum_j lam_j sum_{I in I_j, q in I} alpha_{j,I,(q),k} / |B∩I|:
        the regularizer of Eq. (10) for a record in part q is sum_k c[q, k] sigma_tau(z)_k."""
        scaled = lam.index_select(-1, self.owner) / sizes
        if self.weights.dim() == 2:
            return self.parts_t @ (self.weights * scaled.unsqueeze(-1))
        return torch.einsum("tqk,...t->...qk", self.weights, scaled)
