"""Per-step timing of method plugins, measured in one process so ratios are meaningful.

Each method's `stepper` runs exactly the code its `fit` runs (batch sampling included).
Methods are timed in interleaved rounds of a few steps each, so drift in machine load hits all
of them alike; the reported figure is the median over rounds of the mean step time.
`figure_time` times a whole figure run from scratch through the runner, in seconds and in DP-SGD
steps measured in the same process, with each method's and each phase's share.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import torch

from fairbench.datasets import get_dataset
from fairbench.errors import DataError
from fairbench.methods import FairnessSpec, get_method
from fairbench.methods.trial import Device, as_device, resolve_device
from fairbench.privacy import PrivacyBudget
from fairbench.task import Task

# (report name, method, extra hyperparameters): the opacus row shows what the fast path saves.
DEFAULT_ENTRIES: list[tuple[str, str, dict[str, Any]]] = [
    ("erm", "erm", {}),
    ("dp-sgd", "dp-sgd", {}),
    ("dp-sgd[opacus]", "dp-sgd", {"grad_engine": "opacus"}),
    ("sgda", "sgda", {}),
    ("raco-dp", "raco-dp", {}),
    ("dp-fermi", "dp-fermi", {}),
    ("cgoo", "cgoo", {}),  # one oracle step (its counts are released once per iteration)
]

# Per-step times the RaCO-DP paper (Table 2) measured for the methods' public code, in
# seconds: a yardstick for how this suite's implementations compare.
PUBLISHED_STEP_SECONDS = {"dp-fermi": 0.085}


def bench_task(seed: int) -> tuple[Task, str]:
    """(task, dataset name): real Adult, or a generated task of similar size without it."""
    try:
        return get_dataset("adult").load(seed), "adult"
    except DataError:
        return get_dataset("synthetic", n_rows=40_000).load(seed), "synthetic"


def step_times(
    entries: list[tuple[str, str, dict[str, Any]]] = DEFAULT_ENTRIES,
    batch_size: int = 512,
    rounds: int = 60,
    steps_per_round: int = 10,
    device: Device = "cpu",
    seed: int = 0,
) -> dict[str, Any]:
    """Median seconds per training step for each entry, on Adult (synthetic if absent), on
    `device` (`auto`: CUDA when present, else the CPU)."""
    device = as_device(resolve_device(device).type)
    task, dataset = bench_task(seed)
    budget = PrivacyBudget(1.0)
    steppers = {}
    for label, name, extra in entries:
        method = get_method(name, batch_size=batch_size, **extra)
        steppers[label] = method.stepper(task, budget if method.private else None, seed, device)
    samples: dict[str, list[float]] = {label: [] for label in steppers}
    for round_ in range(rounds + 2):  # two warm-up rounds, discarded
        for label, step in steppers.items():
            start = time.perf_counter()
            for _ in range(steps_per_round):
                step()
            if device == "cuda":
                torch.cuda.synchronize()
            if round_ >= 2:
                samples[label].append((time.perf_counter() - start) / steps_per_round)
    medians = {label: statistics.median(s) for label, s in samples.items()}
    return {
        "step_seconds": medians,
        "ratio_to_dp_sgd": {label: t / medians["dp-sgd"] for label, t in medians.items()},
        "ratio_to_published": {
            label: medians[label] / seconds
            for label, seconds in PUBLISHED_STEP_SECONDS.items()
            if label in medians
        },
        "dataset": dataset,
        "n_train": len(task.train),
        "batch_size": batch_size,
        "rounds": rounds,
        "steps_per_round": steps_per_round,
        "device": device,
        "torch_threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
    }


# (method, fairness spec) for whole-trial timings: each method at its defaults, at ε = 1
FIT_ENTRIES: list[tuple[str, FairnessSpec]] = [
    ("erm", FairnessSpec("demographic_parity")),
    ("dp-sgd", FairnessSpec("demographic_parity")),
    ("raco-dp", FairnessSpec("demographic_parity", 0.05)),
    ("dp-fermi", FairnessSpec("demographic_parity", 4.0)),
    ("cgoo", FairnessSpec("demographic_parity", 0.05)),
]


def fit_times(seed: int = 0, device: Device = "cpu") -> dict[str, float]:
    """Wall seconds of one whole `fit` per method with its default hyperparameters on Adult
    (synthetic if absent), calibration included: what a trial costs."""
    device = as_device(resolve_device(device).type)
    task, _ = bench_task(seed)
    out = {}
    for name, fairness in FIT_ENTRIES:
        method = get_method(name)
        start = time.perf_counter()
        method.fit(task, PrivacyBudget(1.0) if method.private else None, fairness, seed, device)
        if device == "cuda":
            torch.cuda.synchronize()
        out[name] = time.perf_counter() - start
    return out


def write_step_table(result: dict[str, Any], folder: Path) -> None:
    """The RaCO-DP Table 2 analogue: step_time.json (everything measured), .csv and .md."""
    from fairbench.report.document import Document, Table

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "step_time.json").write_text(json.dumps(result, indent=2) + "\n")
    rows = [
        {
            "method": name,
            "ms_per_step": seconds * 1e3,
            "ratio_to_dp_sgd": result["ratio_to_dp_sgd"][name],
            "ratio_to_published": result["ratio_to_published"].get(name),
        }
        for name, seconds in result["step_seconds"].items()
    ]
    pd.DataFrame(rows).to_csv(folder / "step_time.csv", index=False)
    doc = Document().heading(
        1,
        f"Per-step time ({result['dataset']}, {result['n_train']} training rows, batch "
        f"{result['batch_size']}, {result['device']}, {result['torch_threads']} threads)",
    )
    doc.add(
        f"Median over {result['rounds']} interleaved rounds of "
        f"{result['steps_per_round']} steps, one process. Published: the RaCO-DP paper's "
        "Table 2 time for the method's public code.",
        Table(
            ["method", "ms / step", "ratio to dp-sgd", "ratio to published code"],
            [
                [
                    row["method"],
                    f"{row['ms_per_step']:.3f}",
                    f"{row['ratio_to_dp_sgd']:.2f}",
                    "" if row["ratio_to_published"] is None else f"{row['ratio_to_published']:.4f}",
                ]
                for row in rows
            ],
            "lrrr",
        ),
    )
    if "fit_seconds" in result:
        doc.add(
            "Whole trial (one `fit` at the method's defaults, ε = 1, calibration included):",
            Table(
                ["method", "seconds"],
                [[name, f"{s:.1f}"] for name, s in result["fit_seconds"].items()],
                "lr",
            ),
        )
    (folder / "step_time.md").write_text(doc.markdown())


TRIAL_PHASES = ("fit", "accounting", "data", "evaluation")  # `info["phase_seconds"]` of a row


def import_seconds(module: str = "fairbench.runner.trial") -> float:
    """Wall seconds a fresh interpreter takes to start and import `module` (torch and every
    built-in method included): what each worker process of a run pays before its first trial."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", f"import {module}"], check=True, capture_output=True)
    return time.perf_counter() - start


