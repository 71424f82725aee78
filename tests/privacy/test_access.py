"""The data-access replay check: every registered private method passes it, deliberately
leaky methods fail it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from fairbench.audit.access import altered, changed_fields, check_access
from fairbench.datasets import get_dataset
from fairbench.methods import FairnessSpec, get_method, registry
from fairbench.methods.dp_sgd import DPSGD, LABEL
from fairbench.methods.engine import rounds
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.noise import FloatNoise, noisy_sums
from fairbench.task import Task

BUDGET = PrivacyBudget(1.0, 1e-5)
DP = "demographic_parity"
EO = "equalized_odds"
BGL = "bounded_group_loss"
SMALL = {"epochs": 2, "batch_size": 40}
ROUNDS = {"iterations": 3, "epochs": 1, "batch_size": 40}  # jagielski-oracle: epochs per round
# every private plugin, in each configuration whose data access differs
CASES = {
    "dp-sgd": [({**SMALL}, DP, None)],
    "raco-dp": [({**SMALL}, DP, 0.05), ({**SMALL}, EO, 0.05)],
    "dp-fermi": [
        ({**SMALL}, DP, 1.0),
        ({**SMALL}, EO, 1.0),
        ({**SMALL}, DP, 0.0),
        ({**SMALL, "marginals": "public"}, EO, 1.0),
        ({**SMALL, "privacy_notion": "sensitive-attribute"}, DP, 1.0),
        ({**SMALL, "privacy_notion": "sensitive-attribute"}, DP, 0.0),
    ],
    "cgoo": [
        ({"iterations": 3, "epochs": 1, "batch_size": 40}, DP, 0.05),
        ({"iterations": 3, "epochs": 1, "batch_size": 40}, EO, 0.05),
        ({"iterations": 3, "epochs": 1, "batch_size": 40, "play": "paper"}, BGL, 0.2),
    ],
    "pf-ld": [
        ({**SMALL}, DP, 0.05),
        ({**SMALL}, EO, 0.0),
        ({**SMALL}, "accuracy_parity", 0.0),
        ({**SMALL, "privacy_notion": "sensitive-attribute"}, EO, 0.05),
    ],
    "dpse": [({"steps": 5}, BGL, 0.5), ({"steps": 5, "group_sizes": "public"}, BGL, None)],
    "dpnose": [({"steps": 5}, BGL, 0.5), ({"steps": 5}, BGL, None)],
    "decoupled-post": [({**SMALL}, DP, 0.0), ({**SMALL, "holdout": 0, "model": "mlp"}, DP, 0.05)],
    "jagielski-post": [
        ({**SMALL}, EO, 0.05),
        ({**SMALL, "holdout": 0.3}, DP, 0.0),
        ({**SMALL, "privacy_notion": "sensitive-attribute"}, EO, 0.05),
    ],
    "dp-erm-mitigation": [
        ({**SMALL}, DP, 1.0),
        ({**SMALL}, EO, 0.0),
        ({**SMALL, "model": "mlp", "sign_momentum": 0.5}, DP, 1.0),
    ],
    "dpsgd-f": [({**SMALL}, DP, None), ({**SMALL, "model": "mlp"}, EO, None)],
    "dpsgd-global-adapt": [({**SMALL}, DP, None), ({**SMALL, "model": "mlp"}, EO, None)],
    "jagielski-oracle": [
        ({**ROUNDS}, EO, 0.05),
        ({**ROUNDS, "mixture": "uniform"}, DP, 0.05),
        ({**ROUNDS, "privacy_notion": "sensitive-attribute"}, EO, 0.05),
    ],
    "mozannar": [({"max_iter": 5}, DP, 0.05), ({"max_iter": 5}, EO, 0.05)],
}


@pytest.fixture(scope="module")
def task() -> Task:
    return get_dataset("synthetic", n_rows=400, n_groups=3).load(seed=0)


def test_every_registered_private_method_has_a_case():
    private = {name for name, cls in registry().items() if cls.private}
    assert private <= set(CASES), f"add a data-access case for {private - set(CASES)}"


@pytest.mark.parametrize(
    ("name", "hparams", "constraint", "knob"),
    [(name, *case) for name, cases in CASES.items() for case in cases],
)
def test_private_methods_read_training_data_only_through_releases(
    task, name, hparams, constraint, knob
):
    report = check_access(
        get_method(name, **hparams), task, BUDGET, FairnessSpec(constraint, knob), seed=1
    )
    assert report.ok, report.leaks
    trains_on_public_data_only = "sensitive" in str(hparams) and knob == 0.0
    assert (report.releases == 0) == trains_on_public_data_only


def test_dpse_regression_reads_only_through_releases():
    task = get_dataset("synthetic", task="regression", group_sizes=[200, 60, 40]).load(seed=0)
    for hparams in ({"steps": 5}, {"steps": 5, "composition": "parallel"}):
        report = check_access(
            get_method("dpse", **hparams), task, BUDGET, FairnessSpec(BGL, 2.0), seed=1
        )
        assert report.ok, report.leaks


class ExactBaseRate(DPSGD):
    """Leaky: shifts the bias by the exact training base rate, read outside any mechanism."""

    name = "leaky-base-rate"

    def fit(self, task, privacy, fairness, seed, device="cpu"):
        fitted = super().fit(task, privacy, fairness, seed, device)
        fitted.model.linear.bias.data[1] += float(np.mean(task.train.y))
        return fitted


class ExactGroupSizes(DPSGD):
    """Leaky: reports exact group sizes in `info`, which lands in every result row."""

    name = "leaky-group-sizes"

    def fit(self, task, privacy, fairness, seed, device="cpu"):
        fitted = super().fit(task, privacy, fairness, seed, device)
        fitted.info["group_sizes"] = np.bincount(task.train.s).tolist()
        return fitted


class DataDependentSteps(DPSGD):
    """Leaky: one extra step per 2 positive minority records (the step count reads data),
    declared by extending its plan, so its ledger still matches the plan."""

    name = "leaky-steps"
    adaptive_plan = True

    def program(self, trials, plan):
        (trial,) = trials
        task, session, schedule = trial.task, trial.session, plan.schedule
        extra = int(np.sum((task.train.s > 0) & (task.train.y == 1))) // 2
        more = PrivacyLedger()
        more.record(LABEL, sgd_steps(schedule.sampling_rate, schedule.noise_multiplier, extra))
        session.extend_plan(more)
        program = super().program(trials, plan)
        next_round = rounds([session], len(task.train), plan)

        def run():
            for _ in range(schedule.steps + extra):
                program.step(next_round())

        return dataclasses.replace(program, run=run)


class Unaccounted(DPSGD):
    """Leaky: a noisy release of the label sum that the ledger never records."""

    name = "leaky-unaccounted"

    def fit(self, task, privacy, fairness, seed, device="cpu"):
        import torch

        fitted = super().fit(task, privacy, fairness, seed, device)
        total = torch.tensor([float(task.train.y.sum())])
        noise = FloatNoise(torch.Generator().manual_seed(seed))
        noisy = noisy_sums("gaussian", noise, [total], 1.0, 1.0, len(task.train))[0]
        fitted.info["positives"] = float(noisy)
        return fitted


@pytest.mark.parametrize(
    ("leaky", "finding"),
    [
        (ExactBaseRate, "predictions differ"),
        (ExactGroupSizes, "info['group_sizes']"),
        (DataDependentSteps, "release"),
        (Unaccounted, "gaussian releases made"),
    ],
)
def test_leaky_methods_are_caught(task, leaky, finding):
    report = check_access(leaky(**SMALL), task, BUDGET, FairnessSpec(DP), seed=1)
    assert not report.ok
    assert any(finding in leak for leak in report.leaks), report.leaks


def test_altered_records_keep_what_the_notion_declares_public(task):
    assert changed_fields("full", DP) == ("x", "y", "s")
    assert changed_fields("full+public-group-sizes", BGL) == ("x", "y")
    assert changed_fields("full+public-marginals", EO) == ("x",)
    assert changed_fields("sensitive-attribute (paper analysis)", DP) == ("s",)
    train = task.train
    new = altered(train, ("s",), task.n_classes, task.n_groups)
    tenth = round(0.1 * len(train))
    moved = new.s != train.s
    assert moved.sum() == tenth and np.array_equal(new.X, train.X)
    assert np.array_equal(new.y, train.y)
    assert np.array_equal(new.s[moved], (train.s[moved] + 1) % 3)
    new = altered(train, ("x", "y"), task.n_classes, task.n_groups)
    assert np.array_equal(new.s, train.s) and (new.y != train.y).sum() == tenth
    changed_rows = (new.X != train.X).any(axis=1)
    assert 0 < changed_rows.sum() <= tenth
