"""`tune` with `selection: private`: the count laws, the noisy validation score, the
per-candidate calibration, and the total epsilon recomputed independently with dp-accounting."""

import math

import numpy as np
import pytest
import yaml
from dp_accounting import dp_event
from dp_accounting.rdp import RdpAccountant
from dp_accounting.rdp.rdp_privacy_accountant import (
    _compute_rdp_repeat_and_select,
    _truncated_negative_binomial_mean,
    compute_epsilon,
)

from fairbench.errors import CalibrationError, ConfigError
from fairbench.privacy import PrivacyLedger, rdp
from fairbench.privacy.events import from_dict, sgd_steps
from fairbench.privacy.selection import (
    PoissonCount,
    TruncatedNegativeBinomialCount,
    calibrate_candidate,
    selection_epsilon,
)
from fairbench.privacy.session import PrivacyContractError
from fairbench.rundir.store import finished_rows
from fairbench.rundir.tuning import TuneLayout, read_analysis, read_table
from fairbench.streams import numpy_stream
from fairbench.workflows.private_selection import (
    _check_ledger,
    candidate_seed,
    draw_counts,
    draw_picks,
    noisy_cells,
    run_private,
    score,
)
from fairbench.workflows.tune import TuneConfig, load_tune_config

TARGET = 2.0
ORDERS = list(rdp.ORDERS)
BASE = {
    "name": "p",
    "datasets": [{"name": "synthetic", "options": {"n_rows": 1200}}],
    "epsilons": [TARGET],
    "targets": [0.1, 0.3],
    "draws": 3,
    "search_seeds": [100],
    "final_seeds": list(range(10)),
    "selection": "private",
    "count": {"law": "poisson", "mean": 2.0},
    "methods": [
        {"name": "dp-sgd", "hparams": {"epochs": 2}, "space": {"lr": {"log": [0.05, 2.0]}}}
    ],
}

LAWS = [
    PoissonCount(law="poisson", mean=3.0),
    TruncatedNegativeBinomialCount(law="truncated_negative_binomial", eta=1.0, gamma=0.25),
    TruncatedNegativeBinomialCount(law="truncated_negative_binomial", eta=0.0, gamma=0.1),
    TruncatedNegativeBinomialCount(law="truncated_negative_binomial", eta=0.5, gamma=0.2),
]


@pytest.mark.parametrize("law", LAWS, ids=lambda law: f"{law.law}-{law.shape:g}")
def test_the_candidate_count_follows_its_law(law):
    """Mean and P(K = k) for k <= 4 over 20,000 seeded draws, each within 4 standard errors
    of the law's; the pmf sums to 1 and the mean is dp-accounting's for the same law."""
    rng = numpy_stream(0, "count test")
    draws = np.array([law.sample(rng) for _ in range(20_000)])
    assert sum(law.pmf(k) for k in range(2_000)) == pytest.approx(1.0, abs=1e-9)
    assert abs(draws.mean() - law.expected) < 4 * draws.std() / math.sqrt(len(draws))
    for k in range(5):
        p = law.pmf(k)
        assert abs((draws == k).mean() - p) <= 4 * math.sqrt(p * (1 - p) / len(draws)) + 1e-12
    if law.law != "poisson":
        assert law.expected == pytest.approx(_truncated_negative_binomial_mean(law.gamma, law.eta))


def test_the_noisy_score_adds_laplace_noise_of_its_stated_scale_to_each_count():
    """Sensitivity 1 per table (one record, one cell): the noise is Laplace(scale) per cell,
    so its mean absolute value is the scale and its standard deviation sqrt(2) scale. It is
    drawn by a privacy session of the candidate's seed: the same seed, the same noise."""
    cells = np.arange(8.0).reshape(2, 2, 2) * 10
    noise = np.stack([noisy_cells(cells, 3.0, seed) - cells for seed in range(20_000)])
    assert np.abs(noise).mean() == pytest.approx(3.0, rel=0.02)
    assert noise.std() == pytest.approx(math.sqrt(2) * 3.0, rel=0.02)
    assert np.abs(noise.mean(axis=0)).max() < 0.1  # centred, every cell
    assert np.array_equal(noisy_cells(cells, 3.0, 7), noisy_cells(cells, 3.0, 7))


