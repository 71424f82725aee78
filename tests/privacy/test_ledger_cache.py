"""Accounting once per distinct ledger (`fairbench.privacy.ledger_cache`): hits only for
ledgers that account the same mechanisms, results equal to an uncached computation."""

from __future__ import annotations

import pytest
from dp_accounting import dp_event

from fairbench.datasets import get_dataset
from fairbench.methods import FairnessSpec, get_method
from fairbench.privacy import PrivacyBudget, PrivacyLedger, ledger_cache
from fairbench.privacy import ledger as ledger_module
from fairbench.privacy.crosscheck import check_ledger
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.session import PrivacySession
from fairbench.runner.trial import TrialSpec, run_trial

DELTA = 1e-5
G, L = dp_event.GaussianDpEvent, dp_event.LaplaceDpEvent


@pytest.fixture(autouse=True)
def _fresh_cache():
    ledger_cache.cache_clear()
    yield
    ledger_cache.cache_clear()


def ledger(*entries, parallel=False) -> PrivacyLedger:
    out = PrivacyLedger(parallel_groups=parallel)
    for i, (event, group) in enumerate(entries):
        out.record(f"release {i}", event, group)
    return out


def shared_batch(q, sigma, scale, order=1):
    parts = [G(sigma), L(scale)][::order]
    return dp_event.PoissonSampledDpEvent(q, dp_event.ComposedDpEvent(parts))


def test_canonically_equal_ledgers_hit_the_cache_and_agree_exactly():
    """One RaCO-DP-style schedule and a counts release, written as the session writes them,
    and again split, reordered, relabelled, nested and with the batch's releases swapped."""
    counts = dp_event.SelfComposedDpEvent(G(30.0), 3)
    one = ledger((sgd_steps(0.05, 3.0, 8, 5.0), None), (counts, None))
    two = ledger(
        (G(30.0), None),
        (dp_event.SelfComposedDpEvent(shared_batch(0.05, 3.0, 5.0, order=-1), 3), None),
        (dp_event.ComposedDpEvent([G(30.0), dp_event.NoOpDpEvent(), G(30.0)]), None),
        (dp_event.ComposedDpEvent([shared_batch(0.05, 3.0, 5.0)] * 5), None),
    )
    assert ledger_cache.ledger_key(one, DELTA) == ledger_cache.ledger_key(two, DELTA)
    assert ledger_cache.normal_form(two).entries == ledger_cache.normal_form(one).entries
    first = ledger_cache.epsilon(one, DELTA), ledger_cache.cross_check(one, DELTA)
    second = ledger_cache.epsilon(two, DELTA), ledger_cache.cross_check(two, DELTA)
    assert first == second and first[1]["problems"] == []
    assert ledger_cache.cache_info() == {"hits": 3, "misses": 1, "check_misses": 1, "size": 1}
    # the figures are the ledger's: `one` is written in normal form, so bit for bit
    assert first == (one.epsilon(DELTA), check_ledger(one, DELTA, one.epsilon(DELTA)))
    # `two` composes its rounds in parts: the same bound, discretised in more steps
    assert two.epsilon(DELTA) == pytest.approx(first[0], rel=1e-6)


def test_ledgers_that_differ_in_what_they_run_do_not_collide():
    def steps(count=4, sigma=20.0, q=None):
        event = G(sigma) if q is None else dp_event.PoissonSampledDpEvent(q, G(sigma))
        return dp_event.SelfComposedDpEvent(event, count), None

    base = ledger(steps(), (L(50.0), 1))
    variants = {
        "base": (base, DELTA),
        "count": (ledger(steps(count=5), (L(50.0), 1)), DELTA),
        "noise": (ledger(steps(sigma=20.000001), (L(50.0), 1)), DELTA),
        "delta": (base, 1e-6),
        "group": (ledger(steps(), (L(50.0), 0)), DELTA),
        "parallel": (ledger(steps(), (L(50.0), 1), parallel=True), DELTA),
        "sampled": (ledger(steps(q=0.5), (L(50.0), 1)), DELTA),
    }
    keys = {name: ledger_cache.ledger_key(lg, d) for name, (lg, d) in variants.items()}
    assert len(set(keys.values())) == len(variants)
    got = {name: ledger_cache.epsilon(lg, d) for name, (lg, d) in variants.items()}
    assert ledger_cache.cache_info()["misses"] == len(variants)
    assert got == {name: lg.epsilon(d) for name, (lg, d) in variants.items()}
    assert got["count"] > got["base"] > got["noise"] and got["delta"] > got["base"]
    assert got["sampled"] < got["base"]
    # the group tag alone changes nothing sequentially; with parallel groups it would
    assert got["group"] == got["base"] == got["parallel"]


