"""Stacked trials: several trials (seeds x knob values) trained as one program give each
trial the result it gets alone, with its own ledger, and the runner groups them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from fairbench.datasets import get_dataset
from fairbench.methods import FairnessSpec, get_method, method_class, registry
from fairbench.methods.trial import Trial
from fairbench.privacy import PrivacyBudget
from fairbench.privacy.session import PrivacySession, canonical
from fairbench.runner.stacking import max_stack_for, work_units
from fairbench.runner.trial import TrialSpec, run_stack, run_trial, stack_key

FAST = {"epochs": 1, "steps": 5, "max_iter": 3, "iterations": 3, "T": 3}
KNOBS = {
    "raco-dp": [0.02, 0.1],
    "sgda": [0.02, 0.1],
    "dp-fermi": [0.0, 2.0],
    "cgoo": [0.05, 0.1],
    "cgoo-nonprivate": [0.05, 0.1],
    "fairlearn-eg": [0.05, 0.1],
    "mozannar": [0.05, 0.1],
    "dpse": [0.5, 0.7],
    "jagielski-post": [0.0, 0.1],
    "decoupled-post": [0.0, 0.1],
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
    "dpsgd-f",
    "dpsgd-global-adapt",
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
    "dpsgd-f": {"batch_size": 64},
    "dpsgd-global-adapt": {"batch_size": 64},
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
    if name in ("fairlearn-eg", "mozannar"):
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


def test_a_gpu_run_packs_hundreds_of_trials_per_program():
    """On the CPU a tune's 60 draws of one entry at one epsilon are 3 stacks of 20; on a GPU,
    where a step's kernel launches hardly grow with the stack, one program."""
    draws = [
        dataclasses.replace(spec("raco-dp", 0, 0.05, lr=0.1 + i / 100), label=f"raco-dp#{i}")
        for i in range(60)
    ]
    assert [len(u) for u in work_units(draws)] == [20, 20, 20]
    on_gpu = [dataclasses.replace(s, device="cuda") for s in draws]
    assert [len(u) for u in work_units(on_gpu)] == [60]
    assert max_stack_for("cuda") >= 200 > max_stack_for("cpu")


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


@pytest.mark.parametrize(
    ("shared", "draws", "knobs", "expected"),
    [  # lambda = 0 releases no W: its own program (MIXED["dp-fermi"]: 24, 3 and 18 rounds)
        ({}, "mixed", [0.0, 2.0], [[0.0, 0.0, 0.0], [2.0, 2.0, 2.0]]),
        (  # shuffled batches on 360 records: 24, 24 and 3 rounds; equal counts stack
            {"batches": "shuffled", "noise": "closed-form", "rho": 0.2, "parity_unaccounted": True},
            [
                {"lr": 0.5, "batch_size": 30, "epochs": 2},
                {"lr": 0.1, "batch_size": 60, "epochs": 4, "w_diameter": 2.0},
                {"lr": 0.2, "batch_size": 120, "epochs": 1},
            ],
            [1.0, 1.0],
            [[1.0, 1.0], [1.0, 1.0, 1.0, 1.0]],
        ),
    ],
)
def test_dp_fermi_stacks_draws_apart_where_the_step_differs(
    shared, draws, knobs, expected, tasks, monkeypatch
):
    """A tune's dp-fermi draws share a program except where `stack_shape` keeps them apart;
    each trial's result is its own alone."""
    cls = method_class("dp-fermi")
    draws = MIXED["dp-fermi"] if draws == "mixed" else draws
    programs, stack_program = [], cls.stack_program

    def spy(self, stack):
        programs.append(sorted(t.fairness.knob for t in stack.trials))
        return stack_program(self, stack)

    def draw():
        methods, trials = [], []
        for i, hparams in enumerate(draws):
            for seed in (0, 1):
                methods.append(get_method("dp-fermi", **shared, **hparams))
                fairness = FairnessSpec("demographic_parity", knobs[(i + seed) % 2])
                budget = PrivacyBudget(1.0)
                trials.append(Trial(tasks[seed], fairness, PrivacySession(seed, budget=budget)))
        return methods, trials

    monkeypatch.setattr(cls, "stack_program", spy)
    methods, trials = draw()
    stacked = methods[0].fit_stack(trials, methods)
    assert sorted(programs, key=len) == expected
    for s, method, trial in zip(stacked, methods, draw()[1], strict=True):
        a = method.fit_stack([trial])[0]
        assert s.budget == a.budget and canonical(s.ledger) == canonical(a.ledger)
        for p, q in zip(parameters(s), parameters(a), strict=True):
            assert float((p - q).abs().max()) <= 1e-5


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


