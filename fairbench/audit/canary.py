"""`fairbench audit`: an empirical lower bound on a method's privacy loss, from canaries seen
by a white-box adversary in every gradient release.

The accountant proves an upper bound for the mechanisms a method *says* it runs; an audit
tests the implementation itself (Jagielski et al. 2020, Nasr et al. 2021 and 2023). Each
training run gets `canaries` candidate records, each included independently with probability
1/2 (Steinke, Nasr and Jagielski 2023). The adversary sees every noisy gradient release of the
run (`whitebox.AuditSession`), scores each canary by the likelihood ratio of "in", and guesses
"in" for the top-scoring ones; the number of right guesses gives an epsilon lower bound at the
stated confidence (`bound`). A correct implementation exceeds its claim with probability at
most 1 - confidence; the audit flags a method whose bound does. `trials` independent runs
pool their canaries.

Canary i has `CANARY_VALUE` in its own extra feature column and 0 elsewhere, label 1 and the
last group; every other record has 0 in all canary columns. Its gradient lies (almost all) in
its column, where nothing else adds anything, so each watched release shows it plus the
claimed noise, and nothing else.

The audit's setting (`AUDIT_HPARAMS`, the user's `--set` wins) makes a canary as visible as
the claim allows: a small clip (0.1), so a canary's raw gradient is up to 140 times the clip
(clipped to exactly the clip by a correct mechanism, far above it when clipping is skipped); a
Poisson batch of one record in expectation over one epoch, so the claim needs little noise and
a sampled canary stands out against it; and a small learning rate, so the model barely moves
at the canaries and their gradients stay clipped. A privacy claim holds for
every hyperparameter and every dataset, so any setting is a fair test.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from fairbench.audit.bound import bound_from_scores
from fairbench.audit.whitebox import WATCHED, AuditSession, Broken, Watch, canary_scores
from fairbench.datasets import get_dataset
from fairbench.errors import ConfigError
from fairbench.methods import method_class
from fairbench.methods.base import Method
from fairbench.methods.trial import FairnessSpec
from fairbench.privacy import PrivacyBudget
from fairbench.task import Split, Task

CANARY_VALUE = 10.0
CANARY_SALT = 7919  # the stream that draws which canaries a run includes
THREAT_MODEL = "white-box: every noisy gradient release seen (all iterates)"
AUDIT_HPARAMS: dict[str, object] = {
    "batch_size": 1,
    "calibrate": "noise",
    "clip_norm": 0.1,
    "lr": 0.1,
    "epochs": 1.0,
}
# CGOO's `epochs` is per oracle call: 4 calls of a quarter epoch
METHOD_HPARAMS: dict[str, dict[str, object]] = {"cgoo": {"epochs": 0.25, "iterations": 4}}


@dataclass(frozen=True)
class AuditResult:
    """One audit's record, as `make audit` stores it: the claim, the bound and what it rests
    on (runs, canaries, guesses), so a reader can judge the bound's power."""

    method: str
    variant: str  # "correct", or "broken: <how>"
    claimed_epsilon: float
    delta: float
    trials: int  # training runs, each with its own canaries
    canaries: int  # per run, each included with probability 1/2
    epsilon_lower_bound: float  # at `confidence`
    confidence: float
    threat_model: str
    guesses: int  # "in" guesses on the test half of the canaries
    correct: int
    guess_share: float  # the share guessed, chosen on the tuning half
    releases: int  # watched releases per run (the last run's)
    seconds: float

    @property
    def flagged(self) -> bool:
        """Evidence against the claim: the lower bound exceeds it."""
        return self.epsilon_lower_bound > self.claimed_epsilon


def audit_method(name: str, overrides: dict[str, object] | None = None) -> Method:
    """Method `name` in the audit's setting (`AUDIT_HPARAMS`, the method's own entries, then
    the user's overrides); refused when the audit has no locator for its releases."""
    cls = method_class(name)
    if not cls.private:
        raise ConfigError(f"method {name} is not private: it claims no epsilon to audit")
    if name not in WATCHED:
        raise ConfigError(
            f"method {name}: the audit watches {', '.join(WATCHED)} only (no "
            "locator for its releases)"
        )
    fields = cls.Hparams.model_fields
    defaults = {k: v for k, v in AUDIT_HPARAMS.items() if k in fields}
    method = cls(**{**defaults, **METHOD_HPARAMS.get(name, {}), **(overrides or {})})
    if getattr(method.hparams, "model", "logistic") != "logistic":
        raise ConfigError(
            "the audit's locator reads a logistic model's weight gradient: model must be logistic"
        )
    return method


