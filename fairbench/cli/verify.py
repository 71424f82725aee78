"""`fairbench verify`: re-run a sample of a run's trials and check they are bit-identical."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from fairbench.cli.common import console


def verify(
    run_dir: Annotated[Path, typer.Argument(help="a run directory, or a committed figure's")],
    sample: Annotated[int, typer.Option(min=1, help="trials to re-run (stratified)")] = 20,
    seed: Annotated[int, typer.Option(help="seed of the sample")] = 0,
    workers: Annotated[int | None, typer.Option(min=1, help="processes (default: cores)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Does today's code reproduce these results? Re-runs a stratified sample of the run's
    finished trials from their recorded specs and compares test and validation predictions
    and the epsilon spent with the stored rows, bit for bit. Exit 1 if any differs."""
    from fairbench.runner.execute import default_workers
    from fairbench.workflows.verify import verify as run_verify

    checks = run_verify(run_dir, sample, seed, workers or default_workers())
    identical = sum(c.identical for c in checks)
    if as_json:
        print(
            json.dumps(
                [{**c.__dict__, "identical": c.identical} for c in checks], indent=1, default=str
            )
        )
    else:
        for c in checks:
            if c.problem is not None:
                console.print(
                    f"cannot re-run {c.trial_id} ({c.label}): {c.problem}",
                    soft_wrap=True,
                    highlight=False,
                )
            for field, (before, now) in c.differences.items():
                console.print(
                    f"differs {c.trial_id} ({c.label}, epsilon {c.epsilon}): "
                    f"{field} {before} -> {now}",
                    soft_wrap=True,
                    highlight=False,
                )
        console.print(
            f"{identical} of {len(checks)} trials bit-identical ({run_dir})", highlight=False
        )
    if identical < len(checks):
        raise typer.Exit(1)
