"""The privacy session: ledgers produced by the noise drawn, checked against the plan.

`BROKEN` lists method variants that each break the privacy contract in one way; every one must
be caught (by the session at the draw, or by the plan check that `fit` and the runner run).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from dp_accounting import dp_event

from fairbench.datasets import get_dataset
from fairbench.methods import FairnessSpec
from fairbench.methods.dp_sgd import DPSGD, LABEL
from fairbench.methods.plan import Plan
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.contributions import Rows
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.pld import SubstitutionSampledDpEvent
from fairbench.privacy.session import (
    GaussianSum,
    PrivacyContractError,
    PrivacyNotion,
    PrivacySession,
    canonical,
    check_plan,
    ledger_of,
)
from fairbench.runner.trial import TrialSpec, recorded_ledger
from fairbench.streams import torch_stream

BUDGET = PrivacyBudget(1.0)
PARITY = FairnessSpec("demographic_parity")


@pytest.fixture(scope="module")
def task():
    return get_dataset("synthetic", n_rows=1500).load(0)


# -- broken variants ---------------------------------------------------------------------------
def with_steps(plan: Plan, steps: int) -> Plan:
    """`plan` with its ledger of `steps` DP-SGD steps (its schedule and noise unchanged)."""
    s = plan.schedule
    ledger = PrivacyLedger()
    ledger.record(LABEL, sgd_steps(s.sampling_rate, s.noise_multiplier, steps))
    return dataclasses.replace(plan, ledger=ledger)


class LessNoise(DPSGD):
    """Draws 10x less noise than its plan says."""

    def program(self, trials, plan):
        schedule = plan.schedule
        quieter = dataclasses.replace(schedule, noise_multiplier=schedule.noise_multiplier / 10)
        return super().program(trials, dataclasses.replace(plan, schedule=quieter))


class UndeclaredRelease(DPSGD):
    """Also releases noisy label counts of every batch, which its plan never mentions."""

    def program(self, trials, plan):
        program = super().program(trials, plan)
        (trial,) = trials
        counts = trial.session.gaussian_counts("label counts", 50.0)
        y = torch.as_tensor(trial.task.train.y)

        def leaky(round_):
            program.step(round_)
            (batch,) = round_.batches
            counts(y.index_select(0, batch.indices), 2, batch)

        return dataclasses.replace(program, step=leaky)


class ExtraStep(DPSGD):
    """Runs one step more than it planned (and than the budget allows)."""

    def plan(self, shape, target, fairness, seed=0):
        honest = super().plan(shape, target, fairness, seed)
        return dataclasses.replace(honest, rounds=honest.schedule.steps + 1)


class FewerSteps(DPSGD):
    """Plans two steps and runs one: a ledger that differs from its plan, though not unsafe."""

    def plan(self, shape, target, fairness, seed=0):
        return dataclasses.replace(
            with_steps(super().plan(shape, target, fairness, seed), 2), rounds=1
        )


class NoClipping(DPSGD):
    """Skips clipping: its gradient sums have no bound at all."""

    def __init__(self, **hparams):
        super().__init__(**{"clip_norm": math.inf, **hparams})


class WiderClip(DPSGD):
    """Clips at 10 C while drawing the noise its plan sizes for C: the sensitivity is 10x the
    declared one (the mechanism records the noise multiplier it really applied, sigma / 10)."""

    def program(self, trials, plan):
        (trial,) = trials
        session = trial.session

        def wider(label, clip, noise_multiplier, group=None):
            return GaussianSum(session, label, 10 * clip, noise_multiplier / 10, group)

        session.gaussian_sum = wider
        return super().program(trials, plan)


class Overspend(DPSGD):
    """Plans (and runs) twice the steps its noise was calibrated for."""

    def plan(self, shape, target, fairness, seed=0):
        honest = super().plan(shape, target, fairness, seed)
        steps = 2 * honest.schedule.steps
        schedule = dataclasses.replace(honest.schedule, steps=steps)
        return dataclasses.replace(with_steps(honest, steps), schedule=schedule)


BROKEN = {
    "10x less noise": (LessNoise, "beyond the plan"),
    "undeclared release": (UndeclaredRelease, "GaussianDpEvent(noise_multiplier=50.0)"),
    "extra step": (ExtraStep, "beyond the plan"),
    "fewer steps than planned": (FewerSteps, "ran 1 time(s), planned 2"),
    "skipped clipping": (NoClipping, "finite sensitivity"),
    "clip wider than declared": (WiderClip, "beyond the plan"),
    "overspent budget": (Overspend, "> target"),
}


@pytest.mark.parametrize("variant", sorted(BROKEN))
def test_every_broken_variant_is_caught_by_the_runner(task, variant):
    """What the runner does: fit through a fresh session (a draw outside the plan is refused
    there, before its noise), then take the trial's ledger (the plan check and the budget)."""
    cls, message = BROKEN[variant]
    session = PrivacySession(0, torch.device("cpu"), BUDGET)
    spec = TrialSpec(
        "synthetic",
        {},
        "dp-sgd",
        "dp-sgd",
        {},
        "demographic_parity",
        None,
        BUDGET.epsilon,
        BUDGET.delta,
        0,
    )
    with pytest.raises(PrivacyContractError) as caught:
        fitted = cls(epochs=2).fit(task, BUDGET, PARITY, seed=0, session=session)
        recorded_ledger(spec, session, fitted.target_accounting)
    assert message in str(caught.value)
    assert str(caught.value).startswith("method dp-sgd")


