"""The method contract, checked on a class: what the runner and reports rely on of a plugin.

Every fit goes through a privacy session the kit creates and keeps, so the privacy checks read
what the session recorded rather than what the method says it recorded (as the runner does).
A check that fails raises `AssertionError` with one line naming the method and the check.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any, NoReturn

import numpy as np
from annotated_types import Ge, Gt
from pydantic import BaseModel

from fairbench import constraints
from fairbench.datasets import get_dataset
from fairbench.errors import ConfigError
from fairbench.methods.base import Method
from fairbench.methods.knob import Direction, Knob
from fairbench.methods.trial import FairnessSpec, Fitted
from fairbench.privacy import PrivacyBudget
from fairbench.privacy.session import PrivacyContractError, PrivacySession, canonical
from fairbench.runner.trial import evaluate, evaluate_group_loss
from fairbench.task import Split, Task

TARGETS = (0.5, 4.0)  # epsilon targets every private method must meet, a strict and a loose one
DELTA = 1e-5
DEFAULT_KNOB = 0.1  # the knob value of the contract fits: inside every built-in knob's range
# Knob smoke test: the strict fit's training violation (the constraint's gap; for a bounded
# group loss, the worst group's bounded loss) may exceed the loose fit's by this much. With
# tests/contract/test_testing.py's tiny fits no built-in's strict fit is above its loose one (a
# knob with no effect yet gives equal values); sgda's knob wired backwards shows +0.19 on
# `synthetic`.
KNOB_TOLERANCE = 0.05
UNKNOWN_KEY = "surely_not_a_hyperparameter"
REQUIRED_METRICS = ("error", "violation", "predictions_sha256", "rate_constraints")


@cache
def disparity_task() -> Task:
    """A task with a real disparity for the knob check (and the default task): `synthetic`."""
    return get_dataset("synthetic", n_rows=1500).load(0)


def knob_name(method_cls: type) -> str | None:
    """The name of the class's `Knob`; None without one."""
    knob = getattr(method_cls, "knob", None)
    return None if knob is None else knob.name


def default_knob_values(knob: Knob) -> tuple[float, float]:
    """(loose, strict) from the knob's direction (what a larger value does) and its range."""
    small = 0.0 if knob.low is None else float(knob.low)
    if not knob.low_inclusive:
        small += 0.01
    large = small + 1.0
    high = knob.high
    if high is not None and large > high:
        large = float(high) if knob.high_inclusive else (small + high) / 2
    return (large, small) if knob.direction is Direction.LOOSER else (small, large)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


