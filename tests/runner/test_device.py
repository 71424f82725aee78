"""The device a trial runs on: resolved before specs are built, part of a non-CPU trial's id,
and `bench --device auto` falling back to the CPU with a note."""

from __future__ import annotations

import dataclasses
import json
import sys
import time

import pytest
import torch

import fairbench.workflows.bench as bench
from fairbench.datasets import get_dataset
from fairbench.runner.config import expand, parse_config
from fairbench.runner.trial import TrialSpec

ADULT = {"include_sensitive": False, "missing": "category", "sensitive": "sex"}
# two trials of the committed fig-adult-dp store (results/figures/fig-adult-dp/trials.csv)
STORED = {
    "00de7a72a2f1d524": TrialSpec(
        "adult",
        ADULT,
        "erm",
        "erm",
        {
            "batch_size": 256,
            "epochs": 20.0,
            "hidden": 32,
            "lr": 0.5,
            "model": "logistic",
            "weight_decay": 0.0,
        },
        "demographic_parity",
        None,
        None,
        1e-5,
        8,
        "cpu",
    ),
    "096fd7358762ae4f": TrialSpec(
        "adult",
        ADULT,
        "dp-sgd",
        "dp-sgd",
        {
            "batch_size": 512,
            "calibrate": "noise",
            "clip_norm": 1.0,
            "epochs": 20.0,
            "grad_engine": "auto",
            "hidden": 32,
            "lr": 1.0,
            "model": "logistic",
            "noise_multiplier": None,
        },
        "demographic_parity",
        None,
        9.0,
        1e-5,
        0,
        "cpu",
    ),
}
SMALL = {
    "name": "small",
    "datasets": [{"name": "synthetic", "options": {"n_rows": 800}}],
    "epsilons": [1.0],
    "seeds": 2,
    "methods": [{"name": "erm"}, {"name": "dp-sgd"}],
}
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


def test_cpu_trial_ids_are_unchanged_and_another_device_gets_its_own():
    for trial_id, spec in STORED.items():
        assert spec.trial_id == trial_id
        on_gpu = dataclasses.replace(spec, device="cuda")
        assert on_gpu.trial_id != trial_id
        assert on_gpu.trial_id == dataclasses.replace(spec, device="cuda").trial_id  # stable


def test_auto_is_resolved_before_the_specs_are_built(monkeypatch):
    cpu = expand(parse_config({**SMALL, "device": "cpu"}), warn=lambda _: None)
    auto = expand(parse_config({**SMALL, "device": "auto"}), warn=lambda _: None)
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: auto resolves to cuda")
    assert {s.device for s in auto} == {"cpu"}
    assert [s.trial_id for s in auto] == [s.trial_id for s in cpu]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a GPU machine
    gpu = expand(parse_config({**SMALL, "device": "auto"}), warn=lambda _: None)
    assert {s.device for s in gpu} == {"cuda"}
    assert not {s.trial_id for s in gpu} & {s.trial_id for s in cpu}


@pytest.fixture
def small_bench(monkeypatch):
    """`bench` on a synthetic task half Adult's size (enough planned steps for every method at
    epsilon 1; the step loop is the same as on Adult)."""
    task = get_dataset("synthetic", n_rows=24_000).load(0)
    monkeypatch.setattr(bench, "bench_task", lambda seed: (task, "synthetic"))


@no_cuda
def test_bench_device_auto_falls_back_to_the_cpu_with_a_note(cli, small_bench):
    code, out, err = cli("bench", "--device", "auto", "--json", "--rounds", "1")
    assert code == 0, err
    assert "note: --device auto" in err and "timing on the CPU" in err
    result = json.loads(out)  # the note is not in the JSON
    assert result["device"] == "cpu" and result["step_seconds"]["dp-sgd"] > 0


@no_cuda
@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("cuda", "error: device 'cuda' requested but no CUDA device is available; use cpu or auto"),
        ("tpu", "error: --device 'tpu': choose cpu, cuda or auto"),
    ],
)
def test_bench_refuses_a_device_it_cannot_use_in_one_line(cli, small_bench, device, message):
    code, out, err = cli("bench", "--device", device, "--rounds", "1")
    assert code == 2 and err.strip() == message and not out


@no_cuda
def test_bench_figure_refuses_cuda_without_one_in_one_line(cli, small_bench):
    code, out, err = cli("bench", "--figure", "smoke", "--device", "cuda", "--rounds", "1")
    assert code == 2 and not out
    assert err.strip() == (
        "error: device 'cuda' requested but no CUDA device is available; use cpu or auto"
    )


def test_gpu_utilisation_is_sampled_while_a_figure_runs(monkeypatch):
    """One reading a tick from nvidia-smi's CSV ("87 %, 1234 MiB"), averaged; a machine
    without nvidia-smi says the utilisation was not measured instead of inventing one."""
    fake = [sys.executable, "-c", "print('87 %, 1234 MiB'); print('5 %, 9 MiB')"]
    monkeypatch.setattr(bench.GpuUtilisation, "QUERY", fake)
    with bench.GpuUtilisation(interval=0.01) as gpu:
        while len(gpu.samples) < 3:
            time.sleep(0.01)
    summary = gpu.summary()
    assert summary["measured"] and summary["samples"] >= 3
    assert summary["mean_percent"] == 87.0 and summary["max_memory_mib"] == 1234.0

    monkeypatch.setattr(bench.GpuUtilisation, "QUERY", ["no-such-nvidia-smi"])
    with bench.GpuUtilisation(interval=0.01) as gpu:
        time.sleep(0.05)
    assert gpu.summary() == {"measured": False, "why": "nvidia-smi gave no reading"}


def test_bench_stack_sizes_fits_every_trial_in_programs_of_each_width(cli, monkeypatch):
    task = get_dataset("synthetic", n_rows=3_000).load(0)
    monkeypatch.setattr(bench, "bench_task", lambda seed: (task, "synthetic"))
    from fairbench.methods.base import Method

    programs: list[int] = []
    fit_stack = Method.fit_stack

    def spy(self, trials, *args):
        programs.append(len(trials))
        return fit_stack(self, trials, *args)

    monkeypatch.setattr(Method, "fit_stack", spy)
    code, out, _ = cli("bench", "--stack-sizes", "1,3", "--json")
    assert code == 0
    result = json.loads(out)
    assert result["trials"] == 3 and set(result["methods"]) == {"dp-sgd", "raco-dp"}
    for row in result["methods"].values():
        assert set(row["sizes"]) == {"1", "3"} and row["steps"] > 1
        for cell in row["sizes"].values():
            expected = cell["seconds"] / 3 / row["steps"] * 1e6
            assert cell["trial_step_us"] == pytest.approx(expected)
    # per method: the warm-up trial, then three programs of one and one of three
    assert programs == [1, 1, 1, 1, 3] * 2


@pytest.mark.parametrize("sizes", ["0,20", "1,x", ""])
def test_bench_refuses_malformed_stack_sizes_in_one_line(cli, sizes):
    code, _, err = cli("bench", "--stack-sizes", sizes)
    assert code != 0 and "--stack-sizes" in err and len(err.strip().splitlines()) == 1
