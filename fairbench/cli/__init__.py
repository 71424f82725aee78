"""The `fairbench` command line. Thin: parses, calls the library, prints.

This module builds the Typer app; the commands live in one module per group (`runs`, `checks`,
`tuning`, `data`, `privacy`) and are registered here, in the order `--help` lists them.
"""

from __future__ import annotations

import signal
import sys
from typing import Annotated

import typer

from fairbench.cli import advise, checks, data, describe, privacy, runs, tuning, verify
from fairbench.cli.common import BareFlagsGroup, err_console
from fairbench.errors import FairbenchError, Interrupted

app = typer.Typer(
    cls=BareFlagsGroup,
    help="Benchmark differentially private fair-learning methods on the same footing.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    context_settings={"help_option_names": ["-h", "--help"]},  # sub-commands inherit it
)


def _print_version(value: bool) -> None:
    if value:
        import platform

        import torch

        import fairbench

        print(
            f"fairbench {fairbench.__version__} (torch {torch.__version__}, "
            f"python {platform.python_version()})"
        )
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            "-V",
            callback=_print_version,
            is_eager=True,
            help="print the versions of fairbench, torch and python, and exit",
        ),
    ] = False,
) -> None:
    """Benchmark differentially private fair-learning methods on the same footing."""


app.add_typer(data.data_app, name="data")
app.add_typer(privacy.privacy_app, name="privacy")
app.add_typer(tuning.figure_app, name="figure")
app.command()(runs.run)
app.command()(runs.status)
app.command()(runs.export)
app.command()(checks.check)
app.command()(tuning.tune)
app.command("tune-budgets")(tuning.tune_budgets)
app.command()(advise.advise)
app.command()(runs.report)
app.command("list")(data.list_)
app.command()(describe.describe)
app.command()(checks.bench)
app.command()(checks.audit)
app.command()(verify.verify)


def main() -> None:
    """Entry point: user errors become one `error:` line and exit status 2; an interrupted
    run one `interrupted:` line with its resume command, and 128 + the signal number (130
    for Ctrl-C, 143 for SIGTERM; see `errors.Interrupted`)."""
    try:
        app()
    except FairbenchError as exc:
        err_console.print(f"error: {exc}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(2)
    except Interrupted as exc:
        err_console.print(f"interrupted: {exc}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:  # Ctrl-C outside a run's trials: nothing to resume
        err_console.print("interrupted", highlight=False, markup=False)
        sys.exit(128 + signal.SIGINT)
