"""The conformance kit (`fairbench.testing`): every built-in method and dataset adapter passes
it, so does the example plugin, and broken variants fail it at the check meant to catch them."""

from __future__ import annotations

import subprocess
import sys
import time
from importlib.metadata import EntryPoint

import pytest
from pydantic import ConfigDict

import fairbench.methods as methods
from fairbench.datasets import get_dataset
from fairbench.datasets import registry as dataset_registry
from fairbench.errors import ConfigError, DataError
from fairbench.methods.base import Method
from fairbench.methods.dp_sgd import DPSGD, DPSGDHparams
from fairbench.methods.engine import fit_trials
from fairbench.methods.raco_dp import SGDA
from fairbench.methods.trial import Trial
from fairbench.runner.trial import TrialSpec, run_trial
from fairbench.testing import check_adapter, check_method
from fairbench.testing.__main__ import main
from tests.conftest import REPO
from tests.datasets.pums_fixture import write_pums
from tests.privacy.test_session import LessNoise, Overspend  # the session tests' broken variants

# (hyper-parameters, check_method options) small enough for a few seconds per method; knob
# values (loose, strict) where the defaults from a method's Knob take longer to show
TINY = {
    "erm": ({"epochs": 1}, {}),
    "dp-sgd": ({"epochs": 1}, {}),
    "dpsgd-f": ({"epochs": 1}, {}),
    "dpsgd-global-adapt": ({"epochs": 1}, {}),
    "sgda": ({"epochs": 10}, {"knob_values": (0.5, 0.0)}),
    "raco-dp": ({"epochs": 2, "calibrate": "noise"}, {"knob_values": (0.5, 0.0)}),
    "cgoo": ({"iterations": 3}, {"knob_values": (0.5, 0.01)}),
    "cgoo-nonprivate": ({"iterations": 3}, {"knob_values": (0.5, 0.01)}),
    "dp-fermi": ({"epochs": 1}, {"knob_values": (0.0, 2.0)}),
    "dp-erm-mitigation": ({"epochs": 2}, {"knob_values": (0.0, 3.0)}),
    "pf-ld": ({"epochs": 2}, {}),  # knob values from its Knob: alpha 1.0 (loose) -> 0.0
    "dpse": (
        {"steps": 5, "precursor_steps": 5},
        {"constraint": "bounded_group_loss", "knob_values": (2.0, 0.3)},
    ),
    "dpnose": ({"steps": 5}, {"constraint": "bounded_group_loss", "knob_values": (2.0, 0.3)}),
    "fairlearn-eg": ({"max_iter": 2, "lr_max_iter": 100}, {"knob_values": (0.5, 0.01)}),
    "jagielski-post": ({"epochs": 1}, {"constraint": "equalized_odds", "knob_values": (0.5, 0.0)}),
    "decoupled-post": ({"epochs": 1}, {"knob_values": (0.5, 0.0)}),
    "mozannar": ({"max_iter": 2, "lr_max_iter": 100}, {"knob_values": (0.5, 0.01)}),
    "jagielski-oracle": ({"iterations": 3}, {"knob_values": (0.5, 0.01)}),
    "jagielski-oracle-nonprivate": ({"iterations": 3}, {"knob_values": (0.5, 0.01)}),
}
BUILTIN = sorted(n for n, c in methods.registry().items() if c.__module__.startswith("fairbench."))
PRIVATE_CHECKS = {
    "seed-sensitivity",
    "ledger-matches-plan",
    "ledger-nonempty",
    "epsilon-within-target",
}
COMMON = {
    "attributes",
    "hparams-rejected",
    "hparams-json-roundtrip",
    "determinism",
    "metrics-schema",
}
SMALL = {"epochs": 1}
EXAMPLE = {"epochs": 2}  # one size everywhere below: calibrations are cached per process


def test_every_builtin_method_has_small_hyperparameters_here():
    assert set(BUILTIN) <= set(TINY), f"add {sorted(set(BUILTIN) - set(TINY))} to TINY"


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_method_passes_the_kit(name):
    if name in ("fairlearn-eg", "mozannar"):
        pytest.importorskip("fairlearn")
    cls = methods.method_class(name)
    hparams, options = TINY[name]
    passed = check_method(cls, hparams=hparams, **options)
    names = {p.split(" ")[0] for p in passed}
    assert names >= COMMON
    assert (names >= PRIVATE_CHECKS) if cls.private else ("records-nothing" in names)
    assert ("knob-monotonicity" in names) == (cls.knob is not None)


@pytest.mark.parametrize("name", sorted(dataset_registry()))
def test_every_dataset_adapter_passes_the_kit(name, tmp_path):
    if name == "synthetic":
        assert "seed-changes-split" in check_adapter(get_dataset(name, n_rows=600))
        return
    if name == "acs":  # no PUMS file can be fetched here: generated PUMS-shaped files
        write_pums(tmp_path, "AL", 2018, "5-Year", rows=3000, seed=0)
        assert "task-fields" in check_adapter(get_dataset(name), root=tmp_path)
        return
    adapter = get_dataset(name, n_train=500)
    try:
        adapter.locate()
    except DataError:
        pytest.skip(f"{name}: raw files not present under FAIRBENCH_DATA")
    assert "provenance-sha256" in check_adapter(adapter)


# -- the example plugin ------------------------------------------------------------------------
@pytest.fixture
def example():
    from examples.fair_dp_logreg import ReweighedDPSGD

    yield ReweighedDPSGD
    methods._REGISTERED.pop(ReweighedDPSGD.name, None)
    methods.registry.cache_clear()


