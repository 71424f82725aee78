"""Stacked trials: several trials (seeds x knob values) trained as one program give each
trial the result it gets alone, with its own ledger, and the runner groups them."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fairbench.datasets import get_dataset
from fairbench.methods import FairnessSpec, get_method, method_class, registry
from fairbench.methods.trial import Trial
from fairbench.privacy import PrivacyBudget
from fairbench.privacy.session import PrivacySession, canonical
from fairbench.runner.stacking import work_units
from fairbench.runner.trial import TrialSpec, run_stack, run_trial, stack_key

FAST = {"epochs": 1, "steps": 5, "max_iter": 3, "iterations": 3, "T": 3}
KNOBS = {
    "raco-dp": [0.02, 0.1],
    "sgda": [0.02, 0.1],
    "dp-fermi": [0.0, 2.0],
    "cgoo": [0.05, 0.1],
    "cgoo-nonprivate": [0.05, 0.1],
    "fairlearn-eg": [0.05, 0.1],
    "dpse": [0.5, 0.7],
    "jagielski-post": [0.0, 0.1],
    "dp-erm-mitigation": [0.0, 2.0],
    "pf-ld": [0.0, 0.1],
    "jagielski-oracle": [0.02, 0.1],
    "jagielski-oracle-nonprivate": [0.02, 0.1],
}
STACKED = [
    "cgoo",
    "cgoo-nonprivate",
    "dp-erm-mitigation",
    "dp-fermi",
    "dp-sgd",
    "jagielski-oracle",
    "jagielski-oracle-nonprivate",
    "pf-ld",
    "raco-dp",
    "sgda",
]
EXTRA = {
    "raco-dp": {"calibrate": "noise", "batch_size": 64},
    "sgda": {"batch_size": 64},
    "dp-sgd": {"batch_size": 64},
    "dp-fermi": {"batch_size": 64},
    "dp-erm-mitigation": {"batch_size": 64},
    "pf-ld": {"batch_size": 64},
    "cgoo": {"batch_size": 64},
    "cgoo-nonprivate": {"batch_size": 64},
    "jagielski-oracle": {"batch_size": 64},
    "jagielski-oracle-nonprivate": {"batch_size": 64},
}
# longer runs: more than 40 steps; cgoo's and jagielski-oracle's epochs are per oracle call
# (per round; 6 steps at batch 64)
LONGER = {
    "raco-dp": {"calibrate": "noise", "epochs": 10},
    "cgoo": {"iterations": 10},
    "cgoo-nonprivate": {"iterations": 10},
    "jagielski-oracle": {"iterations": 10, "epochs": 1},
    "jagielski-oracle-nonprivate": {"iterations": 10, "epochs": 1},
}


@pytest.fixture(scope="module")
def tasks():
    return {seed: get_dataset("synthetic", n_rows=600).load(seed) for seed in (0, 1)}


def fast(name: str, **extra):
    fields = method_class(name).Hparams.model_fields
    return get_method(name, **{k: v for k, v in FAST.items() if k in fields}, **extra)


def trials_of(name: str, tasks, constraint: str = "demographic_parity") -> list[Trial]:
    budget = PrivacyBudget(1.0) if method_class(name).private else None
    knobs = KNOBS.get(name, [None])
    return [
        Trial(tasks[seed], FairnessSpec(constraint, knob), PrivacySession(seed, budget=budget))
        for seed in (0, 1)
        for knob in knobs
    ]


def parameters(fitted) -> list[torch.Tensor]:
    models = fitted.components or [fitted.model]
    return [p.detach().double() for m in models for p in m.parameters()]


@pytest.mark.parametrize("name", sorted(registry()))
def test_a_stack_gives_every_trial_its_result_alone(name, tasks):
    """Bit-identical where the method trains trials one after another; within float32
    reduction order (1e-6) where it stacks them into one program."""
    if name == "fairlearn-eg":
        pytest.importorskip("fairlearn")  # an optional extra
    constraint = "bounded_group_loss" if name == "dpse" else "demographic_parity"
    method = fast(name, **EXTRA.get(name, {}))
    stacked = method.fit_stack(trials_of(name, tasks, constraint))
    alone = [method.fit_stack([trial])[0] for trial in trials_of(name, tasks, constraint)]
    assert method.stackable() == (name in STACKED)
    tolerance = 1e-6 if method.stackable() else 0.0
    for s, a in zip(stacked, alone, strict=True):
        assert canonical(s.ledger) == canonical(a.ledger)
        for p, q in zip(parameters(s), parameters(a), strict=True):
            assert float((p - q).abs().max()) <= tolerance
        if "lambda" in a.info:
            assert np.allclose(s.info["lambda"], a.info["lambda"], atol=1e-6)


@pytest.mark.parametrize("name", STACKED)
def test_longer_stacked_runs_stay_within_float32_reduction_order(name, tasks):
    method = get_method(name, batch_size=64, **LONGER.get(name, {"epochs": 10}))
    stacked = method.fit_stack(trials_of(name, tasks))
    for s, trial in zip(stacked, trials_of(name, tasks), strict=True):
        a = method.fit_stack([trial])[0]
        assert s.budget.steps == a.budget.steps > 40
        for p, q in zip(parameters(s), parameters(a), strict=True):
            assert float((p - q).abs().max()) <= 1e-5


def test_trials_of_a_stack_draw_their_own_batches_and_noise(tasks):
    """Two trials of one seed and knob in one stack are two copies of one trial; another seed
    differs (its own split, batches and noise)."""
    method = get_method("dp-sgd", epochs=1)
    budget = PrivacyBudget(1.0)
    trials = [
        Trial(tasks[seed], FairnessSpec("demographic_parity"), PrivacySession(seed, budget=budget))
        for seed in (0, 0, 1)
    ]
    first, twin, other = (parameters(f)[0] for f in method.fit_stack(trials))
    assert torch.equal(first, twin) and not torch.allclose(first, other)


def spec(
    method: str, seed: int, knob: float | None = None, epsilon: float | None = 1.0, **hparams
) -> TrialSpec:
    return TrialSpec(
        "synthetic",
        {"n_rows": 600},
        method,
        method,
        hparams,
        "demographic_parity",
        knob,
        epsilon,
        1e-5,
        seed,
    )


def test_work_units_stack_only_what_may_share_a_program():
    specs = (
        [
            spec("raco-dp", s, k, e, epochs=1, calibrate="noise")
            for s in range(3)
            for k in (0.05, 0.1)
            for e in (1.0, 3.0)
        ]
        + [spec("cgoo", s, 0.05, iterations=3) for s in range(2)]
        + [spec("dp-sgd", s, None, 1.0, model="mlp") for s in range(2)]
    )
    units = work_units(specs)
    assert sorted(s.trial_id for u in units for s in u) == sorted(s.trial_id for s in specs)
    stacks = [u for u in units if len(u) > 1]
    assert [len(u) for u in stacks] == [6, 6, 2]
    assert [u[0].epsilon for u in stacks] == [3.0, 1.0, 1.0]  # larger epsilon first
    assert all(len({stack_key(s) for s in u}) == 1 for u in stacks)
    assert [u[0].method for u in stacks] == ["raco-dp", "raco-dp", "cgoo"]  # the mlp: alone
    assert [len(u) for u in work_units(specs[:12], max_stack=4)] == [3, 3, 3, 3]

    # the stacks are the config's: a shuffled grid gives the same ones
    def ids(found):
        return sorted(tuple(s.trial_id for s in u) for u in found)

    assert ids(work_units(list(reversed(specs)))) == ids(units)


def test_the_runner_stores_a_stack_as_the_trials_alone():
    specs = [
        spec("raco-dp", s, k, 1.0, epochs=1, calibrate="noise") for s in (0, 1) for k in (0.05, 0.1)
    ]
    stacked = run_stack(specs)
    for s, row in zip(specs, stacked, strict=True):
        alone = run_trial(s)
        assert row.trial_id == alone.trial_id and row.ledger == alone.ledger
        assert row.epsilon_spent == alone.epsilon_spent
        assert row.test["error"] == pytest.approx(alone.test["error"], abs=2e-3)
        assert row.wall_seconds > 0
    with pytest.raises(ValueError, match="differ only in seed, knob and"):
        run_stack([specs[0], spec("raco-dp", 0, 0.05, 3.0, epochs=1, calibrate="noise")])


def test_mixture_components_are_copies_of_their_own_trial_alone(tasks):
    """A stacked model's parameters are views into the stack; each CGOO component is a copy
    of its own trial's parameters only (not of the whole stack), frozen at its iteration."""
    method = fast("cgoo", batch_size=64)
    fits = method.fit_stack(trials_of("cgoo", tasks))
    for fitted in fits:
        assert len(fitted.components) == FAST["iterations"]
        live = [p.data_ptr() for p in fitted.model.parameters()]
        for component in fitted.components:
            for p in component.parameters():
                assert p.untyped_storage().nbytes() == p.numel() * p.element_size()
                assert p.data_ptr() not in live
        last = fitted.components[-1]  # the last component is the final model's copy
        for p, q in zip(last.parameters(), fitted.model.parameters(), strict=True):
            assert torch.equal(p, q)
        first = fitted.components[0]
        assert not all(
            torch.equal(p, q) for p, q in zip(first.parameters(), last.parameters(), strict=True)
        )