def test_parallel_groups_take_the_worst_group_on_hits_too():
    shared = (dp_event.SelfComposedDpEvent(G(30.0), 2), None)
    one = ledger(shared, (G(10.0), 0), (L(20.0), 1), parallel=True)
    two = ledger((L(20.0), 1), shared, (G(10.0), 0), parallel=True)
    assert ledger_cache.epsilon(one, DELTA) == ledger_cache.epsilon(two, DELTA)
    assert ledger_cache.cache_info()["misses"] == 1
    assert ledger_cache.epsilon(one, DELTA) == one.epsilon(DELTA)
    assert ledger_cache.cross_check(two, DELTA) == check_ledger(one, DELTA, one.epsilon(DELTA))


def spec(method, knob=None, seed=0, **hparams) -> TrialSpec:
    return TrialSpec(
        "synthetic",
        {"n_rows": 1200},
        method,
        method,
        hparams,
        "demographic_parity",
        knob,
        1.0,
        DELTA,
        seed,
    )


@pytest.mark.parametrize(
    "trial",
    [spec("dp-sgd", epochs=1, batch_size=64), spec("raco-dp", 0.05, epochs=1, batch_size=64)],
    ids=["dp-sgd", "raco-dp"],
)
def test_a_trial_stores_what_an_uncached_accounting_of_its_ledger_gives(trial):
    row = run_trial(trial)
    assert ledger_cache.cache_info()["misses"] == 1  # the overspend check's lookup
    fresh = PrivacyLedger.from_json(row.ledger)
    spent = fresh.epsilon(DELTA)
    assert row.epsilon_spent == spent and 0.9 < spent <= 1.0
    assert row.epsilon_checks == check_ledger(fresh, DELTA, spent)
    assert row.epsilon_checks["problems"] == []


def test_two_trials_with_one_ledger_call_the_accountant_once(monkeypatch):
    calls = {"epsilon": 0, "checks": 0}
    accountant, checker = ledger_module.epsilon, ledger_cache.check_ledger

    def counted_epsilon(*args, **kwargs):
        calls["epsilon"] += 1
        return accountant(*args, **kwargs)

    def counted_checks(*args, **kwargs):
        calls["checks"] += 1
        return checker(*args, **kwargs)

    monkeypatch.setattr(ledger_module, "epsilon", counted_epsilon)
    monkeypatch.setattr(ledger_cache, "check_ledger", counted_checks)
    rows = [run_trial(spec("dp-sgd", seed=seed, epochs=1, batch_size=64)) for seed in (0, 1)]
    assert rows[0].ledger == rows[1].ledger and rows[0].test != rows[1].test
    assert calls == {"epsilon": 1, "checks": 1}
    assert ledger_cache.cache_info() == {"hits": 5, "misses": 1, "check_misses": 1, "size": 1}
    assert rows[0].epsilon_checks == rows[1].epsilon_checks
    for row in rows:  # the accounting, hit or miss, is inside the stored wall time
        phases = row.info["phase_seconds"]
        assert set(phases) == {"data", "fit", "accounting", "evaluation"}
        assert row.wall_seconds == pytest.approx(phases["fit"] + phases["accounting"])
        assert min(phases.values()) >= 0


@pytest.fixture(scope="module")
def task():
    return get_dataset("synthetic", n_rows=1200).load(0)


@pytest.mark.parametrize(
    "method, knob, hparams",
    [
        ("dp-sgd", None, {"epochs": 1}),
        ("raco-dp", 0.05, {"epochs": 1, "batch_size": 64}),
        ("dp-fermi", 1.0, {"epochs": 1}),
        ("cgoo", 0.05, {"iterations": 3, "epochs": 0.5}),
        ("dpnose", 0.3, {}),
        ("dpse", 0.3, {}),
    ],
)
def test_session_ledgers_are_their_own_normal_form(task, method, knob, hparams):
    """What the module docstring promises: the normal form is how the sessions of the
    built-in methods write their ledgers (so the cache reports what `PrivacyLedger.epsilon`
    does, bit for bit), except DPSE's stage-by-stage full-data rounds (last bits only)."""
    constraint = "bounded_group_loss" if method in ("dpse", "dpnose") else "demographic_parity"
    budget = PrivacyBudget(1.0, DELTA)
    session = PrivacySession(0, "cpu", budget)
    get_method(method, **hparams).fit(
        task, budget, FairnessSpec(constraint, knob), 0, session=session
    )
    written = session.ledger()
    normal = ledger_cache.normal_form(written)
    same = [(e.group, e.event) for e in normal.entries] == [
        (e.group, e.event) for e in written.entries
    ]
    assert same == (method != "dpse")
    if method == "dpse":
        assert normal.epsilon(DELTA) == pytest.approx(written.epsilon(DELTA), rel=1e-12)
