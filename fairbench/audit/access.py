"""Data-access discipline, checked by replay: does a method's output depend on its training
data only through the releases it accounts for?

A private method may read training data only inside a mechanism: the exact value goes in,
noise is added, and only the noisy value may influence anything else. Everything a method
outputs must therefore be post-processing of its noisy releases, of public facts and of its
seed. The check tests exactly that, for any plugin, without reading its code:

1. Fit on the task with the seed, recording every release (`privacy.noise` sees them all).
2. Fit again with the same seed on a *changed* training set: the private fields of 10% of
   the records altered (label and group moved to another class and group, features taken
   from another record). Each release draws its noise as before (so the random streams stay
   in step), but the method receives the first run's noisy value instead.
3. If the predictions, the ledger, the privacy notion and `info` are bit-identical, the data
   reached the output only through the releases. Any other read that matters (exact group
   sizes or marginals, an unnoised loss for early stopping, data-dependent step counts)
   makes the runs differ, or the sequence of releases diverge.

Every release must also be accounted exactly once: the number of Gaussian (Laplace) releases
made equals the number of Gaussian (Laplace) mechanisms in the ledger, counted with their
compositions' multiplicities. A release never recorded, or recorded once for many, is flagged.

What stays public, and so is kept unchanged between the runs: the record count n (the
sampling rate q = batch / n, as in Opacus); what the privacy notion declares public
(`+public-group-sizes` keeps groups, `+public-marginals` keeps groups and, under equalized
odds, labels; `sensitive-attribute` changes groups only); and the documented preprocessing
exceptions, which happen before a method sees the task (feature standardisation statistics).
Configuration checks that refuse a task (e.g. an empty partition part) stop the run with an
error and release nothing, so they are outside this check.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from dp_accounting import dp_event

from fairbench.methods.base import Method
from fairbench.methods.trial import FairnessSpec, Fitted
from fairbench.privacy import PrivacyBudget
from fairbench.privacy.noise import Kind, observe_releases
from fairbench.task import Split, Task

CHANGED_SHARE = 0.1
_LEAVES = {
    dp_event.GaussianDpEvent: "gaussian",
    dp_event.LaplaceDpEvent: "laplace",
    dp_event.RandomizedResponseDpEvent: "randomized_response",
}


@dataclass(frozen=True)
class AccessReport:
    """The outcome of one replay check: `leaks` lists what differed (empty: none found)."""

    method: str
    privacy_notion: str
    changed: tuple[str, ...]  # the record fields altered in the second run
    releases: int
    leaks: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.leaks


class _Diverged(Exception):
    """The second run's releases stopped matching the first run's."""


LABEL_CONDITIONED = ("equalized_odds", "false_negative_rate_parity")  # marginals over (s, y)


def changed_fields(notion: str, constraint: str) -> tuple[str, ...]:
    """The record fields a privacy notion protects, minus what it declares public."""
    if notion.startswith(("sensitive-attribute", "local-dp-attribute")):
        return ("s",)
    kept = set()
    if "public-group-sizes" in notion:
        kept.add("s")
    if "public-marginals" in notion:
        kept |= {"s", "y"} if constraint in LABEL_CONDITIONED else {"s"}
    return tuple(f for f in ("x", "y", "s") if f not in kept)


def altered(
    split: Split, fields: tuple[str, ...], n_classes: int, n_groups: int, seed: int = 0
) -> Split:
    """`split` with the given fields of 10% of its records changed: labels and groups moved
    to the next class and group, features (and regression targets) taken from other records."""
    rng = np.random.default_rng(seed)
    n = len(split)
    rows = rng.choice(n, size=max(1, round(CHANGED_SHARE * n)), replace=False)
    donors = (rows + 1 + rng.integers(0, n - 1, size=len(rows))) % n  # never the row itself
    X, y, s = split.X.copy(), split.y.copy(), split.s.copy()
    if "x" in fields:
        X[rows] = split.X[donors]
    if "y" in fields:
        y[rows] = (y[rows] + 1) % n_classes if n_classes else split.y[donors] + 1.0
    if "s" in fields:
        s[rows] = (s[rows] + 1) % n_groups
    return Split(X=X, y=y, s=s)


def check_access(
    method: Method,
    task: Task,
    privacy: PrivacyBudget,
    fairness: FairnessSpec,
    seed: int = 0,
) -> AccessReport:
    """Fit twice with the same seed, the second time on altered private fields with the
    first run's releases replayed, and report every way the two outputs differ."""
    recorded: list[tuple[Kind, Any]] = []

    def record(kind: Kind, exact, noisy):
        recorded.append((kind, _copy(noisy)))
        return noisy

    with observe_releases(record):
        first = method.fit(task, privacy, fairness, seed)
    notion = first.privacy_notion
    assert notion is not None  # `Method.fit` sets it from the session's guarantee
    fields = changed_fields(notion, fairness.constraint)
    changed = dataclasses.replace(
        task, train=altered(task.train, fields, task.n_classes, task.n_groups, seed)
    )
    replay = iter(recorded)
    try:
        with observe_releases(_replayer(replay)):
            second = method.fit(changed, privacy, fairness, seed)
        leaks = _differences(first, second, task)
        if next(replay, None) is not None:
            leaks.append("fewer releases on the changed data: the release count reads data")
    except _Diverged as exc:
        leaks = [str(exc)]
    leaks += _unaccounted(Counter(kind for kind, _ in recorded), first)
    return AccessReport(method.name, notion, fields, len(recorded), tuple(leaks))