def test_the_noisy_score_is_a_planned_session_release():
    """The score's noise goes through a privacy session (no numpy draw outside it): an
    observer of the session's releases sees one Laplace release of the exact table."""
    from fairbench.privacy.noise import observe_releases

    seen = []
    cells = np.ones((2, 2, 2))
    with observe_releases(lambda kind, exact, noisy: seen.append((kind, exact)) or noisy):
        noisy_cells(cells, 2.0, 3)
    assert len(seen) == 1 and seen[0][0] == "laplace"
    assert np.array_equal(seen[0][1][0].numpy().reshape(2, 2, 2), cells)


def test_the_score_is_the_suites_metrics_on_the_table():
    # group 0: 10 records (y=0: 6 predicted 0, 1 predicted 1; y=1: 3 predicted 1)
    # group 1: 10 records (y=0: 2 predicted 0, 2 predicted 1; y=1: 1 predicted 0, 5 predicted 1)
    cells = np.array([[[6, 1], [0, 3]], [[2, 2], [1, 5]]], dtype=float)
    error, violation = score(cells, "demographic_parity")
    assert error == pytest.approx(4 / 20)
    assert violation == pytest.approx(abs(4 / 10 - 7 / 10))
    cells[1] = -1.0  # noise drove a whole group below zero: never feasible
    assert math.isnan(score(cells, "demographic_parity")[1])


def test_the_per_candidate_budget_meets_the_target_tightly():
    law = TruncatedNegativeBinomialCount(law="truncated_negative_binomial", eta=1.0, gamma=0.1)

    def candidate(budget: float) -> dp_event.DpEvent:  # a Gaussian and a Laplace at budget/2
        return dp_event.ComposedDpEvent(
            [dp_event.GaussianDpEvent(4.0 / budget), dp_event.LaplaceDpEvent(2.0 / budget)]
        )

    budget, total = calibrate_candidate(1.0, 1e-5, law, lambda b: [candidate(b)])
    assert 0.99 <= total <= 1.0
    event = dp_event.RepeatAndSelectDpEvent(candidate(budget), law.expected, law.shape)
    again = RdpAccountant(orders=ORDERS).compose(event).get_epsilon(1e-5)
    assert again == pytest.approx(total, rel=1e-9)
    with pytest.raises(CalibrationError, match="cannot meet epsilon 1 with 10 expected"):
        calibrate_candidate(1.0, 1e-5, law, lambda b: [_infeasible_below(b, 0.5, candidate)])


def _infeasible_below(budget, floor, candidate):
    if budget < floor:
        raise CalibrationError("no noise that small")
    return candidate(budget)


def test_a_laplace_on_a_poisson_batch_keeps_its_amplification():
    """RaCO-DP's step (a Gaussian and a Laplace on one batch of rate 0.08, 97 steps): its
    selection costs a little more than the Gaussian alone would, and about 8x less than the
    steps run on the whole data (what dp-accounting's RDP accountant would force)."""
    law = PoissonCount(law="poisson", mean=4.0)
    steps = sgd_steps(0.08, 4.0, 97, laplace_scale=5.0)
    whole = dp_event.SelfComposedDpEvent(steps.event.event, 97)
    paid = selection_epsilon([steps], law, 1e-5)
    assert selection_epsilon([sgd_steps(0.08, 4.0, 97)], law, 1e-5) < paid
    assert 8 * paid < selection_epsilon([whole], law, 1e-5)


