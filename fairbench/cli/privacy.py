"""The `privacy` group: the suite's accountant from the command line, and re-checking a
finished run's privacy claims."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from fairbench.cli.common import console
from fairbench.errors import ConfigError

privacy_app = typer.Typer(help="The suite's privacy accountant.", no_args_is_help=True)


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
    from fairbench.privacy.verify import verify_rows
    from fairbench.rundir.store import finished_rows

    findings = verify_rows(finished_rows(run_dir, "verify"))
    flagged = [f for f in findings if f.problems]
    if as_json:
        print(json.dumps([f.__dict__ for f in findings], indent=2, default=str))
    else:
        checked = sum(
            f.checks["rdp"] is not None or f.checks["pld_optimistic"] is not None for f in findings
        )
        console.print(
            f"{len(findings)} private trials re-accounted, {checked} cross-checked by an "
            f"independent method, {len(flagged)} flagged",
            soft_wrap=True,
        )
        for f in flagged:
            console.print(
                f"  {f.trial_id} {f.label}: " + "; ".join(f.problems),
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
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

    if steps is not None and noise_multiplier is None:
        noise_multiplier = calibrate_noise_multiplier(
            sampling_rate, steps, epsilon, delta, laplace_scale
        )
    elif noise_multiplier is not None and steps is None:
        steps = calibrate_steps(sampling_rate, noise_multiplier, epsilon, delta, laplace_scale)
    else:
        raise ConfigError(
            "give exactly one of --steps (solve sigma) or --noise-multiplier (solve T)"
        )
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