def dp_sgd_step_seconds(batch_size: int = 512, rounds: int = 60) -> dict[str, Any]:
    """`step_times` of DP-SGD alone, with one torch thread as the run's workers have: the unit
    a figure's wall time is expressed in."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = step_times([("dp-sgd", "dp-sgd", {})], batch_size=batch_size, rounds=rounds)
    finally:
        torch.set_num_threads(threads)
    return {"seconds": result["step_seconds"]["dp-sgd"], "dataset": result["dataset"]}


class GpuUtilisation:
    """Samples the GPU's utilisation and memory (`nvidia-smi`, once a second, in a thread)
    while a figure runs on CUDA: whether its stacks keep the device busy."""

    QUERY: ClassVar[list[str]] = [
        "nvidia-smi",
        "--query-gpu=utilization.gpu,memory.used",
        "--format=csv,noheader",
    ]

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(self.QUERY, capture_output=True, text=True, timeout=10)
                first = out.stdout.splitlines()[0]  # the first GPU: the one torch uses
                util, memory = (float(v.split()[0]) for v in first.split(","))
                self.samples.append((util, memory))
            except (OSError, subprocess.SubprocessError, IndexError, ValueError):
                return  # no nvidia-smi: the summary says so
            self._stop.wait(self.interval)

    def __enter__(self) -> GpuUtilisation:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, Any]:
        if not self.samples:
            return {"measured": False, "why": "nvidia-smi gave no reading"}
        util = [u for u, _ in self.samples]
        return {
            "measured": True,
            "samples": len(util),
            "mean_percent": statistics.fmean(util),
            "median_percent": statistics.median(util),
            "max_memory_mib": max(m for _, m in self.samples),
        }


def figure_time(
    config_name: str,
    run_dir: Path,
    workers: int,
    step_rounds: int = 60,
    batch_size: int = 512,
    device: Device = "cpu",
) -> dict[str, Any]:
    """Wall time of a whole figure run from scratch (`run_dir` must not hold one), in seconds
    and in DP-SGD steps, with where it went.

    In one process: the DP-SGD step time (`dp_sgd_step_seconds`) just before and just after
    the trials run, so `wall_in_dp_sgd_steps` (wall / their mean) compares runs across
    machines and load; trials per second; each method's share (the sum of its trials' stored
    seconds, fit and accounting, and the wall time attributed to it in proportion, as workers
    run trials of all methods side by side); `trial_phases`, the summed seconds of every
    trial's phases (`info["phase_seconds"]`: fit, i.e. the steps and calibration,
    accounting, data, evaluation) and their shares; `core_seconds`, the run's
    workers x wall plus the report, split into those phases, the workers' imports (a fresh
    interpreter's `import_seconds` per pool process; none when trials run in this process)
    and writing the report (`fairbench run` writes it after the trials), the rest `other`
    (pool start-up, moving results, the store, workers idle at the tail). On `device`
    "cuda" the trials run there (the DP-SGD unit stays the CPU's) and `gpu` reports the
    device's utilisation while they ran (`GpuUtilisation`).
    """
    from fairbench.errors import ConfigError
    from fairbench.report import write_report
    from fairbench.rundir.store import finished_rows
    from fairbench.runner.config import load_config
    from fairbench.runner.execute import execute, prepare_run

    if run_dir.exists() and any(run_dir.iterdir()):
        raise ConfigError(f"{run_dir} is not empty; a figure is timed from scratch")
    config = load_config(config_name, [f"device={device}"])
    before = dp_sgd_step_seconds(batch_size, step_rounds)
    start = time.perf_counter()
    specs = prepare_run(config, run_dir, warn=lambda _: None)
    gpu = GpuUtilisation() if device == "cuda" else None
    with gpu or contextlib.nullcontext():
        summary = execute(specs, run_dir, workers, True)
    wall = time.perf_counter() - start
    after = dp_sgd_step_seconds(batch_size, step_rounds)
    rows = pd.DataFrame(finished_rows(run_dir, "time")) if summary.done else pd.DataFrame()
    report = None
    if summary.done:
        start = time.perf_counter()
        write_report(run_dir)
        report = time.perf_counter() - start
    imports = import_seconds()
    pool = workers > 1 and len(specs) > 1  # else the trials ran in this process
    step = (before["seconds"] + after["seconds"]) / 2

    phases = {p: 0.0 for p in TRIAL_PHASES}
    methods: dict[str, Any] = {}
    if len(rows):
        split = rows["info"].map(lambda info: info["phase_seconds"]).apply(pd.Series)
        phases = {p: float(split[p].sum()) for p in TRIAL_PHASES}
        per_label = rows.groupby("label")["wall_seconds"].agg(["count", "sum"])
        total = float(per_label["sum"].sum())
        for label, r in per_label.sort_values("sum", ascending=False).iterrows():
            mine = split[rows["label"] == label].sum()
            methods[label] = {
                "trials": int(r["count"]),
                "trial_seconds": float(r["sum"]),
                "wall_seconds_share": wall * float(r["sum"]) / total,
                "phase_seconds": {p: float(mine[p]) for p in TRIAL_PHASES},
            }
    trial_total = sum(phases.values())
    core = {**phases, "imports": imports * workers if pool else 0.0, "report": report or 0.0}
    core_total = workers * wall + (report or 0.0)
    core["other"] = core_total - sum(core.values())
    return {
        "figure": config.name,
        "device": device,
        "trials": len(rows),
        "failed": len(summary.failed),
        "workers": workers,
        "wall_seconds": wall,
        "trials_per_second": len(rows) / wall,
        "dp_sgd_step_seconds": {
            "before": before["seconds"],
            "after": after["seconds"],
            "mean": step,
            "dataset": before["dataset"],
            "batch_size": batch_size,
            "rounds": step_rounds,
            "torch_threads": 1,
        },
        "wall_in_dp_sgd_steps": wall / step,
        "trial_phases": {
            "total": trial_total,
            **{
                p: {"seconds": s, "share": s / trial_total if trial_total else 0.0}
                for p, s in phases.items()
            },
        },
        "import_seconds": imports,
        "report_seconds": report,
        "core_seconds": {
            "total": core_total,
            **{p: {"seconds": s, "share": s / core_total} for p, s in core.items()},
        },
        "methods": methods,
        "gpu": None if gpu is None else gpu.summary(),
    }


def stack_times(
    tune: str,
    methods: tuple[str, ...] = ("dp-sgd", "raco-dp"),
    epsilon: float = 1.0,
    draws: int = 16,
    repeats: int = 3,
) -> dict[str, Any]:
    """What stacks across configurations save: each method's first `draws` draws of the
    tune config's space, at `epsilon` on its first dataset and search seed, fitted as one
    program per draw and as one stacked program (`Method.mixed`), alternately `repeats`
    times in this process; the median wall seconds of each and their ratio. Calibration is
    cached before timing (both pay the same cached planning), so the times are training's.
    A draw that cannot be calibrated at `epsilon` is left out of both."""
    from fairbench.methods.trial import Trial
    from fairbench.privacy.session import PrivacySession
    from fairbench.runner.config import expand
    from fairbench.runner.trial import load_task
    from fairbench.runner.worker import plan_refusal
    from fairbench.workflows.tune import load_tune_config, sample_configurations, search_config

    config = load_tune_config(tune)
    seed = config.search_seeds[0]
    specs = [
        s
        for s in expand(search_config(config, sample_configurations(config, draws)), lambda _: None)
        if s.method in methods and s.epsilon == epsilon and s.seed == seed
    ]
    first = specs[0]
    out: dict[str, Any] = {
        "tune": tune,
        "dataset": first.dataset,
        "n_train": len(load_task(first).train),
        "epsilon": epsilon,
        "seed": seed,
        "repeats": repeats,
        "methods": {},
    }
    for name in methods:
        mine = [s for s in specs if s.method == name and plan_refusal(s) is None]
        configured = [get_method(s.method, **s.hparams) for s in mine]

        def trials(mine=mine) -> list[Trial]:
            return [
                Trial(
                    load_task(s),
                    FairnessSpec(s.constraint, s.knob, s.constraint_definition),
                    PrivacySession(s.seed, budget=PrivacyBudget(epsilon, s.delta)),
                )
                for s in mine
            ]

        def alone(configured=configured, trials=trials) -> list[Any]:
            return [m.fit_stack([t])[0] for m, t in zip(configured, trials(), strict=True)]

        def stacked(configured=configured, trials=trials) -> list[Any]:
            return configured[0].fit_stack(trials(), configured)

        seconds: dict[str, list[float]] = {"programs": [], "stacked": []}
        for _ in range(repeats):
            for kind, fit in (("programs", alone), ("stacked", stacked)):
                began = time.perf_counter()
                fits = fit()
                seconds[kind].append(time.perf_counter() - began)
        medians = {kind: statistics.median(times) for kind, times in seconds.items()}
        out["methods"][name] = {
            "draws": len(mine),
            "infeasible_draws": draws - len(mine),
            "steps": [f.budget.steps for f in fits],
            "seconds": seconds,
            "median_seconds": medians,
            "ratio": medians["programs"] / medians["stacked"],
        }
    return out


# method -> hyperparameters that fix its step count (raco-dp's default solves steps for sigma)
STACK_SIZE_ENTRIES: dict[str, dict[str, Any]] = {"dp-sgd": {}, "raco-dp": {"calibrate": "noise"}}


def stack_size_times(
    sizes: list[int],
    batch_size: int = 512,
    epochs: float = 1.0,
    device: Device = "cpu",
    seed: int = 0,
) -> dict[str, Any]:
    """What a stack's width costs on this device: N = max(sizes) trials of each method (one
    split, session seeds 0..N-1, ε = 1, the method's typical knob) fitted whole in programs
    of each size, in this process; wall seconds and microseconds per trial-step. A round
    gathers T·B rows, so past some width a stack's rows leave the caches."""
    from fairbench.methods.trial import Trial
    from fairbench.privacy.session import PrivacySession

    device = as_device(resolve_device(device).type)
    task, dataset = bench_task(seed)
    count = max(sizes)
    out: dict[str, Any] = {"dataset": dataset, "trials": count, "batch_size": batch_size}
    out["device"], out["methods"] = device, {}
    for name, extra in STACK_SIZE_ENTRIES.items():
        method = get_method(name, batch_size=batch_size, epochs=epochs, **extra)
        knob = None if method.knob is None else method.knob.typical

        def trials(seeds: range, method=method, knob=knob) -> list[Trial]:
            return [
                Trial(
                    task,
                    FairnessSpec("demographic_parity", knob),
                    PrivacySession(s, resolve_device(device), PrivacyBudget(1.0)),
                )
                for s in seeds
            ]

        steps = method.fit_stack(trials(range(1)))[0].budget.steps  # warm: calibration cached
        rows = {}
        for size in sizes:
            began = time.perf_counter()
            for first in range(0, count, size):
                method.fit_stack(trials(range(first, min(first + size, count))))
            if device == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - began
            rows[str(size)] = {"seconds": seconds, "trial_step_us": seconds / count / steps * 1e6}
        out["methods"][name] = {"steps": steps, "sizes": rows}
    return out
