"""Pre-flight (calibration and warnings before anything is written), overrides, `--device`
and `--json` of `fairbench run`."""

import json

import pandas as pd
import pytest
import yaml

from fairbench.errors import CalibrationError, ConfigError
from fairbench.runner.config import expand, parse_config
from fairbench.runner.overrides import apply_overrides
from fairbench.runner.preflight import plan_at, preflight, smallest_feasible_epsilon
from tests.contract.test_bad_input import TINY, config


def specs_of(data):
    return expand(parse_config(data), warn=lambda _: None)


@pytest.mark.slow
def test_the_plan_states_the_steps_each_trial_then_runs(cli, tmp_path):
    data = {
        **TINY,
        "methods": [
            {"name": "dp-sgd", "hparams": {"epochs": 2, "batch_size": 64}},
            {"name": "erm", "hparams": {"epochs": 2, "batch_size": 100}},
        ],
    }
    code, out, _ = cli("run", config(tmp_path, data), "--dry-run", "--json")
    plan = {row["method"]: row for row in json.loads(out)["configs"]}
    assert code == 0 and not (tmp_path / "runs").exists()
    code, _, _ = cli("run", config(tmp_path, data), "--out", str(tmp_path / "r"), "--quiet")
    trials = pd.read_csv(tmp_path / "r" / "trials.csv").set_index("method")
    assert code == 0
    assert plan["dp-sgd"]["steps_per_trial"] == trials.loc["dp-sgd", "steps"]  # from the plan
    assert plan["erm"]["steps_per_trial"] == pytest.approx(trials.loc["erm", "steps"], rel=0.1)
    assert plan["dp-sgd"]["trials"] == 1 and plan["dp-sgd"]["epsilon"] == 1.0


@pytest.mark.slow
def test_the_smallest_feasible_epsilon_is_feasible_and_tight():
    data = {
        **TINY,
        "epsilons": [0.01],
        "methods": [{"name": "raco-dp", "knobs": [0.05], "hparams": {"epochs": 1}}],
    }
    spec = specs_of(data)[0]
    with pytest.raises(CalibrationError, match="calibrates from epsilon"):
        preflight([spec], [0])
    floor = smallest_feasible_epsilon(spec, 0.01)
    assert 0.01 < floor < 100
    plan_at(spec, floor)  # calibrates
    with pytest.raises(CalibrationError):
        plan_at(spec, floor * 0.98)


def test_warnings_name_delta_above_one_over_n_repeated_seeds_and_oversized_batches():
    data = {
        **TINY,
        "delta": 0.01,
        "seeds": [0, 0, 1],
        "methods": [{"name": "dp-sgd", "hparams": {"epochs": 1, "batch_size": 5000}}],
    }
    warnings = preflight(specs_of(data), parse_config(data).seed_list).warnings
    assert len(warnings) == 3
    assert "delta = 0.01 is not below 1/n" in warnings[1]
    assert "seeds [0] are listed more than once; each seed runs once (2 distinct" in warnings[0]
    assert "batch_size 5000 exceeds the" in warnings[2]


def test_overrides_name_entries_by_label_name_or_index():
    data = {"seeds": 10, "methods": ["erm", {"name": "dp-sgd", "label": "fast"}]}
    out = apply_overrides(
        data,
        [
            "seeds=3",
            "epsilons=[0.5, 1]",
            "methods.fast.knobs=[0.05]",
            "methods.erm.hparams.lr=0.1",
            "methods.1.hparams.epochs=2",
        ],
    )
    assert out == {
        "seeds": 3,
        "epsilons": [0.5, 1],
        "methods": [
            {"name": "erm", "hparams": {"lr": 0.1}},
            {"name": "dp-sgd", "label": "fast", "knobs": [0.05], "hparams": {"epochs": 2}},
        ],
    }
    assert data["methods"][0] == "erm"  # the input is left alone
    with pytest.raises(ConfigError, match="names several entries"):
        apply_overrides({"methods": ["erm", "erm"]}, ["methods.erm.knobs=[1]"])


@pytest.mark.slow
def test_overrides_and_device_are_recorded_in_the_run_config(cli, tmp_path):
    out = tmp_path / "r"
    data = {**TINY, "device": "auto"}
    code, stdout, _ = cli(
        "run",
        config(tmp_path, data),
        "seeds=[3]",
        "epsilons=[2]",
        "methods.dp-sgd.hparams.epochs=2",
        "--device",
        "cpu",
        "--out",
        str(out),
        "--json",
    )
    assert code == 0
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["seeds"] == [3] and saved["epsilons"] == [2.0] and saved["device"] == "cpu"
    dp_sgd = next(m for m in saved["methods"] if m["name"] == "dp-sgd")
    assert dp_sgd["hparams"]["epochs"] == 2
    summary = json.loads(stdout)
    assert summary["trials"] == summary["run"] == 2 and summary["failed"] == []
    assert summary["files"]["pareto"] == str(out / "pareto.csv")
    # `device: auto` is stored as the device used, and the same config resumes
    code, stdout, _ = cli(
        "run",
        config(tmp_path, data),
        "seeds=[3]",
        "epsilons=[2]",
        "methods.dp-sgd.hparams.epochs=2",
        "--resume",
        str(out),
        "--json",
    )
    assert code == 0 and json.loads(stdout)["already_done"] == 2


def test_a_rate_tolerance_of_one_or_more_is_named_as_never_binding():
    data = {
        **TINY,
        "epsilons": [2.0],
        "methods": [
            {"name": "raco-dp", "knobs": [0.05, 5], "hparams": {"epochs": 1, "batch_size": 64}},
            {"name": "dp-fermi", "knobs": [5], "hparams": {"epochs": 1, "batch_size": 64}},
        ],
    }
    warnings = preflight(specs_of(data), [0]).warnings
    assert warnings == [
        "method raco-dp: knob gamma = 5 never binds (demographic_parity compares rates in [0, 1]), "
        "so those trials run unconstrained; use values below 1"
    ]


def test_the_step_times_ship_with_the_package_as_the_committed_table():
    """Preflight's time estimates read the package's copy of the bench table (so a wheel
    install has them); `make table-step-time` refreshes both, and they never drift."""
    from pathlib import Path

    from fairbench.runner.preflight import STEP_TIMES, step_milliseconds

    committed = Path(__file__).resolve().parents[2] / "results/figures/table-step-time"
    assert STEP_TIMES.read_bytes() == (committed / "step_time.csv").read_bytes()
    times = step_milliseconds()
    assert {"dp-sgd", "raco-dp"} <= set(times) and all(ms > 0 for ms in times.values())
