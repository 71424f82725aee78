import json

import pytest
from dp_accounting import dp_event as de
from dp_accounting.pld import pld_privacy_accountant

from fairbench.privacy import epsilon
from fairbench.privacy.events import sgd_steps
from tests.conftest import needs_adult


def independent(q, sigma, steps, laplace=None, delta=1e-5):
    """dp-accounting alone; with a Laplace, as separately sampled releases (an under-count)."""
    step = de.PoissonSampledDpEvent(q, de.GaussianDpEvent(sigma))
    if laplace:
        step = de.ComposedDpEvent([step, de.PoissonSampledDpEvent(q, de.LaplaceDpEvent(laplace))])
    accountant = pld_privacy_accountant.PLDAccountant()
    accountant.compose(step, steps)
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize("laplace", [None, 3.0])
def test_privacy_epsilon_prints_the_pld_epsilon(cli, laplace):
    args = [
        "privacy",
        "epsilon",
        "--sampling-rate",
        "0.02",
        "--steps",
        "800",
        "--noise-multiplier",
        "1.1",
        "--delta",
        "1e-5",
    ]
    if laplace:
        args += ["--laplace-scale", str(laplace)]
    code, out, _ = cli(*args)
    assert code == 0
    result = json.loads(out)
    assert result["delta"] == 1e-5
    if laplace is None:
        assert result["epsilon"] == pytest.approx(independent(0.02, 1.1, 800), rel=1e-3)
    else:  # releases share each batch: the suite's shared-batch PLD, above separate sampling
        shared = epsilon(sgd_steps(0.02, 1.1, 800, laplace), 1e-5)
        assert result["epsilon"] == pytest.approx(shared, rel=1e-9)
        assert result["epsilon"] > independent(0.02, 1.1, 800, laplace)


@pytest.mark.slow
def test_privacy_calibrate_both_ways_and_refuses_ambiguity(cli):
    code, out, _ = cli(
        "privacy", "calibrate", "--sampling-rate", "0.02", "--epsilon", "2", "--steps", "800"
    )
    sigma = json.loads(out)
    assert code == 0 and sigma["steps"] == 800 and sigma["epsilon"] <= 2.0
    assert independent(0.02, sigma["noise_multiplier"], 800) <= 2.0
    code, out, _ = cli(
        "privacy",
        "calibrate",
        "--sampling-rate",
        "0.02",
        "--epsilon",
        "2",
        "--noise-multiplier",
        "1.0",
    )
    steps = json.loads(out)
    assert code == 0 and independent(0.02, 1.0, steps["steps"]) <= 2.0
    code, _, err = cli("privacy", "calibrate", "--sampling-rate", "0.02", "--epsilon", "2")
    assert code == 2 and "exactly one of --steps" in err
    code, _, err = cli(
        "privacy",
        "epsilon",
        "--sampling-rate",
        "0.02",
        "--steps",
        "10",
        "--noise-multiplier",
        "1",
        "--delta",
        "2",
    )
    assert code == 2 and "delta must lie strictly between 0 and 1" in err


def test_list_commands(cli):
    code, out, _ = cli("list", "methods")
    assert code == 0 and "dp-sgd" in out and "erm" in out and "[private]" in out
    (post,) = [line for line in out.splitlines() if line.startswith("jagielski-post ")]
    assert "needs A at test" in post and "knob: gamma" in post
    code, out, _ = cli("list", "datasets")
    assert "adult" in out and "synthetic" in out
    code, out, _ = cli("list", "configs")
    assert "default" in out and "smoke" in out


@needs_adult
def test_data_check_verifies_present_files(cli):
    code, out, _ = cli("data", "check")
    assert code == 0
    line = next(ln for ln in out.splitlines() if "adult" in ln)
    assert "verified" in line and "48,842" in line and "106" in line


