"""The method interface every plugin implements, built-in or third-party.

A method is configured with explicit, validated hyperparameters (scikit-learn style) and
`fit` receives the task, the privacy budget (None for a non-private method), the fairness
spec, a seed and a device. A plugin declares its `plan` (from public inputs) and its
`program` (the step the engine runs, `fairbench.methods.engine`), whose releases and batches
come from a privacy session (`fairbench.privacy.session`): its only source of noise and
Poisson batches. The session records every release as it is drawn; that record is the
trial's ledger, and the epsilon a trial reports is computed from it by the suite's
accountant. `fit` checks it against the plan the engine submitted.
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import ValidationError

from fairbench.errors import ConfigError
from fairbench.methods.knob import Knob
from fairbench.methods.plan import DataShape, Plan
from fairbench.methods.trial import (
    Device,
    FairnessSpec,
    Fitted,
    Hparams,
    Trial,
    resolve_device,
)
from fairbench.privacy import PrivacyBudget
from fairbench.privacy.session import (
    Guarantee,
    PrivacyContractError,
    PrivacyNotion,
    PrivacySession,
    check_plan,
)
from fairbench.task import Task

if TYPE_CHECKING:  # the engine builds on this module
    from fairbench.methods.engine import Stack


class Method(ABC):
    """A method plugin: class attributes that describe it, and two declarations.

    `plan(shape, target, fairness, seed)`: what a trial will run, from public inputs alone
    (`fairbench.methods.plan.Plan`): the events it releases, the loop's schedule, the budget
    and the public quantities it reports. `program(trials, plan)`: the step over a stack of
    trials that share the plan (models, the update drawn through each trial's session, what
    each trial reports afterwards). The engine (`fairbench.methods.engine.fit_trials`) owns
    the trial: it validates the knob and constraint from the class attributes, submits the
    plan to every session under the declared guarantee, runs the loop, builds the `Fitted`
    results and checks every ledger against its plan. A method whose plan grows with noisy
    outputs (DPSE) sets `adaptive_plan` and runs its own loop (`TrainingProgram.run`)."""

    name: ClassVar[str]
    description: ClassVar[str]
    private: ClassVar[bool]  # True: needs a PrivacyBudget and spends it
    knob: ClassVar[Knob | None] = None  # the fairness knob, None for plain baselines
    Hparams: ClassVar[type[Hparams]] = Hparams
    # what the plugin had to reconstruct because its sources are incomplete (one line, shown
    # wherever methods are listed); None: implemented from a complete specification
    reconstructed: ClassVar[str | None] = None
    # True: predictions read each record's sensitive attribute (a group-aware post-processor);
    # every row, table and plot marks such a method, never compared silently with the others
    sensitive_at_test: ClassVar[bool] = False
    # the reported metric that measures what a method without a knob targets (e.g. the group
    # accuracy cost of privacy), named as reports write it; None: its knob's constraint, or none
    target_metric: ClassVar[str | None] = None
    # the citation: authors, year, title, venue; a plain baseline says what it is instead.
    # `fairbench describe` shows it; "" only for a third-party plugin that declares none
    paper: ClassVar[str] = ""
    # the named constraints a trial of this method may use (fairbench.metrics.VIOLATIONS
    # names); the engine refuses any other before training. None: not declared
    constraints: ClassVar[tuple[str, ...] | None] = None
    # True: it also takes a user-declared rate-constraint set (a config's `constraint:
    # {name, partition, constraints}`)
    declared_constraints: ClassVar[bool] = False
    # True: its plan grows during training (`PrivacySession.extend_plan`: budgets set by noisy
    # outputs), so the plan it submits first is not all it spends; private selection, which
    # accounts a candidate by its plan before it trains, refuses it
    adaptive_plan: ClassVar[bool] = False
    # the hyper-parameters whose values may differ between the trials of one stacked program
    # (`stack_program` reads each trial's own): a tune's draws of the method then train as one
    # program. Every other hyper-parameter must be equal within a stack (the runner groups by
    # them, `runner.stacking`). Empty: trials stack only with equal hyper-parameters and plans
    mixed: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, **hparams: Any) -> None:
        try:
            self.hparams = self.Hparams(**hparams)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ConfigError(
                f"method {self.name}: hyperparameter {where!r}: {err['msg']} "
                f"(valid: {', '.join(self.Hparams.model_fields)})"
            ) from None

    # -- what a plugin declares ----------------------------------------------------------------
    def guarantee(self) -> Guarantee:
        """What this configuration's epsilon is a statement about, from its hyper-parameters
        alone (private selection refuses a partial one before anything runs): its
        `privacy_notion` hyper-parameter where it has one, else the full notion. A method that
        reads statistics of the data exactly overrides it; the engine submits every plan
        under it."""
        if not self.private:
            return Guarantee(PrivacyNotion.NONE)
        notion = PrivacyNotion(getattr(self.hparams, "privacy_notion", PrivacyNotion.FULL))
        partial = () if notion is PrivacyNotion.FULL else ("privacy_notion",)
        return Guarantee(notion, because=partial)

    def plan(
        self,
        shape: DataShape,
        target: PrivacyBudget | None,
        fairness: FairnessSpec,
        seed: int = 0,
    ) -> Plan:
        """What a trial on data of `shape` will run to meet `target` (None: non-private):
        public inputs only, no data read, nothing trained. `seed` is the trial's, for a plan
        that depends on its own public randomness (a randomly drawn iterate). A plan that
        cannot meet the target raises `CalibrationError`."""
        raise NotImplementedError(f"method {self.name} declares no plan")

    def required_target(self, target: PrivacyBudget | None) -> PrivacyBudget:
        """`plan`'s target where the method is private (the engine refuses a private trial
        without one before it plans)."""
        if target is None:
            raise ConfigError(f"method {self.name} is private: give it a target epsilon")
        return target

    def program(self, trials: list[Trial], plan: Plan) -> Any:
        """The `engine.TrainingProgram` of `trials`, which share `plan`: their models, the
        step over one round of their batches, and what each reports afterwards."""
        raise NotImplementedError(f"method {self.name} declares no program")

    def stack_program(self, stack: Stack) -> Any:
        """The `engine.TrainingProgram` of a `Stack` whose trials' hyper-parameters differ in
        the `mixed` keys (so do their plans): a method that declares `mixed` reads each
        trial's own (`Stack.values`). The engine calls `program` where a stack's trials share
        one configuration and plan."""
        raise NotImplementedError(f"method {self.name} declares no mixed hyperparameters")

    def stack_shape(self, plan: Plan) -> Any:
        """What of a plan, beyond the hyper-parameters outside `mixed`, must be equal for
        trials to share a `stack_program` (a method whose step differs in kind with the
        knob, such as a release made only when it is positive); None: nothing more."""
        return None

    def stackable(self) -> bool:
        """Whether trials of this method whose plans are equal (these hyperparameters, one
        budget, any seeds and knob values) train as one stacked program."""
        return False

    def check(self, fairness: FairnessSpec) -> None:
        """Refuse, before anything is planned, a constraint or knob value the class attributes
        rule out (`constraints`, `declared_constraints`, `knob`)."""
        if fairness.definition is not None:
            if not self.declared_constraints:
                raise ConfigError(
                    f"method {self.name} takes the named constraints "
                    f"{', '.join(self.constraints or ())}, not a declared constraint set"
                )
        elif self.constraints is not None and fairness.constraint not in self.constraints:
            raise ConfigError(
                f"method {self.name} supports the constraints {', '.join(self.constraints)}; "
                f"got {fairness.constraint!r}"
            )
        if self.knob is None:
            return
        self.knob.validate(fairness.knob, method=self.name)
        if fairness.knob is None and self.knob.required:
            raise ConfigError(
                f"method {self.name} needs {self.knob.name} values: give the method `knobs`"
            )

    # -- what the engine does with it ----------------------------------------------------------
    def fit(
        self,
        task: Task,
        privacy: PrivacyBudget | None,
        fairness: FairnessSpec,
        seed: int,
        device: Device = "cpu",
        session: PrivacySession | None = None,
    ) -> Fitted:
        """Train on `task.train` only (validation and test are the runner's business). The
        returned ledger is what `session` recorded, checked against the method's plan; the
        conditions the device recorded during training (`privacy.sync`) are checked too."""
        if self.private and privacy is None:
            raise ConfigError(f"method {self.name} is private: give it a target epsilon")
        if session is None:
            session = PrivacySession(
                seed, resolve_device(device), privacy if self.private else None
            )
        return self.fit_stack([Trial(task, fairness, session)])[0]

    def fit_stack(self, trials: list[Trial], methods: list[Method] | None = None) -> list[Fitted]:
        """`fit` for several trials of this method at once (one program per group of equal
        plans, or of hyper-parameters equal but for the `mixed` keys, where the method
        stacks), each with its own session; `methods`: each trial's own configuration of this
        method (default: this one for all). Each trial's ledger is checked against its own
        plan."""
        from fairbench.methods.engine import fit_stacks  # the engine builds on this module

        if self.private and any(t.session.budget is None for t in trials):
            raise ConfigError(f"method {self.name} is private: give it a target epsilon")
        configured = [self] * len(trials) if methods is None else methods
        if any(type(m) is not type(self) for m in configured):
            raise ValueError(f"a stack of method {self.name} holds trials of another method")
        try:
            fits = fit_stacks(configured, trials)
        except PrivacyContractError as refused:  # a draw outside the plan: name the method
            raise PrivacyContractError(f"method {self.name}: {refused}") from None
        for fitted, trial, method in zip(fits, trials, configured, strict=True):
            session = trial.session
            try:
                session.checks.verify()  # what the device recorded during training, read once
            except PrivacyContractError as refused:
                raise PrivacyContractError(f"method {self.name}: {refused}") from None
            method._check_guarantee(session)
            fitted.ledger, fitted.plan = session.ledger(), session.plan
            check_plan(self.name, fitted.plan, fitted.ledger)
            if fitted.privacy_notion is None:
                fitted.privacy_notion = session.guarantee.label
        return fits

    def stepper(
        self, task: Task, privacy: PrivacyBudget | None, seed: int, device: Device = "cpu"
    ) -> Callable[[], None]:
        """One training step of exactly the code `fit` runs (sampling included), for
        `fairbench bench`."""
        from fairbench.methods.engine import one_step

        return one_step(self, task, privacy, seed, device)

    def _check_guarantee(self, session: PrivacySession) -> None:
        """A private trial ran under the guarantee the method declares, and its plan grew only
        if the method says it may (what private selection relies on)."""
        if not session.private:
            return
        declared = self.guarantee()
        if session.guarantee != declared:
            raise PrivacyContractError(
                f"method {self.name}: submitted its plan under {session.guarantee.label!r} but "
                f"declares {declared.label!r} (guarantee())"
            )
        if session.extended and not self.adaptive_plan:
            raise PrivacyContractError(
                f"method {self.name}: extended its plan during training without declaring "
                "adaptive_plan = True"
            )


SENSITIVE_MARK = " (A at test)"


def series_label(label: str, method: type[Method]) -> str:
    """How reports name a method entry: its label, marked when the method's predictions read
    the sensitive attribute, so no table or legend compares it silently with those that do
    not (the rows also say so, `uses_sensitive_at_test`)."""
    marked = method.sensitive_at_test and SENSITIVE_MARK not in label
    return label + SENSITIVE_MARK if marked else label