@pytest.fixture(scope="module")
def selected(tmp_path_factory):
    out = tmp_path_factory.mktemp("private")
    config = TuneConfig.model_validate(BASE)
    table, failures = run_private(config, out, workers=1, quiet=True, warn=lambda _: None)
    assert failures == []
    records = read_analysis(TuneLayout(out))
    rows = finished_rows(out / "private" / f"synthetic-eps{TARGET:g}", "test")
    return config, out, table, records, rows


def test_the_stored_total_is_recomputed_independently(selected):
    """dp-accounting's RDP accountant (the suite's orders) on the recorded candidate ledger
    and law gives the stored total (DP-SGD: every release is one dp-accounting computes);
    it meets the target, within 1% of it."""
    _, out, _, (record,), _ = selected
    ledger = record["candidate_ledger"]["entries"]
    candidate = dp_event.ComposedDpEvent([from_dict(e["event"]) for e in ledger])
    assert ledger[-1]["event"] == {
        "type": "LaplaceDpEvent",
        "noise_multiplier": record["score_laplace_scale"],
    }
    assert (record["count_mean"], record["count_shape"]) == (2.0, math.inf)
    event = dp_event.RepeatAndSelectDpEvent(candidate, 2.0, math.inf)
    again = RdpAccountant(orders=ORDERS).compose(event).get_epsilon(record["delta"])
    assert record["total_epsilon"] == pytest.approx(again, rel=1e-9)
    assert 0.99 * TARGET <= record["total_epsilon"] <= TARGET
    assert record["accountant"] == "rdp" and "PLD accountant cannot" in record["accounting_note"]
    rows = read_table(TuneLayout(out))
    assert (rows["tuning_epsilon"] == record["total_epsilon"]).all()
    assert set(rows["selection"]) == {"private"} and set(rows["accountant"]) == {"rdp"}
    # a row per target and repeat: its K and what it released, as the analysis records them
    assert len(rows) == len(BASE["targets"]) * len(record["repeats"])
    repeats = record["repeats"] * len(BASE["targets"])
    for row, repeat in zip(rows.itertuples(), repeats, strict=True):
        assert (row.repeat, row.candidates) == (repeat["repeat"], repeat["count"])
        index = repeat["released"][f"{row.target:g}"]
        if index is None:
            assert row.selected is None and math.isnan(row.test_error)
        else:
            assert row.test_error == repeat["candidates"][index]["test_error"]
    assert "total ε (RDP)" in (out / "tuning.md").read_text()


def test_candidates_are_the_recorded_draws_trained_at_the_calibrated_budget(selected):
    """K per repeat comes from its seeded stream, each candidate's configuration uniformly
    from the method's support; repeat r trains its K candidates on split r, each with its own
    seed, at the training epsilon the calibration found."""
    config, _, _, (record,), rows = selected
    counts = draw_counts(config)["dp-sgd"]
    picks = draw_picks(config, {"dp-sgd": counts})["dp-sgd"]
    assert [r["count"] for r in record["repeats"]] == counts
    assert len(rows) == sum(counts) and sum(counts) > 0
    assert record["support"] == config.support and len(record["plan_of"]) == config.support
    for repeat, chosen in zip(config.final_seeds, picks, strict=True):
        mine = [r for r in rows if r["dataset_options"]["split_seed"] == repeat]
        assert sorted(r["label"] for r in mine) == sorted(f"dp-sgd#{u}" for u in chosen)
        seeds = {candidate_seed(config.seed, "dp-sgd", repeat, i) for i in range(len(chosen))}
        assert {r["seed"] for r in mine} == seeds
    assert {r["epsilon"] for r in rows} == {record["training_epsilon"]}
    assert record["training_epsilon"] == pytest.approx(record["candidate_epsilon"] / 2)
    assert record["score_laplace_scale"] == pytest.approx(2 / record["candidate_epsilon"])