# draws of a tune: one stack, each trial its own step size, batch size (so rate and rounds),
# epochs, clip, noise and knob; on 384 training rows the longest runs 24 rounds, the shortest 3
MIXED = {
    "dp-sgd": [
        {"lr": 0.5, "batch_size": 32, "epochs": 2},
        {"lr": 2.0, "batch_size": 128, "epochs": 1, "clip_norm": 0.5},
        {"lr": 1.0, "batch_size": 64, "epochs": 3},
    ],
    "raco-dp": [
        {"lr": 0.5, "batch_size": 32, "epochs": 2, "laplace_scale": 5.0},
        {"lr": 0.1, "batch_size": 128, "epochs": 1, "lr_dual": 0.5, "clip_norm": 1.0},
        {"lr": 1.0, "batch_size": 64, "epochs": 3, "laplace_scale": 20.0, "lambda_max": 0.5},
        {"lr": 0.3, "batch_size": 32, "epochs": 1, "temperature": 4.0},
    ],
    "raco-dp[calibrate]": [  # the paper's fixed-sigma step count beside solved noise
        {"calibrate": "noise", "lr": 0.5, "batch_size": 32, "epochs": 2, "temperature": 2.0},
        {"calibrate": "steps", "noise_multiplier": 3.0, "max_steps": 4, "batch_size": 128},
        {"calibrate": "steps", "noise_multiplier": 4.0, "max_steps": 10, "laplace_scale": 20.0},
    ],
    "sgda": [
        {"lr": 0.5, "batch_size": 32, "epochs": 2},
        {"lr": 0.1, "batch_size": 128, "epochs": 1, "lr_dual": 0.5},
    ],
    "cgoo": [  # 3 iterations of 12 steps, 6 of 1, 3 of 3
        {"lr": 0.5, "batch_size": 32, "epochs": 1, "iterations": 3},
        {"lr": 2.0, "batch_size": 128, "epochs": 0.25, "iterations": 6, "lr_dual": 0.5},
        {"lr": 1.0, "batch_size": 64, "epochs": 0.5, "iterations": 3, "clip_norm": 0.5},
    ],
    "dpsgd-f": [  # 24 rounds, 3, 18 and (a fixed sigma's steps) 10
        {"lr": 0.5, "batch_size": 32, "epochs": 2, "base_clip": 1.0},
        {"lr": 2.0, "batch_size": 128, "epochs": 1, "count_noise_multiplier": 5.0},
        {"lr": 1.0, "batch_size": 64, "epochs": 3, "base_clip": 0.25},
        {"calibrate": "steps", "noise_multiplier": 3.0, "max_steps": 10, "batch_size": 64},
    ],
    "dpsgd-global-adapt": [  # 24 rounds, 3, 18 and (a fixed sigma's steps) 10
        {"lr": 0.5, "batch_size": 32, "epochs": 2, "clip_norm": 1.0, "lr_bound": 0.2},
        {"lr": 2.0, "batch_size": 128, "epochs": 1, "count_noise_multiplier": 5.0},
        {"lr": 1.0, "batch_size": 64, "epochs": 3, "initial_bound": 2.0, "threshold": 0.5},
        {"calibrate": "steps", "noise_multiplier": 3.0, "max_steps": 10, "batch_size": 64},
    ],
    "jagielski-oracle": [  # 3 game rounds of 12 steps, 6 of 1, 3 of 3
        {"lr": 0.5, "batch_size": 32, "epochs": 1, "iterations": 3, "bound": 20.0},
        {"lr": 2.0, "batch_size": 128, "epochs": 0.25, "iterations": 6, "eta0": 1.0},
        {
            "lr": 1.0,
            "batch_size": 64,
            "epochs": 0.5,
            "iterations": 3,
            "clip_norm": 0.5,
            "auditor_share": 0.4,
            "mixture": "uniform",
        },
    ],
    "jagielski-oracle-nonprivate": [
        {"lr": 0.5, "batch_size": 32, "epochs": 1, "iterations": 3, "bound": 20.0},
        {"lr": 2.0, "batch_size": 128, "epochs": 0.25, "iterations": 6, "eta0": 1.0},
        {"lr": 1.0, "batch_size": 64, "epochs": 0.5, "iterations": 3, "mixture": "uniform"},
    ],
}
MIXED["raco-dp[padded]"] = MIXED["raco-dp"]  # the authors' batches, each trial's own size
MIXED["jagielski-oracle[sensitive]"] = MIXED["jagielski-oracle"]  # its public error term
MIXED_SHARED = {
    "jagielski-oracle[sensitive]": {"privacy_notion": "sensitive-attribute"},
    "raco-dp": {"calibrate": "noise"},
    "raco-dp[padded]": {"calibrate": "noise", "batches": "padded", "parity_unaccounted": True},
}


