"""The GPU path, right by construction (issue 20, part 4): no method's step loop reads a value
on the host, and what the device checks instead is still refused before a trial is stored.

The guard: every way a tensor's value reaches the host from Python (`item`, `cpu`, `tolist`,
`numpy`, `bool`/`float`/`int`/`index` conversions, hence also `if tensor:`) raises while a
step-loop part runs: a batch draw, a method's step (`engine.TrainingProgram.step`; CGOO's and
jagielski-oracle's game moves, once per iteration), DPSE's and DPNoSE's descent rounds.
Set-up before the loop and the report after it may read values. On the CPU those reads cost
nothing, but they are what would stall an accelerator, so the guard counts them all. It runs
under `device_paths()`, so the CPU takes the code paths an accelerator takes (`privacy.sync`).

Not caught from Python: syncs inside torch's own kernels, e.g. the Poisson batch's selection
`positions[positions < n]`, whose size the host must learn. The CUDA variant (skipped without
a GPU) adds torch's sync debug mode inside each step for those.
"""

from __future__ import annotations

import functools
import hashlib
from collections import Counter

import numpy as np
import pytest
import torch
from dp_accounting import dp_event

import fairbench.methods.cgoo as cgoo
import fairbench.methods.dpse as dpse
import fairbench.methods.engine as engine
import fairbench.methods.jagielski_oracle as jagielski_oracle
import fairbench.methods.raco_dp as raco_dp
import fairbench.privacy.sampling as sampling
import fairbench.privacy.stacked as stacked
from fairbench.datasets import get_dataset
from fairbench.methods import FairnessSpec, get_method, registry
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.noise import (
    TAIL_MASS,
    TAIL_START,
    dense_standard_gaussian,
    standard_gaussian,
)
from fairbench.privacy.session import PrivacyContractError, PrivacySession
from fairbench.privacy.sync import DeviceChecks, device_paths
from fairbench.streams import torch_stream

