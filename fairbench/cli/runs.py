"""`fairbench run`, `status`, `export` and `report`: a run directory, from grid to report."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fairbench.cli.common import (
    Executor,
    ExecutorOption,
    SchedulerOption,
    check_executor,
    console,
    err_console,
)
from fairbench.errors import ConfigError


class DeviceChoice(str, Enum):
    cpu = "cpu"
    cuda = "cuda"
    auto = "auto"


def run(
    config: Annotated[
        str | None, typer.Argument(help="YAML path or bundled config name [default: default]")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Argument(
            help="KEY=VALUE overrides, e.g. epsilons=[0.5,1] seeds=3 methods.raco-dp.knobs=[0.05]",
            show_default=False,
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="run directory (default runs/NAME)")] = None,
    resume: Annotated[Path | None, typer.Option(help="continue the run in this directory")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="processes (default: cores)")] = None,
    device: Annotated[
        DeviceChoice | None,
        typer.Option(help="overrides the config's device; the run records the one used"),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress output")] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="check and calibrate, print the plan; write nothing")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the outcome as JSON")] = False,
    executor: ExecutorOption = Executor.local,
    scheduler: SchedulerOption = None,
) -> None:
    """Run an experiment grid into a run directory, then write its report.

    Everything is checked before anything is written: the config, the data files, and every
    private configuration's calibration at its epsilon (`--dry-run` stops there and prints
    the plan)."""
    from fairbench.runner.config import expand
    from fairbench.runner.execute import default_workers
    from fairbench.runner.preflight import preflight
    from fairbench.workflows.experiment import run_experiment

    experiment, run_dir = _experiment(config, overrides or [], resume, out, device)
    check_executor(executor, scheduler)
    warnings: list[str] = []

    def warn(message: str) -> None:
        warnings.append(message.removeprefix("warning: "))
        err_console.print(f"warning: {warnings[-1]}", soft_wrap=True, highlight=False)

    if dry_run:
        specs = expand(experiment, warn=warn)
        plan = preflight(specs, experiment.seed_list)
        for message in plan.warnings:
            warn(message)
        _print_plan(plan, specs, experiment.name, run_dir, as_json)
        return
    outcome = run_experiment(
        experiment,
        run_dir,
        workers or default_workers(),
        quiet or as_json,
        executor.value,
        scheduler,
        warn,
    )
    summary, report = outcome.summary, outcome.report
    if as_json:
        print(json.dumps(_run_json(run_dir, summary, report, warnings), indent=1))
    else:
        console.print(
            f"{summary.done} trials run, {summary.skipped} already done, "
            f"{len(summary.failed)} failed → {run_dir}"
        )
        _print_report(report)
    if summary.failed:
        for trial_id, error in summary.failed:
            err_console.print(f"failed trial {trial_id}: {error.splitlines()[-1]}")
        raise typer.Exit(1)


def _experiment(
    config: str | None,
    overrides: list[str],
    resume: Path | None,
    out: Path | None,
    device: DeviceChoice | None,
):
    """The config to run and its directory. With `--resume`, the run's saved config, or the
    one given (which `prepare_run` then refuses, naming the keys, unless it is the same)."""
    from fairbench.runner.config import load_config, parse_config
    from fairbench.runner.execute import load_run_config
    from fairbench.runner.overrides import apply_overrides

    if config is not None and "=" in config and not Path(config).exists():
        overrides = [config, *overrides]  # `fairbench run seeds=3`
        config = None
    if device is not None:
        overrides = [*overrides, f"device={device.value}"]
    if resume is None:
        experiment = load_config(config or "default", overrides)
        return experiment, out or Path("runs") / experiment.name
    if out is not None and out != resume:
        raise ConfigError("--resume names the run directory; drop --out (or give the same path)")
    if config is not None:
        return load_config(config, overrides), resume
    saved = load_run_config(resume)
    if not overrides:
        return saved, resume
    data = apply_overrides(saved.model_dump(), overrides)
    return parse_config(data, f"{resume} with overrides {' '.join(overrides)}"), resume


def _run_json(run_dir: Path, summary, report, warnings: list[str]) -> dict:
    return {
        "run_dir": str(run_dir),
        "trials": summary.total,
        "run": summary.done,
        "already_done": summary.skipped,
        "failed": [{"trial_id": t, "error": e.splitlines()[-1]} for t, e in summary.failed],
        "warnings": [*warnings, *report.warnings],
        "files": {
            "trials": str(report.trials_csv),
            "pareto": str(report.pareto_csv),
            "report": str(report.pareto_md),
            "html": str(report.html),
            "constraints": str(report.constraints_csv),
            "figures": [str(f) for f in report.figures],
        },
    }


def _print_plan(plan, specs, name: str, run_dir: Path, as_json: bool) -> None:
    from fairbench.runner.preflight import describe_seconds, plan_rows
    from fairbench.runner.progress import run_progress

    already = run_progress(specs, run_dir)
    if as_json:
        print(
            json.dumps(
                {
                    "name": name,
                    "run_dir": str(run_dir),
                    "trials": len(specs),
                    "already_done": already.done,
                    "estimated_seconds": plan.seconds,
                    "unestimated_configs": plan.unestimated,
                    "warnings": plan.warnings,
                    "configs": plan_rows(plan),
                },
                indent=1,
            )
        )
        return
    table = Table(title=f"{name}: {len(specs)} trials, calibrated (dry run, nothing written)")
    for col in ("dataset", "method", "ε", "knobs", "seeds", "trials", "steps / trial", "est. time"):
        table.add_column(col)
    for c in plan.configs:
        eps = "non-private" if c.epsilon is None else f"{c.epsilon:g}"
        steps = "-" if c.steps is None else f"{c.steps:,}"
        knobs = ", ".join(f"{k:g}" for k in c.knobs) or "-"
        table.add_row(
            escape(c.dataset),
            escape(c.label),
            eps,
            escape(knobs),
            str(c.seeds),
            str(c.trials),
            steps,
            describe_seconds(c.seconds),
        )
    Console(width=max(console.width, 100)).print(table)
    n = plan.unestimated
    untimed = f", plus {n} configuration{'s' * (n != 1)} the bench table does not time" if n else ""
    console.print(
        f"estimated time: {describe_seconds(plan.seconds)} of training steps in one "
        f"process{untimed}; from the bench table's CPU step times (Adult, batch 512), "
        "an upper estimate: stacking and workers shorten it",
        soft_wrap=True,
    )
    if already.done or already.failed:
        console.print(
            f"{run_dir} already holds {already.done} of them done, {already.failed} failed",
            soft_wrap=True,
        )


def status(
    run_dir: Path,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Done, failed and pending trials of a run directory, per method."""
    import dataclasses

    from fairbench.runner.config import expand
    from fairbench.runner.execute import load_run_config
    from fairbench.runner.progress import run_progress

    specs = expand(load_run_config(run_dir), warn=lambda _: None, check_data=False)
    progress = run_progress(specs, run_dir)
    if as_json:
        print(json.dumps(dataclasses.asdict(progress)))
        return
    table = Table(
        title=f"{run_dir}: {progress.done} done, {progress.failed} failed, "
        f"{progress.pending} pending"
    )
    for col in ("method", "done", "failed", "pending"):
        table.add_column(col)
    for p in progress.labels:
        table.add_row(escape(p.label), str(p.done), str(p.failed), str(p.pending))
    console.print(table)
    for trial_id, error in progress.failures:
        console.print(f"failed {trial_id}: {error}", highlight=False, markup=False, soft_wrap=True)


