"""Rate-constraint sets for the common fairness notions (RaCO-DP, Appendix A), and the
user-declared form that configs may give."""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fairbench.constraints.rates import RateConstraintSet
from fairbench.errors import ConfigError


def _assemble(
    name: str, part_table: np.ndarray, n_parts: int, constraints: list
) -> RateConstraintSet:
    """`constraints`: (name, [(parts, weights)], gamma) triples; weights (K,) per term, or
    (Q, K) per term in every term (one weight vector per part)."""
    parts, weights, owner = [], [], []
    for j, (_, terms, _) in enumerate(constraints):
        for members, alpha in terms:
            mask = np.zeros(n_parts)
            mask[list(members)] = 1.0
            parts.append(mask)
            weights.append(np.asarray(alpha, dtype=float))
            owner.append(j)
    return RateConstraintSet(
        name=name,
        part_table=part_table,
        n_parts=n_parts,
        term_parts=np.array(parts),
        term_weights=np.array(weights),
        term_owner=np.array(owner, dtype=np.int64),
        constraint_names=tuple(c[0] for c in constraints),
        gamma=np.array([c[2] for c in constraints], dtype=float),
    )


def _unit(k: int, n: int, sign: float = 1.0) -> np.ndarray:
    e = np.zeros(n)
    e[k] = sign
    return e


def demographic_parity(n_classes: int, n_groups: int, gamma: float = 0.0) -> RateConstraintSet:
    """P_k(s = z) − P_k(s ≠ z) ≤ γ for every group z and class k: J = |Z|·|Y|, Q = |Z|."""
    table = np.tile(np.arange(n_groups), (n_classes, 1))
    constraints = []
    for z in range(n_groups):
        rest = [g for g in range(n_groups) if g != z]
        for k in range(n_classes):
            terms = [([z], _unit(k, n_classes)), (rest, _unit(k, n_classes, -1.0))]
            constraints.append((f"P(ŷ={k}|s={z}) - P(ŷ={k}|s≠{z})", terms, gamma))
    return _assemble("demographic_parity", table, n_groups, constraints)


def equalized_odds(n_classes: int, n_groups: int, gamma: float = 0.0) -> RateConstraintSet:
    """Counterfactual equalized odds (Appendix A, Eq. 15): for every true class y, group z and
    predicted class k, P_k(y, s = z) − P_k(y, s ≠ z) ≤ γ. J = |Y|²·|Z|, Q = |Y|·|Z|."""
    table = np.arange(n_classes * n_groups).reshape(n_classes, n_groups)
    constraints = []
    for y in range(n_classes):
        for z in range(n_groups):
            rest = [int(table[y, g]) for g in range(n_groups) if g != z]
            for k in range(n_classes):
                terms = [
                    ([int(table[y, z])], _unit(k, n_classes)),
                    (rest, _unit(k, n_classes, -1.0)),
                ]
                constraints.append((f"P(ŷ={k}|y={y},s={z}) - P(ŷ={k}|y={y},s≠{z})", terms, gamma))
    return _assemble("equalized_odds", table, n_classes * n_groups, constraints)


def false_negative_rate(
    n_classes: int, n_groups: int, gamma: float = 0.0, classes: list[int] | None = None
) -> RateConstraintSet:
    """FNR_y = P(ŷ ≠ y | y) ≤ γ for each constrained class y (default: class 1 for binary
    tasks, every class otherwise). Q = |Y| (partition by label).

    The paper's Eq. (17), read literally, bounds P_k(D[Y ≠ k]) for every k, which for binary
    tasks constrains the false-positive rate as well; its own experiments (a pessimistic
    "FNR = 0" constraint) only make sense for the false-negative rate, which is what is built.
    """
    classes = ([1] if n_classes == 2 else list(range(n_classes))) if classes is None else classes
    table = np.tile(np.arange(n_classes)[:, None], (1, n_groups))
    constraints = []
    for y in classes:
        wrong = np.ones(n_classes)
        wrong[y] = 0.0
        constraints.append((f"FNR(y={y})", [([y], wrong)], gamma))
    return _assemble("false_negative_rate", table, n_classes, constraints)


