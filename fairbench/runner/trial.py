"""One trial: a fully resolved (dataset, method, hyperparameters, knob, budget, seed) point,
run and evaluated into one result row."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from fairbench import constraints, metrics
from fairbench.constraints import RateConstraintSet
from fairbench.datasets import get_dataset
from fairbench.datasets.base import SPLIT_SEED
from fairbench.errors import FairbenchError
from fairbench.methods import FairnessSpec, Fitted, Method, get_method
from fairbench.methods.trial import Trial, as_device, resolve_device
from fairbench.privacy import PrivacyBudget, PrivacyLedger, ledger_cache
from fairbench.privacy.session import PrivacyContractError, PrivacySession, check_plan
from fairbench.rundir.models import fitted_state
from fairbench.rundir.row import TrialRow
from fairbench.runner.stamp import stamp
from fairbench.task import Split, Task

NOISE_SAMPLERS = {False: "float64, seeded", True: "exact discrete (OpenDP), OS entropy"}


@dataclass(frozen=True)
class TrialSpec:
    """Everything that determines a trial's result. Its hash names the trial in the store."""

    dataset: str
    dataset_options: dict[str, Any] = field(hash=False)
    method: str
    label: str
    hparams: dict[str, Any] = field(hash=False)
    constraint: str
    knob: float | None
    epsilon: float | None  # None: a non-private method
    delta: float
    seed: int
    device: str = "cpu"
    constraint_definition: dict[str, Any] | None = field(default=None, hash=False)
    secure_noise: bool = False  # exact discrete noise from OpenDP (`privacy.noise`)

    @property
    def trial_id(self) -> str:
        """Stable hash of the resolved spec. The device (resolved: "cpu" or "cuda", never
        "auto") enters only when it is not the CPU, since another device draws other random
        numbers (its generators) and reduces in another order: a resumed run never mixes CPU
        and GPU results under one id, and every CPU trial keeps its id. `secure_noise` enters
        only when set (ids of float-noise trials are unchanged)."""
        data = asdict(self)
        if self.device == "cpu":
            del data["device"]
        if not self.secure_noise:
            del data["secure_noise"]
        blob = json.dumps(data, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def config_key(self) -> str:
        """What the trials of one configuration share: the spec but its seed and knob."""
        shared = {k: v for k, v in asdict(self).items() if k not in ("seed", "knob")}
        return json.dumps(shared, sort_keys=True, default=str)

    @property
    def config_id(self) -> str:
        """Hash of the hyperparameters alone: one point on a Pareto plot per (config, knob)."""
        return hashlib.sha256(json.dumps(self.hparams, sort_keys=True).encode()).hexdigest()[:8]


@lru_cache(maxsize=1024)
def _mixed(method: str, hparams_json: str) -> frozenset[str] | None:
    """The method's `mixed` hyper-parameters where it stacks; None where it does not (or the
    hyperparameters are invalid: the trial then runs alone and fails there)."""
    try:
        configured = get_method(method, **json.loads(hparams_json))
    except FairbenchError:
        return None
    return configured.mixed if configured.stackable() else None


def stack_key(spec: TrialSpec) -> str | None:
    """What the trials of one stack (`run_stack`) share: the spec but its seed, knob, the
    hyper-parameters its method declares `mixed` (`Method.mixed`) and the draw number of its
    label (a tune's draws of one entry are `label#i`: they stack; another entry, such as one
    joining a tune later, never joins their stacks); None for a trial that trains alone (its
    method does not stack)."""
    mixed = _mixed(spec.method, json.dumps(spec.hparams, sort_keys=True))
    if mixed is None:
        return None
    shared = {k: v for k, v in asdict(spec).items() if k not in ("seed", "knob")}
    shared["label"] = spec.label.rsplit("#", 1)[0]
    shared["hparams"] = {k: v for k, v in spec.hparams.items() if k not in mixed}
    return json.dumps(shared, sort_keys=True, default=str)


@lru_cache(maxsize=16)  # a figure's seeds (10) fit: stacks span several seeds, in turn
def _load(dataset: str, options_json: str, seed: int) -> Task:
    return get_dataset(dataset, **json.loads(options_json)).load(seed)


def load_task(spec: TrialSpec) -> Task:
    """The trial's task, cached per process: trials sharing a seed share its split. A
    `split_seed` among the dataset options fixes the split instead of the trial's seed, which
    then seeds only the trial's own streams (init, sampling, noise)."""
    options = dict(spec.dataset_options)
    split_seed = options.pop(SPLIT_SEED, spec.seed)
    return _load(spec.dataset, json.dumps(options, sort_keys=True), split_seed)


def evaluate(
    fitted: Fitted, split: Split, task: Task, rate_set: RateConstraintSet, builtin: bool
) -> dict[str, Any]:
    """Accuracy and fairness of hard (argmax) predictions on one held-out split.

    `violation` is the named metric for a built-in constraint and the largest constraint value
    for a declared set; `rate_constraints` lists every constraint of the set with its value,
    and, when the trial's knob is the slack gamma, whether it is satisfied.
    """
    y, s, pred, proba, w = decisions(fitted, split)
    per_constraint = rate_set.evaluate(y, pred, s, w)
    violation = (
        metrics.VIOLATIONS[rate_set.name](y, pred, s, w)
        if builtin
        else max(c["value"] for c in per_constraint)
    )
    out: dict[str, Any] = {
        "predictions_sha256": predictions_hash(pred, w),
        "error": metrics.error_rate(y, pred, w),
        "violation": violation,
        "rate_constraints": per_constraint,
        "demographic_parity": metrics.demographic_parity_difference(pred, s, w),
        "equalized_odds": metrics.equalized_odds_difference(y, pred, s, w),
        "group_error": metrics.group_error_rates(y, pred, s, task.n_groups, w).tolist(),
        "group_log_loss": metrics.group_log_losses(y, proba, s, task.n_groups, w).tolist(),
        "false_negative_rate": metrics.false_negative_rate(y, pred, w).tolist(),
    }
    if task.n_groups > 2:
        out["demographic_parity_ovr"] = metrics.demographic_parity_difference_ovr(pred, s, w)
    return out


def predictions_hash(predictions: np.ndarray, weights: np.ndarray | None = None) -> str:
    """Fingerprint of a split's predictions: two trials with equal hashes made the same
    decisions on every record (for a randomized classifier, every component did, with the same
    mixture weights), so two knob values that give equal hashes on every seed trained one
    model, not two."""
    digest = hashlib.sha256()
    for part in (predictions, weights):
        if part is not None:
            data = np.ascontiguousarray(part)
            digest.update(str(data.dtype).encode() + data.tobytes())
    return digest.hexdigest()[:16]


def decisions(fitted: Fitted, split: Split):
    """(y, s, hard predictions, probabilities, row weights or None) to evaluate on. A
    randomized classifier (a mixture of T components) is evaluated exactly, with no sampling:
    every record appears once per component with that component's prediction, weighted by
    the component's probability when the mixture is not uniform, so each rate the metrics
    take (error, group rates, conditional rates) is the mixture's expected rate. Its log loss
    is the components' (weighted) average. A derived predictor (`Fitted.derived`) likewise:
    each record once per output, weighted by that output's probability given its group."""
    if fitted.derived is not None:  # each record twice: output 1 with its probability, 0 else
        proba = fitted.predict_proba(split.X, split.s)
        both = np.concatenate([np.ones(len(split), np.int64), np.zeros(len(split), np.int64)])
        return (
            np.tile(split.y, 2),
            np.tile(split.s, 2),
            both,
            np.tile(proba, (2, 1)),
            np.concatenate([proba[:, 1], proba[:, 0]]),
        )
    if not fitted.randomized:
        proba = fitted.predict_proba(split.X)
        return split.y, split.s, proba.argmax(axis=1), proba, None
    proba = fitted.component_probabilities(split.X)
    copies = len(proba)
    weight = None if fitted.weights is None else np.repeat(fitted.weights, len(split))
    return (
        np.tile(split.y, copies),
        np.tile(split.s, copies),
        proba.argmax(axis=2).reshape(-1),
        proba.reshape(-1, proba.shape[2]),
        weight,
    )


def outcome_cells(fitted: Fitted, split: Split, task: Task) -> list:
    """Counts of a split's records by (group, label, prediction), nested lists. A randomized
    or derived predictor's record is spread over its outputs with weights summing to 1, so
    adding or removing one record moves the table by exactly 1 in l1 norm: the sensitivity
    private selection's noisy validation score is calibrated to."""
    y, s, pred, _, w = decisions(fitted, split)
    if w is None:  # a uniform mixture repeats each record once per component
        w = np.full(len(y), len(split) / len(y))
    cells = np.zeros((task.n_groups, task.n_classes, task.n_classes))
    np.add.at(cells, (s, y, pred), w)
    return cells.tolist()


def evaluate_group_loss(
    fitted: Fitted, split: Split, task: Task, bound: float | None
) -> dict[str, Any]:
    """Bounded group loss on one held-out split: each group's mean loss (squared error for
    regression, error rate for classification); the violation is the largest. `bound`, when
    the method was given one, is checked against the worst group's value of the loss the
    method bounds: the same loss, or the log loss where `info["bounded_loss"]` says so."""
    if task.kind == "regression":
        pred = fitted.predict_values(split.X)
        fingerprint = predictions_hash(pred)
        losses = metrics.group_mean_squared_errors(split.y, pred, split.s, task.n_groups)
        error = float(np.mean((split.y - pred) ** 2))
        bounded = losses
    else:
        y, s, pred, proba, w = decisions(fitted, split)
        fingerprint = predictions_hash(pred, w)
        losses = metrics.group_error_rates(y, pred, s, task.n_groups, w)
        error = metrics.error_rate(y, pred, w)
        # the bound is checked on the loss the method bounds (DPSE: the logistic loss)
        bounded = (
            metrics.group_log_losses(y, proba, s, task.n_groups, w)
            if fitted.info.get("bounded_loss") == "log_loss"
            else losses
        )
    worst = float(np.nanmax(losses))
    held = float(np.nanmax(bounded))
    smallest = int(np.argmin(np.bincount(task.train.s, minlength=task.n_groups)))
    return {
        "predictions_sha256": fingerprint,
        "error": error,
        "violation": worst,
        "rate_constraints": [
            {
                "name": "bounded_group_loss",
                "value": held,
                "gamma": bound,
                "violation": None if bound is None else held - bound,
                "satisfied": None if bound is None else held <= bound,
            }
        ],
        "group_loss": losses.tolist(),
        "smallest_group_loss": float(losses[smallest]),
    }


def run_trial(spec: TrialSpec) -> TrialRow:
    """Fit and evaluate one trial; the row holds the spec, the outcome and the ledger (the
    store keeps its `to_record()`)."""
    return run_stack([spec])[0]


def run_stack(specs: list[TrialSpec]) -> list[TrialRow]:
    """Fit trials of one stack (`stack_key`: they differ only in seed, knob, draw and their
    method's `mixed` hyper-parameters) as one stacked program where the method stacks (else
    one after another), then account and evaluate each.

    A trial's `wall_seconds` is its share of the stack's fit plus the accounting of its own
    ledger (epsilon, plan check, cross-checks; cached per distinct ledger by
    `privacy.ledger_cache`, hit or miss counted); `info["phase_seconds"]` splits the whole
    trial into `data` (loading the tasks, cached per process; shared like the fit), `fit`,
    `accounting` and `evaluation` (both held-out splits' metrics)."""
    first = specs[0]
    if len(specs) > 1 and (
        stack_key(first) is None or any(stack_key(s) != stack_key(first) for s in specs)
    ):
        raise ValueError(
            "a stack's trials must differ only in seed, knob and their method's mixed "
            "hyperparameters"
        )
    began = time.perf_counter()
    tasks = [load_task(spec) for spec in specs]
    loaded = time.perf_counter()
    configured: dict[str, Method] = {}  # one method per configuration
    for s in specs:
        key = json.dumps(s.hparams, sort_keys=True)
        if key not in configured:
            configured[key] = get_method(s.method, **s.hparams)
    methods = [configured[json.dumps(s.hparams, sort_keys=True)] for s in specs]
    budgets = [PrivacyBudget(s.epsilon, s.delta) if s.epsilon is not None else None for s in specs]
    trials = [
        Trial(
            task,
            FairnessSpec(s.constraint, s.knob, s.constraint_definition),
            PrivacySession(
                s.seed, resolve_device(as_device(s.device)), privacy, secure_noise=s.secure_noise
            ),
        )
        for s, task, privacy in zip(specs, tasks, budgets, strict=True)
    ]
    fits = methods[0].fit_stack(trials, methods)
    shared = {
        "data": (loaded - began) / len(specs),
        "fit": (time.perf_counter() - loaded) / len(specs),
    }
    return [
        _evaluated(spec, method, fitted, trial, privacy, shared)
        for spec, method, fitted, trial, privacy in zip(
            specs, methods, fits, trials, budgets, strict=True
        )
    ]


def _evaluated(spec, method, fitted, trial, privacy, shared: dict[str, float]) -> TrialRow:
    start = time.perf_counter()
    task = trial.task
    fitted.ledger = recorded_ledger(spec, trial.session, fitted.target_accounting)
    spent = ledger_cache.epsilon(fitted.ledger, spec.delta)
    checks = ledger_cache.cross_check(fitted.ledger, spec.delta)
    accounted = time.perf_counter()
    if task.kind == "regression" or spec.constraint == "bounded_group_loss":
        val = evaluate_group_loss(fitted, task.val, task, spec.knob)
        test = evaluate_group_loss(fitted, task.test, task, spec.knob)
    else:
        gamma = spec.knob if method.knob is not None and method.knob.name == "gamma" else None
        rate_set = constraints.build(
            spec.constraint,
            spec.constraint_definition,
            task.n_classes,
            task.n_groups,
            0.0 if gamma is None else gamma,
        )
        if gamma is None:  # no stated target: report values only
            rate_set = rate_set.with_gamma(float("nan"))
        builtin = spec.constraint_definition is None
        val = evaluate(fitted, task.val, task, rate_set, builtin)
        test = evaluate(fitted, task.test, task, rate_set, builtin)
    if task.kind != "regression":
        fitted.info["val_outcome_cells"] = outcome_cells(fitted, task.val, task)
    phases = {
        **shared,
        "accounting": accounted - start,
        "evaluation": time.perf_counter() - accounted,
    }
    wall = shared["fit"] + phases["accounting"]
    return _row(spec, method, fitted, privacy, spent, checks, wall, phases, task, val, test)


def recorded_ledger(spec: TrialSpec, session: PrivacySession, accounting: str) -> PrivacyLedger:
    """The trial's ledger: what its session recorded, refused (`PrivacyContractError`) when it
    differs from the method's plan or spends more than the target epsilon (the epsilon from
    `privacy.ledger_cache`, computed once per distinct ledger)."""
    ledger = session.ledger()
    check_plan(spec.method, session.plan, ledger)
    if spec.epsilon is not None and accounting == "suite":
        spent = ledger_cache.epsilon(ledger, spec.delta)
        if spent > spec.epsilon:
            raise PrivacyContractError(
                f"method {spec.method} spent epsilon {spent:.6g} > target {spec.epsilon}: its "
                "plan overspends the budget (a calibration bug)"
            )
    return ledger


def _row(spec, method, fitted, privacy, spent, checks, wall, phases, task, val, test) -> TrialRow:
    return TrialRow(
        trial_id=spec.trial_id,
        config_id=spec.config_id,
        **{k: v for k, v in asdict(spec).items() if k != "secure_noise"},
        knob_name=None if method.knob is None else method.knob.name,
        privacy_notion=fitted.privacy_notion if privacy is not None else "non-private",
        uses_sensitive_at_test=fitted.sensitive_at_test,
        epsilon_spent=spent,
        epsilon_checks=checks,
        target_accounting=fitted.target_accounting,
        wall_seconds=wall,
        n_train=len(task.train),
        group_names=list(task.group_names),
        group_sizes_train=np.bincount(task.train.s, minlength=task.n_groups).tolist(),
        task_kind=task.kind,
        dataset_sha256=task.provenance.sha256,
        budget=None if fitted.budget is None else asdict(fitted.budget),
        info={
            **{k: (float(v) if isinstance(v, np.floating) else v) for k, v in fitted.info.items()},
            **({"noise_sampler": NOISE_SAMPLERS[spec.secure_noise]} if privacy else {}),
            **preprocessing_flag(task),
            "phase_seconds": phases,
        },
        ledger=fitted.ledger.to_json(),
        stamp=stamp(str(fitted.device)),
        val=val,
        test=test,
        model_state=fitted_state(fitted),
    )


def preprocessing_flag(task: Task) -> dict[str, str]:
    """`{"preprocessing": "private" | "not private"}` for a task whose provenance says (a
    user CSV: public bounds or training-split statistics), so that every row and report
    shows it; nothing for the built-ins, whose cards document their preprocessing."""
    private = task.provenance.preprocessing.get("preprocessing_private")
    if private is None:
        return {}
    return {"preprocessing": "private (public bounds)" if private else "not private"}