def test_data_check_flags_corrupted_files(cli, monkeypatch, adult_copy):
    (adult_copy / "adult" / "adult.test").write_text("garbage")
    monkeypatch.setenv("FAIRBENCH_DATA", str(adult_copy))
    code, out, _ = cli("data", "check")
    assert code == 1 and "corrupted" in out


def test_bench_json_reports_medians_and_ratios(cli, tmp_path):
    code, out, _ = cli("bench", "--json", "--rounds", "2", "--out", str(tmp_path))
    assert code == 0
    table = (tmp_path / "step_time.md").read_text()
    assert "| dp-sgd |" in table and "| 1.00 |" in table
    assert json.loads((tmp_path / "step_time.json").read_text()) == json.loads(out)
    result = json.loads(out)
    assert set(result["step_seconds"]) == {
        "erm",
        "dp-sgd",
        "dp-sgd[opacus]",
        "sgda",
        "raco-dp",
        "dp-fermi",
        "cgoo",
    }
    assert result["ratio_to_published"]["dp-fermi"] > 0
    assert result["ratio_to_dp_sgd"]["dp-sgd"] == 1.0
    assert all(t > 0 for t in result["step_seconds"].values())
    assert result["batch_size"] == 512


def test_list_json(cli):
    code, out, _ = cli("list", "methods", "--json")
    methods = {m["name"]: m for m in json.loads(out)}
    assert code == 0 and methods["raco-dp"] == {
        "name": "raco-dp",
        "description": methods["raco-dp"]["description"],
        "private": True,
        "knob": "gamma",
        "sensitive_at_test": False,
        "reconstructed": None,
    }
    assert methods["jagielski-post"]["sensitive_at_test"] and methods["erm"]["knob"] is None
    datasets = json.loads(cli("list", "datasets", "--json")[1])
    assert {"name": "synthetic", "description": datasets[-1]["description"]} in datasets
    configs = {c["name"]: c for c in json.loads(cli("list", "configs", "--json")[1])}
    assert configs["smoke"]["path"].endswith("runs/smoke.yaml")
    assert configs["privacy-cost-german"]["kind"] == "tune"


def test_data_check_json_is_one_object_per_file(cli, monkeypatch, adult_copy):
    (adult_copy / "adult" / "adult.test").write_text("garbage")
    monkeypatch.setenv("FAIRBENCH_DATA", str(adult_copy))
    code, out, _ = cli("data", "check", "--json")
    entries = json.loads(out)
    assert code == 1  # a present file does not verify
    adult = [
        (e["path"], e["present"], e["sha256_ok"], e["status"])
        for e in entries
        if e["dataset"] == "adult"
    ]
    assert adult == [
        ("adult/adult.data", True, True, "corrupted"),
        ("adult/adult.test", True, False, "corrupted"),
    ]
    german = [e for e in entries if e["dataset"] == "german"]
    assert [(e["present"], e["status"]) for e in german] == [(False, "missing")]
    assert "fairbench data fetch german" in german[0]["problem"]
    (synthetic,) = [e for e in entries if e["dataset"] == "synthetic"]
    assert synthetic["path"] is None and synthetic["status"] == "generated"


def test_report_json_lists_what_it_wrote(cli, tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(
        "name: tiny\ndatasets: [{name: synthetic, options: {n_rows: 400}}]\nseeds: 1\n"
        "methods: [{name: erm, hparams: {epochs: 1}}]\n"
    )
    run_dir = tmp_path / "run"
    assert cli("run", str(config), "--out", str(run_dir), "--quiet")[0] == 0
    code, out, _ = cli("report", str(run_dir), "--json")
    report = json.loads(out)
    assert code == 0 and report["n_trials"] == 1 and report["n_pareto_points"] >= 1
    assert report["trials_csv"] == str(run_dir / "trials.csv")
    assert report["n_figures"] == len(report["figures"]) and isinstance(report["warnings"], list)
    assert all((run_dir / p).exists() for p in report["figures"])