def canary_task(n_rows: int, canaries: int, seed: int = 0) -> Task:
    """A small synthetic task with `canaries` extra all-zero feature columns, one per canary."""
    base = get_dataset("synthetic", n_rows=n_rows, data_seed=seed).load(seed=seed)

    def widen(split: Split) -> Split:
        zeros = np.zeros((len(split), canaries), dtype=split.X.dtype)
        return Split(X=np.hstack([split.X, zeros]), y=split.y, s=split.s)

    names = tuple(f"canary{i}" for i in range(canaries))
    return dataclasses.replace(
        base,
        train=widen(base.train),
        val=widen(base.val),
        test=widen(base.test),
        feature_names=(*base.feature_names, *names),
    )


def with_canaries(task: Task, member: np.ndarray) -> Task:
    """`task` with the canaries marked in `member` appended to its training split: canary i
    has `CANARY_VALUE` in its own column and 0 elsewhere, label 1 and the last group."""
    first = task.n_features - len(member)
    rows = np.flatnonzero(member)
    X = np.zeros((len(rows), task.n_features), dtype=task.train.X.dtype)
    X[np.arange(len(rows)), first + rows] = CANARY_VALUE
    train = task.train
    return dataclasses.replace(
        task,
        train=Split(
            X=np.vstack([train.X, X]),
            y=np.append(train.y, np.ones(len(rows), dtype=train.y.dtype)),
            s=np.append(train.s, np.full(len(rows), task.n_groups - 1, dtype=train.s.dtype)),
        ),
    )


def audit(
    method: Method,
    epsilon: float,
    delta: float = 1e-5,
    fairness: FairnessSpec | None = None,
    trials: int = 4,
    canaries: int = 1000,
    confidence: float = 0.95,
    n_rows: int = 400,
    seed: int = 0,
    broken: Broken | None = None,
) -> AuditResult:
    """`trials` training runs, each on the task plus a random half of its `canaries` and
    under a white-box session (broken as `broken` says); the one-run bound on all their
    canaries at `confidence`."""
    if trials < 1 or canaries < 2:
        raise ConfigError(f"an audit needs a run and 2 canaries, got {trials} and {canaries}")
    privacy = PrivacyBudget(epsilon, delta)
    fairness = fairness or FairnessSpec("demographic_parity")
    task = canary_task(n_rows, canaries, seed)
    first = task.n_features - canaries
    watch = Watch(
        WATCHED[method.name],
        slice(first, task.n_features),
        CANARY_VALUE / math.sqrt(CANARY_VALUE**2 + 1),
    )
    start = time.perf_counter()
    scores, members = [], []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # models this small only lose time to intra-op threads
    try:
        for run in range(seed * trials, (seed + 1) * trials):  # fresh seeds per audit seed
            member = np.random.default_rng([run, CANARY_SALT]).random(canaries) < 0.5
            session = AuditSession(run, privacy, watch, broken)
            method.fit(with_canaries(task, member), privacy, fairness, run, session=session)
            scores.append(canary_scores(session.observations))
            members.append(member)
    finally:
        torch.set_num_threads(threads)
    tuning = np.tile(np.arange(canaries) < canaries // 2, trials)
    bound, guesses, correct, share = bound_from_scores(
        np.concatenate(scores), np.concatenate(members), tuning, delta, confidence
    )
    variant = "correct" if broken is None else f"broken: {broken}"
    return AuditResult(
        method.name,
        variant,
        epsilon,
        delta,
        trials,
        canaries,
        bound,
        confidence,
        THREAT_MODEL,
        guesses,
        correct,
        share,
        len(session.observations),
        time.perf_counter() - start,
    )
