"""The `fairbench` command line. Thin: parses, calls the library, prints."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fairbench.errors import ConfigError, DataError, FairbenchError

app = typer.Typer(
    help="Benchmark differentially private fair-learning methods on the same footing.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
data_app = typer.Typer(help="Inspect and fetch the raw datasets.", no_args_is_help=True)
privacy_app = typer.Typer(help="The suite's privacy accountant.", no_args_is_help=True)
app.add_typer(data_app, name="data")
app.add_typer(privacy_app, name="privacy")
figure_app = typer.Typer(help="Paper figures built from finished runs.", no_args_is_help=True)
app.add_typer(figure_app, name="figure")
console = Console()
err_console = Console(stderr=True)


class Executor(str, Enum):
    local = "local"
    dask = "dask"


@app.command()
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


@app.command()
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


@app.command()
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
    from fairbench.runner.store import finished_rows

    rows = finished_rows(run_dir, "export")
    path = out or run_dir / f"trials.{fmt.value}"
    tmp = path.with_name(path.name + ".tmp")
    writer = write_trials_parquet if fmt is ExportFormat.parquet else write_trials_csv
    writer(trials_frame(rows), tmp)
    tmp.replace(path)  # never a half-written file under the final name
    console.print(f"{len(rows)} trials → {path}")


@app.command()
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
    from fairbench.runner.store import finished_rows

    if (baseline is None) == (write_baseline is None):
        raise ConfigError("give exactly one of --baseline FILE (check) or --write-baseline FILE")
    rows = finished_rows(run_dir, "check")
    if write_baseline is not None:
        written = regression.write_baseline(rows, write_baseline, run_dir.name)
        console.print(f"baseline of {len(written['entries'])} series → {write_baseline}")
        return
    reference = regression.load_baseline(baseline)
    found = regression.compare(rows, reference)
    for item in found:
        console.print(f"REGRESSION {item}", highlight=False, markup=False, soft_wrap=True)
    console.print(f"{len(reference['entries'])} series checked against {baseline}: "
                  f"{len(found)} regression(s)", soft_wrap=True)  # fmt: skip
    if found:
        raise typer.Exit(1)


@app.command()
def tune(
    config: Annotated[str, typer.Argument(help="tune config: YAML path or bundled name")],
    out: Annotated[Path | None, typer.Option(help="output directory (default runs/NAME)")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="processes (default: cores)")] = None,
    quiet: Annotated[bool, typer.Option(help="no progress bar (for CI)")] = False,
    charge_tuning: Annotated[
        bool, typer.Option(help="report the privacy cost of tuning under the stated bound")
    ] = False,
) -> None:
    """Equal-budget random search per method, selection on validation, the selected
    configurations re-run on fresh seeds; writes selected/*.yaml (run configs) and tuning.md."""
    from fairbench.runner.execute import default_workers
    from fairbench.runner.tune import load_tune_config, run_tune

    spec = load_tune_config(config)
    out = out or Path("runs") / spec.name
    table, failures = run_tune(spec, out, workers or default_workers(), quiet, charge_tuning,
                               warn=err_console.print)  # fmt: skip
    reached = table["selected"].notna().sum()
    console.print(f"{reached} of {len(table)} (method, target, ε) selections reached their "
                  f"target → {out / 'tuning.md'}; run configs in {out / 'selected'}")  # fmt: skip
    infeasible = int(table.drop_duplicates(["dataset", "epsilon", "method"])["infeasible"].sum())
    if infeasible:
        console.print(f"{infeasible} drawn configurations could not be calibrated at their ε "
                      "(counted against their method's budget; see tuning.md)")  # fmt: skip
    for line in failures:
        err_console.print(f"failed {line}")
    if failures:
        raise typer.Exit(1)


@figure_app.command("privacy-cost")
def figure_privacy_cost(
    tune_outs: Annotated[list[Path], typer.Argument(help="`fairbench tune --out` directories")],
    out: Annotated[Path, typer.Option(help="folder for the CSVs, figures and notes")] = Path(
        "results/figures/fig-privacy-cost"
    ),
) -> None:
    """Test error of the configuration tuned at each violation target, against epsilon: per
    dataset a CSV, a figure per model (PNG, PDF) and a markdown note (does privacy bite?)."""
    from fairbench.report.privacy_cost import build

    written = build(tune_outs, out)
    for path in written:
        if path.suffix in (".csv", ".md", ".png"):
            console.print(f"wrote {path}", highlight=False, markup=False, soft_wrap=True)


@app.command()
def report(run_dir: Path) -> None:
    """(Re)write trials.csv, pareto.csv, pareto.md and figures/ of a run directory."""
    from fairbench.report import write_report

    _print_report(write_report(run_dir))


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


class Listable(str, Enum):
    methods = "methods"
    datasets = "datasets"
    configs = "configs"


@app.command("list")
def list_(what: Listable) -> None:
    """List installed method plugins, dataset adapters or bundled configs."""
    if what is Listable.methods:
        from fairbench.methods import registry as methods

        for name, cls in sorted(methods().items()):
            kind = "private" if cls.private else "non-private"
            knob = f", knob: {cls.knob}" if cls.knob else ""
            print(f"{name:12s} {cls.description} [{kind}{knob}]")
    elif what is Listable.datasets:
        from fairbench.datasets import registry as datasets

        for name, cls in sorted(datasets().items()):
            print(f"{name:12s} {cls.description}")
    else:
        from fairbench.runner.config import BUNDLED

        for path in sorted(BUNDLED.glob("*.yaml")):
            print(f"{path.stem:12s} {path}")


@data_app.command("check")
def data_check() -> None:
    """Verify every known dataset under the data folder: presence, checksum, rows, features."""
    import numpy as np

    from fairbench.datasets import registry as datasets
    from fairbench.datasets.files import data_root

    root = data_root()
    table = Table(title=f"datasets under {root}")
    for col in ("dataset", "status", "rows", "features", "groups", "label rate (mean) per group"):
        table.add_column(col)
    bad = False
    for name, cls in sorted(datasets().items()):
        try:
            task = cls().load(seed=0)
        except DataError as exc:
            missing = "missing data file" in str(exc)
            bad |= not missing
            table.add_row(
                name,
                "missing" if missing else "[red]corrupted[/red]",
                "",
                "",
                "",
                str(exc) if not missing else "",
            )
            continue
        splits = (task.train, task.val, task.test)
        rows = sum(len(s) for s in splits)
        y = np.concatenate([s.y for s in splits])
        groups = np.concatenate([s.s for s in splits])
        per_group = [
            (y[groups == g] == 1) if task.label_names else y[groups == g]
            for g in range(task.n_groups)
        ]  # positive rate, or mean regression target
        rates = [
            f"{group}: {v.mean():.3f}" for group, v in zip(task.group_names, per_group, strict=True)
        ]
        status = "verified" if cls.files else "generated"
        table.add_row(
            name,
            f"[green]{status}[/green]",
            f"{rows:,}",
            str(task.n_features),
            str(task.n_groups),
            ", ".join(rates),
        )
    console.print(table)
    if bad:
        raise typer.Exit(1)


def _key_values(items: list[str] | None, flag: str, example: str) -> dict[str, object]:
    """Repeated `FLAG KEY=VALUE` options as a dict, values parsed as YAML scalars."""
    import yaml

    parsed = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"{flag} {item!r}: write KEY=VALUE, e.g. {flag} {example}")
        parsed[key] = yaml.safe_load(value)
    return parsed


@data_app.command("fetch")
def data_fetch(
    dataset: str,
    option: Annotated[
        list[str] | None, typer.Option(help="adapter option KEY=VALUE (e.g. state=AL)")
    ] = None,
) -> None:
    """Download a dataset's raw files from their public source into the data folder."""

    from fairbench.datasets import get_dataset
    from fairbench.datasets.base import Dataset
    from fairbench.datasets.files import data_root

    adapter = get_dataset(dataset, **_key_values(option, "--option", "state=AL"))
    if not adapter.files and type(adapter).fetch is Dataset.fetch:
        console.print(f"{dataset} is generated; nothing to fetch")
        return
    written = adapter.fetch(data_root())
    console.print(f"{dataset}: {len(written)} file(s) downloaded and verified under {data_root()}")


@privacy_app.command("epsilon")
def privacy_epsilon(
    sampling_rate: Annotated[float, typer.Option(help="Poisson sampling rate q")],
    steps: Annotated[int, typer.Option(help="number of steps T")],
    noise_multiplier: Annotated[float, typer.Option(help="Gaussian noise multiplier sigma")],
    delta: Annotated[float, typer.Option(help="target delta")] = 1e-5,
    laplace_scale: Annotated[
        float | None, typer.Option(help="per-step Laplace scale b (sensitivity 1)")
    ] = None,
) -> None:
    """Epsilon of T Poisson-sampled Gaussian steps (each with a Laplace count if given)."""
    from fairbench.privacy import epsilon
    from fairbench.privacy.accountant import validate
    from fairbench.privacy.events import sgd_steps

    validate(
        sampling_rate=sampling_rate,
        delta=delta,
        steps=steps,
        noise_multiplier=noise_multiplier,
        laplace_scale=laplace_scale,
    )
    eps = epsilon(sgd_steps(sampling_rate, noise_multiplier, steps, laplace_scale), delta)
    print(json.dumps({"epsilon": eps, "delta": delta}))


@privacy_app.command("verify")
def privacy_verify(
    run_dir: Path,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Re-account every private trial of a run from its stored ledger, cross-check it (optimistic
    PLD, RDP, Laplace closed form) and flag any claim that does not hold. Exit 1 if flagged."""
    from fairbench.privacy.verify import verify_run

    findings = verify_run(run_dir)
    flagged = [f for f in findings if f.problems]
    if as_json:
        print(json.dumps([f.__dict__ for f in findings], indent=2, default=str))
    else:
        checked = sum(f.checks["rdp"] is not None or f.checks["pld_optimistic"] is not None
                      for f in findings)  # fmt: skip
        console.print(
            f"{len(findings)} private trials re-accounted, {checked} cross-checked by an "
            f"independent method, {len(flagged)} flagged",
            soft_wrap=True,
        )
        for f in flagged:
            console.print(f"  {f.trial_id} {f.label}: " + "; ".join(f.problems),
                          highlight=False, markup=False, soft_wrap=True)  # fmt: skip
    if flagged:
        raise typer.Exit(1)


@privacy_app.command("calibrate")
def privacy_calibrate(
    sampling_rate: Annotated[float, typer.Option(help="Poisson sampling rate q")],
    epsilon: Annotated[float, typer.Option(help="target epsilon")],
    delta: Annotated[float, typer.Option(help="target delta")] = 1e-5,
    steps: Annotated[int | None, typer.Option(help="fix T, solve for sigma")] = None,
    noise_multiplier: Annotated[float | None, typer.Option(help="fix sigma, solve for T")] = None,
    laplace_scale: Annotated[float | None, typer.Option(help="per-step Laplace scale")] = None,
) -> None:
    """Solve for the noise multiplier (given --steps) or the steps (given --noise-multiplier)."""
    from fairbench.privacy import calibrate_noise_multiplier, calibrate_steps
    from fairbench.privacy import epsilon as account
    from fairbench.privacy.events import sgd_steps

    if (steps is None) == (noise_multiplier is None):
        raise ConfigError(
            "give exactly one of --steps (solve sigma) or --noise-multiplier (solve T)"
        )
    if steps is not None:
        noise_multiplier = calibrate_noise_multiplier(
            sampling_rate, steps, epsilon, delta, laplace_scale
        )
    else:
        steps = calibrate_steps(sampling_rate, noise_multiplier, epsilon, delta, laplace_scale)
    spent = account(sgd_steps(sampling_rate, noise_multiplier, steps, laplace_scale), delta)
    print(
        json.dumps(
            {
                "noise_multiplier": noise_multiplier,
                "steps": steps,
                "epsilon": spent,
                "target_epsilon": epsilon,
                "delta": delta,
            }
        )
    )


@app.command()
def bench(
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
    batch_size: int = 512,
    rounds: Annotated[int, typer.Option(min=1)] = 60,
    device: str = "cpu",
    out: Annotated[
        Path | None, typer.Option(help="also write step_time.json/.csv/.md into this folder")
    ] = None,
    fits: Annotated[bool, typer.Option(help="also time one whole trial per method")] = False,
    figure: Annotated[
        str | None, typer.Option(help="instead, time this figure config run from scratch")
    ] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="--figure: processes")] = None,
) -> None:
    """Median wall time per training step of each method, and ratios to DP-SGD; or, with
    --figure, the wall time of a whole figure run and each method's share."""
    from fairbench.bench import fit_times, step_times, write_step_table

    if figure is not None:
        _bench_figure(figure, out, workers, as_json)
        return

    result = step_times(batch_size=batch_size, rounds=rounds, device=device)
    if fits:
        result["fit_seconds"] = fit_times()
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
        table.add_row(escape(name), f"{seconds * 1e3:.3f}", f"{ratio:.2f}",
                      "" if published is None else f"{published:.4f}")  # fmt: skip
    console.print(table)
    for name, seconds in result.get("fit_seconds", {}).items():
        console.print(f"one {name} trial (defaults, ε = 1): {seconds:.1f} s")
    if result["ratio_to_published"]:
        console.print("published code: per-step times measured in the RaCO-DP paper (Table 2)")


def _bench_figure(figure: str, out: Path | None, workers: int | None, as_json: bool) -> None:
    import tempfile

    from fairbench.bench import figure_time
    from fairbench.runner.execute import default_workers

    with tempfile.TemporaryDirectory() as scratch:
        result = figure_time(figure, Path(scratch) / "run", workers or default_workers())
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{result['figure']}_time.json").write_text(json.dumps(result, indent=2) + "\n")
    if as_json:
        print(json.dumps(result, indent=2))
        return
    minutes = result["wall_seconds"] / 60
    console.print(f"{result['figure']}: {result['trials']} trials ({result['failed']} failed) "
                  f"in {minutes:.1f} min on {result['workers']} workers")  # fmt: skip
    table = Table(title="time per method")
    for col in ("method", "trials", "trial seconds (sum)", "wall minutes (share)"):
        table.add_column(col)
    for label, m in result["methods"].items():
        table.add_row(escape(label), str(m["trials"]), f"{m['trial_seconds']:.0f}",
                      f"{m['wall_seconds_share'] / 60:.1f}")  # fmt: skip
    console.print(table)


@app.command()
def audit(
    method: Annotated[str, typer.Option(help="a private method plugin")],
    epsilon: Annotated[float, typer.Option(help="the claimed epsilon the method is run at")],
    delta: Annotated[float, typer.Option(help="the claimed delta")] = 1e-5,
    trials: Annotated[int, typer.Option(min=4, help="fits per world (with, without canary)")] = 400,
    knob: Annotated[float | None, typer.Option(help="fairness knob, for methods with one")] = None,
    constraint: Annotated[str, typer.Option(help="the constraint the method trains for")] = (
        "demographic_parity"
    ),
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="hyperparameter KEY=VALUE (repeatable)")
    ] = None,
    confidence: Annotated[float, typer.Option(min=0.5, max=0.999)] = 0.95,
    seed: int = 0,
    power_check: Annotated[
        bool, typer.Option(help="also audit with the Gaussian noise off: it must be caught")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Empirical lower bound on a method's privacy loss by canary membership inference.
    Exit 1 if the bound exceeds the claimed epsilon (the implementation leaks more), or if
    the power check's noiseless copy is not caught (the trial budget is too small)."""
    import dataclasses

    from fairbench.audit.canary import audit as run_audit
    from fairbench.audit.canary import audit_method, gaussian_noise_disabled
    from fairbench.methods import FairnessSpec
    from fairbench.privacy import PrivacyBudget

    PrivacyBudget(epsilon, delta)  # one clear error for a bad claim before any fit
    plugin = audit_method(method, _key_values(set_, "--set", "batch_size=16"))
    if plugin.knob is not None and knob is None:
        raise ConfigError(f"method {method} has a fairness knob ({plugin.knob}): give --knob")

    def audit_once():
        return run_audit(plugin, epsilon, delta, FairnessSpec(constraint, knob), trials,
                         confidence, seed=seed)  # fmt: skip

    results = {"audit": audit_once()}
    if power_check:
        with gaussian_noise_disabled():
            results["noise off"] = audit_once()
    failed = not results["audit"].consistent or (power_check and results["noise off"].consistent)
    if as_json:
        print(json.dumps({name: dataclasses.asdict(r) | {"consistent": r.consistent}
                          for name, r in results.items()}))  # fmt: skip
    for name, r in [] if as_json else results.items():
        verdict = "consistent with the claim" if r.consistent else "EXCEEDS the claim"
        if name == "noise off":
            verdict = ("caught: the audit has the power to see a missing noise"
                       if not r.consistent else "NOT caught: raise --trials")  # fmt: skip
        console.print(
            f"{name}: {method} at claimed ε = {epsilon:g}, δ = {delta:g}: empirical lower "
            f"bound ε ≥ {r.epsilon_lower_bound:.3f} ({confidence:.0%} confidence; held-out "
            f"TPR {r.true_positives}/{r.held_out}, FPR {r.false_positives}/{r.held_out}; "
            f"{2 * trials} fits in {r.seconds:.0f} s): {verdict}",
            highlight=False, markup=False, soft_wrap=True,
        )  # fmt: skip
    if failed:
        raise typer.Exit(1)


def main() -> None:
    """Entry point: user errors become one `error:` line and exit status 2."""
    try:
        app()
    except FairbenchError as exc:
        err_console.print(f"error: {exc}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