class ExportFormat(str, Enum):
    csv = "csv"
    parquet = "parquet"


def export(
    run_dir: Path,
    fmt: Annotated[ExportFormat, typer.Option("--format", help="file format")] = (
        ExportFormat.parquet
    ),
    out: Annotated[
        Path | None, typer.Option(help="file to write (default RUN_DIR/trials.*)")
    ] = None,
) -> None:
    """Write every finished trial of a run, one row each, as CSV or Parquet."""
    from fairbench.report.aggregate import trials_frame
    from fairbench.report.tables import write_trials_csv, write_trials_parquet
    from fairbench.rundir.store import finished_rows

    path = out or run_dir / f"trials.{fmt.value}"
    if not path.parent.is_dir():
        raise ConfigError(
            f"--out {path}: the directory {path.parent} does not exist; create it "
            "or give another path"
        )
    rows = finished_rows(run_dir, "export")
    tmp = path.with_name(path.name + ".tmp")
    writer = write_trials_parquet if fmt is ExportFormat.parquet else write_trials_csv
    writer(trials_frame(rows), tmp)
    tmp.replace(path)  # never a half-written file under the final name
    console.print(f"{len(rows)} trials → {path}")


def report(
    run_dir: Path,
    as_json: Annotated[bool, typer.Option("--json", help="print what was written as JSON")] = False,
) -> None:
    """(Re)write trials.csv, pareto.csv, pareto.md and figures/ of a run directory."""
    from fairbench.report import write_report

    written = write_report(run_dir)
    if as_json:
        print(json.dumps(_report_json(written)))
    else:
        _print_report(written)


