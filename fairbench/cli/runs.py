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

from fairbench.cli.common import console, err_console
from fairbench.errors import ConfigError


class Executor(str, Enum):
    local = "local"
    dask = "dask"


def run(
    config: Annotated[str, typer.Argument(help="YAML path or bundled config name")] = "default",
    out: Annotated[Path | None, typer.Option(help="run directory (default runs/NAME)")] = None,
    resume: Annotated[Path | None, typer.Option(help="continue the run in this directory")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="processes (default: cores)")] = None,
    quiet: Annotated[bool, typer.Option(help="no progress bar (for CI)")] = False,
    dry_run: Annotated[bool, typer.Option(help="print the grid and its size; run nothing")] = False,
    executor: Annotated[Executor, typer.Option(help="local processes, or a Dask cluster")] = (
        Executor.local
    ),
    scheduler: Annotated[
        str | None, typer.Option(help="Dask scheduler address (default: a local cluster)")
    ] = None,
) -> None:
    """Run an experiment grid into a run directory, then write its report."""
    from fairbench.report import write_report
    from fairbench.runner.config import expand, load_config
    from fairbench.runner.execute import default_workers, execute, load_run_config, prepare_run

    if resume is not None:
        experiment, run_dir = load_run_config(resume), resume
    else:
        experiment = load_config(config)
        run_dir = out or Path("runs") / experiment.name
    if dry_run:
        _print_grid(expand(experiment, warn=err_console.print), experiment.name, run_dir)
        return
    if scheduler is not None and executor is not Executor.dask:
        raise ConfigError("--scheduler addresses a Dask cluster: add --executor dask")
    specs = prepare_run(experiment, run_dir, warn=err_console.print)
    summary = execute(specs, run_dir, workers or default_workers(), quiet, executor.value,
                      scheduler)  # fmt: skip
    report = write_report(run_dir)
    console.print(
        f"{summary.done} trials run, {summary.skipped} already done, "
        f"{len(summary.failed)} failed → {run_dir}"
    )
    _print_report(report)
    if summary.failed:
        for trial_id, error in summary.failed:
            err_console.print(f"failed trial {trial_id}: {error.splitlines()[-1]}")
        raise typer.Exit(1)


def _print_grid(specs, name: str, run_dir: Path) -> None:
    from fairbench.runner.progress import grid_summary, run_progress

    table = Table(title=f"{name}: {len(specs)} trials (dry run, nothing written)")
    for col in ("dataset", "method", "trials", "ε", "knobs", "seeds", "constraints"):
        table.add_column(col)
    for line in grid_summary(specs):
        table.add_row(*(escape(str(line[k])) for k in ("dataset", "label", "trials")),
                      escape(", ".join("non-private" if e is None else f"{e:g}"
                                       for e in line["epsilons"])),
                      escape(", ".join("-" if k is None else f"{k:g}" for k in line["knobs"])),
                      str(line["seeds"]), escape(", ".join(line["constraints"])))  # fmt: skip
    console.print(table)
    already = run_progress(specs, run_dir)
    if already.done or already.failed:
        console.print(f"{run_dir} already holds {already.done} of them done, "
                      f"{already.failed} failed", soft_wrap=True)  # fmt: skip


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
    table = Table(title=f"{run_dir}: {progress.done} done, {progress.failed} failed, "
                        f"{progress.pending} pending")  # fmt: skip
    for col in ("method", "done", "failed", "pending"):
        table.add_column(col)
    for p in progress.labels:
        table.add_row(escape(p.label), str(p.done), str(p.failed), str(p.pending))
    console.print(table)
    for trial_id, error in progress.failures:
        console.print(f"failed {trial_id}: {error}", highlight=False, markup=False,
                      soft_wrap=True)  # fmt: skip


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

    rows = finished_rows(run_dir, "export")
    path = out or run_dir / f"trials.{fmt.value}"
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

    fields = {k: [str(p) for p in v] if isinstance(v, list) and k != "warnings"
              else str(v) if isinstance(v, Path) else v
              for k, v in dataclasses.asdict(report).items()}  # fmt: skip
    return {**fields, "n_pareto_points": len(pd.read_csv(report.pareto_csv)),
            "n_figures": len(report.figures)}  # fmt: skip


PRINTED_POINTS = 60  # a longer Pareto table is left to pareto.md


def _print_pareto(pareto_csv: Path) -> None:
    """The run's Pareto points as a terminal table: what a first run should end with."""
    import pandas as pd

    points = pd.read_csv(pareto_csv, dtype={"knob_values": str}).fillna({"knob_values": ""})
    if len(points) > PRINTED_POINTS:
        console.print(f"{len(points)} Pareto points: see the tables in pareto.md")
        return
    table = Table(title="error vs violation (test; mean ± 95% CI over seeds; ★ frontier)")
    for col in ("dataset", "ε", "method", "knob", "seeds", "test error", "violation", "met",
                "steps", ""):  # fmt: skip
        table.add_column(col, no_wrap=True)
    for r in points.itertuples(index=False):
        met = "" if pd.isna(r.satisfied_fraction) else f"{r.satisfied_k:.0f}/{r.satisfied_n:.0f}"
        table.add_row(escape(r.dataset), "non-private" if r.epsilon == float("inf") else
                      f"{r.epsilon:g}", escape(r.label), escape(str(r.knob_values)
                      if pd.notna(r.knob_values) else ""), str(r.n_seeds),
                      _mean_ci(r.test_error_mean, r.test_error_ci95),
                      _mean_ci(r.violation_mean, r.violation_ci95), met,
                      f"{r.steps_mean:,.0f}", "★" if r.on_frontier else "")  # fmt: skip
    Console(width=max(console.width, 120)).print(table)  # logs and CI: wider than 80 columns


def _mean_ci(mean: float, half: float) -> str:
    return f"{mean:.4f}" if half != half else f"{mean:.4f} ± {half:.4f}"


def _print_report(report) -> None:
    for warning in report.warnings:
        err_console.print(f"warning: {warning}", soft_wrap=True)
    _print_pareto(report.pareto_csv)
    console.print(f"trials:  {report.trials_csv} ({report.n_trials} rows)", soft_wrap=True)
    console.print(f"report:  {report.pareto_md} (also paired.md, constraints.md)", soft_wrap=True)
    console.print(f"pareto:  {report.pareto_csv}", soft_wrap=True)
    console.print(f"per-seed satisfaction: {report.constraints_csv}", soft_wrap=True)
    for fig in report.figures:
        console.print(f"figure:  {fig}", soft_wrap=True)