def test_a_refused_release_draws_no_noise(task):
    session = PrivacySession(0, torch.device("cpu"), BUDGET)
    with pytest.raises(PrivacyContractError):
        ExtraStep(epochs=2).fit(task, BUDGET, PARITY, seed=0, session=session)
    planned = canonical(session.plan)
    assert canonical(session.ledger()) == planned  # the extra round was never recorded


def test_a_release_before_any_plan_is_refused(task):
    """The engine submits every trial's plan before `program` runs, so a method that declares
    plan() and program() cannot draw first; the session refuses such a draw all the same."""
    session = PrivacySession(0, torch.device("cpu"), BUDGET)
    with pytest.raises(PrivacyContractError, match="undeclared release 'peek'"):
        session.gaussian_counts("peek", 10.0)(torch.as_tensor(task.train.y), 2)
    assert not session.releases


def test_fewer_rounds_than_planned_differ_from_the_plan(task):
    with pytest.raises(PrivacyContractError, match="recorded privacy events differ"):
        FewerSteps(epochs=2).fit(task, BUDGET, PARITY, seed=0)


def test_the_honest_method_passes_and_its_ledger_is_its_plan(task):
    fitted = DPSGD(epochs=2).fit(task, BUDGET, PARITY, seed=0)
    assert canonical(fitted.ledger) == canonical(fitted.plan)
    b = fitted.budget
    expected = sgd_steps(b.sampling_rate, b.noise["gradient"], b.steps)
    assert fitted.ledger.entries[0].event == expected  # the calibrated form, exactly
    assert 0.99 < fitted.ledger.epsilon(BUDGET.delta) <= BUDGET.epsilon


# -- mechanisms --------------------------------------------------------------------------------
def plan_of(*events) -> PrivacyLedger:
    plan = PrivacyLedger()
    for event in events:
        plan.record("planned", event)
    return plan


def test_releases_on_one_batch_share_its_sampling_and_rounds_are_counted():
    session = PrivacySession(0, budget=BUDGET)
    session.submit_plan(plan_of(sgd_steps(0.1, 2.0, 3, 5.0), dp_event.GaussianDpEvent(3.0)))
    grads = session.gaussian_sum("g", 1.0, 2.0)
    hist = session.laplace_histogram("h", 5.0)
    sample = session.poisson(100, 0.1)
    for _ in range(3):
        batch = sample()
        rows = torch.full((len(batch.indices), 2), 0.5)
        hist(rows, torch.zeros(len(batch.indices), dtype=torch.int64), 1, batch)
        grads(Rows.of(torch.ones(len(batch.indices), 4)), batch)
    counts = session.gaussian_counts("c", 3.0)
    counts(torch.tensor([0, 1, 1]), 2)
    ledger = session.ledger()
    assert [e.event for e in ledger.entries] == [
        sgd_steps(0.1, 2.0, 3, 5.0),
        dp_event.GaussianDpEvent(3.0),
    ]


def test_sensitive_attribute_sessions_account_substitution_and_double_the_noise():
    session = PrivacySession(0, budget=BUDGET)
    plan = plan_of(sgd_steps(1.0, 2.0, 1, substitution=True))
    session.submit_plan(plan, PrivacyNotion.SENSITIVE_ATTRIBUTE)
    mechanism = session.gaussian_sum("g", 1.5, 2.0)
    batch = session.poisson(1000, 1.0)()
    zeros = Rows.of(torch.zeros(1000, 20_000))
    noise = mechanism(zeros, batch)[0]
    assert noise.std().item() == pytest.approx(2.0 * 2 * 1.5, rel=0.02)  # sigma * 2C
    (entry,) = session.ledger().entries
    assert entry.event == SubstitutionSampledDpEvent(1.0, dp_event.GaussianDpEvent(2.0))


