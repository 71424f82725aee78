"""Cross-checks of the reported epsilon and `fairbench privacy verify` on a finished run."""

import csv
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import yaml
from dp_accounting import dp_event as de
from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

from fairbench.privacy import PrivacyLedger, epsilon
from fairbench.privacy.accountant import REPORT_DISCRETISATION
from fairbench.privacy.crosscheck import (
    _INTEGER_ORDERS,
    OPTIMISTIC_TOLERANCE,
    RDP_TOLERANCE,
    _poisson_rdp_upper,
    check_ledger,
    cross_check,
    rdp_epsilon,
)
from fairbench.privacy.events import sgd_steps
from fairbench.privacy.pld import one_batch

DELTA = 1e-5
REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("gaussians", [1, 2])
def test_reported_epsilon_sits_between_optimistic_pld_and_rdp(gaussians):
    event = sgd_steps(0.02, 1.2, 800, None, gaussians)
    reported = epsilon(event, DELTA)
    checks = cross_check(event, DELTA, reported)
    assert checks["pld_optimistic"] <= reported <= checks["rdp"]
    assert reported < 1.1 * checks["pld_optimistic"]
    assert checks["problems"] == []


def test_claims_outside_the_bounds_are_flagged():
    event = sgd_steps(0.02, 1.2, 800)
    reported = epsilon(event, DELTA)
    assert "below the optimistic PLD" in cross_check(event, DELTA, 0.5 * reported)["problems"][0]
    assert "above the RDP" in cross_check(event, DELTA, 10 * reported)["problems"][0]


def test_pure_laplace_ledgers_are_checked_against_the_closed_form():
    ledger = PrivacyLedger()
    ledger.record("counts", de.SelfComposedDpEvent(de.LaplaceDpEvent(4.0), 3))
    checks = check_ledger(ledger, DELTA, ledger.epsilon(DELTA))
    assert checks["laplace_closed_form"] == pytest.approx(0.75)
    assert checks["problems"] == []


def test_releases_without_an_independent_method_say_so():
    substitution = sgd_steps(0.02, 4.0, 100, None, 1, substitution=True)
    checks = cross_check(substitution, DELTA, 0.3)
    assert checks["pld_optimistic"] is None and checks["rdp"] is None


def test_a_stored_raco_dp_ledger_gets_both_independent_bounds():
    ledger = PrivacyLedger()
    ledger.record("histogram and gradient", sgd_steps(0.04, 4.0, 600, 5.0))
    ledger.record("counts", de.GaussianDpEvent(100.0))
    ledger = PrivacyLedger.from_json(ledger.to_json())  # as `privacy verify` reads it
    reported = ledger.epsilon(DELTA)
    checks = check_ledger(ledger, DELTA, reported)
    assert checks["pld_optimistic"] < reported < checks["rdp"] and checks["problems"] == []
    gaussian_only = epsilon(sgd_steps(0.04, 4.0, 600), DELTA)
    # the Gaussian alone, rounded optimistically (up to one interval per step below)
    assert checks["pld_optimistic"] >= gaussian_only - 600 * REPORT_DISCRETISATION


def test_general_subsampling_bound_is_above_the_exact_gaussian_rdp():
    """Zhu & Wang's bound for any subsampled mechanism, given a Gaussian's RDP, must sit on
    or above dp-accounting's exact subsampled-Gaussian RDP at every integer order."""
    orders = _INTEGER_ORDERS
    for q, sigma in ((0.01, 0.8), (0.05, 2.0), (0.3, 5.0)):
        general = _poisson_rdp_upper(q, orders / (2 * sigma**2), orders)
        exact = RdpAccountant(orders=list(orders))
        exact.compose(de.PoissonSampledDpEvent(q, de.GaussianDpEvent(sigma)))
        assert np.all(general >= np.asarray(exact.rdp) * (1 - 1e-9))
        assert general[0] < 3 * exact.rdp[0]  # and not uselessly loose at low orders


def test_rdp_never_drops_a_laplace_sharing_the_batch():
    """dp-accounting's own merge returns an int noise multiplier's Gaussian alone; ours
    accounts the Laplace whatever the number type."""
    with_int = rdp_epsilon(sgd_steps(0.04, 4, 600, 5.0), DELTA)
    with_float = rdp_epsilon(sgd_steps(0.04, 4.0, 600, 5.0), DELTA)
    gaussian_only = rdp_epsilon(sgd_steps(0.04, 4.0, 600), DELTA)
    assert with_int == with_float > gaussian_only


