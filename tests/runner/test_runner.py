"""The runner end to end through the real CLI entry point, on small generated data."""

import json
import sqlite3
import textwrap

import pandas as pd
import pytest
import torch
import yaml
from dp_accounting import dp_event as de
from dp_accounting.pld import pld_privacy_accountant

from fairbench.report.aggregate import ci95, dominated
from fairbench.runner.config import expand, parse_config

SMALL = {
    "name": "small",
    "datasets": [{"name": "synthetic", "options": {"n_rows": 800}}],
    "epsilons": [1.0, 4.0],
    "seeds": 2,
    "methods": [
        {"name": "erm", "hparams": {"epochs": 2}},
        {"name": "dp-sgd", "hparams": {"epochs": 2, "batch_size": 64}},
    ],
}


def write_config(tmp_path, data, name="exp.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if isinstance(data, dict) else data)
    return str(path)


def without_timing(rows):
    """Result rows keyed by trial, minus wall time and its split into phases (the only fields
    allowed to differ)."""
    out = {}
    for key, row in rows.items():
        record = {k: v for k, v in json.loads(row).items() if k != "wall_seconds"}
        record["info"] = {k: v for k, v in record["info"].items() if k != "phase_seconds"}
        out[key] = record
    return out


def _differing(a: dict, b: dict, prefix: str = "") -> dict:
    """The paths of the fields two result records disagree on, with both values."""
    out = {}
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            out.update(_differing(x, y, f"{prefix}{key}."))
        elif x != y:
            out[prefix + key] = (x, y)
    return out


def read_results(run_dir):
    with sqlite3.connect(run_dir / "results.sqlite") as db:
        return dict(db.execute("SELECT trial_id, result FROM trials WHERE status='done'"))


def test_grid_expansion_resolves_defaults_and_hashes_trials():
    specs = expand(parse_config(SMALL), warn=lambda _: None)
    assert len(specs) == 2 * 1 + 2 * 2  # erm: seeds; dp-sgd: seeds x epsilons
    dp = [s for s in specs if s.method == "dp-sgd"]
    assert dp[0].hparams["clip_norm"] == 1.0 and dp[0].hparams["batch_size"] == 64
    assert {s.epsilon for s in specs if s.method == "erm"} == {None}
    assert len({s.trial_id for s in specs}) == len(specs)
    again = expand(parse_config(SMALL), warn=lambda _: None)
    assert [s.trial_id for s in specs] == [s.trial_id for s in again]


def test_sweeps_and_knobs_validate():
    swept = {**SMALL, "methods": [{"name": "erm", "sweep": {"lr": [0.1, 0.5]}}]}
    specs = expand(parse_config(swept), warn=lambda _: None)
    assert sorted({s.hparams["lr"] for s in specs}) == [0.1, 0.5] and len(specs) == 4
    from fairbench.errors import ConfigError

    with pytest.raises(ConfigError, match="has no fairness knob"):
        expand(parse_config({**SMALL, "methods": [{"name": "erm", "knobs": [0.1]}]}))
    with pytest.raises(ConfigError, match="list target epsilons"):
        expand(parse_config({**SMALL, "epsilons": []}))


def test_trial_rows_hold_the_documented_columns_in_stored_order():
    """A row's fixed fields are the documented columns (the spec's among them, in its field
    order), and `to_record()`, what the store keeps, is those columns then `val_*`, `test_*`
    of the split metrics documented for the task: rate metrics (with `demographic_parity_ovr`
    beyond two groups), or the bounded group loss's."""
    from dataclasses import fields

    from fairbench.rundir.row import (
        COLUMNS,
        GROUP_LOSS_METRICS,
        RATE_METRICS,
        SPLITS,
        TRANSIENT,
        TrialRow,
        columns,
    )
    from fairbench.runner.trial import TrialSpec, run_trial

    names = tuple(f.name for f in fields(TrialRow))
    assert names[-len(TRANSIENT) :] == TRANSIENT and names[-3:-1] == SPLITS
    assert names[: -2 - len(TRANSIENT)] == COLUMNS
    # secure_noise (off by default) is no column: rows keep the sampler in info.noise_sampler
    spec_fields = tuple(f.name for f in fields(TrialSpec) if f.name != "secure_noise")
    assert COLUMNS[2 : 2 + len(spec_fields)] == spec_fields
    one = {**SMALL, "seeds": 1, "methods": [{"name": "erm", "hparams": {"epochs": 1}}]}
    three_groups = {"name": "synthetic", "options": {"n_rows": 600, "n_groups": 3}}
    cases = [
        (one, RATE_METRICS),
        ({**one, "datasets": [three_groups]}, (*RATE_METRICS, "demographic_parity_ovr")),
        ({**one, "constraint": "bounded_group_loss"}, GROUP_LOSS_METRICS),
        (
            {**one, "methods": [{"name": "sgda", "knobs": [0.05], "hparams": {"epochs": 1}}]},
            RATE_METRICS,
        ),
    ]
    for config, metrics in cases:
        (spec,) = expand(parse_config(config), warn=lambda _: None)
        row = run_trial(spec)
        assert list(row.to_record()) == columns(metrics)
        record = row.to_record()
        assert record["knob_name"] == {"erm": None, "sgda": "gamma"}[spec.method]  # a string
        assert record["val_error"] == row.val["error"] and record["test_error"] == row.test["error"]


def test_missing_data_falls_back_to_synthetic_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("FAIRBENCH_DATA", str(tmp_path))
    warnings = []
    config = {**SMALL, "datasets": [{"name": "adult", "if_missing": "synthetic"}, "synthetic"]}
    specs = expand(parse_config(config), warn=warnings.append)
    assert {s.dataset for s in specs} == {"synthetic"}
    assert len(specs) == 6  # the fallback coincides with the listed synthetic set: no duplicates
    assert "falling back to the synthetic dataset" in warnings[0]


@pytest.mark.slow
def test_run_writes_store_tables_and_figures_then_resumes(cli, tmp_path):
    out = tmp_path / "run"
    config = write_config(tmp_path, SMALL)
    code, stdout, _ = cli("run", config, "--out", str(out), "--workers", "1", "--quiet")
    assert code == 0, stdout
    assert "6 trials run, 0 already done, 0 failed" in stdout
    names = (
        "config.yaml",
        "results.sqlite",
        "trials.csv",
        "pareto.csv",
        "pareto.md",
        "constraints.csv",
        "constraint_values.csv",
        "constraints.md",
    )
    for name in names:
        assert (out / name).is_file()
    per_constraint = pd.read_csv(out / "constraint_values.csv")
    assert len(per_constraint) == 3 * 4  # (erm, dp-sgd at 2 epsilons) x 4 DP constraints
    assert (per_constraint["n_seeds"] == 2).all()
    assert len(pd.read_csv(out / "constraints.csv")) == 3  # satisfaction per point
    assert "\\|" in (out / "constraints.md").read_text()  # | in names escaped for tables
    assert (out / "figures" / "synthetic_demographic_parity_full.png").stat().st_size > 10_000
    pareto = pd.read_csv(out / "pareto.csv")
    required = {
        "dataset",
        "constraint",
        "method",
        "privacy_notion",
        "epsilon",
        "delta",
        "knob",
        "n_seeds",
        "test_error_mean",
        "test_error_ci95",
        "violation_mean",
        "violation_ci95",
        "on_frontier",
    }
    assert required <= set(pareto.columns)
    assert sorted(pareto["epsilon"]) == [1.0, 4.0, float("inf")]
    assert (pareto["n_seeds"] == 2).all()
    dp = pareto[pareto["method"] == "dp-sgd"]
    assert (dp["epsilon_spent_max"] <= dp["epsilon"]).all()
    assert set(pareto.loc[pareto["method"] == "erm", "privacy_notion"]) == {"non-private"}
    trials = pd.read_csv(out / "trials.csv")
    assert len(trials) == 6 and trials["ledger"].str.contains("PoissonSampledDpEvent").sum() == 4
    for _, row in trials[trials["method"] == "dp-sgd"].iterrows():
        # the recorded epsilon, recomputed from the mechanism's parameters without fairbench
        info = json.loads(row["info"])
        step = de.PoissonSampledDpEvent(
            info["sampling_rate"], de.GaussianDpEvent(info["noise_multiplier"])
        )
        accountant = pld_privacy_accountant.PLDAccountant()
        accountant.compose(step, info["steps"])
        assert row["epsilon_spent"] == pytest.approx(accountant.get_epsilon(row["delta"]), rel=1e-3)
        assert row["epsilon_spent"] <= row["epsilon"]

    first = read_results(out)
    code, stdout, _ = cli("run", config, "--out", str(out), "--workers", "1", "--quiet")
    assert code == 0 and "0 trials run, 6 already done" in stdout

    # a run killed part-way: drop three finished trials, resume, get identical numbers back
    with sqlite3.connect(out / "results.sqlite") as db:
        db.execute(
            "DELETE FROM trials WHERE trial_id IN "
            "(SELECT trial_id FROM trials ORDER BY trial_id LIMIT 3)"
        )
    code, stdout, _ = cli("run", "--resume", str(out), "--workers", "1", "--quiet")
    assert code == 0 and "3 trials run, 3 already done" in stdout
    resumed = read_results(out)
    assert without_timing(resumed) == without_timing(first)

    other = write_config(tmp_path, {**SMALL, "seeds": 3}, "other.yaml")
    code, _, stderr = cli("run", other, "--out", str(out), "--quiet")
    assert code == 2 and "holds a run of a different config" in stderr


@pytest.mark.slow
def test_worker_processes_give_the_same_numbers(cli, tmp_path):
    config = write_config(tmp_path, {**SMALL, "epsilons": [1.0]})
    for workers in ("1", "2"):
        code, _, _ = cli(
            "run", config, "--out", str(tmp_path / workers), "--workers", workers, "--quiet"
        )
        assert code == 0
    one = pd.read_csv(tmp_path / "1" / "trials.csv").set_index("trial_id").sort_index()
    two = pd.read_csv(tmp_path / "2" / "trials.csv").set_index("trial_id").sort_index()
    assert one["test_error"].equals(two["test_error"])
    assert one["epsilon_spent"].equals(two["epsilon_spent"])


BAD_CONFIGS = {
    "malformed YAML": ("name: x\nmethods: [erm\n", "malformed YAML"),
    "unknown key": ({**SMALL, "epsilonz": [1]}, "unknown config key 'epsilonz'; valid keys"),
    "unknown method key": (
        {**SMALL, "methods": [{"name": "erm", "hparam": {}}]},
        "unknown config key 'methods.0.hparam'; valid keys there: name, label, hparams",
    ),
    "unknown dataset": ({**SMALL, "datasets": ["adlt"]}, "unknown dataset 'adlt'"),
    "unknown method": ({**SMALL, "methods": ["dp_sgd"]}, "unknown method 'dp_sgd'"),
    "epsilon zero": ({**SMALL, "epsilons": [0.0]}, "epsilon must be a finite number > 0"),
    "epsilon negative": ({**SMALL, "epsilons": [-1]}, "epsilon must be a finite number > 0"),
    "delta one": ({**SMALL, "delta": 1.0}, "delta must lie strictly between 0 and 1"),
    "delta zero": ({**SMALL, "delta": 0}, "delta must lie strictly between 0 and 1"),
    "bad hparam": (
        {**SMALL, "methods": [{"name": "erm", "hparams": {"lr": "fast"}}]},
        "hyperparameter 'lr'",
    ),
    "bad constraint": ({**SMALL, "constraint": "parity"}, "unknown constraint 'parity'"),
    "bad device": ({**SMALL, "device": "tpu"}, "field 'device'"),
    "declared constraint, part outside": (
        {
            **SMALL,
            "constraint": {
                "name": "c",
                "partition": "group",
                "constraints": [{"name": "x", "terms": [{"parts": [5], "weights": [0, 1]}]}],
            },
        },
        "part 5 is outside the group partition",
    ),
    "declared constraint, weights": (
        {
            **SMALL,
            "constraint": {
                "name": "c",
                "partition": "label",
                "constraints": [{"name": "x", "terms": [{"parts": [1], "weights": [1]}]}],
            },
        },
        "1 weights given, the task has 2 classes",
    ),
    # a fairness knob outside its method's range, refused before any trial or run directory
    "raco-dp gamma < 0": (
        {**SMALL, "methods": [{"name": "raco-dp", "knobs": [0.05, -1]}]},
        "method raco-dp: knob gamma = -1 is outside its valid range [0, inf)",
    ),
    "dp-fermi lambda < 0": (
        {**SMALL, "methods": [{"name": "dp-fermi", "knobs": [-1]}]},
        "method dp-fermi: knob lambda = -1 is outside its valid range [0, inf)",
    ),
    "cgoo alpha 0": (
        {**SMALL, "methods": [{"name": "cgoo", "knobs": [0.0, 0.05]}]},
        "method cgoo: knob alpha = 0 is outside its valid range (0, inf)",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_bad_input_is_one_error_line_and_writes_nothing(cli, tmp_path, case):
    data, message = BAD_CONFIGS[case]
    out = tmp_path / "run"
    code, _, stderr = cli("run", write_config(tmp_path, data), "--out", str(out), "--quiet")
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], stderr
    assert not out.exists()


def test_missing_and_corrupted_data_are_refused_before_anything_is_written(
    cli, tmp_path, monkeypatch, adult_copy
):
    config = write_config(tmp_path, {**SMALL, "datasets": ["adult"]})
    out = tmp_path / "run"
    monkeypatch.setenv("FAIRBENCH_DATA", str(tmp_path / "empty"))
    code, _, stderr = cli("run", config, "--out", str(out), "--quiet")
    assert code == 2 and "missing data file" in stderr and str(tmp_path / "empty") in stderr
    assert "fairbench data fetch adult" in stderr and not out.exists()

    path = adult_copy / "adult" / "adult.data"
    path.write_text("\n".join(path.read_text().splitlines()[:-50]))  # truncated rows
    monkeypatch.setenv("FAIRBENCH_DATA", str(adult_copy))
    code, _, stderr = cli("run", config, "--out", str(out), "--quiet")
    assert code == 2 and "checksum mismatch" in stderr and not out.exists()


def test_pareto_helpers():
    errors = pd.Series([0.1, 0.2, 0.15]).to_numpy()
    violations = pd.Series([0.2, 0.05, 0.25]).to_numpy()
    assert dominated(errors, violations).tolist() == [False, False, True]
    assert ci95(pd.Series([1.0, 2.0, 3.0])) == pytest.approx(4.302652729911275 * 1 / 3**0.5)
    assert pd.isna(ci95(pd.Series([1.0])))


def test_report_needs_a_run_directory(cli, tmp_path):
    code, _, stderr = cli("report", str(tmp_path))
    assert code == 2 and "has no results store" in stderr
    code, _, stderr = cli("run", "--resume", str(tmp_path), "--quiet")
    assert code == 2 and "is not a run directory" in stderr
    assert textwrap.dedent(stderr).count("\n") == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_a_gpu_is_refused_up_front(cli, tmp_path):
    out = tmp_path / "run"
    code, _, stderr = cli(
        "run", write_config(tmp_path, {**SMALL, "device": "cuda"}), "--out", str(out), "--quiet"
    )
    assert code == 2 and "no CUDA device is available" in stderr and not out.exists()


def test_a_declared_constraint_runs_through_sgda_and_is_evaluated(cli, tmp_path):
    tpr_gap = {
        "name": "tpr_gap",
        "partition": "label_x_group",
        "constraints": [
            {
                "name": "tpr(1) - tpr(0)",
                "terms": [{"parts": [3], "weights": [0, 1]}, {"parts": [2], "weights": [0, -1]}],
            },
            {
                "name": "tpr(0) - tpr(1)",
                "terms": [{"parts": [2], "weights": [0, 1]}, {"parts": [3], "weights": [0, -1]}],
            },
        ],
    }
    config = {
        **SMALL,
        "constraint": tpr_gap,
        "epsilons": [],
        "seeds": 1,
        "methods": [{"name": "sgda", "hparams": {"epochs": 3}, "knobs": [0.1]}],
    }
    out = tmp_path / "run"
    code, stdout, _ = cli("run", write_config(tmp_path, config), "--out", str(out), "--quiet")
    assert code == 0, stdout
    trials = pd.read_csv(out / "trials.csv")
    (row,) = trials.to_dict("records")
    evaluated = json.loads(row["test_rate_constraints"])
    assert [c["name"] for c in evaluated] == ["tpr(1) - tpr(0)", "tpr(0) - tpr(1)"]
    assert evaluated[0]["value"] == pytest.approx(-evaluated[1]["value"])
    assert row["test_violation"] == pytest.approx(max(c["value"] for c in evaluated))
    assert row["constraint"] == "tpr_gap" and all(c["gamma"] == 0.1 for c in evaluated)


def test_dry_run_status_stamp_and_export(cli, tmp_path):
    out = tmp_path / "run"
    config = write_config(tmp_path, SMALL)
    code, stdout, _ = cli("run", config, "--out", str(out), "--dry-run")
    assert code == 0 and "6 trials, calibrated (dry run" in stdout and not out.exists()
    assert cli("run", config, "--out", str(out), "--workers", "1", "--quiet")[0] == 0

    rows = read_results(out)
    stamp = json.loads(next(iter(rows.values())))["stamp"]
    assert stamp["torch"] == torch.__version__ and stamp["device"] == "cpu"
    assert {"fairbench", "git_commit", "opacus", "dp-accounting", "numpy"} <= set(stamp)

    with sqlite3.connect(out / "results.sqlite") as db:  # one trial lost, one failed
        first, second = sorted(rows)[:2]
        db.execute("DELETE FROM trials WHERE trial_id = ?", (first,))
        db.execute(
            "UPDATE trials SET status='failed', result=NULL, error=? WHERE trial_id=?",
            ("Traceback ...\nValueError: boom", second),
        )
    code, stdout, _ = cli("status", str(out), "--json")
    status = json.loads(stdout)
    assert code == 0 and status["failures"] == [[second, "ValueError: boom"]]
    totals = {k: sum(p[k] for p in status["labels"]) for k in ("done", "failed", "pending")}
    assert totals == {"done": 4, "failed": 1, "pending": 1}
    code, stdout, _ = cli("run", config, "--out", str(out), "--dry-run")
    assert "already holds 4 of them done, 1 failed" in stdout

    code, stdout, _ = cli("export", str(out), "--format", "csv", "--out", str(tmp_path / "t.csv"))
    assert code == 0 and len(pd.read_csv(tmp_path / "t.csv")) == 4
    pytest.importorskip("pyarrow")
    code, stdout, _ = cli("export", str(out))
    table = pd.read_parquet(out / "trials.parquet")
    assert code == 0 and len(table) == 4 and set(table["method"]) <= {"erm", "dp-sgd"}
    assert table["epsilon_spent"].dtype == float
    assert json.loads(table["stamp"].iloc[0])["torch"] == torch.__version__


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_to_exactly_the_uninterrupted_trials(tmp_path):
    """A real `fairbench run` with two workers, SIGKILLed (with its workers) once a few trials
    are committed, then resumed: the same trial ids as an uninterrupted run, each once, and the
    same numbers."""
    import os
    import signal
    import subprocess
    import sys
    import time

    config = write_config(tmp_path, {**SMALL, "seeds": 3})  # 9 trials
    run = [sys.executable, "-m", "fairbench.cli", "run"]
    options = ["--workers", "2", "--quiet"]
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [*run, config, "--out", str(killed), *options],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
        try:  # the file can exist a moment before its table does
            if (killed / "results.sqlite").is_file() and 2 <= len(read_results(killed)) < 9:
                break
        except sqlite3.OperationalError:
            continue
    assert proc.poll() is None, "the run finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)  # the whole session: parent and worker processes
    proc.wait()
    interrupted = len(read_results(killed))
    assert 2 <= interrupted < 9
    subprocess.run([*run, "--resume", str(killed), *options], check=True, stdout=subprocess.DEVNULL)
    whole = tmp_path / "whole"
    subprocess.run(
        [*run, config, "--out", str(whole), "--workers", "1", "--quiet"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    with sqlite3.connect(killed / "results.sqlite") as db:
        ids = [r[0] for r in db.execute("SELECT trial_id FROM trials")]
    assert len(ids) == len(set(ids)) == 9
    assert without_timing(read_results(killed)) == without_timing(read_results(whole))


@pytest.mark.slow
def test_the_dask_executor_matches_the_local_one(cli, tmp_path):
    """A real local Dask cluster (two worker processes) runs the grid in batches; the rows
    equal the local executor's for the same seeds."""
    pytest.importorskip("distributed")
    config = write_config(tmp_path, SMALL)
    code, _, err = cli(
        "run",
        config,
        "--out",
        str(tmp_path / "dask"),
        "--executor",
        "dask",
        "--workers",
        "2",
        "--quiet",
    )
    assert code == 0, err
    assert cli("run", config, "--out", str(tmp_path / "local"), "--workers", "1", "--quiet")[0] == 0
    dask, local = (without_timing(read_results(tmp_path / d)) for d in ("dask", "local"))
    assert dask.keys() == local.keys()
    differ = {t: _differing(dask[t], local[t]) for t in dask if dask[t] != local[t]}
    assert not differ, differ
    code, _, err = cli("run", config, "--out", str(tmp_path / "x"), "--scheduler", "tcp://h:1")
    assert code == 2 and "--executor dask" in err


@pytest.fixture
def scheduler():
    """The address of a running Dask scheduler on loopback with two single-threaded workers
    (threads of this process: a cluster the run connects to, not one it starts)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        dashboard_address=None,
    ) as cluster:
        yield cluster.scheduler_address


TINY_TUNE = {
    "name": "tiny",
    "datasets": [{"name": "synthetic", "options": {"n_rows": 600}}],
    "epsilons": [2.0],
    "targets": [0.3],
    "draws": 2,
    "search_seeds": [100],
    "final_seeds": list(range(10)),
    "methods": [
        {"name": "dp-sgd", "hparams": {"epochs": 1, "batch_size": 64}, "space": {"lr": [0.1, 1]}}
    ],
}


def _on_scheduler_and_locally(cli, tmp_path, scheduler, *command: str):
    """`fairbench COMMAND` into tmp_path/dask through the scheduler and tmp_path/local with
    one local process."""
    dask = ("--executor", "dask", "--scheduler", scheduler)
    for where, extra in [("dask", dask), ("local", ("--workers", "1"))]:
        code, _, err = cli(*command, "--out", str(tmp_path / where), "--quiet", *extra)
        assert code == 0, err


def _assert_same_rows(dask_dir, local_dir):
    dask, local = (without_timing(read_results(d)) for d in (dask_dir, local_dir))
    assert dask.keys() == local.keys() and dask
    differ = {t: _differing(dask[t], local[t]) for t in dask if dask[t] != local[t]}
    assert not differ, differ


def test_a_run_on_a_running_scheduler_matches_the_local_executor(cli, tmp_path, scheduler):
    """`--executor dask --scheduler ADDRESS` sends the trials to an existing cluster; every
    row equals the local executor's."""
    config = write_config(tmp_path, {**SMALL, "seeds": 1})
    _on_scheduler_and_locally(cli, tmp_path, scheduler, "run", config)
    _assert_same_rows(tmp_path / "dask", tmp_path / "local")


@pytest.mark.slow
def test_a_tune_on_a_running_scheduler_matches_the_local_executor(
    cli, tmp_path, scheduler, monkeypatch
):
    """The same for `fairbench tune`: its search and every final run."""
    monkeypatch.setattr("fairbench.workflows.tune.write_report", lambda run_dir: None)
    config = write_config(tmp_path, TINY_TUNE, "tune.yaml")
    _on_scheduler_and_locally(cli, tmp_path, scheduler, "tune", config)
    finals = sorted(p.name for p in (tmp_path / "local" / "final").iterdir())
    assert finals
    for run_dir in ["search", *(f"final/{name}" for name in finals)]:
        _assert_same_rows(tmp_path / "dask" / run_dir, tmp_path / "local" / run_dir)


def test_an_unreachable_scheduler_is_one_error_line_and_nothing_written(cli, tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr("fairbench.runner.dask_executor.CONNECT_TIMEOUT_S", 1)
    config = write_config(tmp_path, SMALL)
    out = tmp_path / "x"
    for command in ("run", "tune"):
        target = config if command == "run" else write_config(tmp_path, TINY_TUNE, "tune.yaml")
        code, _, err = cli(
            command,
            target,
            "--out",
            str(out),
            "--executor",
            "dask",
            "--scheduler",
            "tcp://127.0.0.1:1",
        )
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "--scheduler tcp://127.0.0.1:1: Timed out trying to connect" in err
        assert not out.exists()


def test_bundles_cover_every_unit_once():
    from fairbench.runner.dask_executor import bundles

    units = [[i] for i in range(37)]
    parts = bundles(units, workers=2)
    assert [u for part in parts for u in part] == units and len(parts) == 8


def test_bench_times_a_whole_figure_and_splits_it_by_method(cli, tmp_path):
    config = tmp_path / "mini.yaml"
    config.write_text(
        "name: mini\ndatasets: [{name: synthetic, options: {n_rows: 600}}]\nepsilons: [2.0]\n"
        "seeds: 2\nmethods: [{name: erm}, {name: dp-sgd, hparams: {epochs: 1}}]\n"
    )
    code, out, err = cli(
        "bench",
        "--figure",
        str(config),
        "--workers",
        "1",
        "--json",
        "--rounds",
        "2",
        "--out",
        str(tmp_path / "timing"),
    )
    assert code == 0, err
    result = json.loads(out)
    assert (result["figure"], result["trials"], result["failed"]) == ("mini", 4, 0)
    assert {k: v["trials"] for k, v in result["methods"].items()} == {"erm": 2, "dp-sgd": 2}
    shares = sum(v["wall_seconds_share"] for v in result["methods"].values())
    assert shares == pytest.approx(result["wall_seconds"])
    assert json.loads((tmp_path / "timing" / "mini_time.json").read_text()) == result
    # the figure in DP-SGD steps timed in the same process, before and after it
    wall, step = result["wall_seconds"], result["dp_sgd_step_seconds"]
    assert step["mean"] == pytest.approx((step["before"] + step["after"]) / 2)
    assert min(step["before"], step["after"]) > 0
    assert result["wall_in_dp_sgd_steps"] == pytest.approx(wall / step["mean"])
    assert result["trials_per_second"] == pytest.approx(4 / wall)
    # the trials' phases: stored wall time = fit + accounting; all four within the run's wall
    phases = dict(result["trial_phases"])
    total = phases.pop("total")
    assert set(phases) == {"fit", "accounting", "data", "evaluation"}
    assert sum(p["seconds"] for p in phases.values()) == pytest.approx(total)
    assert sum(p["share"] for p in phases.values()) == pytest.approx(1.0)
    assert total <= wall * result["workers"]
    stored = sum(m["trial_seconds"] for m in result["methods"].values())
    assert stored == pytest.approx(phases["fit"]["seconds"] + phases["accounting"]["seconds"])
    # the process: one worker ran the trials here (no pool imports); the report was timed
    core = result["core_seconds"]
    assert core["total"] == pytest.approx(wall + result["report_seconds"])
    parts = {k: v["seconds"] for k, v in core.items() if k != "total"}
    assert sum(parts.values()) == pytest.approx(core["total"]) and parts["other"] >= 0
    assert parts["imports"] == 0 and result["import_seconds"] > 0
    assert parts["report"] == result["report_seconds"] > 0