def _replayer(replay: Iterator[tuple[Kind, Any]]):
    def substitute(kind: Kind, exact, noisy):
        expected = next(replay, None)
        if expected is None:
            raise _Diverged("more releases on the changed data: the release count reads data")
        want_kind, value = expected
        if want_kind != kind or _shape(value) != _shape(noisy):
            raise _Diverged(
                f"release sequence diverged ({want_kind} {_shape(value)} expected, "
                f"{kind} {_shape(noisy)} made): control flow reads data"
            )
        return _copy(value)

    return substitute


def _copy(value):
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value.clone() if isinstance(value, torch.Tensor) else np.array(value, copy=True)


def _shape(value) -> tuple:
    return tuple(_shape(v) for v in value) if isinstance(value, list) else tuple(value.shape)


def _outputs(fitted: Fitted, task: Task) -> np.ndarray:
    probe = task.test.X
    if task.kind == "regression":
        return fitted.predict_values(probe)
    return fitted.predict_proba(probe, task.test.s)


def _differences(first: Fitted, second: Fitted, task: Task) -> list[str]:
    leaks = []
    if not np.array_equal(_outputs(first, task), _outputs(second, task), equal_nan=True):
        leaks.append("predictions differ: training data reached the model outside a release")
    if first.privacy_notion != second.privacy_notion:
        leaks.append("the privacy notion depends on the data")
    if _canonical(first.ledger.to_json()) != _canonical(second.ledger.to_json()):
        leaks.append("the ledger depends on the data outside a release")
    for key in sorted(set(first.info) | set(second.info)):
        if _canonical(first.info.get(key)) != _canonical(second.info.get(key)):
            leaks.append(f"info[{key!r}] depends on the data outside a release")
    return leaks


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def _unaccounted(made: Counter[str], fitted: Fitted) -> list[str]:
    accounted = _mechanisms(fitted.ledger.event)
    return [
        f"{made[kind]} {kind} releases made, {accounted[kind]} accounted in the ledger"
        for kind in sorted(set(made) | set(accounted))
        if made[kind] != accounted[kind]
    ]


def _mechanisms(event: dp_event.DpEvent) -> Counter[str]:
    """How many noise mechanisms of each kind an event composes (with multiplicity)."""
    if type(event) in _LEAVES:
        return Counter({_LEAVES[type(event)]: 1})
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return Counter({k: v * event.count for k, v in _mechanisms(event.event).items()})
    children = getattr(event, "events", None) or [getattr(event, "event", None)]
    return sum((_mechanisms(c) for c in children if c is not None), Counter())