def _report_json(report) -> dict:
    """Every path the report wrote (as strings), its counts and its warnings."""
    import dataclasses

    import pandas as pd

    fields = {
        k: [str(p) for p in v]
        if isinstance(v, list) and k != "warnings"
        else str(v)
        if isinstance(v, Path)
        else v
        for k, v in dataclasses.asdict(report).items()
    }
    return {
        **fields,
        "n_pareto_points": len(pd.read_csv(report.pareto_csv)),
        "n_figures": len(report.figures),
    }


PRINTED_POINTS = 60  # a longer Pareto table is left to pareto.md


def _print_pareto(pareto_csv: Path) -> None:
    """The run's Pareto points as a terminal table: what a first run should end with."""
    import pandas as pd

    points = pd.read_csv(pareto_csv, dtype={"knob_values": str}).fillna({"knob_values": ""})
    if len(points) > PRINTED_POINTS:
        console.print(f"{len(points)} Pareto points: see the tables in pareto.md")
        return
    table = Table(title="error vs violation (test; mean ± 95% CI over seeds; ★ frontier)")
    for col in (
        "dataset",
        "ε",
        "method",
        "knob",
        "seeds",
        "test error",
        "violation",
        "met",
        "steps",
        "",
    ):
        table.add_column(col, no_wrap=True)
    for r in points.itertuples(index=False):
        met = "" if pd.isna(r.satisfied_fraction) else f"{r.satisfied_k:.0f}/{r.satisfied_n:.0f}"
        table.add_row(
            escape(r.dataset),
            "non-private" if r.epsilon == float("inf") else f"{r.epsilon:g}",
            escape(r.label),
            escape(str(r.knob_values) if pd.notna(r.knob_values) else ""),
            str(r.n_seeds),
            _mean_ci(r.test_error_mean, r.test_error_ci95),
            _mean_ci(r.violation_mean, r.violation_ci95),
            met,
            f"{r.steps_mean:,.0f}",
            "★" if r.on_frontier else "",
        )
    Console(width=max(console.width, 120)).print(table)  # logs and CI: wider than 80 columns


def _mean_ci(mean: float, half: float) -> str:
    return f"{mean:.4f}" if half != half else f"{mean:.4f} ± {half:.4f}"


def _print_report(report) -> None:
    for warning in report.warnings:
        err_console.print(f"warning: {warning}", soft_wrap=True)
    _print_pareto(report.pareto_csv)
    console.print(f"trials:  {report.trials_csv} ({report.n_trials} rows)", soft_wrap=True)
    console.print(f"report:  {report.html} (one self-contained page)", soft_wrap=True)
    console.print(
        f"tables:  {report.pareto_md} (also paired.md, constraints.md; .tex beside each)",
        soft_wrap=True,
    )
    console.print(f"pareto:  {report.pareto_csv}", soft_wrap=True)
    console.print(f"per-seed satisfaction: {report.constraints_csv}", soft_wrap=True)
    for fig in report.figures:
        console.print(f"figure:  {fig}", soft_wrap=True)
