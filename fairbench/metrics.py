"""Fairness and accuracy metrics on hard (argmax) predictions, multi-class and multi-group.

Names follow fairlearn where a counterpart exists. Rates conditioned on an empty cell (a group
with no member of some true class, say) are left out of the gaps rather than counted as zero.

`weight` (optional, per record) makes every rate a weighted one: a non-uniform mixture of
classifiers is evaluated exactly as one row per (record, component) weighted by the
component's probability (`fairbench.runner.trial.decisions`).
"""

from __future__ import annotations

import numpy as np


def _check(*arrays: np.ndarray) -> list[np.ndarray]:
    out = [np.asarray(a) for a in arrays]
    if len({len(a) for a in out}) != 1:
        raise ValueError(f"arrays of different lengths: {[len(a) for a in out]}")
    return out


def _mean(values: np.ndarray, weight: np.ndarray | None) -> float:
    return float(np.mean(values) if weight is None else np.average(values, weights=weight))


def _part(weight: np.ndarray | None, members: np.ndarray) -> np.ndarray | None:
    return None if weight is None else weight[members]


def error_rate(y_true: np.ndarray, y_pred: np.ndarray, weight: np.ndarray | None = None) -> float:
    """Fraction of wrong predictions."""
    y_true, y_pred = _check(y_true, y_pred)
    return _mean(y_true != y_pred, weight)


def majority_class_error(y_train: np.ndarray, y_test: np.ndarray) -> float:
    """Test error of predicting the training labels' majority class for everyone: the
    reference a model must beat (violation 0 under every rate constraint, no training)."""
    majority = np.bincount(y_train).argmax()
    return error_rate(y_test, np.full_like(y_test, majority))


def _rates(
    y_pred: np.ndarray, members: np.ndarray, n_classes: int, weight: np.ndarray | None = None
) -> np.ndarray | None:
    """P(y_pred = k | members) for every class k, or None for an empty condition."""
    if not members.any():
        return None
    if weight is None:
        return np.bincount(y_pred[members], minlength=n_classes)[:n_classes] / members.sum()
    w = weight[members]
    return np.bincount(y_pred[members], weights=w, minlength=n_classes)[:n_classes] / w.sum()


def _n_classes(*labels: np.ndarray) -> int:
    return int(max(int(a.max()) for a in labels if len(a)) + 1)


def demographic_parity_difference(
    y_pred: np.ndarray, sensitive: np.ndarray, weight: np.ndarray | None = None
) -> float:
    """max over predicted classes k and pairs of groups a, b of |P(ŷ=k|s=a) − P(ŷ=k|s=b)|.

    For binary labels this is the usual gap in positive-prediction rates.
    """
    y_pred, sensitive = _check(y_pred, sensitive)
    k = _n_classes(y_pred)
    rates = [
        r
        for g in np.unique(sensitive)
        if (r := _rates(y_pred, sensitive == g, k, weight)) is not None
    ]
    if len(rates) < 2:
        return 0.0
    stacked = np.stack(rates)
    return float((stacked.max(axis=0) - stacked.min(axis=0)).max())


def demographic_parity_difference_ovr(
    y_pred: np.ndarray, sensitive: np.ndarray, weight: np.ndarray | None = None
) -> float:
    """max over k and groups a of |P(ŷ=k|s=a) − P(ŷ=k|s≠a)|: the one-vs-rest form RaCO-DP
    constrains. Equals `demographic_parity_difference` scaled down when there are two groups;
    differs in general with more."""
    y_pred, sensitive = _check(y_pred, sensitive)
    k = _n_classes(y_pred)
    gaps = [0.0]
    for g in np.unique(sensitive):
        inside = _rates(y_pred, sensitive == g, k, weight)
        outside = _rates(y_pred, sensitive != g, k, weight)
        if inside is not None and outside is not None:
            gaps.append(float(np.abs(inside - outside).max()))
    return max(gaps)


def equalized_odds_difference(
    y_true: np.ndarray, y_pred: np.ndarray, sensitive: np.ndarray, weight: np.ndarray | None = None
) -> float:
    """max over true class y, predicted class k and pairs of groups of the gap in
    P(ŷ=k | y, s). For binary labels: the larger of the TPR and FPR gaps across groups."""
    y_true, y_pred, sensitive = _check(y_true, y_pred, sensitive)
    k = _n_classes(y_true, y_pred)
    worst = 0.0
    for label in np.unique(y_true):
        rates = [
            r
            for g in np.unique(sensitive)
            if (r := _rates(y_pred, (y_true == label) & (sensitive == g), k, weight)) is not None
        ]
        if len(rates) >= 2:
            stacked = np.stack(rates)
            worst = max(worst, float((stacked.max(axis=0) - stacked.min(axis=0)).max()))
    return worst


def false_negative_rate(
    y_true: np.ndarray, y_pred: np.ndarray, weight: np.ndarray | None = None
) -> np.ndarray:
    """Per class y: P(ŷ ≠ y | y) (NaN for a class absent from y_true)."""
    y_true, y_pred = _check(y_true, y_pred)
    k = _n_classes(y_true, y_pred)
    out = np.full(k, np.nan)
    for label in range(k):
        members = y_true == label
        if members.any():
            out[label] = _mean(y_pred[members] != label, _part(weight, members))
    return out


