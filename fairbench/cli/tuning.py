"""`fairbench tune` and the `figure` group built from its outputs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fairbench.cli.common import (
    Executor,
    ExecutorOption,
    SchedulerOption,
    check_executor,
    console,
    err_console,
)
from fairbench.errors import ConfigError, Interrupted
from fairbench.figures import FIGURES

figure_app = typer.Typer(help="Paper figures built from finished runs.", no_args_is_help=True)


def tune(
    config: Annotated[str, typer.Argument(help="tune config: YAML path or bundled name")],
    out: Annotated[Path | None, typer.Option(help="output directory (default runs/NAME)")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="processes (default: cores)")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress output")] = False,
    charge_tuning: Annotated[
        bool,
        typer.Option(
            "--charge-tuning", help="report the privacy cost of tuning under the stated bound"
        ),
    ] = False,
    executor: ExecutorOption = Executor.local,
    scheduler: SchedulerOption = None,
) -> None:
    """Equal-draws random search per method, selection on validation, the selected
    configurations re-run on fresh seeds; writes selected/*.yaml (run configs), tuning.md and
    tuning.json (a row per selection and final seed). With `selection: private` in the
    config, tuning is paid for out of epsilon instead (private selection; tuning.md,
    tuning.json with a row per repeat, and private/selections.json: the analysis)."""
    from fairbench.rundir.tuning import TuneLayout
    from fairbench.runner.execute import default_workers
    from fairbench.workflows.private_selection import run_private
    from fairbench.workflows.tune import (
        CHARGED_BY_COMPOSITION,
        NOT_CHARGED,
        load_tune_config,
        run_tune,
    )

    spec = load_tune_config(config)
    out = out or Path("runs") / spec.name
    private = spec.selection != "free"
    if private and charge_tuning:
        raise ConfigError(
            f"--charge-tuning bounds the cost of free selection; selection: {spec.selection} "
            "has its own accounting: drop the flag"
        )
    check_executor(executor, scheduler)
    try:
        if private:
            table, failures = run_private(
                spec,
                out,
                workers or default_workers(),
                quiet,
                warn=err_console.print,
                executor=executor.value,
                scheduler=scheduler,
            )
        else:
            table, failures = run_tune(
                spec,
                out,
                workers or default_workers(),
                quiet,
                charge_tuning,
                warn=err_console.print,
                executor=executor.value,
                scheduler=scheduler,
            )
    except Interrupted as exc:  # tune resumes by running it again, not by `run --resume`
        exc.resume = f"fairbench tune {config} --out {out}"
        raise
    reached = table["selected"].notna().sum()
    layout = TuneLayout(out)
    if private:
        console.print(
            f"{reached} of {len(table)} (method, target, ε) {spec.selection} "
            f"selections released a model → {layout.notes}; per repeat in {layout.table}"
        )
    else:
        console.print(
            f"{reached} of {len(table)} (method, target, ε) selections reached their "
            f"target ({CHARGED_BY_COMPOSITION if charge_tuning else NOT_CHARGED}) → "
            f"{layout.notes}; run configs in {layout.selected}"
        )
    infeasible = int(table.drop_duplicates(["dataset", "epsilon", "method"])["infeasible"].sum())
    if infeasible:
        console.print(
            f"{infeasible} drawn configurations could not be calibrated at their ε "
            f"(counted among their method's draws; see {layout.notes.name})"
        )
    for line in failures:
        err_console.print(f"failed {line}")
    if failures:
        raise typer.Exit(1)


def tune_budgets(
    tune_out: Annotated[
        Path, typer.Argument(help="a finished `fairbench tune --out` directory (selection: free)")
    ],
    workers: Annotated[int | None, typer.Option(min=1, help="processes (default: cores)")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress output")] = False,
) -> None:
    """Budget sensitivity of a tune: every method re-selected by tune's own rule from its
    first 4 and 8 draws (those below the tune's), those choices' missing final trials run on
    the same fresh seeds, and budgets/tuning-draws<k>.json written; fig-privacy-cost and
    fig-literature then label each winner stable or say why not."""
    from fairbench.rundir.tuning import TuneLayout
    from fairbench.runner.execute import default_workers
    from fairbench.workflows.budgets import load_tuned_config, run_budgets

    config = load_tuned_config(tune_out)
    try:
        selections, failures = run_budgets(
            config, tune_out, workers or default_workers(), quiet, warn=err_console.print
        )
    except Interrupted as exc:
        exc.resume = f"fairbench tune-budgets {tune_out}"
        raise
    if not selections:
        console.print(f"{config.draws} draws: no smaller budget to re-select at")
    layout = TuneLayout(tune_out)
    for k, table in selections.items():
        console.print(
            f"{k} draws: {table['selected'].notna().sum()} of {len(table)} (method, target, ε) "
            f"selections reached their target → {layout.budget_table(k)}"
        )
    for line in failures:
        err_console.print(f"failed {line}")
    if failures:
        raise typer.Exit(1)


def _figure_command(name: str) -> None:
    """`fairbench figure NAME`, from its entry in the figure registry."""
    spec = FIGURES[name]

    def command(tune_outs: list[Path], out: Path = Path(spec.out)) -> None:
        from fairbench.figures import build

        for path in build(name, tune_outs, out):
            if path.suffix in (".csv", ".md", ".png"):
                console.print(f"wrote {path}", highlight=False, markup=False, soft_wrap=True)

    # objects, not strings: this module's annotations are postponed, and these read `spec`
    command.__annotations__ = {
        "tune_outs": Annotated[list[Path], typer.Argument(help=spec.inputs_help)],
        "out": Annotated[Path, typer.Option(help="folder for the CSVs, figures and notes")],
        "return": None,
    }
    command.__doc__ = spec.summary
    figure_app.command(name)(command)


for _name in FIGURES:
    _figure_command(_name)
