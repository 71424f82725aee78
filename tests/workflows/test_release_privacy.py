"""The holes an outside review found around private selection's release, each closed:
candidates that are not whole-record DP are refused before anything runs, the budget does
not depend on the candidates drawn, every (method, repeat, candidate) draws its own noise
and batches, and a split by per-record coins moves no other record when one is added."""

import dataclasses

import numpy as np
import pytest
import torch
import yaml

import fairbench.methods as methods
from fairbench.datasets.base import independent_split
from fairbench.errors import ConfigError
from fairbench.methods.dp_sgd import DPSGD
from fairbench.methods.trial import FairnessSpec, Trial
from fairbench.privacy import PrivacyBudget, PrivacyLedger
from fairbench.privacy.session import (
    Guarantee,
    PrivacyContractError,
    PrivacyNotion,
    PrivacySession,
)
from fairbench.rundir.tuning import TuneLayout, read_analysis
from fairbench.runner.trial import load_task, run_trial
from fairbench.workflows.private_selection import (
    calibrate,
    candidate_seed,
    candidate_specs,
    candidate_templates,
    draw_counts,
    draw_picks,
    run_private,
)
from fairbench.workflows.tune import TuneConfig, sample_configurations

BASE = {
    "name": "holes",
    "datasets": [{"name": "synthetic", "options": {"n_rows": 800}}],
    "epsilons": [1.0],
    "targets": [0.1],
    "draws": 1,
    "search_seeds": [100],
    "final_seeds": list(range(10)),
    "selection": "private",
    "count": {"law": "poisson", "mean": 4.0},
    "support": 2,
    "methods": [{"name": "dp-sgd", "hparams": {"epochs": 1}}],
}


def _config(**change) -> TuneConfig:
    return TuneConfig.model_validate({**BASE, **change})


@pytest.mark.parametrize(
    ("entry", "constraint", "message"),
    [
        # the review's reproduction: the base classifier trains by noiseless SGD on X and y
        (
            {"name": "jagielski-post", "hparams": {"privacy_notion": "sensitive-attribute"}},
            "demographic_parity",
            "privacy_notion: sensitive-attribute is not (epsilon, delta)-DP for the whole record "
            "(its epsilon is stated for the sensitive-attribute notion only); private selection "
            "releases whole-record DP only: set privacy_notion: full",
        ),
        (
            {"name": "dp-fermi", "hparams": {"marginals": "public"}},
            "demographic_parity",
            "marginals: public is not (epsilon, delta)-DP for the whole record (it reads the "
            "marginals exactly); private selection releases whole-record DP only: set "
            "marginals: private",
        ),
        (
            {"name": "dpse", "hparams": {"group_sizes": "public"}},
            "bounded_group_loss",
            "group_sizes: public is not (epsilon, delta)-DP for the whole record (it reads the "
            "group sizes exactly)",
        ),
        # a searched setting is checked on every configuration of the support
        (
            {"name": "pf-ld", "space": {"privacy_notion": ["full", "sensitive-attribute"]}},
            "demographic_parity",
            "privacy_notion: sensitive-attribute",
        ),
        # its plan grows with noisy outputs: its cost is not known before it trains
        ({"name": "dpse"}, "bounded_group_loss", "method dpse plans adaptively"),
    ],
    ids=[
        "jagielski-post-notion",
        "dp-fermi-marginals",
        "dpse-group-sizes",
        "searched-notion",
        "adaptive-plan",
    ],
)
def test_a_candidate_that_is_not_whole_record_dp_is_refused_before_anything_runs(
    tmp_path, entry, constraint, message
):
    config = _config(methods=[entry], constraint=constraint, support=4)
    with pytest.raises(ConfigError, match=None) as info:
        run_private(config, tmp_path / "out", 1, True)
    text = str(info.value)
    assert text.startswith("candidate ") and message in text and "\n" not in text
    assert "leave the method out" in text or "leave it out" in text
    assert not (tmp_path / "out").exists()


class _Noiseless(DPSGD):
    """A plugin whose plan has no noisy release: its model would read the data freely."""

    name = "noiseless-test"

    def plan(self, shape, target, fairness, seed=0):
        declared = super().plan(shape, target, fairness, seed)
        return dataclasses.replace(declared, ledger=PrivacyLedger())


class _Mislabelled(DPSGD):
    """A plugin that declares whole-record DP but trains under another notion: it rewrites
    its sessions' guarantee after the engine has submitted its plan under the declared one."""

    name = "mislabelled-test"

    def program(self, trials, plan):
        for trial in trials:
            trial.session.guarantee = Guarantee(PrivacyNotion.SENSITIVE_ATTRIBUTE)
        return super().program(trials, plan)


