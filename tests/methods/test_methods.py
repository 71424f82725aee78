import numpy as np
import pytest
import torch

from fairbench import metrics
from fairbench.datasets import get_dataset
from fairbench.errors import ConfigError
from fairbench.methods import FairnessSpec, get_method, registry
from fairbench.privacy import PrivacyBudget, epsilon
from fairbench.privacy.events import sgd_steps
from tests.conftest import needs_adult

DP = FairnessSpec("demographic_parity")


@pytest.fixture(scope="module")
def task():
    return get_dataset("synthetic", n_rows=3000).load(seed=0)


def params(fitted):
    return torch.cat([p.detach().reshape(-1) for p in fitted.model.parameters()])


def test_builtin_methods_register_through_entry_points():
    methods = registry()
    assert {"erm", "dp-sgd"} <= set(methods)
    assert methods["dp-sgd"].private and not methods["erm"].private


def test_every_fairness_knob_is_declared_with_its_range_and_direction():
    from fairbench.methods.knob import Direction, Knob

    looser, stricter = Direction.LOOSER, Direction.STRICTER
    knobs = {name: cls.knob for name, cls in registry().items() if cls.knob is not None}
    assert all(isinstance(k, Knob) and k.meaning for k in knobs.values())
    assert {name: (k.name, k.range_text, k.direction) for name, k in knobs.items()} == {
        "sgda": ("gamma", "[0, inf)", looser),
        "raco-dp": ("gamma", "[0, inf)", looser),
        "dp-fermi": ("lambda", "[0, inf)", stricter),
        "cgoo": ("alpha", "(0, inf)", looser),
        "cgoo-nonprivate": ("alpha", "(0, inf)", looser),
        "dpse": ("bound", "[0, inf)", looser),
        "dpnose": ("bound", "[0, inf)", looser),
        "fairlearn-eg": ("difference_bound", "(0, inf)", looser),
        "mozannar": ("difference_bound", "(0, inf)", looser),
        "jagielski-post": ("gamma", "[0, 1]", looser),
        "decoupled-post": ("gamma", "[0, 1]", looser),
        "dp-erm-mitigation": ("lambda", "[0, inf)", stricter),
        "pf-ld": ("alpha", "[0, inf)", looser),
        "jagielski-oracle": ("gamma", "[0, inf)", looser),
        "jagielski-oracle-nonprivate": ("gamma", "[0, inf)", looser),
    }


def test_a_knob_refuses_values_outside_its_range_in_one_line():
    from fairbench.methods.knob import Direction, Knob

    knob = Knob("x", "a test knob", Direction.LOOSER, low=0.0, high=1.0, low_inclusive=False)
    assert knob.range_text == "(0, 1]"
    for value in (None, 1e-9, 0.5, 1.0):
        knob.validate(value, method="m")
    for value in (0.0, -1.0, 1.5, float("nan"), float("inf")):
        with pytest.raises(
            ConfigError,
            match=r"^method m: knob x = \S+ is outside its valid "
            r"range \(0, 1\] \(a test knob; larger is looser\)$",
        ):
            knob.validate(value, method="m")


def test_hyperparameters_are_validated():
    with pytest.raises(ConfigError, match="unknown method 'dpsgd'"):
        get_method("dpsgd")
    with pytest.raises(ConfigError, match="hyperparameter 'learning_rate'"):
        get_method("erm", learning_rate=0.1)
    with pytest.raises(ConfigError, match="needs noise_multiplier"):
        get_method("dp-sgd", calibrate="steps")
    with pytest.raises(ConfigError, match="'lr'"):
        get_method("dp-sgd", lr=-1)


def test_erm_learns_the_synthetic_task(task):
    fitted = get_method("erm", epochs=10).fit(task, None, DP, seed=0)
    assert metrics.error_rate(task.test.y, fitted.predict(task.test.X)) < 0.2
    assert fitted.ledger.entries == [] and fitted.ledger.epsilon(1e-5) == 0.0
    proba = fitted.predict_proba(task.test.X)
    assert proba.shape == (len(task.test), 2) and np.allclose(proba.sum(axis=1), 1)


def test_dp_sgd_calibrates_noise_and_records_its_mechanism(task):
    method = get_method("dp-sgd", epochs=5, batch_size=128)
    fitted = method.fit(task, PrivacyBudget(1.0), DP, seed=0)
    q = 128 / len(task.train)
    assert fitted.info["sampling_rate"] == pytest.approx(q)
    assert fitted.info["steps"] == round(5 / q)
    (entry,) = fitted.ledger.entries
    assert entry.event == sgd_steps(q, fitted.info["noise_multiplier"], fitted.info["steps"])
    spent = fitted.ledger.epsilon(1e-5)
    assert 0.98 < spent <= 1.0
    assert metrics.error_rate(task.test.y, fitted.predict(task.test.X)) < 0.25


