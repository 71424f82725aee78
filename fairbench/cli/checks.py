"""`fairbench check`, `bench` and `audit`: checks and measurements of the suite itself
(regressions against a baseline, timings, empirical privacy audits)."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from fairbench.cli.common import console, err_console, key_values
from fairbench.errors import ConfigError

if TYPE_CHECKING:
    from fairbench.methods.trial import Device


class Broken(str, Enum):
    """`--broken`: the deliberately broken copies of `fairbench.audit.whitebox.BROKEN`."""

    one_third_noise = "one-third-noise"
    no_clipping = "no-clipping"


def check(
    run_dir: Path,
    baseline: Annotated[Path | None, typer.Option(help="committed baseline JSON")] = None,
    write_baseline: Annotated[
        Path | None, typer.Option(help="write the run's summary as a new baseline instead")
    ] = None,
) -> None:
    """Compare a run with a baseline: Pareto error at fixed violation levels, constraint
    satisfaction, epsilon spent. Exit 1, listing each regression, if any exceeds tolerance."""
    from fairbench.report import regression
    from fairbench.rundir.store import finished_rows

    if (baseline is None) == (write_baseline is None):
        raise ConfigError("give exactly one of --baseline FILE (check) or --write-baseline FILE")
    rows = finished_rows(run_dir, "check")
    if write_baseline is not None:
        written = regression.write_baseline(rows, write_baseline, run_dir.name)
        console.print(f"baseline of {len(written['entries'])} series → {write_baseline}")
        return
    assert baseline is not None  # exactly one of the two is given (checked above)
    reference = regression.load_baseline(baseline)
    found = regression.compare(rows, reference)
    for item in found:
        console.print(f"REGRESSION {item}", highlight=False, markup=False, soft_wrap=True)
    console.print(
        f"{len(reference['entries'])} series checked against {baseline}: "
        f"{len(found)} regression(s)",
        soft_wrap=True,
    )
    if found:
        raise typer.Exit(1)


def bench(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    batch_size: int = 512,
    rounds: Annotated[int, typer.Option(min=1)] = 60,
    device: Annotated[str, typer.Option(help="cpu, cuda or auto (cuda when present)")] = "cpu",
    out: Annotated[
        Path | None, typer.Option(help="also write step_time.json/.csv/.md into this folder")
    ] = None,
    fits: Annotated[
        bool, typer.Option("--fits", help="also time one whole trial per method")
    ] = False,
    figure: Annotated[
        str | None, typer.Option(help="instead, time this figure config run from scratch")
    ] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="--figure: processes")] = None,
    keep_run: Annotated[
        Path | None, typer.Option(help="--figure: run into this new directory and keep it")
    ] = None,
    stacks: Annotated[
        str | None,
        typer.Option(
            help="instead, time this tune config's draws of dp-sgd and raco-dp at --epsilon as "
            "one program per draw and as one stacked program"
        ),
    ] = None,
    epsilon: Annotated[float, typer.Option(help="--stacks: the target epsilon")] = 1.0,
    draws: Annotated[int, typer.Option(min=1, help="--stacks: draws per method")] = 16,
    stack_sizes: Annotated[
        str | None,
        typer.Option(
            help="instead, fit max(SIZES) trials of dp-sgd and raco-dp in programs of each "
            "size (comma-separated, e.g. 1,20,200): seconds per trial-step by stack width"
        ),
    ] = None,
) -> None:
    """Median wall time per training step of each method, and ratios to DP-SGD; or, with
    --figure, the wall time of a whole figure run, in seconds and in DP-SGD steps timed in the
    same process (--rounds, --batch-size), and each method's and phase's share; or, with
    --stacks, what stacking a tune's draws into one program saves (`bench.stack_times`); or,
    with --stack-sizes, what a stack's width costs (`bench.stack_size_times`)."""
    from fairbench.workflows.bench import (
        fit_times,
        stack_size_times,
        stack_times,
        step_times,
        write_step_table,
    )

    if stack_sizes is not None:
        try:
            sizes = [int(size) for size in stack_sizes.split(",")]
        except ValueError:
            sizes = []
        if not sizes or min(sizes) < 1:
            raise ConfigError(
                f"--stack-sizes {stack_sizes!r}: give positive integers separated by commas, "
                "e.g. 1,20,200"
            )
        result = stack_size_times(sizes, batch_size, device=_bench_device(device))
        if as_json:
            print(json.dumps(result, indent=2))
            return
        for name, row in result["methods"].items():
            cells = ", ".join(
                f"{size}: {cell['seconds']:.1f} s ({cell['trial_step_us']:.0f} µs)"
                for size, cell in row["sizes"].items()
            )
            console.print(
                f"{name}: {result['trials']} trials of {row['steps']} steps on "
                f"{result['dataset']} ({result['device']}), by stack size: {cells}",
                highlight=False,
            )
        return
    if stacks is not None:
        result = stack_times(stacks, epsilon=epsilon, draws=draws)
        if as_json:
            print(json.dumps(result, indent=2))
            return
        for name, row in result["methods"].items():
            medians = row["median_seconds"]
            console.print(
                f"{name}: {row['draws']} draws of {stacks} at epsilon {epsilon} "
                f"({result['dataset']}, n_train {result['n_train']}): one program per draw "
                f"{medians['programs']:.2f} s, one stacked program {medians['stacked']:.2f} s "
                f"(median of {result['repeats']}), ratio {row['ratio']:.2f}",
                highlight=False,
            )
        return
    if figure is not None:
        _bench_figure(
            figure, out, workers, as_json, rounds, batch_size, keep_run, _bench_device(device)
        )
        return

    device = _bench_device(device)
    result = step_times(batch_size=batch_size, rounds=rounds, device=device)
    if fits:
        result["fit_seconds"] = fit_times(device=device)
    if out is not None:
        write_step_table(result, out)
    if as_json:
        print(json.dumps(result, indent=2))
        return
    table = Table(title=f"step time, {result['dataset']}, batch {batch_size}, {device}")
    for col in ("method", "median ms / step", "ratio to dp-sgd", "ratio to published code"):
        table.add_column(col)
    for name, seconds in result["step_seconds"].items():
        ratio = result["ratio_to_dp_sgd"][name]
        published = result["ratio_to_published"].get(name)
        table.add_row(
            escape(name),
            f"{seconds * 1e3:.3f}",
            f"{ratio:.2f}",
            "" if published is None else f"{published:.4f}",
        )
    console.print(table)
    for name, seconds in result.get("fit_seconds", {}).items():
        console.print(f"one {name} trial (defaults, ε = 1): {seconds:.1f} s")
    if result["ratio_to_published"]:
        console.print("published code: per-step times measured in the RaCO-DP paper (Table 2)")