# dp-fermi: 24, 3 and 18 rounds. lambda = 0 and lambda > 0 release different things per step
# (their own stacks, `stack_shape`): the knobs of an entry are all positive or all 0
MIXED["dp-fermi"] = [
    {"lr": 0.5, "batch_size": 32, "epochs": 2, "w_diameter": 2.0},
    {"lr": 0.1, "lr_w": 0.5, "batch_size": 128, "epochs": 1, "clip_norm": 1.0, "clip_norm_w": 0.5},
    {
        "lr": 0.2,
        "lr_w": 0.05,
        "batch_size": 64,
        "epochs": 3,
        "w_diameter": 8.0,
        "marginal_noise": 20.0,
    },
]
MIXED["dp-fermi[sensitive]"] = MIXED["dp-fermi"]
MIXED["dp-fermi[zero]"] = MIXED["dp-fermi"]
MIXED["dp-fermi[sensitive-zero]"] = MIXED["dp-fermi"]  # no release: exact sums
MIXED["dp-fermi[parity]"] = MIXED["dp-fermi"]
MIXED["dp-fermi[closed-form]"] = [
    dict(d, rho=0.1 + 0.05 * i) for i, d in enumerate(MIXED["dp-fermi"])
]
MIXED_SHARED["dp-fermi[sensitive]"] = {"privacy_notion": "sensitive-attribute"}
MIXED_SHARED["dp-fermi[sensitive-zero]"] = MIXED_SHARED["dp-fermi[sensitive]"]
MIXED_SHARED["dp-fermi[parity]"] = {
    "ermi": "first-group",
    "logits": "sigmoid",
    "w_init": "normal",
    "clipping": "batch-mean",
}
MIXED_SHARED["dp-fermi[closed-form]"] = {"noise": "closed-form", "parity_unaccounted": True}
MIXED_KNOBS = {
    "dp-fermi": [0.5, 2.0],
    "dp-fermi[sensitive]": [0.5, 2.0],
    "dp-fermi[zero]": [0.0, 0.0],
    "dp-fermi[sensitive-zero]": [0.0, 0.0],
    "dp-fermi[parity]": [0.5, 2.0],
    "dp-fermi[closed-form]": [0.5, 2.0],
}

# pf-ld: 24 rounds (dual period 12), 3 (3), 18 (6) and a fixed sigma's 10 (6): epochs end
# apart, the dual updates and (sensitive) releases of each trial at its own
MIXED["pf-ld"] = [
    {"lr": 0.5, "batch_size": 32, "epochs": 2, "laplace_scale": 5.0},
    {"lr": 2.0, "batch_size": 128, "epochs": 1, "lr_dual": 0.5, "clip_norm": 0.5},
    {"lr": 1.0, "batch_size": 64, "epochs": 3, "lambda_max": 0.5, "count_scale": 10.0},
    {"calibrate": "steps", "noise_multiplier": 3.0, "max_steps": 10, "batch_size": 64},
]
MIXED["pf-ld[sensitive]"] = [
    {"lr": 0.5, "batch_size": 32, "epochs": 2, "dual_scale": 50.0},
    {"lr": 2.0, "batch_size": 128, "epochs": 1, "lr_dual": 0.5, "clip_norm": 0.5},
    {"lr": 1.0, "batch_size": 64, "epochs": 3, "dual_scale": 200.0, "lambda_max": 0.5},
]
MIXED_SHARED["pf-ld[sensitive]"] = {"privacy_notion": "sensitive-attribute"}