def false_negative_rate_parity(
    n_classes: int, n_groups: int, gamma: float = 0.0
) -> RateConstraintSet:
    """Equal false-negative rates across groups (equal opportunity, Hardt et al. 2016): for the
    positive class y (binary tasks; every class otherwise) and every group z, both
    FNR(y, s = z) − FNR(y, s ≠ z) ≤ γ and the reverse (the TPR gap) ≤ γ. Equalized odds
    restricted to the positive label. J = 2·|Z|·(constrained classes), Q = |Y|·|Z|."""
    table = np.arange(n_classes * n_groups).reshape(n_classes, n_groups)
    constraints = []
    for y in [1] if n_classes == 2 else range(n_classes):
        wrong = np.ones(n_classes)
        wrong[y] = 0.0
        for z in range(n_groups):
            rest = [int(table[y, g]) for g in range(n_groups) if g != z]
            for sign, what in ((1.0, "FNR"), (-1.0, "TPR")):
                terms = [([int(table[y, z])], sign * wrong), (rest, -sign * wrong)]
                constraints.append((f"{what}(y={y}|s={z}) - {what}(y={y}|s≠{z})", terms, gamma))
    return _assemble("false_negative_rate_parity", table, n_classes * n_groups, constraints)


def accuracy_parity(n_classes: int, n_groups: int, gamma: float = 0.0) -> RateConstraintSet:
    """Equal error rates across groups: for every group z, both err(s = z) − err(s ≠ z) ≤ γ and
    the reverse, with err(S) = P(ŷ ≠ y | S). A record's wrong classes depend on its label, so
    the partition is label × group and each term weighs its parts' classes apart: part (y, z)
    counts every class but y. J = 2·|Z|, Q = |Y|·|Z|."""
    table = np.arange(n_classes * n_groups).reshape(n_classes, n_groups)
    wrong = np.zeros((n_classes * n_groups, n_classes))  # (Q, K): the classes wrong in part q
    for y in range(n_classes):
        wrong[table[y], :] = 1.0
        wrong[table[y], y] = 0.0
    constraints = []
    for z in range(n_groups):
        own = [int(table[y, z]) for y in range(n_classes)]
        rest = [int(table[y, g]) for y in range(n_classes) for g in range(n_groups) if g != z]
        for sign, name in ((1.0, f"err(s={z}) - err(s≠{z})"), (-1.0, f"err(s≠{z}) - err(s={z})")):
            constraints.append((name, [(own, sign * wrong), (rest, -sign * wrong)], gamma))
    return _assemble("accuracy_parity", table, n_classes * n_groups, constraints)


BUILDERS = {
    "demographic_parity": demographic_parity,
    "equalized_odds": equalized_odds,
    "false_negative_rate": false_negative_rate,
    "false_negative_rate_parity": false_negative_rate_parity,
    "accuracy_parity": accuracy_parity,
}

PARTITIONS = ("group", "label", "label_x_group")


class TermSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    parts: list[int] = Field(min_length=1)  # the subset I: indices of partition parts
    weights: list[float]  # alpha_{j,I,k}, one per class


class CustomConstraint(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    terms: list[TermSpec] = Field(min_length=1)
    gamma: float | None = None  # None: the trial's fairness knob


class CustomConstraintSet(BaseModel):
    """A user-declared rate-constraint set (YAML `constraint:` as a mapping).

    Parts are numbered per `partition`: `group` -> part = group; `label` -> part = label;
    `label_x_group` -> part = label * n_groups + group.
    """

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    partition: Literal["group", "label", "label_x_group"]
    constraints: list[CustomConstraint] = Field(min_length=1)


def partition_table(kind: str, n_classes: int, n_groups: int) -> np.ndarray:
    if kind == "group":
        return np.tile(np.arange(n_groups), (n_classes, 1))
    if kind == "label":
        return np.tile(np.arange(n_classes)[:, None], (1, n_groups))
    return np.arange(n_classes * n_groups).reshape(n_classes, n_groups)


def custom(
    spec: CustomConstraintSet, n_classes: int, n_groups: int, gamma: float
) -> RateConstraintSet:
    """Build a declared set, with one clear error for an index outside the partition or
    weights of the wrong shape."""
    table = partition_table(spec.partition, n_classes, n_groups)
    n_parts = int(table.max()) + 1
    constraints = []
    for c in spec.constraints:
        for i, term in enumerate(c.terms):
            bad = [p for p in term.parts if not 0 <= p < n_parts]
            if bad:
                raise ConfigError(
                    f"constraint {c.name!r} term {i}: part {bad[0]} is outside the "
                    f"{spec.partition} partition, whose parts are 0..{n_parts - 1}"
                )
            if len(term.weights) != n_classes:
                raise ConfigError(
                    f"constraint {c.name!r} term {i}: {len(term.weights)} weights given, the "
                    f"task has {n_classes} classes: give one weight per predicted class"
                )
        terms = [(t.parts, t.weights) for t in c.terms]
        constraints.append((c.name, terms, gamma if c.gamma is None else c.gamma))
    return _assemble(spec.name, table, n_parts, constraints)