@pytest.fixture
def test_plugins(monkeypatch):
    monkeypatch.setattr(
        methods,
        "_REGISTERED",
        {**methods._REGISTERED, "noiseless-test": _Noiseless, "mislabelled-test": _Mislabelled},
    )
    methods.registry.cache_clear()
    yield
    methods.registry.cache_clear()


def test_a_plan_with_no_noisy_release_is_refused_at_calibration(tmp_path, test_plugins):
    """The guard behind the configuration check: a plan that releases nothing noisy."""
    config = _config(methods=[{"name": "noiseless-test", "hparams": {"epochs": 1}}])
    with pytest.raises(ConfigError, match="plans no noisy release, so its model would read"):
        run_private(config, tmp_path / "out", 1, True)
    assert not (tmp_path / "out").exists()


def test_a_plan_submitted_under_another_guarantee_is_refused(tmp_path, test_plugins):
    """A method's declared guarantee is checked against the one its session ran under:
    training refuses the mismatch, in private selection's candidates as in a trial. (The plan
    capture reads the declaration, which the engine submits every plan under.)"""
    from fairbench.runner.preflight import capture

    config = _config(methods=[{"name": "mislabelled-test", "hparams": {"epochs": 1}}])
    (spec, *_) = candidate_templates(config, sample_configurations(config, 1)).values()
    _, guarantee = capture(spec, 1.0)
    assert guarantee.label == "full"
    _, failures = run_private(config, tmp_path / "out", 1, True)
    refused = "submitted its plan under 'sensitive-attribute' but declares 'full'"
    assert failures and all("PrivacyContractError" in f and refused in f for f in failures)
    with pytest.raises(PrivacyContractError, match="declares 'full'"):
        run_trial(spec)


def test_rows_carry_the_guarantee_a_method_declares():
    """dp-fermi with public marginals says so in its row's notion, from its declaration."""
    from fairbench.runner.config import expand, parse_config

    config = parse_config(
        {
            "name": "notion",
            "datasets": [{"name": "synthetic", "options": {"n_rows": 600}}],
            "epsilons": [2.0],
            "seeds": 1,
            "methods": [
                {
                    "name": "dp-fermi",
                    "hparams": {"marginals": "public", "epochs": 1},
                    "knobs": [1.0],
                }
            ],
        }
    )
    (spec,) = expand(config, warn=lambda _: None)
    assert run_trial(spec).privacy_notion == "full+public-marginals"
    method = methods.get_method("dp-fermi", marginals="public")
    assert method.guarantee() == Guarantee(public=("marginals",))
    assert not method.guarantee().whole_record


def test_the_budget_does_not_depend_on_how_many_candidates_are_drawn():
    """Calibrated over the support only: two configs whose count laws draw different K (other
    final seeds) get the same per-candidate budget; the candidates are drawn from the
    support afterwards."""
    space = {"batch_size": [32, 64], "lr": {"log": [0.1, 1.0]}}
    budgets = []
    for seeds in (list(range(10)), list(range(20, 30))):
        config = _config(
            final_seeds=seeds,
            methods=[{"name": "dp-sgd", "space": space, "hparams": {"epochs": 1}}],
        )
        templates = candidate_templates(config, sample_configurations(config, config.support))
        budgets.append(calibrate(config, list(templates.values())))
        counts = draw_counts(config)["dp-sgd"]
        assert all(
            0 <= u < config.support
            for picks in draw_picks(config, {"dp-sgd": counts})["dp-sgd"]
            for u in picks
        )
    assert draw_counts(_config(final_seeds=list(range(10)))) != draw_counts(
        _config(final_seeds=list(range(20, 30)))
    )
    assert budgets[0].candidate_epsilon == budgets[1].candidate_epsilon
    assert budgets[0].total_epsilon == budgets[1].total_epsilon


def test_two_methods_candidates_draw_independent_noise_and_batches():
    """Candidate #0 of two methods in one repeat: different seeds, hence different Poisson
    batches and different noise (the seeds are per method, repeat and candidate)."""
    two = [
        {"name": "dp-sgd", "hparams": {"epochs": 1}},
        {"name": "dp-sgd", "label": "other", "hparams": {"epochs": 1}},
    ]
    config = _config(methods=two)
    templates = candidate_templates(config, sample_configurations(config, config.support))
    budget = calibrate(config, [templates[("synthetic", 1.0, "dp-sgd#0")]])
    picks = {"dp-sgd": [[0]] * 10, "other": [[0]] * 10}
    budgets = {("synthetic", 1.0, "dp-sgd"): budget, ("synthetic", 1.0, "other"): budget}
    specs = candidate_specs(config, picks, templates, budgets)
    first = specs[("synthetic", 1.0, "dp-sgd", 0, 0)]
    second = specs[("synthetic", 1.0, "other", 0, 0)]
    assert first.seed != second.seed
    assert first.seed == candidate_seed(config.seed, "dp-sgd", 0, 0)
    draws = []
    for spec in (first, second):
        task = load_task(spec)
        session = PrivacySession(spec.seed, budget=PrivacyBudget(budget.training_epsilon))
        ledger = PrivacyLedger()
        from dp_accounting import dp_event

        ledger.record("g", dp_event.PoissonSampledDpEvent(0.1, dp_event.GaussianDpEvent(1.0)))
        session.submit_plan(ledger)
        batch = session.poisson(len(task.train), 0.1)()
        zeros = [torch.zeros(3, dtype=torch.float64)]
        noise = session.gaussian_sum("g", 1.0, 1.0).release(zeros, len(batch.indices), batch)
        draws.append((batch.indices.tolist(), noise[0].tolist()))
    assert draws[0][0] != draws[1][0] and draws[0][1] != draws[1][1]