@dataclass
class Checker:
    """One method class under test, the options of its fits, and the fits made so far."""

    cls: type[Method]  # what the checks verify it is
    task: Task
    constraint: str
    knob: float | None
    hparams: dict[str, Any]
    targets: tuple[float, ...] = TARGETS
    delta: float = DELTA
    fits: dict[tuple, tuple[Fitted, PrivacySession]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        name = getattr(self.cls, "name", None)
        return name if isinstance(name, str) and name else self.cls.__name__

    @property
    def private(self) -> bool:
        return getattr(self.cls, "private", False) is True

    def fail(self, check: str, why: str) -> NoReturn:
        raise AssertionError(one_line(f"method {self.label}: check {check} failed: {why}"))

    def require(self, ok: Any, check: str, why: str) -> None:
        if not ok:
            self.fail(check, why)

    def fit(
        self,
        check: str,
        seed: int,
        epsilon: float | None,
        *,
        knob: float | None = None,
        task: Task | None = None,
        fresh: bool = False,
    ) -> tuple[Fitted, PrivacySession]:
        """Fit through a session the kit keeps; cached by arguments unless `fresh`."""
        knob = self.knob if knob is None else knob
        task = self.task if task is None else task
        key = (seed, epsilon, knob, id(task))
        if key in self.fits and not fresh:
            return self.fits[key]
        budget = None if epsilon is None else PrivacyBudget(epsilon, self.delta)
        session = PrivacySession(seed, budget=budget)
        try:
            method = self.cls(**self.hparams)
            fitted = method.fit(
                task, budget, FairnessSpec(self.constraint, knob), seed, "cpu", session=session
            )
        except PrivacyContractError as exc:
            message = str(exc).removeprefix(f"method {self.label}: ")  # said once, by fail
            plan = "differ from its plan" in message or "without a plan" in message
            self.fail("ledger-matches-plan" if plan else "privacy-contract", message)
        except Exception as exc:  # any error in a fit fails the check that asked for it
            self.fail(
                check,
                f"fit (seed {seed}, epsilon {epsilon}, knob {knob}) raised "
                f"{type(exc).__name__}: {exc}",
            )
        self.require(isinstance(fitted, Fitted), check, "fit did not return a Fitted")
        if not fresh:
            self.fits[key] = (fitted, session)
        return fitted, session

    def contract_epsilon(self) -> float | None:
        return self.targets[0] if self.private else None


def check_attributes(c: Checker) -> Iterator[str]:
    """(a) What registries, configs and reports read off the class."""
    cls = c.cls
    for attr, kind in (("name", str), ("description", str), ("private", bool)):
        value = getattr(cls, attr, None)
        why = f"class attribute {attr!r} must be a non-empty {kind.__name__}, got {value!r}"
        c.require(isinstance(value, kind) and value != "", "attributes", why)
    hp = getattr(cls, "Hparams", None)
    if not (isinstance(hp, type) and issubclass(hp, BaseModel)):
        c.fail("attributes", "Hparams must be a pydantic model")
    c.require(
        hp.model_config.get("extra") == "forbid",
        "attributes",
        "Hparams must forbid unknown keys (model_config extra='forbid')",
    )
    knob = getattr(cls, "knob", None)
    c.require(
        knob is None or isinstance(knob, Knob),
        "attributes",
        "knob must be None or a fairbench.methods.knob.Knob (the engine checks values with it)",
    )
    c.require(
        isinstance(cls, type) and issubclass(cls, Method) and cls.program is not Method.program,
        "attributes",
        "a method subclasses fairbench.methods.base.Method and declares plan() and program()",
    )
    yield "attributes"


def positive_field(hparams: type[BaseModel]) -> str | None:
    """The first field constrained to be > 0 or >= 0 (pydantic's Gt / Ge metadata with a
    non-negative bound): a negative value must be refused."""
    for name, info in hparams.model_fields.items():
        for rule in info.metadata:
            if isinstance(rule, Gt | Ge):
                bound: Any = rule.gt if isinstance(rule, Gt) else rule.ge  # a number here
                if bound >= 0:
                    return name
    return None


def check_hparams(c: Checker) -> Iterator[str]:
    """(b) Bad hyper-parameters are a ConfigError at construction, never a silent default;
    (c) the resolved ones survive JSON, the form a results row stores them in."""
    try:
        resolved = c.cls(**c.hparams).hparams
    except Exception as exc:
        c.fail("hparams-valid", f"the given hyper-parameters {c.hparams} were refused: {exc}")
    c.require(
        isinstance(resolved, c.cls.Hparams),
        "hparams-valid",
        "the instance's `hparams` is not an instance of the class's Hparams",
    )
    bad: list[tuple[str, dict[str, Any]]] = [("unknown key", {**c.hparams, UNKNOWN_KEY: 1})]
    positive = positive_field(c.cls.Hparams)
    if positive is not None:
        bad.append((f"negative {positive}", {**c.hparams, positive: -1}))
    for what, hparams in bad:
        try:
            c.cls(**hparams)
        except ConfigError:
            continue
        except Exception as exc:
            c.fail("hparams-rejected", f"{what} raised {type(exc).__name__}, not ConfigError")
        c.fail("hparams-rejected", f"{what} was accepted: {hparams}")
    yield "hparams-rejected" + ("" if positive else " (unknown key only: no field is >= 0)")
    again = type(resolved)(**json.loads(json.dumps(resolved.model_dump())))
    c.require(
        again == resolved,
        "hparams-json-roundtrip",
        f"{resolved!r} came back from JSON as {again!r}",
    )
    yield "hparams-json-roundtrip"


def outputs(fitted: Fitted, split: Split, task: Task) -> np.ndarray:
    """Every number the model answers on `split` with (each component's, when randomized)."""
    if task.kind == "regression":
        return fitted.predict_values(split.X)
    if fitted.derived is not None:
        return fitted.predict_proba(split.X, split.s)
    return fitted.component_probabilities(split.X)


def fingerprint(fitted: Fitted, task: Task) -> str:
    values = np.ascontiguousarray(outputs(fitted, task.test, task))
    weights = np.asarray(fitted.weights if fitted.weights is not None else [], dtype=np.float64)
    return hashlib.sha256(values.tobytes() + weights.tobytes()).hexdigest()


def ledger_text(fitted: Fitted) -> str:
    return json.dumps(fitted.ledger.to_json(), sort_keys=True, default=str)


def check_determinism(c: Checker) -> Iterator[str]:
    """(d) A seed fixes the model and the ledger bit for bit, or results cannot be rerun; for a
    private method a different seed must also change the noise, hence the model."""
    eps = c.contract_epsilon()
    first, _ = c.fit("determinism", 0, eps)
    again, _ = c.fit("determinism", 0, eps, fresh=True)
    c.require(
        fingerprint(first, c.task) == fingerprint(again, c.task),
        "determinism",
        "two fits with seed 0 gave different test predictions (is a random stream "
        "seeded from anything but the session?)",
    )
    c.require(
        ledger_text(first) == ledger_text(again),
        "determinism",
        "two fits with seed 0 recorded different ledgers",
    )
    yield "determinism"
    if not c.private:
        return
    other, _ = c.fit("seed-sensitivity", 1, eps)
    c.require(
        fingerprint(other, c.task) != fingerprint(first, c.task),
        "seed-sensitivity",
        "seeds 0 and 1 gave bit-identical models: training ignores the seed",
    )
    yield "seed-sensitivity"


def check_privacy(c: Checker) -> Iterator[str]:
    """(e) The ledger is what the session recorded and what the plan said, and it spends no
    more than the target; a non-private method records nothing."""
    if not c.private:
        fitted, session = c.fit("records-nothing", 0, None)
        c.require(
            not fitted.ledger.entries and not session.releases,
            "records-nothing",
            "a non-private method recorded privacy events",
        )
        yield "records-nothing"
        return
    for target in c.targets:
        fitted, session = c.fit("ledger-matches-plan", 0, target)
        recorded = session.ledger()
        if fitted.plan is None or session.plan is None:
            c.fail("ledger-matches-plan", f"no plan was submitted (epsilon {target})")
        if fitted.ledger is None:
            c.fail("ledger-matches-plan", f"the fit returned no ledger (epsilon {target})")
        same = canonical(fitted.ledger) == canonical(fitted.plan) and canonical(
            recorded
        ) == canonical(session.plan)
        c.require(
            same,
            "ledger-matches-plan",
            f"the recorded ledger differs from the plan (epsilon {target})",
        )
        c.require(
            fitted.ledger.to_json() == recorded.to_json(),
            "ledger-matches-plan",
            "the returned ledger is not what the session recorded",
        )
        c.require(recorded.entries, "ledger-nonempty", f"nothing recorded at epsilon {target}")
        spent = recorded.epsilon(c.delta)
        c.require(
            spent <= target, "epsilon-within-target", f"spent epsilon {spent:.6g} > target {target}"
        )
    yield from ("ledger-matches-plan", "ledger-nonempty", "epsilon-within-target")


def evaluation(c: Checker, fitted: Fitted, split: Split, task: Task) -> dict[str, Any]:
    """The runner's evaluation of one split (`run_trial`'s choice of evaluator and rates)."""
    if task.kind == "regression" or c.constraint == "bounded_group_loss":
        return evaluate_group_loss(fitted, split, task, c.knob)
    gamma = c.knob if knob_name(c.cls) == "gamma" else None
    rate_set = constraints.build(
        c.constraint, None, task.n_classes, task.n_groups, 0.0 if gamma is None else gamma
    )
    if gamma is None:
        rate_set = rate_set.with_gamma(float("nan"))
    return evaluate(fitted, split, task, rate_set, True)


def check_metrics(c: Checker) -> Iterator[str]:
    """(f) The fitted model goes through the runner's evaluation into a well-formed row."""
    fitted, _ = c.fit("metrics-schema", 0, c.contract_epsilon())
    try:
        row = evaluation(c, fitted, c.task.test, c.task)
    except Exception as exc:
        c.fail("metrics-schema", f"evaluation raised {type(exc).__name__}: {exc}")
    missing = [k for k in REQUIRED_METRICS if k not in row]
    c.require(not missing, "metrics-schema", f"evaluation lacks {missing}")
    error, violation = row["error"], row["violation"]
    c.require(
        math.isfinite(error) and math.isfinite(violation) and violation >= 0,
        "metrics-schema",
        f"error {error}, violation {violation}",
    )
    c.require(
        c.task.kind == "regression" or 0 <= error <= 1,
        "metrics-schema",
        f"error {error} outside [0, 1]",
    )
    c.require(isinstance(row["predictions_sha256"], str), "metrics-schema", "bad fingerprint")
    yield "metrics-schema"


def check_knob(c: Checker, knob_values: tuple[float, float] | None) -> Iterator[str]:
    """(g) Smoke test: the strict knob value does not train a visibly less fair model than the
    loose one on a task with a real disparity (a backwards or ignored knob shows)."""
    knob = c.cls.knob
    if knob is None:
        return
    name = knob.name
    values = knob_values or default_knob_values(knob)
    task = disparity_task()
    eps = c.targets[-1] if c.private else None
    violation = []
    for value in values:
        fitted, _ = c.fit("knob-monotonicity", 0, eps, knob=value, task=task)
        row = evaluation(c, fitted, task.train, task)
        # a loss bound is compared on the loss it bounds (each bound has its own violation)
        bounded = c.constraint == "bounded_group_loss" or task.kind == "regression"
        violation.append(row["rate_constraints"][0]["value"] if bounded else row["violation"])
    loose, strict = violation
    c.require(
        strict <= loose + KNOB_TOLERANCE,
        "knob-monotonicity",
        f"{name} = {values[1]} (strict) has training violation {strict:.4f} > {loose:.4f} "
        f"at {name} = {values[0]} (loose) + tolerance {KNOB_TOLERANCE}",
    )
    yield f"knob-monotonicity ({name} {values[0]} -> {values[1]}: {loose:.3f} -> {strict:.3f})"


def iter_checks(
    method_cls: type[Method],
    *,
    task: Task | None = None,
    knob: float | None = None,
    constraint: str | None = None,
    hparams: dict[str, Any] | None = None,
    knob_values: tuple[float, float] | None = None,
    targets: tuple[float, ...] = TARGETS,
) -> Iterator[str]:
    """`check_method`, one check at a time: yields each passed check's name as it passes (a
    skipped one as "NAME: skipped (why)") and raises `AssertionError` at the first failure."""
    has_knob = getattr(method_cls, "knob", None) is not None
    c = Checker(
        method_cls,
        task if task is not None else disparity_task(),
        constraint or "demographic_parity",
        knob if knob is not None or not has_knob else DEFAULT_KNOB,
        dict(hparams or {}),
        tuple(targets),
    )
    yield from check_attributes(c)
    yield from check_hparams(c)
    yield from check_determinism(c)
    yield from check_privacy(c)
    yield from check_metrics(c)
    yield from check_knob(c, knob_values)


def check_method(
    method_cls: type[Method],
    *,
    task: Task | None = None,
    knob: float | None = None,
    constraint: str | None = None,
    hparams: dict[str, Any] | None = None,
    knob_values: tuple[float, float] | None = None,
    targets: tuple[float, ...] = TARGETS,
) -> list[str]:
    """Run the method contract on `method_cls` and return the checks passed; raise
    `AssertionError` (one line naming the method and the check) at the first failure.

    `task` defaults to `synthetic` (1,500 rows), `constraint` to demographic parity, `knob` (for
    a method with one) to 0.1, `hparams` to the class defaults: pass small ones (few epochs) to
    keep its four to six fits quick. `knob_values` = (loose, strict) for the knob smoke test;
    by default they come from the `Knob`'s direction and range."""
    return list(
        iter_checks(
            method_cls,
            task=task,
            knob=knob,
            constraint=constraint,
            hparams=hparams,
            knob_values=knob_values,
            targets=targets,
        )
    )