def test_a_clipped_sum_bounds_each_record_inside_the_mechanism():
    session = PrivacySession(0)  # non-private: exact sums, so the clipping shows
    session.submit_plan(PrivacyLedger())
    rows = torch.tensor([[30.0, 40.0], [0.3, 0.4]])
    (total,) = session.gaussian_sum("g", 1.0, 0.0)(Rows.of(rows))
    assert torch.allclose(total, torch.tensor([0.6 + 0.3, 0.8 + 0.4]))


def test_a_histogram_row_above_l1_norm_one_is_refused():
    session = PrivacySession(0, budget=BUDGET)
    session.submit_plan(PrivacyLedger())
    rows = torch.tensor([[0.5, 0.5], [1.5, 0.5]])
    with pytest.raises(PrivacyContractError, match="l1 norm above 1"):
        session.laplace_histogram("h", 5.0)(rows, torch.tensor([0, 0]), 1)


def test_non_private_sessions_draw_nothing_and_record_nothing():
    session = PrivacySession(0)
    session.submit_plan(PrivacyLedger())
    values = torch.arange(6.0).reshape(3, 2)
    assert torch.equal(session.gaussian_sum("g", math.inf, 0.0)(Rows.of(values))[0], values.sum(0))
    fresh = torch_stream(0, "noise/g").get_state()
    assert torch.equal(session.stream("noise/g").get_state(), fresh)  # nothing drawn
    assert session.ledger().entries == [] and session.notion is PrivacyNotion.NONE
    with pytest.raises(PrivacyContractError, match="Poisson"):
        PrivacySession(0, budget=BUDGET).shuffled(10, 2)


def test_a_trial_declared_not_accounted_may_shuffle_and_spends_infinite_epsilon():
    """A plan with a `NonPrivateDpEvent` (a parity run the suite cannot account) lets a
    private trial draw shuffled batches; its releases on them are recorded unsampled, and the
    marker makes its epsilon inf (never the target it did not meet)."""
    plan = PrivacyLedger()
    plan.record("g", dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(2.0), 3))
    plan.record("not accounted", dp_event.NonPrivateDpEvent())
    session = PrivacySession(0, budget=BUDGET)
    with pytest.raises(PrivacyContractError, match="Poisson"):
        session.shuffled(10, 4)  # no plan yet: refused as any private trial
    session.submit_plan(plan)
    assert session.not_accounted
    session.unaccounted("not accounted")
    draw, release = session.shuffled(10, 4, drop_last=True), session.gaussian_sum("g", 1.0, 2.0)
    for _ in range(3):
        batch = draw()
        assert len(batch.indices) == 4 and batch.rate is None
        release(Rows.of(torch.ones(4, 2)), batch)
    ledger = session.ledger()
    check_plan("m", session.plan, ledger)
    assert ledger.epsilon(1e-5) == math.inf


def test_canonical_forms_ignore_how_a_ledger_is_written_but_not_what_it_runs():
    one = PrivacyLedger()
    one.record("a", sgd_steps(0.1, 2.0, 4, 5.0))
    two = PrivacyLedger()
    inner = dp_event.ComposedDpEvent([dp_event.LaplaceDpEvent(5.0), dp_event.GaussianDpEvent(2.0)])
    for _ in range(2):
        two.record("b", dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(0.1, inner), 2))
    assert canonical(one) == canonical(two)
    check_plan("m", one, two)
    three = PrivacyLedger()
    three.record("a", sgd_steps(0.1, 2.0, 5, 5.0))
    with pytest.raises(PrivacyContractError, match="ran 5 time"):
        check_plan("m", one, three)


def test_the_ledger_of_releases_counts_identical_full_data_releases():
    session = PrivacySession(0, budget=BUDGET)
    plan = PrivacyLedger()
    plan.record("c", dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(3.0), 4), 1)
    session.submit_plan(plan)
    counts = session.gaussian_counts("c", 3.0, group=1)
    for _ in range(4):
        counts(torch.tensor([0, 1]), 2)
    ledger = ledger_of(session.releases, PrivacyNotion.FULL)
    assert [(e.event, e.group) for e in ledger.entries] == [
        (dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(3.0), 4), 1)
    ]


def test_methods_import_no_noise_sampler():
    """The only way to draw privacy noise is through the session's mechanisms."""
    from pathlib import Path

    import fairbench.methods as methods

    for path in Path(methods.__file__).parent.glob("*.py"):
        assert "privacy.noise" not in path.read_text(), path.name