# dp-erm-mitigation: lambda > 0 (the regularised step) and lambda = 0 (dp-sgd's), never
# together (`stack_shape`); 24 rounds, 3, 18 and a fixed sigma's 10
MIXED["dp-erm-mitigation"] = [
    {"lr": 0.5, "batch_size": 32, "epochs": 2, "histogram_scale": 5.0},
    {"lr": 2.0, "batch_size": 128, "epochs": 1, "clip_norm": 0.5, "count_scale": 20.0},
    {"lr": 1.0, "batch_size": 64, "epochs": 3, "gradient_weight": 0.5, "curvature_weight": 2.0},
    {"calibrate": "steps", "noise_multiplier": 3.0, "max_steps": 10, "batch_size": 64},
]
MIXED["dp-erm-mitigation[zero]"] = MIXED["dp-erm-mitigation"]
MIXED_KNOBS["dp-erm-mitigation"] = [1.0, 3.0]
MIXED_KNOBS["dp-erm-mitigation[zero]"] = [0.0, 0.0]


def mixed_trials(entry: str, tasks) -> tuple[list, list[Trial]]:
    """Each draw of MIXED on both seeds, knob values alternating: (methods, trials)."""
    name = entry.split("[")[0]
    cls = method_class(name)
    budget = PrivacyBudget(1.0) if cls.private else None
    methods, trials = [], []
    for i, hparams in enumerate(MIXED[entry]):
        for seed in (0, 1):
            methods.append(get_method(name, **MIXED_SHARED.get(entry, {}), **hparams))
            knobs = MIXED_KNOBS.get(entry, KNOBS.get(name))
            knob = None if cls.knob is None else knobs[(i + seed) % 2]
            fairness = FairnessSpec("demographic_parity", knob)
            trials.append(Trial(tasks[seed], fairness, PrivacySession(seed, budget=budget)))
    return methods, trials


@pytest.mark.parametrize("entry", sorted(MIXED))
def test_a_stack_of_several_configurations_gives_every_trial_its_result_alone(
    entry, tasks, monkeypatch
):
    """One program for every draw (different lr, batch size, epochs: different round
    counts, clip, noise, knob): each trial's ledger is its own alone, its parameters and
    multipliers are its own within float32 reduction order."""
    methods, trials = mixed_trials(entry, tasks)
    programs = []
    stack_program = type(methods[0]).stack_program

    def spy(self, stack):
        programs.append(len(stack.trials))
        return stack_program(self, stack)

    monkeypatch.setattr(type(methods[0]), "stack_program", spy)
    stacked = methods[0].fit_stack(trials, methods)
    assert programs == [len(trials)]
    steps = sorted({f.budget.steps for f in stacked})
    assert len(steps) == len(MIXED[entry]) and steps[-1] >= 6 * steps[0]
    _, fresh = mixed_trials(entry, tasks)
    for s, method, trial in zip(stacked, methods, fresh, strict=True):
        a = method.fit_stack([trial])[0]
        assert s.budget == a.budget and s.info.keys() == a.info.keys()
        for key, value in a.info.items():
            if key == "trace":  # of noisy statistics of the predictions: one may flip
                assert len(s.info[key]) == len(value)
            elif key in ("lambda", "G", "last_noisy_gap", "w_norm", "w_first_group"):  # float32
                np.testing.assert_allclose(s.info[key], value, atol=1e-5, rtol=0)
            elif key == "noisy_counts":  # pf-ld's sensitive notion: sums of probabilities
                np.testing.assert_allclose(s.info[key], value, rtol=1e-6)
            else:
                assert s.info[key] == value
        assert canonical(s.ledger) == canonical(a.ledger) and s.plan == a.plan
        for p, q in zip(parameters(s), parameters(a), strict=True):
            assert float((p - q).abs().max()) <= 1e-5


