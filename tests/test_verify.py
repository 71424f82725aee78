"""Cross-checks of the reported epsilon and `fairbench privacy verify` on a finished run."""

import json
import sqlite3

import pytest
import yaml
from dp_accounting import dp_event as de

from fairbench.privacy import PrivacyLedger, epsilon
from fairbench.privacy.crosscheck import check_ledger, cross_check
from fairbench.privacy.events import sgd_steps

DELTA = 1e-5


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
    checks = cross_check(sgd_steps(0.02, 4.0, 100, 5.0), DELTA, 0.3)
    assert checks["pld_optimistic"] is None and checks["rdp"] is None


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