# (q, sigma, steps, Laplace scale) spanning what the bundled configs run: q from ACS-sized
# (0.003) to Parkinsons-sized (0.3) batches and unsampled (1.0, DPSE's releases), sigma
# from 0.6 to 100, 5 to 30,000 steps, RaCO-DP's Laplace scales 2 to 10 (the paper's range)
GRID = [
    (0.003, 1.2, 6000, None),
    (0.003, 4.0, 30000, 5.0),
    (0.003, 0.7, 1000, 2.0),
    (0.03, 0.6, 1000, None),
    (0.03, 1.5, 6000, None),
    (0.03, 4.0, 600, 5.0),
    (0.03, 4.0, 30000, 5.0),
    (0.03, 8.0, 6000, 10.0),
    (0.03, 1.5, 1000, 2.0),
    (0.15, 1.5, 100, None),
    (0.15, 6.0, 1000, None),
    (0.15, 4.0, 100, 5.0),
    (0.15, 8.0, 1000, 2.0),
    (0.15, 4.0, 6000, 10.0),
    (0.3, 4.0, 500, 5.0),
    (0.3, 4.0, 5, 5.0),
    (0.3, 2.0, 300, None),
    (0.3, 1.0, 100, None),
    (0.3, 14.0, 300, None),
    (1.0, 1.0, 100, None),
    (1.0, 10.0, 300, None),
    (1.0, 100.0, 100, None),
]


@pytest.mark.parametrize(("q", "sigma", "steps", "laplace"), GRID)
def test_cross_checks_bracket_the_reported_epsilon_across_the_config_grid(q, sigma, steps, laplace):
    event = sgd_steps(q, sigma, steps, laplace)
    reported = epsilon(event, DELTA)
    checks = cross_check(event, DELTA, reported)
    assert checks["problems"] == []
    assert checks["pld_optimistic"] <= reported + OPTIMISTIC_TOLERANCE
    assert reported <= checks["rdp"] * (1 + RDP_TOLERANCE)
    if laplace is None:  # the two roundings of one PLD agree up to the optimistic side's
        # discretisation error, at most one interval per composed step
        gap = reported - checks["pld_optimistic"]
        assert gap <= steps * REPORT_DISCRETISATION + 0.02 * reported + 0.01


def _poisson_parameters(event, count=1):
    if isinstance(event, de.SelfComposedDpEvent):
        yield from _poisson_parameters(event.event, count * event.count)
    elif isinstance(event, de.ComposedDpEvent):
        for part in event.events:
            yield from _poisson_parameters(part, count)
    elif isinstance(event, de.PoissonSampledDpEvent):
        sigma, laplace = one_batch(event.event)
        yield event.sampling_probability, sigma, count, laplace


def test_the_grid_covers_every_committed_run():
    csv.field_size_limit(1 << 30)
    seen = []
    for path in (REPO / "results" / "figures").rglob("trials.csv"):
        with path.open() as f:
            for row in csv.DictReader(f):
                if row["ledger"]:
                    ledger = PrivacyLedger.from_json(json.loads(row["ledger"]))
                    if ledger.entries:
                        seen.extend(_poisson_parameters(ledger.event))
    assert seen, "no committed Poisson-sampled ledgers found"
    sampled = [g for g in GRID if g[0] < 1]
    for i, name in enumerate(("q", "sigma", "steps")):
        low, high = min(g[i] for g in sampled), max(g[i] for g in sampled)
        values = [s[i] for s in seen]
        assert low <= min(values) and max(values) <= high, name
    scales = {s[3] for s in seen if s[3] is not None}
    assert scales <= set(np.linspace(2, 10, 33))


def test_verify_passes_a_clean_run_and_flags_a_tampered_one(cli, tmp_path):
    config = {
        "name": "v",
        "datasets": [{"name": "synthetic", "options": {"n_rows": 800}}],
        "epsilons": [2.0],
        "seeds": 2,
        "methods": [{"name": "dp-sgd", "hparams": {"epochs": 2, "batch_size": 64}}],
    }
    path = tmp_path / "v.yaml"
    path.write_text(yaml.safe_dump(config))
    run = tmp_path / "run"
    assert cli("run", str(path), "--out", str(run))[0] == 0
    code, out, _ = cli("privacy", "verify", str(run))
    assert code == 0 and "2 private trials re-accounted, 2 cross-checked" in out
    assert "0 flagged" in out
    with sqlite3.connect(run / "results.sqlite") as db:  # weaken one trial's recorded noise
        trial_id, result = db.execute("SELECT trial_id, result FROM trials LIMIT 1").fetchone()
        row = json.loads(result)
        step = row["ledger"]["entries"][0]["event"]
        step["event"]["event"]["noise_multiplier"] /= 3
        db.execute("UPDATE trials SET result=? WHERE trial_id=?", (json.dumps(row), trial_id))
    code, out, _ = cli("privacy", "verify", str(run))
    assert code == 1 and "1 flagged" in out
    assert "above its target" in out and "stored epsilon" in out