def test_a_stack_of_several_configurations_draws_each_trial_its_own_batches(tasks):
    """Each row of a round at its own rate is the batch its generator draws alone, on the
    host and on a device's sync-free path (rows as wide as the longest chunk, masked)."""
    from fairbench.privacy.sampling import poisson_batches, stacked_poisson_batches
    from fairbench.privacy.sync import device_paths
    from fairbench.streams import torch_stream

    rates, cpu = [0.05, 0.2, 0.01], torch.device("cpu")

    def streams():
        return [torch_stream(s, "x", cpu) for s in range(3)]

    draw = stacked_poisson_batches(600, rates, streams(), cpu)
    with device_paths():
        on_device = stacked_poisson_batches(600, rates, streams(), cpu)
    alone = [poisson_batches(600, r, g, cpu) for r, g in zip(rates, streams(), strict=True)]
    for _ in range(5):
        index, mask, sizes = draw()
        with device_paths():
            wide, inside, unread = on_device()
        assert mask is not None and sizes is not None and unread is None
        for t, single in enumerate(alone):
            batch = single()
            assert torch.equal(index[t, : sizes[t]], batch) and int(mask[t].sum()) == sizes[t]
            assert torch.equal(wide[t][inside[t]], batch)


def draw(i: int, seed: int, knob: float, epsilon: float = 1.0, **hparams) -> TrialSpec:
    """A tune's draw i of raco-dp (label `raco-dp#i`)."""
    drawn = spec("raco-dp", seed, knob, epsilon, calibrate="noise", **hparams)
    return dataclasses.replace(drawn, label=f"raco-dp#{i}")


def test_the_runner_stacks_a_tunes_draws_and_stores_each_as_alone():
    draws = [
        {"lr": 0.5, "batch_size": 32, "epochs": 1},
        {"lr": 0.2, "batch_size": 128, "epochs": 2, "laplace_scale": 20.0},
    ]
    specs = [draw(i, s, k, **d) for i, d in enumerate(draws) for s in (0, 1) for k in (0.05, 0.1)]
    others = [
        dataclasses.replace(draw(0, 0, 0.05, epochs=1), label="raco-dp-b#0"),  # another entry
        draw(0, 0, 0.05, epochs=1, dual_rates="soft"),  # a key outside `mixed`
        draw(0, 0, 0.05, 3.0, epochs=1),  # another epsilon
        spec("dp-sgd", 0, None, 1.0, model="mlp", lr=0.5),  # does not stack
        spec("dp-sgd", 0, None, 1.0, model="mlp", lr=2.0),
    ]
    units = work_units(specs + others)
    assert sorted(len(u) for u in units) == [1, 1, 1, 1, 1, 8]
    (stack,) = [u for u in units if len(u) == 8]
    assert [(s.seed, s.knob, s.label) for s in stack] == [  # a draw's seeds in one stack
        (s, k, f"raco-dp#{i}") for i in range(2) for s in (0, 1) for k in (0.05, 0.1)
    ]
    rows = run_stack(stack)
    for s, row in zip(stack, rows, strict=True):
        alone = run_trial(s)
        assert row.trial_id == alone.trial_id and row.ledger == alone.ledger
        assert row.epsilon_spent == alone.epsilon_spent
        assert row.test["error"] == pytest.approx(alone.test["error"], abs=2e-3)


def test_a_draw_that_cannot_be_planned_fails_alone_and_the_others_still_stack(monkeypatch):
    from fairbench.runner import worker

    stacks = []
    real = worker.run_stack
    monkeypatch.setattr(worker, "run_stack", lambda specs: stacks.append(len(specs)) or real(specs))
    unit = [
        draw(i, 0, 0.05, 0.1, epochs=1, laplace_scale=scale)
        for i, scale in enumerate((1.0, 50.0, 100.0))
    ]
    results = worker.run_unit(unit)
    assert stacks == [2]
    errors = {s.label: error for s, _, error in results}
    assert errors["raco-dp#0"].startswith("CalibrationError: ")
    assert errors["raco-dp#1"] is None and errors["raco-dp#2"] is None