HOST_READS = ("item", "cpu", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__")
DP, EO, BGL = "demographic_parity", "equalized_odds", "bounded_group_loss"

# (method, hyperparameters, fairness, task): every registered method at least once, and the
# variants whose step takes another branch (mlp through opacus, hard rates, the sensitive
# notion, a random iterate, the paper's play, a bound in DPSE's stage 2, pooled DPNoSE)
FAST = {"batch_size": 64, "epochs": 1}  # Poisson rate 1/4 on these tasks: the sampler runs
RACO = {**FAST, "calibrate": "noise"}
CASES = [
    ("erm", FAST, FairnessSpec(DP), "cls"),
    ("dp-sgd", FAST, FairnessSpec(DP), "cls"),
    ("dp-sgd", {**FAST, "model": "mlp"}, FairnessSpec(DP), "cls"),
    ("sgda", FAST, FairnessSpec(DP, 0.05), "cls"),
    ("raco-dp", RACO, FairnessSpec(EO, 0.05), "cls3"),
    ("raco-dp", {**RACO, "dual_rates": "hard", "model": "mlp"}, FairnessSpec(DP, 0.05), "cls"),
    ("dp-fermi", FAST, FairnessSpec(EO, 1.0), "cls3"),
    (
        "dp-fermi",
        {**FAST, "privacy_notion": "sensitive-attribute", "iterate": "random"},
        FairnessSpec(DP, 1.0),
        "cls",
    ),
    ("dp-erm-mitigation", FAST, FairnessSpec(EO, 1.0), "cls3"),
    ("dpsgd-f", FAST, FairnessSpec(DP), "cls3"),
    ("dpsgd-f", {**FAST, "model": "mlp"}, FairnessSpec(DP), "cls"),
    ("dpsgd-global-adapt", FAST, FairnessSpec(DP), "cls"),
    ("dpsgd-global-adapt", {**FAST, "model": "mlp"}, FairnessSpec(EO), "cls3"),
    (
        "dp-erm-mitigation",
        {**FAST, "model": "mlp", "sign_momentum": 0.9},
        FairnessSpec(DP, 1.0),
        "cls",
    ),
    ("pf-ld", FAST, FairnessSpec(EO, 0.0), "cls3"),
    (
        "pf-ld",
        {**FAST, "privacy_notion": "sensitive-attribute", "model": "mlp"},
        FairnessSpec("accuracy_parity", 0.05),
        "cls",
    ),
    ("cgoo", {"batch_size": 64, "iterations": 3}, FairnessSpec(DP, 0.05), "cls"),
    (
        "cgoo",
        {"batch_size": 64, "iterations": 3, "objective": "negative_gmean"},
        FairnessSpec(EO, 0.05),
        "cls3",
    ),
    (
        "cgoo",
        {"batch_size": 64, "iterations": 3, "play": "paper", "objective": "balanced_error"},
        FairnessSpec(BGL, 0.2),
        "cls3",
    ),
    ("cgoo-nonprivate", {"batch_size": 64, "iterations": 3}, FairnessSpec(DP, 0.05), "cls"),
    ("dpse", {"steps": 5}, FairnessSpec(BGL, 1.5), "reg"),
    ("dpse", {"steps": 5}, FairnessSpec(BGL, 0.5), "cls"),
    ("dpnose", {"steps": 5}, FairnessSpec(BGL, None), "reg"),
    ("dpnose", {"steps": 5, "objective": "group_means"}, FairnessSpec(BGL, None), "cls"),
    ("jagielski-post", FAST, FairnessSpec(EO, 0.05), "cls"),
    (
        "jagielski-post",
        {**FAST, "privacy_notion": "sensitive-attribute", "holdout": 0.2},
        FairnessSpec(DP, 0.05),
        "cls3",
    ),
    ("decoupled-post", FAST, FairnessSpec(DP, 0.0), "cls3"),
    ("decoupled-post", {**FAST, "model": "mlp", "holdout": 0}, FairnessSpec(DP, 0.05), "cls"),
    ("jagielski-oracle", {"batch_size": 64, "iterations": 3}, FairnessSpec(EO, 0.05), "cls3"),
    (
        "jagielski-oracle",
        {
            "batch_size": 64,
            "iterations": 3,
            "privacy_notion": "sensitive-attribute",
            "model": "mlp",
        },
        FairnessSpec(DP, 0.05),
        "cls",
    ),
    (
        "jagielski-oracle-nonprivate",
        {"batch_size": 64, "iterations": 3},
        FairnessSpec(DP, 0.05),
        "cls",
    ),
]
# methods whose training is no torch step loop, and why
EXEMPT = {
    "fairlearn-eg": "scikit-learn's solver on numpy, on the host by design; only its output "
    "(linear rules) is moved to the trial's device",
    "mozannar": "fairlearn-eg's reduction on the privatized groups: scikit-learn on numpy, on "
    "the host by design, as fairlearn-eg",
}
# also exempt, inside guarded methods: DPSE's and DPNoSE's stage 1 and group counts (numpy,
# once, before the rounds: their outputs set the noise multipliers of stage 2's plan, which
# the host needs), every method's calibration and plan, and the reports after the loop


@pytest.fixture(scope="module")
def tasks():
    return {
        "cls": get_dataset("synthetic", n_rows=400).load(0),
        "cls3": get_dataset("synthetic", n_rows=600, n_groups=3).load(0),
        "reg": get_dataset("synthetic", task="regression", n_rows=600, n_groups=3).load(0),
    }


class HostRead(AssertionError):
    """A tensor's value was read on the host inside the step loop."""


class Guard:
    """Counts the loop parts entered, by kind ("draw", "step"); host reads raise while one
    runs."""

    def __init__(self) -> None:
        self.depth = 0
        self.entered: Counter[str] = Counter()
        self.cuda_sync_check = False

    def wrap(self, fn, kind: str = "step"):
        @functools.wraps(fn)
        def guarded(*args, **kwargs):
            self.depth += 1
            self.entered[kind] += 1
            debug = self.cuda_sync_check and kind == "step"
            if debug:
                torch.cuda.set_sync_debug_mode("error")
            try:
                return fn(*args, **kwargs)
            finally:
                if debug:
                    torch.cuda.set_sync_debug_mode("default")
                self.depth -= 1

        return guarded


@pytest.fixture
def guard(monkeypatch):
    guard = Guard()
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def read(self, *args, _original=original, _name=name, **kwargs):
            if guard.depth:
                raise HostRead(f"Tensor.{_name} inside a training step")
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, read)

    def drawing(sampler):  # the Poisson selection syncs inside torch: see the module doc
        @functools.wraps(sampler)
        def wrapped(self, *args, **kwargs):
            return guard.wrap(sampler(self, *args, **kwargs), kind="draw")

        return wrapped

    monkeypatch.setattr(PrivacySession, "poisson", drawing(PrivacySession.poisson))
    monkeypatch.setattr(PrivacySession, "shuffled", drawing(PrivacySession.shuffled))
    rounds = stacked.stacked_poisson_batches  # stacked programs draw all trials' batches
    monkeypatch.setattr(
        stacked, "stacked_poisson_batches", lambda *a, **k: guard.wrap(rounds(*a, **k), kind="draw")
    )

    def stepping(cls):
        init = cls.__init__

        def guarded_init(self, *args, **kwargs):
            init(self, *args, **kwargs)
            if self.step is not None:  # a program that runs its own loop has no step
                object.__setattr__(self, "step", guard.wrap(self.step))

        monkeypatch.setattr(cls, "__init__", guarded_init)

    stepping(engine.TrainingProgram)
    monkeypatch.setattr(cgoo.Game, "move", guard.wrap(cgoo.Game.move))
    for move in ("respond", "audit"):  # the game's moves, once per round each
        monkeypatch.setattr(
            jagielski_oracle.Game, move, guard.wrap(getattr(jagielski_oracle.Game, move))
        )
    monkeypatch.setattr(dpse.DPSE, "_descend", guard.wrap(dpse.DPSE._descend))
    monkeypatch.setattr(dpse.DPSE, "_pooled_descent", guard.wrap(dpse.DPSE._pooled_descent))
    with device_paths():
        yield guard