def test_the_release_is_the_best_noisy_score_and_the_noise_is_reproducible(selected):
    _, _, _, (record,), rows = selected
    by_id = {r["trial_id"]: r for r in rows}
    for repeat in record["repeats"]:
        for cand in repeat["candidates"]:
            row = by_id[cand["trial_id"]]
            cells = np.asarray(row["info"]["val_outcome_cells"])
            # the exact table gives the trial's own validation numbers
            exact = score(cells, "demographic_parity")
            assert exact == pytest.approx((row["val_error"], row["val_violation"]))
            noisy = score(
                noisy_cells(cells, record["score_laplace_scale"], row["seed"]),
                "demographic_parity",
            )
            assert noisy == pytest.approx((cand["val_error"], cand["val_violation"]), nan_ok=True)
        for target, released in repeat["released"].items():
            feasible = [
                i
                for i, c in enumerate(repeat["candidates"])
                if _within(c["val_violation"], float(target))
            ]
            best = min(feasible, key=lambda i: repeat["candidates"][i]["val_error"], default=None)
            assert released == best


def _within(violation: float | None, target: float) -> bool:
    return violation is not None and not math.isnan(violation) and violation <= target


def test_summary_rows_average_the_released_models(selected):
    _, _, table, (record,), _ = selected
    for row in table.itertuples(index=False):
        key = f"{row.target:g}"
        released = [
            r["candidates"][r["released"][key]]
            for r in record["repeats"]
            if r["released"][key] is not None
        ]
        assert row.final_seeds == len(released)
        if released:
            assert row.test_error == pytest.approx(np.mean([c["test_error"] for c in released]))


@pytest.mark.slow
def test_candidates_of_different_mechanisms_are_accounted_by_the_max_of_their_curves(tmp_path):
    """A space that changes the batch size: every distinct candidate mechanism is recorded
    and every candidate is mapped to its own; the stored total is the repeat-and-select bound
    on the pointwise maximum of their RDP curves, recomputed here with dp-accounting alone
    (each DP-SGD curve by its accountant, its formula and conversion); it meets the target,
    and it is at least each mechanism's own selection epsilon."""
    methods = [{"name": "dp-sgd", "hparams": {"epochs": 2}, "space": {"batch_size": [64, 128]}}]
    config = TuneConfig.model_validate(
        {**BASE, "methods": methods, "count": {"law": "poisson", "mean": 4.0}}
    )
    run_private(config, tmp_path / "out", workers=1, quiet=True, warn=lambda _: None)
    record = read_analysis(TuneLayout(tmp_path / "out"))[0]
    assert len(record["candidate_plans"]) == 2
    events = []
    for plan in record["candidate_plans"]:
        training = PrivacyLedger.from_json(plan).event
        events.append(
            dp_event.ComposedDpEvent(
                [training, dp_event.LaplaceDpEvent(record["score_laplace_scale"])]
            )
        )
    curves = [RdpAccountant(orders=ORDERS).compose(e)._rdp for e in events]
    worst = np.max(curves, axis=0)
    bound = _compute_rdp_repeat_and_select(np.asarray(ORDERS), worst, 4.0, math.inf)
    total = compute_epsilon(ORDERS, bound, config.delta)[0]
    assert record["total_epsilon"] == pytest.approx(total, rel=1e-9)
    assert 0.99 * TARGET <= total <= TARGET
    alone = [
        RdpAccountant(orders=ORDERS)
        .compose(dp_event.RepeatAndSelectDpEvent(e, 4.0, math.inf))
        .get_epsilon(config.delta)
        for e in events
    ]
    assert total >= max(alone) - 1e-12
    assert sorted(record["plan_of"]) == sorted(f"dp-sgd#{u}" for u in range(config.support))
    assert set(record["plan_of"].values()) == {0, 1}


