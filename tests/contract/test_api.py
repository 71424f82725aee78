"""The Python API: `fairbench.run` is the CLI's run, `load_run` reads any run directory, and
docs/api.md's example runs as written."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
import yaml

import fairbench
from fairbench.errors import CalibrationError, ConfigError, FairbenchError
from tests.conftest import REPO
from tests.runner.test_runner import SMALL, read_results, without_timing, write_config


@pytest.fixture(scope="module")
def small_run(tmp_path_factory) -> fairbench.Run:
    """SMALL (erm + DP-SGD at ε 1 and 4, two seeds) run once through the API."""
    return fairbench.run(SMALL, out=tmp_path_factory.mktemp("api") / "small")


def python_blocks(markdown: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", markdown, flags=re.DOTALL)


@pytest.mark.slow
def test_docs_example_runs_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks((REPO / "docs" / "api.md").read_text())
    assert len(blocks) >= 8
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/api.md", "exec"), namespace)
    run, tiny, again = namespace["run"], namespace["tiny"], namespace["again"]
    assert again.path == run.path == Path("runs/smoke")
    assert again.config["seeds"] == 2  # the override is what config.yaml records
    assert len(run.trials) == 2 + 2  # erm and DP-SGD at ε 1, two seeds each
    assert (tmp_path / "trade-off.png").stat().st_size > 10_000
    assert namespace["ax"].get_title() == "smoke, ε = 1"
    assert len(tiny.trials) == 2 + 2 * 2 and set(tiny.pareto["epsilon"]) == {1.0, 4.0, math.inf}
    assert again.html == Path("runs/smoke/report.html") and again.html.is_file()
    plt.close("all")


def test_run_is_the_cli_run(tmp_path, cli, small_run):
    code, _, err = cli(
        "run",
        write_config(tmp_path, SMALL),
        "--out",
        str(tmp_path / "cli"),
        "--workers",
        "1",
        "--quiet",
    )
    assert code == 0, err
    assert without_timing(read_results(small_run.path)) == without_timing(
        read_results(tmp_path / "cli")
    )
    ours, theirs = small_run.pareto, fairbench.load_run(tmp_path / "cli").pareto
    timing = ["wall_seconds_mean"]
    pd.testing.assert_frame_equal(ours.drop(columns=timing), theirs.drop(columns=timing))
    assert yaml.safe_load((tmp_path / "cli" / "config.yaml").read_text()) == small_run.config


def test_tables_are_the_report_files_and_trials_keep_python_values(small_run):
    for name in ("pareto", "paired", "constraints"):
        table = getattr(small_run, name)
        assert len(table) == len(pd.read_csv(small_run.path / f"{name}.csv")), name
    trials = small_run.trials
    assert list(trials.columns[:4]) == ["trial_id", "dataset", "constraint", "method"]
    assert len(trials) == 2 + 2 * 2 and isinstance(trials["hparams"].iloc[0], dict)
    dp = small_run.pareto.query("label == 'dp-sgd'")
    expected = trials[trials["label"] == "dp-sgd"].groupby("epsilon")["test_error"].mean()
    assert dp.set_index("epsilon")["test_error_mean"].to_dict() == pytest.approx(expected.to_dict())


def test_privacy_summary_and_ledger_are_the_accountants(small_run):
    trials = small_run.trials
    privacy = small_run.privacy.set_index(["label", "epsilon"])
    for eps in (1.0, 4.0):
        row = privacy.loc[("dp-sgd", eps)]
        spent = trials[(trials["label"] == "dp-sgd") & (trials["epsilon"] == eps)]["epsilon_spent"]
        assert row["trials"] == 2 and row["epsilon_spent_max"] == spent.max() <= eps + 1e-9
        assert row["releases"].startswith("dp-sgd: clipped gradient sum: Poisson-sampled Gaussian")
    assert privacy.loc[("erm", math.inf), "releases"] == ""
    trial = trials[(trials["label"] == "dp-sgd") & (trials["epsilon"] == 1.0)].iloc[0]
    ledger = small_run.ledger(trial["trial_id"])
    assert len(ledger) == 1
    release = ledger.iloc[0]
    assert release["mechanism"] == "Poisson-sampled Gaussian" and release["group"] is None
    assert release["rounds"] == trial["steps"] == trial["info"]["steps"]
    assert release["sampling_rate"] == trial["info"]["sampling_rate"]
    assert release["noise"] == {"σ": trial["info"]["noise_multiplier"]}
    with pytest.raises(ConfigError, match="no finished trial 'nope'"):
        small_run.ledger("nope")


def test_plot_draws_the_report_figure_and_checks_its_choices(small_run):
    fig = small_run.plot()
    assert [ax.get_title() for ax in fig.axes] == ["ε = 1", "ε = 4"]
    assert fig.axes[0].get_ylabel() == "test error"
    _, ax = plt.subplots()
    drawn = small_run.plot(ax=ax, epsilon=4.0)
    assert drawn is ax.figure and ax.get_title() == "ε = 4"
    labels = ax.get_legend_handles_labels()[1]
    assert "dp-sgd" in labels and "erm (non-private)" in labels
    with pytest.raises(ConfigError, match="pass epsilon= one of 1, 4"):
        small_run.plot(ax=ax)
    with pytest.raises(
        ConfigError, match="dataset='adult' is not in this run; choose one of: synthetic"
    ):
        small_run.plot(dataset="adult")
    with pytest.raises(ConfigError, match="epsilon=2: this run has 1, 4, inf"):
        small_run.plot(epsilon=2.0)
    plt.close("all")


def test_missing_or_stale_report_files_are_rewritten(small_run):
    (small_run.path / "paired.csv").unlink()
    paired = small_run.paired  # rewritten on access
    assert len(paired) == len(pd.read_csv(small_run.path / "paired.csv"))
    pareto = small_run.path / "pareto.csv"
    store = small_run.path / "results.sqlite"
    before = store.stat().st_mtime
    pareto.write_text(pareto.read_text().splitlines()[0] + "\n")  # header only: a stale file
    os.utime(pareto, (before - 10, before - 10))
    assert len(small_run.pareto) == 1 + 2  # erm (non-private), DP-SGD at two epsilons


def test_overrides_are_validated_and_recorded(tmp_path):
    run = fairbench.run(SMALL, out=tmp_path / "o", overrides=["epsilons=[2.0]", "seeds=[3]"])
    assert run.config["epsilons"] == [2.0] and run.config["seeds"] == [3]
    assert set(run.trials["seed"]) == {3}
    with pytest.raises(ConfigError, match="with overrides seeds=many: field 'seeds"):
        fairbench.run(SMALL, out=tmp_path / "bad", overrides=["seeds=many"])
    assert not (tmp_path / "bad").exists()


def test_bad_input_raises_one_fairbench_error_and_writes_nothing(tmp_path):
    with pytest.raises(ConfigError, match="config 'no-such-config' not found"):
        fairbench.run("no-such-config", out=tmp_path / "a")
    with pytest.raises(ConfigError, match="unknown config key 'epochs'"):
        fairbench.run({**SMALL, "epochs": 3}, out=tmp_path / "b")
    with pytest.raises(ConfigError, match="expected a YAML path, a bundled config name"):
        fairbench.run(42, out=tmp_path / "c")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(FairbenchError, match="is not a run directory"):
        fairbench.load_run(tmp_path)


@pytest.mark.slow
def test_preflight_runs_before_anything_is_written(tmp_path):
    raco = {"name": "raco-dp", "knobs": [0.05], "hparams": {"epochs": 1}}
    infeasible = {**SMALL, "epsilons": [0.01], "methods": [raco]}
    with pytest.raises(CalibrationError, match=r"raco-dp on synthetic at epsilon 0\.01"):
        fairbench.run(infeasible, out=tmp_path / "infeasible")
    assert not (tmp_path / "infeasible").exists()
    with pytest.warns(UserWarning, match=r"seeds \[0\] are listed more than once"):
        run = fairbench.run({**SMALL, "epsilons": [4.0], "seeds": [0, 0]}, out=tmp_path / "dup")
    assert set(run.trials["seed"]) == {0}


def test_load_run_reads_committed_results_without_a_store(tmp_path):
    committed = REPO / "results" / "figures" / "fig-adult-dp"
    for name in ("config.yaml", "trials.csv", "pareto.csv"):  # what a clone holds, no store
        shutil.copy(committed / name, tmp_path / name)
    run = fairbench.load_run(tmp_path)
    assert len(run.trials) == 540 and run.config["name"] == "fig-adult-dp"
    assert run.pareto.equals(
        pd.read_csv(committed / "pareto.csv", dtype={"knob_values": str}).fillna(
            {"knob_values": ""}
        )
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "pareto.csv", "trials.csv"]


def test_import_fairbench_stays_light():
    code = (
        "import sys, fairbench; heavy = {'pandas', 'torch', 'matplotlib'} & set(sys.modules);"
        " print(json.dumps(sorted(heavy)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", "import json; " + code],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    assert json.loads(out.stdout) == []
    assert callable(fairbench.run) and fairbench.Run.__name__ == "Run"
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        fairbench.nope  # noqa: B018