def test_pf_ld_splits_a_stack_by_constraint(tasks, monkeypatch):
    """pf-ld's step reads its constraint's cells and parts (`stack_shape`): draws of two
    constraints are two programs, each trial its result alone."""
    methods, trials = mixed_trials("pf-ld", tasks)
    trials = [
        dataclasses.replace(t, fairness=FairnessSpec(constraint, t.fairness.knob))
        for t, constraint in zip(trials, ["demographic_parity", "equalized_odds"] * 4, strict=True)
    ]
    sizes = []
    stack_program = type(methods[0]).stack_program

    def spy(self, stack):
        sizes.append(sorted({p.details["constraint"] for p in stack.plans}))
        return stack_program(self, stack)

    monkeypatch.setattr(type(methods[0]), "stack_program", spy)
    stacked = methods[0].fit_stack(trials, methods)
    assert sorted(sizes) == [["demographic_parity"], ["equalized_odds"]]
    _, fresh = mixed_trials("pf-ld", tasks)
    for s, method, trial, old in zip(stacked, methods, fresh, trials, strict=True):
        a = method.fit_stack([dataclasses.replace(trial, fairness=old.fairness)])[0]
        np.testing.assert_allclose(s.info["lambda"], a.info["lambda"], atol=1e-5, rtol=0)
        for p, q in zip(parameters(s), parameters(a), strict=True):
            assert float((p - q).abs().max()) <= 1e-5


def test_jagielski_oracle_stacks_apart_the_draws_of_each_constraint(tasks, monkeypatch):
    """Its game is the constraint's (`stack_shape`): a tune's draws under demographic parity
    and under equalized odds run as two programs, each with its constraint's draws only, and
    every trial gets its result alone."""
    from fairbench.methods.jagielski_oracle import JagielskiOracle

    def odds() -> list[Trial]:
        return [
            dataclasses.replace(t, fairness=FairnessSpec("equalized_odds", t.fairness.knob))
            for t in mixed_trials("jagielski-oracle", tasks)[1]
        ]

    methods, parity = mixed_trials("jagielski-oracle", tasks)
    programs = []
    stack_program = JagielskiOracle.stack_program

    def spy(self, stack):
        programs.append([*sorted({t.fairness.constraint for t in stack.trials}), len(stack.trials)])
        return stack_program(self, stack)

    monkeypatch.setattr(JagielskiOracle, "stack_program", spy)
    stacked = methods[0].fit_stack(parity + odds(), methods + methods)
    assert programs == [["demographic_parity", 6], ["equalized_odds", 6]]
    for s, method, trial in zip(stacked[6:], methods, odds(), strict=True):
        a = method.fit_stack([trial])[0]
        assert canonical(s.ledger) == canonical(a.ledger) and s.info["counts"] == a.info["counts"]
        for p, q in zip(parameters(s), parameters(a), strict=True):
            assert float((p - q).abs().max()) <= 1e-5


def test_dp_erm_mitigation_splits_a_stack_by_the_sign_of_lambda(tasks, monkeypatch):
    """lambda = 0 runs dp-sgd's step, lambda > 0 the regularised one with its releases
    (`stack_shape`): a tune's draws of both are two programs, each trial its result alone."""
    methods, trials = mixed_trials("dp-erm-mitigation", tasks)
    trials = [
        dataclasses.replace(t, fairness=FairnessSpec("demographic_parity", knob))
        for t, knob in zip(trials, [0.0, 2.0, 2.0, 0.0] * 2, strict=True)
    ]
    knobs = []
    stack_program = type(methods[0]).stack_program

    def spy(self, stack):
        knobs.append(sorted({t.fairness.knob for t in stack.trials}))
        return stack_program(self, stack)

    monkeypatch.setattr(type(methods[0]), "stack_program", spy)
    stacked = methods[0].fit_stack(trials, methods)
    assert sorted(knobs) == [[0.0], [2.0]]
    _, fresh = mixed_trials("dp-erm-mitigation", tasks)
    for s, method, trial, old in zip(stacked, methods, fresh, trials, strict=True):
        a = method.fit_stack([dataclasses.replace(trial, fairness=old.fairness)])[0]
        assert canonical(s.ledger) == canonical(a.ledger) and s.info == a.info
        for p, q in zip(parameters(s), parameters(a), strict=True):
            assert float((p - q).abs().max()) <= 1e-5