def test_dp_fermi_splits_a_stack_by_schedule(tasks, monkeypatch):
    """lambda = 0 and lambda > 0 trials run different schedules: one stack becomes one
    sub-stack per schedule, each trial in its own."""
    method = fast("dp-fermi", batch_size=64)
    sizes = []
    program = method.program

    def spy(trials, plan):
        sizes.append(sorted(t.fairness.knob for t in trials))
        return program(trials, plan)

    monkeypatch.setattr(method, "program", spy)
    trials = trials_of("dp-fermi", tasks)
    fits = method.fit_stack(trials)
    assert sizes == [[0.0, 0.0], [2.0, 2.0]]
    assert [f.info["lambda"] for f in fits] == [t.fairness.knob for t in trials]
    assert fits[0].info["noise_multiplier"] < fits[1].info["noise_multiplier"]  # W's release


def test_padding_rows_of_a_device_batch_contribute_nothing_through_one_model(tasks):
    """On a device a Poisson batch is padded to a fixed width with copies of record 0; an MLP
    (one trial, `OneModel`) must give those rows zero gradient, or record 0 would count in the
    clipped sum once per padding row."""
    from fairbench.methods.engine import StackedData, exact_sums
    from fairbench.models import build_model
    from fairbench.models.grad_sample import CrossEntropy
    from fairbench.models.stacked import stack_models
    from fairbench.privacy.stacked import poisson_rounds
    from fairbench.privacy.sync import device_paths
    from fairbench.streams import torch_stream

    task = tasks[0]
    model = build_model("mlp", task.n_features, task.n_classes, 8, torch_stream(0, "init"))
    stack = stack_models([model])
    data = StackedData([task], torch.device("cpu"))
    with device_paths():
        round_ = poisson_rounds([PrivacySession(0)], data.n, 0.05)()
    assert round_.mask is not None and not bool(round_.mask.all())  # padded
    rows = data.gather(round_)
    x = rows.rows(data.x)
    summed = exact_sums(
        stack.contributions(x, CrossEntropy(rows.rows(data.y)), stack.logits(x), rows)
    )
    real = round_.index[0][round_.mask[0]]
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(data.x[real]), data.y[real], reduction="sum").backward()
    for got, want in zip(summed, [p.grad for p in model.parameters()], strict=True):
        assert torch.allclose(got[0], want, atol=1e-5)