def fit(name, hparams, fairness, task, device="cpu"):
    method = get_method(name, **hparams)
    return method.fit(task, PrivacyBudget(4.0) if method.private else None, fairness, 0, device)


def test_every_registered_method_is_guarded_or_exempt_with_a_reason():
    assert set(registry()) == {case[0] for case in CASES} | set(EXEMPT)
    assert not {case[0] for case in CASES} & set(EXEMPT)


@pytest.mark.parametrize(
    ("name", "hparams", "fairness", "data"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_no_step_loop_reads_a_value_on_the_host(guard, tasks, name, hparams, fairness, data):
    fitted = fit(name, hparams, fairness, tasks[data])
    assert guard.entered["step"] > 0  # the loop ran under the guard
    assert guard.entered["draw"] > 0 or name in ("dpse", "dpnose")  # full-batch rounds
    assert fitted.device == torch.device("cpu")
    assert all(
        p.device == fitted.device
        for m in fitted.components or [fitted.model]
        for p in m.parameters()
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
@pytest.mark.parametrize(
    ("name", "hparams", "fairness", "data"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_no_step_syncs_on_cuda(guard, tasks, name, hparams, fairness, data):
    guard.cuda_sync_check = True  # also torch's own syncs, inside each step (not the draws)
    fitted = fit(name, hparams, fairness, tasks[data], "cuda")
    assert guard.entered["step"] > 0 and fitted.device.type == "cuda"
    assert all(
        p.device.type == "cuda" for m in fitted.components or [fitted.model] for p in m.parameters()
    )


def test_exempt_methods_still_return_their_model_on_the_trials_device(tasks):
    pytest.importorskip("fairlearn")
    fitted = fit("fairlearn-eg", {"max_iter": 3}, FairnessSpec(DP, 0.05), tasks["cls"])
    assert all(
        p.device == fitted.device for m in fitted.components or [fitted.model] for p in m.buffers()
    )


def test_the_guard_catches_a_host_read(guard, tasks, monkeypatch):
    """The CPU's exact Poisson path reads whether the chunks reached the end, and the batch
    sizes, every step."""
    monkeypatch.setattr(sampling, "host_reads_free", lambda device: True)
    with pytest.raises(HostRead, match=r"Tensor\.(item|__bool__|tolist)"):
        fit("dp-sgd", {"epochs": 1, "batch_size": 64}, FairnessSpec(DP), tasks["cls"])


def test_the_guard_catches_a_condition_on_a_tensor(guard, tasks, monkeypatch):
    def branching(soft, logits, hard):
        if soft.sum() > 0:  # a condition on a tensor reads it on the host
            return soft
        return soft

    monkeypatch.setattr(raco_dp, "rate_contributions", branching)
    with pytest.raises(HostRead, match="__bool__"):
        fit(
            "raco-dp",
            {"epochs": 1, "calibrate": "noise", "batch_size": 64},
            FairnessSpec(DP, 0.05),
            tasks["cls"],
        )


# -- Poisson batches: the same draws, a shortfall refused after training -------------------------
@pytest.mark.parametrize(("n", "q"), [(1000, 0.01), (50, 0.5), (30000, 0.03), (7, 0.9)])
def test_the_device_path_draws_the_cpus_batches(n, q):
    host = sampling.poisson_batches(n, q, torch_stream(0, "s"), torch.device("cpu"))
    with device_paths():
        device = sampling.poisson_batches(n, q, torch_stream(0, "s"), torch.device("cpu"))
    for _ in range(100):
        assert torch.equal(host(), device())
    device.checks.verify()  # no chunk fell short


def test_cpu_batches_are_bit_identical_to_before():
    """Hashes of batches drawn by the sampler as it was before the device path existed."""
    for (n, q), expected in {
        (30000, 0.03): "4df4255bec1537bf",
        (50, 0.5): "abce7c2f145d1f11",
    }.items():
        draw = sampling.poisson_batches(n, q, torch_stream(0, "sampling"), torch.device("cpu"))
        batches = torch.cat([draw() for _ in range(200)])
        assert hashlib.sha256(batches.numpy().tobytes()).hexdigest()[:16] == expected


def test_a_chunk_that_falls_short_is_refused_after_training(tasks, monkeypatch):
    monkeypatch.setattr(sampling, "poisson_chunk", lambda n, q: 3)  # far too short
    host = sampling.poisson_batches(1000, 0.5, torch_stream(0, "s"), torch.device("cpu"))
    assert 400 < len(host()) < 600  # the CPU draws on: exact
    with device_paths():
        draw = sampling.poisson_batches(1000, 0.5, torch_stream(0, "s"), torch.device("cpu"))
        assert len(draw()) == 3  # truncated, and recorded on the device
        with pytest.raises(sampling.PoissonShortfall, match="fell short"):
            draw.checks.verify()
        with pytest.raises(sampling.PoissonShortfall):  # a trial is refused by `fit`
            fit("dp-sgd", {"epochs": 1, "batch_size": 64}, FairnessSpec(DP), tasks["cls"])


# -- the histogram's l1 bound, checked on the device -------------------------------------------
def test_a_histogram_row_above_l1_norm_one_is_refused_after_training(tasks, monkeypatch):
    session = PrivacySession(0, budget=PrivacyBudget(1.0))
    plan = PrivacyLedger()
    plan.record("h", dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(5.0), 2))
    session.submit_plan(plan)
    histogram = session.laplace_histogram("h", 5.0)
    rows = torch.tensor([[0.5, 0.5], [1.5, 0.5]])
    with device_paths():
        histogram(torch.tensor([[0.5, 0.5]]), torch.tensor([0]), 1)
        session.checks.verify()  # a valid row passes
        histogram(rows, torch.tensor([0, 0]), 1)  # no host read: the release goes ahead
        with pytest.raises(PrivacyContractError, match="l1 norm above 1"):
            session.checks.verify()
        # through a method: RaCO-DP with rows of l1 norm 2 is refused by `fit`
        monkeypatch.setattr(raco_dp, "rate_contributions", lambda soft, logits, hard: 2 * soft)
        with pytest.raises(PrivacyContractError, match=r"method raco-dp: .*l1 norm above 1"):
            fit(
                "raco-dp",
                {"epochs": 1, "calibrate": "noise", "batch_size": 64},
                FairnessSpec(DP, 0.05),
                tasks["cls"],
            )


def test_device_checks_combine_flags_and_read_them_once():
    checks = DeviceChecks()
    checks.fail_if("b", torch.tensor([False, False]), lambda: KeyError("b"))
    for failed in (False, True, False):  # one failure among many calls is remembered
        checks.fail_if("a", torch.tensor(failed), lambda: ValueError("a failed"))
    with pytest.raises(ValueError, match="a failed"):
        checks.verify()
    checks.verify()  # forgotten once read


# -- the dense Gaussian sampler ------------------------------------------------------------------
def test_cpu_gaussian_draws_are_bit_identical_to_before():
    z = standard_gaussian((2_000_000,), torch_stream(0, "pin"))
    assert hashlib.sha256(z.numpy().tobytes()).hexdigest()[:16] == "dbe20edc618d4bf3"


def test_off_the_cpu_the_gaussian_is_the_dense_sampler():
    with device_paths():
        z = standard_gaussian((1000,), torch_stream(0, "x"))
    assert torch.equal(z, dense_standard_gaussian((1000,), torch_stream(0, "x")))


def test_the_dense_gaussian_is_the_standard_normal_with_its_exact_tail():
    from scipy import stats

    shape = (2_000_000,)
    z = dense_standard_gaussian(shape, torch_stream(1, "dense")).numpy()
    assert z.dtype == np.float64
    assert abs(z.mean()) < 3e-3 and abs(z.std() - 1) < 3e-3
    assert stats.kstest(z[:200_000], "norm").pvalue > 1e-3
    # the first word selects the tail (probability TAIL_MASS, about 1.1e-6): exactly the
    # selected draws lie beyond TAIL_START
    selector = torch.rand((5, *shape), generator=torch_stream(1, "dense"), dtype=torch.float64)
    tail = (selector[0] < TAIL_MASS).numpy()
    assert tail.sum() > 0 and np.array_equal(np.abs(z) > TAIL_START, tail)


def test_the_dense_gaussian_tail_is_the_normal_tail(monkeypatch):
    """Selecting the tail always (TAIL_MASS raised to 1 in the selector): every draw is
    beyond TAIL_START, with the normal's conditional tail shape."""
    from scipy import stats

    import fairbench.privacy.noise as noise

    monkeypatch.setattr(noise, "TAIL_MASS", 1.0 - 2.0**-53)
    z = np.abs(noise.dense_standard_gaussian((200_000,), torch_stream(3, "t")).numpy())
    assert (z >= 0).all()
    # p = fine uniform * ~1: |Z| is then the plain half-normal
    assert stats.kstest(z, stats.halfnorm.cdf).pvalue > 1e-3