def test_a_candidate_whose_ledger_is_not_its_plan_is_refused(selected):
    """Each candidate's recorded training ledger is checked against its own planned one."""
    _, _, _, (record,), rows = selected
    row = dict(rows[0])
    budget = _budget_of(record)
    _check_ledger(row, budget)  # as trained: its plan
    ledger = PrivacyLedger.from_json(row["ledger"])
    ledger.record("one more step", dp_event.GaussianDpEvent(50.0))
    with pytest.raises(PrivacyContractError, match="other than the plan"):
        _check_ledger({**row, "ledger": ledger.to_json()}, budget)
    with pytest.raises(PrivacyContractError, match="other than the plan"):
        _check_ledger({**row, "label": "dp-sgd#99"}, budget)  # a candidate never planned


def _budget_of(record):
    from fairbench.workflows.private_selection import SelectionCalibration

    plans = tuple(record["candidate_plans"])
    ledger = PrivacyLedger.from_json(record["candidate_ledger"])
    return SelectionCalibration(
        record["candidate_epsilon"],
        record["training_epsilon"],
        record["score_laplace_scale"],
        record["total_epsilon"],
        ledger,
        plans,
        tuple(record["plan_of"].items()),
    )


def test_the_max_curve_bound_is_dp_accountings_for_one_candidate():
    """Pins the module-private formula selection_epsilon uses: with one Gaussian candidate
    it is the RDP accountant's own RepeatAndSelect epsilon on the same orders, for both law
    families."""
    event = dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(0.05, dp_event.GaussianDpEvent(2.0)), 200
    )
    for law in LAWS:
        expected = (
            RdpAccountant(orders=ORDERS)
            .compose(dp_event.RepeatAndSelectDpEvent(event, law.expected, law.shape))
            .get_epsilon(1e-5)
        )
        assert selection_epsilon([event], law, 1e-5) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"count": None}, "selection: private needs `count`"),
        ({"methods": [{"name": "erm"}]}, "method erm is not private"),
        ({"selection": "free"}, "count applies to selection: private or uncharged only"),
        ({"count": {"law": "poisson", "mean": 0.5}}, "count.poisson.mean"),
        ({"count": {"law": "geometric", "mean": 3}}, "count"),
        ({"count": {"law": "truncated_negative_binomial", "eta": 1, "gamma": 1}}, "gamma"),
    ],
)
def test_bad_private_selection_configs_are_one_line_errors(tmp_path, change, message):
    path = tmp_path / "tune.yaml"
    path.write_text(yaml.safe_dump({**BASE, **change}))
    with pytest.raises(ConfigError, match=message) as info:
        load_tune_config(str(path))
    assert "\n" not in str(info.value)


def test_charge_tuning_with_private_selection_is_refused_and_writes_nothing(cli, tmp_path):
    path = tmp_path / "tune.yaml"
    path.write_text(yaml.safe_dump(BASE))
    code, _, err = cli("tune", str(path), "--out", str(tmp_path / "out"), "--charge-tuning")
    assert code == 2
    assert err.strip().startswith("error: --charge-tuning") and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_calibrations_in_worker_processes_come_back_in_job_order():
    """Several (epsilon, method) calibrations run in a spawned pool (each is deterministic):
    each result is its own job's, a total tight under that job's epsilon, with every
    candidate's plan recorded."""
    from fairbench.workflows.private_selection import _calibrate_all, candidate_templates
    from fairbench.workflows.tune import sample_configurations

    config = TuneConfig.model_validate({**BASE, "epsilons": [1.0, 3.0], "support": 2})
    templates = candidate_templates(config, sample_configurations(config, 2))
    jobs = [[templates[("synthetic", eps, f"dp-sgd#{i}")] for i in range(2)] for eps in (1.0, 3.0)]
    low, high = _calibrate_all(config, jobs, 2)
    assert 0.99 <= low.total_epsilon <= 1.0 and 2.97 <= high.total_epsilon <= 3.0
    assert low.candidate_epsilon < high.candidate_epsilon
    assert [label for label, _ in low.plan_of] == ["dp-sgd#0", "dp-sgd#1"]