def test_a_split_by_per_record_coins_moves_no_other_record():
    """Each record's part comes from its own coin: a record appended to the data leaves
    every other record in its part (a stratified split re-deals the whole stratum), and the
    parts' shares are 64% / 11% / 25% in expectation."""
    small = independent_split(5000, 7)
    large = independent_split(5001, 7)
    for before, after in zip(small, large, strict=True):
        assert np.array_equal(before, after[after < 5000])
    shares = [len(p) / 5000 for p in small]
    assert shares == pytest.approx([0.6375, 0.1125, 0.25], abs=0.02)


def test_a_per_record_split_is_an_option_of_the_csv_adapter(tmp_path):
    from fairbench.datasets import get_dataset

    rng = np.random.default_rng(0)
    frame = {
        "x": rng.normal(size=400).round(3),
        "s": rng.choice(["a", "b"], 400),
        "y": rng.choice([0, 1], 400),
    }
    import pandas as pd

    path = tmp_path / "d.csv"
    pd.DataFrame(frame).to_csv(path, index=False)
    stratified = get_dataset("csv", path=str(path), label="y", sensitive="s")
    per_record = get_dataset("csv", path=str(path), label="y", sensitive="s", split="per-record")
    assert "split" not in stratified.resolved_options()  # existing trial ids are unchanged
    assert per_record.resolved_options()["split"] == "per-record"
    task = per_record.load(3)
    coins = independent_split(400, 3)
    assert len(task.test) == len(coins[2]) and len(task.val) == len(coins[1])


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_column(tmp_path):
    """Excel's "CSV UTF-8" export starts with a byte-order mark: `--label` names the first
    column as the user sees it."""
    from fairbench.datasets import get_dataset

    path = tmp_path / "bom.csv"
    rows = "".join(f"{i % 2},{'m' if i % 3 else 'f'},{i / 10}\n" for i in range(120))
    path.write_bytes(b"\xef\xbb\xbf" + f"y,s,x\n{rows}".encode())
    task = get_dataset("csv", path=str(path), label="y", sensitive="s").load(0)
    assert task.feature_names == ("x",)


def test_a_failed_check_names_the_rows_dropped_before_it(tmp_path):
    """A file whose one "f" row has no label: the sensitive column is then refused as having
    one group, and the error says a row was dropped first (it is why)."""
    from fairbench.datasets import get_dataset
    from fairbench.errors import DataError

    path = tmp_path / "d.csv"
    path.write_text("y,s,x\n" + "".join(f"{i % 2},m,{i}\n" for i in range(40)) + ",f,1\n")
    with pytest.raises(DataError) as info:
        _ = get_dataset("csv", path=str(path), label="y", sensitive="s").profile
    text = str(info.value)
    assert "has one group" in text and "after dropping 1 (label or sensitive value missing)" in text
    assert "of 41 rows" in text and "\n" not in text


def test_the_tune_outputs_say_they_are_an_analysis_not_a_release(tmp_path):
    config = _config(final_seeds=list(range(10)))
    run_private(config, tmp_path / "out", 1, True)
    record = read_analysis(TuneLayout(tmp_path / "out"))[0]
    assert record["note"].startswith("analysis of the selection, not part of the DP release")
    assert "not part of the DP release" in (tmp_path / "out" / "tuning.md").read_text()
    assert yaml.safe_load((tmp_path / "out" / "tune.yaml").read_text())["support"] == 2


def test_fit_refuses_a_plan_extended_without_declaring_it():
    """Only a method that declares `adaptive_plan` may grow its plan during training."""
    from fairbench.datasets import get_dataset

    task = get_dataset("synthetic", n_rows=400).load(0)

    class Grows(DPSGD):
        name = "grows-test"

        def program(self, trials, plan):
            trials[0].session.extend_plan(PrivacyLedger())
            return super().program(trials, plan)

    session = PrivacySession(0, budget=PrivacyBudget(1.0))
    method = Grows(epochs=1)
    with pytest.raises(PrivacyContractError, match="without declaring adaptive_plan"):
        method.fit_stack([Trial(task, FairnessSpec("demographic_parity"), session)])