def false_negative_rate_parity_difference(
    y_true: np.ndarray, y_pred: np.ndarray, sensitive: np.ndarray, weight: np.ndarray | None = None
) -> float:
    """The largest gap between groups in P(ŷ ≠ y | y, s) for the positive class (binary
    tasks; every class otherwise): the equal-opportunity gap, which equals the TPR gap."""
    y_true, y_pred, sensitive = _check(y_true, y_pred, sensitive)
    k = _n_classes(y_true, y_pred)
    worst = 0.0
    for label in [1] if k == 2 else range(k):
        fnrs = []
        for g in np.unique(sensitive):
            members = (y_true == label) & (sensitive == g)
            if members.any():
                fnrs.append(_mean(y_pred[members] != label, _part(weight, members)))
        if len(fnrs) >= 2:
            worst = max(worst, float(max(fnrs) - min(fnrs)))
    return worst


def group_error_rates(
    y_true: np.ndarray,
    y_pred: np.ndarray,
    sensitive: np.ndarray,
    n_groups: int,
    weight: np.ndarray | None = None,
) -> np.ndarray:
    """Per group g: error rate among members of g (NaN for an empty group)."""
    y_true, y_pred, sensitive = _check(y_true, y_pred, sensitive)
    return np.array(
        [
            error_rate(
                y_true[sensitive == g], y_pred[sensitive == g], _part(weight, sensitive == g)
            )
            if (sensitive == g).any()
            else np.nan
            for g in range(n_groups)
        ]
    )


def group_log_losses(
    y_true: np.ndarray,
    proba: np.ndarray,
    sensitive: np.ndarray,
    n_groups: int,
    weight: np.ndarray | None = None,
) -> np.ndarray:
    """Per group g: mean cross-entropy of the predicted probabilities (NaN for an empty group)."""
    y_true, sensitive = _check(y_true, sensitive)
    losses = -np.log(np.clip(proba[np.arange(len(y_true)), y_true], 1e-12, 1.0))
    return np.array(
        [
            _mean(losses[sensitive == g], _part(weight, sensitive == g))
            if (sensitive == g).any()
            else np.nan
            for g in range(n_groups)
        ]
    )


def accuracy_parity_difference(
    y_true: np.ndarray, y_pred: np.ndarray, sensitive: np.ndarray, weight: np.ndarray | None = None
) -> float:
    """max − min over the groups present of the group error rate P(ŷ ≠ y | s)."""
    y_true, y_pred, sensitive = _check(y_true, y_pred, sensitive)
    errors = [
        _mean(y_pred[members] != y_true[members], _part(weight, members))
        for g in np.unique(sensitive)
        if (members := sensitive == g).any()
    ]
    return float(max(errors) - min(errors)) if len(errors) >= 2 else 0.0


def _fnr_violation(
    y_true: np.ndarray, y_pred: np.ndarray, sensitive: np.ndarray, weight: np.ndarray | None = None
) -> float:
    """FNR of the positive class for binary tasks, the largest per-class FNR otherwise."""
    fnr = false_negative_rate(y_true, y_pred, weight)
    return float(fnr[1] if len(fnr) == 2 else np.nanmax(fnr))


# The violation a trial reports for each built-in constraint name a config may give.
def group_mean_squared_errors(
    y_true: np.ndarray, y_pred: np.ndarray, sensitive: np.ndarray, n_groups: int
) -> np.ndarray:
    """Per group g: mean squared prediction error among members of g (NaN if empty)."""
    y_true, y_pred, sensitive = _check(y_true, y_pred, sensitive)
    sq = (np.asarray(y_true, dtype=np.float64) - y_pred) ** 2
    return np.array(
        [sq[sensitive == g].mean() if (sensitive == g).any() else np.nan for g in range(n_groups)]
    )


def bounded_group_loss(
    y_true: np.ndarray, y_pred: np.ndarray, sensitive: np.ndarray, weight: np.ndarray | None = None
) -> float:
    """The largest group's mean loss (Agarwal et al. 2019): squared error for float targets,
    error rate for class labels."""
    n_groups = int(np.max(sensitive)) + 1
    if np.issubdtype(np.asarray(y_true).dtype, np.floating):
        losses = group_mean_squared_errors(y_true, y_pred, sensitive, n_groups)
    else:
        losses = group_error_rates(y_true, y_pred, sensitive, n_groups, weight)
    return float(np.nanmax(losses))


VIOLATIONS = {
    "demographic_parity": lambda y, p, s, weight=None: demographic_parity_difference(p, s, weight),
    "equalized_odds": equalized_odds_difference,
    "false_negative_rate": _fnr_violation,
    "false_negative_rate_parity": false_negative_rate_parity_difference,
    "bounded_group_loss": bounded_group_loss,
    "accuracy_parity": accuracy_parity_difference,
}