def test_dp_sgd_calibrated_steps_mode(task):
    method = get_method("dp-sgd", calibrate="steps", noise_multiplier=2.0, batch_size=256)
    fitted = method.fit(task, PrivacyBudget(2.0), DP, seed=0)
    q, steps = fitted.info["sampling_rate"], fitted.info["steps"]
    assert fitted.info["noise_multiplier"] == 2.0
    assert (
        epsilon(sgd_steps(q, 2.0, steps), 1e-5) <= 2.0 < epsilon(sgd_steps(q, 2.0, steps * 2), 1e-5)
    )


def test_training_is_seeded_and_the_noise_is_real(task):
    method = get_method("dp-sgd", epochs=2, batch_size=128)
    a, b = (method.fit(task, PrivacyBudget(1.0), DP, seed=7) for _ in range(2))
    assert torch.equal(params(a), params(b))
    c = method.fit(task, PrivacyBudget(1.0), DP, seed=8)
    assert not torch.equal(params(a), params(c))
    # at a tiny epsilon the calibrated noise is ~12x larger: runs differ far more across seeds
    tight = [params(method.fit(task, PrivacyBudget(0.05), DP, seed=s)) for s in (7, 8)]
    assert (tight[0] - tight[1]).norm() > 3 * (params(a) - params(c)).norm()


def test_dp_sgd_refuses_to_run_without_a_budget_and_runs_an_mlp(task):
    with pytest.raises(ConfigError, match="is private"):
        get_method("dp-sgd").fit(task, None, DP, seed=0)
    fitted = get_method("dp-sgd", model="mlp", hidden=8, epochs=2).fit(
        task, PrivacyBudget(3.0), DP, seed=0
    )
    assert fitted.ledger.epsilon(1e-5) <= 3.0
    assert metrics.error_rate(task.test.y, fitted.predict(task.test.X)) < 0.3


@needs_adult
def test_real_adult_accuracy_of_the_baselines():
    """A quick version of the README's 10-seed numbers (make run): seeds 0-2."""
    erm, private = [], []
    for seed in range(3):
        task = get_dataset("adult").load(seed)
        fit = get_method("erm").fit(task, None, DP, seed)
        erm.append(1 - metrics.error_rate(task.test.y, fit.predict(task.test.X)))
        if seed == 0:
            fit = get_method("dp-sgd").fit(task, PrivacyBudget(1.0), DP, seed)
            private.append(1 - metrics.error_rate(task.test.y, fit.predict(task.test.X)))
            dp_gap = metrics.demographic_parity_difference(fit.predict(task.test.X), task.test.s)
    assert np.mean(erm) >= 0.848
    assert private[0] >= 0.835
    assert 0.14 < dp_gap < 0.22


def test_poisson_batches_include_every_record_independently_at_rate_q():
    from fairbench.privacy.sampling import poisson_batches

    n, q, draws = 400, 0.05, 4000
    gen = torch.Generator().manual_seed(0)
    next_batch = poisson_batches(n, q, gen, torch.device("cpu"))
    counts = torch.zeros(n)
    sizes = []
    for _ in range(draws):
        idx = next_batch()
        assert torch.all(idx[1:] > idx[:-1]) and (
            idx.numel() == 0 or 0 <= idx.min() <= idx.max() < n
        )
        counts[idx] += 1
        sizes.append(len(idx))
    sizes = torch.tensor(sizes, dtype=torch.float64)
    assert sizes.mean().item() == pytest.approx(n * q, rel=0.02)  # Binomial(n, q) size
    assert sizes.var().item() == pytest.approx(n * q * (1 - q), rel=0.1)
    freq = counts / draws  # each record's inclusion rate; sd per record ~ 0.0034
    assert freq.mean().item() == pytest.approx(q, rel=0.02)
    assert (freq - q).abs().max().item() < 0.02
    # the first and last records are as likely as any other (no edge effect)
    assert counts[:20].mean().item() / draws == pytest.approx(q, abs=0.006)
    assert counts[-20:].mean().item() / draws == pytest.approx(q, abs=0.006)
    full = poisson_batches(10, 1.0, gen, torch.device("cpu"))()
    assert full.tolist() == list(range(10))


def test_classifiers_refuse_regression_tasks():
    regression = get_dataset("synthetic", task="regression").load(seed=0)
    with pytest.raises(ConfigError, match="regression task and this method trains classifiers"):
        get_method("erm").fit(regression, None, DP, seed=0)


def test_bench_stepper_runs_past_its_plan_on_fresh_trials_without_overdrawing_a_session():
    small = get_dataset("synthetic", n_rows=400).load(seed=0)
    method = get_method("dp-sgd", batch_size=64, epochs=1)  # 255 training rows: 4 steps a plan
    step = method.stepper(small, PrivacyBudget(1.0), seed=0)
    for _ in range(12):  # a session refuses a fifth draw; the stepper starts fresh trials
        step()