def test_the_example_plugin_passes_the_kit(example):
    passed = check_method(example, hparams=EXAMPLE, knob_values=(0.0, 1.0))
    assert {p.split(" ")[0] for p in passed} >= COMMON | PRIVATE_CHECKS
    assert any(p.startswith("knob-monotonicity (strength") for p in passed)


def test_register_adds_a_class_at_run_time_and_the_runner_finds_it(example):
    assert methods.register(example) is example
    methods.registry.cache_clear()  # what test_plugins does: registrations survive it
    assert methods.method_class("reweighed-dp-sgd") is example and "dp-sgd" in methods.registry()
    spec = TrialSpec(
        "synthetic",
        {"n_rows": 1500},
        example.name,
        example.name,
        EXAMPLE,
        "demographic_parity",
        1.0,
        0.5,
        1e-5,
        0,
    )
    row = run_trial(spec)
    assert 0 < row.epsilon_spent <= 0.5 and row.knob_name == "strength"
    with pytest.raises(ConfigError, match=r"taken by fairbench\.methods\.dp_sgd\.DPSGD"):
        methods.register(type("Impostor", (DPSGD,), {}))
    with pytest.raises(ConfigError, match="not a Method subclass"):
        methods.register(dict)


def test_the_example_plugin_registers_through_an_entry_point(monkeypatch, example):
    builtin = list(methods.entry_points(group=methods.GROUP))
    plugin = EntryPoint(example.name, "examples.fair_dp_logreg:ReweighedDPSGD", methods.GROUP)
    monkeypatch.setattr(methods, "entry_points", lambda group: [*builtin, plugin])
    methods.registry.cache_clear()
    assert methods.method_class(example.name) is example and "erm" in methods.registry()


def test_the_command_line_prints_one_line_per_check_and_sets_the_exit_code(capsys):
    code = main(["examples.fair_dp_logreg:ReweighedDPSGD", "--hparams", '{"epochs": 2}'])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and lines[0].startswith("PASS examples.fair_dp_logreg:ReweighedDPSGD")
    assert lines[-1].startswith("PASS") and "knob-monotonicity (strength" in lines[-1]
    assert main([f"{__name__}:SwallowsUnknown", "--hparams", '{"epochs": 1}']) == 1
    assert "FAIL" in capsys.readouterr().out


def test_python_dash_m_runs_from_the_repository_root():
    """The `examples` package here, not opacus's installed one of the same name."""
    done = subprocess.run(
        [sys.executable, "-m", "fairbench.testing", "examples.fair_dp_logreg:WeightedCrossEntropy"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert "check attributes failed" in done.stdout


# -- broken variants: each fails at the check meant to catch it ----------------------------------
class UncheckedLessNoise(LessNoise):
    """10x less noise, with a `fit` that skips the plan check: the session still refuses."""

    def fit(self, task, privacy, fairness, seed, device="cpu", session=None):
        (fitted,) = fit_trials(self, [Trial(task, fairness, session)])
        fitted.ledger, fitted.plan = session.ledger(), session.plan
        return fitted


class SeededFromTime(DPSGD):
    """Reseeds the session's noise from the clock: no two runs agree."""

    def program(self, trials, plan):
        for trial in trials:
            trial.session.stream("sampling").manual_seed(time.time_ns())
        return super().program(trials, plan)


class SeedIgnored(DPSGD):
    """Trains with seed 0 whatever the trial's seed: every seed gives the same model."""

    def program(self, trials, plan):
        for trial in trials:
            trial.session.seed = 0  # every stream is spawned from it
        return super().program(trials, plan)


class SwallowsUnknown(DPSGD):
    """Drops hyper-parameters it does not know instead of refusing them (a typo is lost)."""

    def __init__(self, **hparams):
        super().__init__(**{k: v for k, v in hparams.items() if k in self.Hparams.model_fields})


class LaxHparams(DPSGDHparams):
    model_config = ConfigDict(extra="ignore", frozen=True)


class LaxModel(DPSGD):
    """Its hyper-parameter model ignores unknown keys."""

    Hparams = LaxHparams


class NamedKnob(DPSGD):
    """Declares its knob as a bare name, which the engine cannot check values with."""

    knob = "strength"


class TrainsItself(DPSGD):
    """Declares no program (the former contract): the engine has nothing to run."""

    program = Method.program


BROKEN = {
    # a draw the plan does not allow is refused by the session before its noise is drawn
    "ledger differs from plan": (LessNoise, "privacy-contract"),
    "ledger differs, fit unchecked": (UncheckedLessNoise, "privacy-contract"),
    "overspent budget": (Overspend, "epsilon-within-target"),
    "seeded from the clock": (SeededFromTime, "determinism"),
    "seed ignored": (SeedIgnored, "seed-sensitivity"),
    "unknown hyper-parameter dropped": (SwallowsUnknown, "hparams-rejected"),
    "unknown keys allowed": (LaxModel, "attributes"),
    "knob not a Knob": (NamedKnob, "attributes"),
    "no program declared": (TrainsItself, "attributes"),
}


@pytest.mark.parametrize("variant", sorted(BROKEN))
def test_the_kit_catches_a_broken_variant(variant):
    cls, check = BROKEN[variant]
    with pytest.raises(AssertionError, match=f"^method dp-sgd: check {check} failed: "):
        check_method(cls, hparams=SMALL)


def test_a_typed_knob_gives_the_smoke_test_its_direction():
    """A `Knob` says what a larger value does, so the smoke test needs no explicit values; a
    strict value that makes things worse is caught."""
    passed = check_method(SGDA, hparams={"epochs": 40})
    assert "knob-monotonicity (gamma 1.0 -> 0.0" in passed[-1]
    with pytest.raises(AssertionError, match="check knob-monotonicity failed"):
        check_method(SGDA, hparams={"epochs": 40}, knob_values=(0.0, 0.5))