def _bench_device(device: str) -> Device:
    """`--device` resolved to the device the steps run on: `auto` falls back to the CPU with
    a note (on stderr, so --json output stays JSON); `cuda` without one is a ConfigError."""
    import torch

    from fairbench.methods.trial import as_device, resolve_device

    requested = as_device(device, "--device")
    resolved = as_device(resolve_device(requested).type)
    if requested == "auto" and resolved == "cpu":
        why = "torch has no CUDA support" if torch.version.cuda is None else "no CUDA device"
        err_console.print(
            f"note: --device auto: {why} here, timing on the CPU",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    return resolved


def _bench_figure(
    figure: str,
    out: Path | None,
    workers: int | None,
    as_json: bool,
    rounds: int,
    batch: int,
    keep_run: Path | None,
    device: str,
) -> None:
    import tempfile

    from fairbench.runner.execute import default_workers
    from fairbench.workflows.bench import figure_time

    with tempfile.TemporaryDirectory() as scratch:
        run_dir = Path(scratch) / "run" if keep_run is None else keep_run
        result = figure_time(
            figure,
            run_dir,
            workers or default_workers(),
            step_rounds=rounds,
            batch_size=batch,
            device=device,  # type: ignore[arg-type]  # resolved: "cpu" or "cuda"
        )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{result['figure']}_time.json").write_text(json.dumps(result, indent=2) + "\n")
    if as_json:
        print(json.dumps(result, indent=2))
    else:
        _print_figure_time(result)
    if result["failed"]:
        raise ConfigError(
            f"{result['failed']} trial(s) of {figure} failed; the timing is not "
            "the figure's: fix them (see the run's failures) and time it again"
        )


def _print_figure_time(result: dict) -> None:
    wall = result["wall_seconds"]
    step = result["dp_sgd_step_seconds"]
    console.print(
        f"{result['figure']}: {result['trials']} trials ({result['failed']} failed) "
        f"in {wall:.1f} s ({wall / 60:.1f} min) on {result['workers']} workers, "
        f"{result['trials_per_second']:.2f} trials/s",
        soft_wrap=True,
    )
    if (gpu := result.get("gpu")) is not None:
        console.print(
            f"GPU utilisation {gpu['mean_percent']:.0f}% mean, {gpu['median_percent']:.0f}% "
            f"median over {gpu['samples']} s, at most {gpu['max_memory_mib']:.0f} MiB"
            if gpu["measured"]
            else f"GPU utilisation not measured: {gpu['why']}",
            soft_wrap=True,
        )
    console.print(
        f"DP-SGD step ({step['dataset']}, batch {step['batch_size']}, 1 thread): "
        f"{step['before'] * 1e3:.3f} ms before, {step['after'] * 1e3:.3f} ms after, "
        f"mean {step['mean'] * 1e3:.3f} ms: the figure costs "
        f"{result['wall_in_dp_sgd_steps']:,.0f} DP-SGD steps of wall time",
        soft_wrap=True,
    )
    core = result["core_seconds"]
    table = Table(title=f"where the time went ({result['workers']} workers x wall + report)")
    for col in ("phase", "core seconds", "share"):
        table.add_column(col)
    names = {
        "fit": "fit (steps, calibration)",
        "accounting": "accounting (after fit)",
        "data": "data",
        "evaluation": "evaluation",
        "imports": "imports (workers)",
        "report": "report",
        "other": "other (pool, store, idle)",
    }
    for phase, label in names.items():
        table.add_row(label, f"{core[phase]['seconds']:.1f}", f"{core[phase]['share']:.1%}")
    table.add_row("total", f"{core['total']:.1f}", "")
    console.print(table)
    table = Table(title="time per method")
    for col in ("method", "trials", "trial seconds (sum)", "wall minutes (share)", "accounting s"):
        table.add_column(col)
    for label, m in result["methods"].items():
        table.add_row(
            escape(label),
            str(m["trials"]),
            f"{m['trial_seconds']:.0f}",
            f"{m['wall_seconds_share'] / 60:.1f}",
            f"{m['phase_seconds']['accounting']:.1f}",
        )
    console.print(table)


def _check_knob(plugin, method: str, knob: float | None) -> None:
    """A method with a fairness knob is audited at one valid value of it, given by --knob."""
    if plugin.knob is None:
        return
    if knob is None:
        raise ConfigError(f"method {method} has a fairness knob ({plugin.knob.name}): give --knob")
    plugin.knob.validate(knob, method=method)


def audit(
    method: Annotated[str, typer.Option(help="a private method plugin")],
    epsilon: Annotated[float, typer.Option(help="the claimed epsilon the method is run at")],
    delta: Annotated[float, typer.Option(help="the claimed delta")] = 1e-5,
    trials: Annotated[int, typer.Option(min=1, help="training runs, each with its canaries")] = 10,
    canaries: Annotated[
        int, typer.Option(min=2, help="canaries per run, each included with probability 1/2")
    ] = 1000,
    knob: Annotated[float | None, typer.Option(help="fairness knob, for methods with one")] = None,
    constraint: Annotated[str, typer.Option(help="the constraint the method trains for")] = (
        "demographic_parity"
    ),
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help="hyperparameter (repeatable)"),
    ] = None,
    confidence: Annotated[float, typer.Option(min=0.5, max=0.999)] = 0.95,
    seed: int = 0,
    broken: Annotated[
        Broken | None,
        typer.Option(help="audit a deliberately broken copy instead: it must be flagged"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Empirical lower bound on a method's privacy loss: canaries seen by a white-box
    adversary in every gradient release. Exit 1 if the bound exceeds the claimed epsilon (the
    implementation leaks more) or, with --broken, if the broken copy is not flagged (the audit
    lacks the power to see that bug)."""
    import dataclasses

    from fairbench.audit.canary import audit as run_audit
    from fairbench.audit.canary import audit_method
    from fairbench.audit.whitebox import BROKEN
    from fairbench.methods import FairnessSpec
    from fairbench.privacy import PrivacyBudget

    PrivacyBudget(epsilon, delta)  # one clear error for a bad claim before any fit
    plugin = audit_method(method, key_values(set_, "--set", "batch_size=16"))
    _check_knob(plugin, method, knob)
    result = run_audit(
        plugin,
        epsilon,
        delta,
        FairnessSpec(constraint, knob),
        trials,
        canaries,
        confidence,
        seed=seed,
        broken=None if broken is None else next(b for b in BROKEN if b == broken.value),
    )
    name = method if broken is None else f"{method}, broken: {broken.value}"
    failed = result.flagged if broken is None else not result.flagged
    if as_json:
        record = {"name": name, **dataclasses.asdict(result), "flagged": result.flagged}
        print(json.dumps({"audit": record}))
    else:
        _print_audit(result, name)
    if failed:
        raise typer.Exit(1)


def _print_audit(r, name: str) -> None:
    if r.variant == "correct":
        verdict = "EXCEEDS the claim" if r.flagged else "consistent with the claim"
    else:
        verdict = (
            "flagged: the audit sees this bug"
            if r.flagged
            else "NOT flagged: raise --trials or --canaries"
        )
    console.print(
        f"{name} at claimed ε = {r.claimed_epsilon:g}, δ = {r.delta:g}: empirical lower bound "
        f"ε ≥ {r.epsilon_lower_bound:.3f} ({r.confidence:.0%} confidence; {r.correct} of "
        f"{r.guesses} guesses right on the test half of {r.trials} × {r.canaries} canaries; "
        f"{r.seconds:.0f} s): {verdict}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
