"""`fairbench advise`: a recommendation and a released model for a user's own CSV file."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Annotated

import typer

from fairbench.cli.common import console, err_console
from fairbench.errors import ConfigError


def advise(
    data: Annotated[Path, typer.Argument(metavar="DATA.csv", help="your CSV file")],
    label: Annotated[str, typer.Option(metavar="COL", help="the label column")],
    sensitive: Annotated[str, typer.Option(metavar="COL", help="the sensitive column (groups)")],
    epsilon: Annotated[float, typer.Option(help="your total privacy budget for the release")],
    tau: Annotated[float, typer.Option(help="allowed violation of the constraint")],
    constraint: Annotated[
        str, typer.Option(help="demographic_parity, equalized_odds, ...")
    ] = "demographic_parity",
    delta: Annotated[float, typer.Option(help="the release's delta")] = 1e-5,
    positive: Annotated[
        str | None, typer.Option(metavar="VALUE", help="the label value that is 1")
    ] = None,
    drop: Annotated[
        list[str] | None, typer.Option(metavar="COL", help="leave a column out")
    ] = None,
    other: Annotated[
        list[str] | None, typer.Option(metavar="VALUE", help="merge a sensitive value into other")
    ] = None,
    missing: Annotated[
        str, typer.Option(metavar="drop|impute", help="rows with a missing feature")
    ] = "drop",
    bounds: Annotated[
        Path | None, typer.Option(metavar="FILE", help="public bounds YAML: private preprocessing")
    ] = None,
    candidates: Annotated[
        float, typer.Option(min=1, help="expected candidates per method (Poisson mean)")
    ] = 4.0,
    repeats: Annotated[int, typer.Option(min=2, help="comparison repeats per method")] = 5,
    max_time: Annotated[
        float | None, typer.Option(metavar="SECONDS", help="refuse a plan estimated longer")
    ] = None,
    method: Annotated[
        list[str] | None, typer.Option(metavar="NAME", help="consider only this method")
    ] = None,
    allow_sensitive_at_test: Annotated[
        bool, typer.Option(help="also methods whose predictions read the sensitive attribute")
    ] = False,
    seed: Annotated[
        int | None,
        typer.Option(
            help="reproducible demonstration: every draw from this seed (NOT a DP "
            "release; default: the OS's entropy, never written)"
        ),
    ] = None,
    secure_noise: Annotated[
        bool, typer.Option(help="exact discrete noise from OpenDP for training and scores")
    ] = False,
    spaces: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", help="methods and spaces (configs/advise/methods.yaml's form)"
        ),
    ] = None,
    support: Annotated[
        int, typer.Option(min=1, help="configurations per method a candidate is drawn from")
    ] = 8,
    out: Annotated[Path | None, typer.Option(help="output folder (default advise-NAME)")] = None,
    workers: Annotated[int | None, typer.Option(min=1, help="processes (default: cores)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print one JSON object at the end")] = (
        False
    ),
    quiet: Annotated[bool, typer.Option("--quiet", help="no progress output")] = False,
) -> None:
    """Which private fair method should you use at your epsilon on your data, and what does
    it cost? One private selection over every applicable (method, configuration) releases a
    model and the recommendation at your epsilon (tuning paid for); a per-method comparison
    beside it is an analysis whose privacy cost is printed."""
    from fairbench.runner.execute import default_workers
    from fairbench.workflows import advise as flow
    from fairbench.workflows import advise_report as text

    if secure_noise and importlib.util.find_spec("opendp") is None:
        from fairbench.privacy.noise import OPENDP_MISSING

        raise ConfigError(f"--secure-noise: {OPENDP_MISSING}")
    entry = {
        "csv": str(data),
        "label": label,
        "sensitive": sensitive,
        "missing": missing,
        **({"positive": positive} if positive is not None else {}),
        **({"drop": drop} if drop else {}),
        **({"other": other} if other else {}),
        **({"bounds": str(bounds)} if bounds else {}),
    }
    say = err_console.print if as_json else console.print
    request = flow.Request(
        entry,
        epsilon,
        constraint,
        tau,
        delta,
        candidates,
        repeats,
        allow_sensitive_at_test,
        seed,
        tuple(method or ()),
        None if spaces is None else str(spaces),
        support,
        secure_noise,
    )
    if not quiet:
        say("calibrating the release's private selection to your epsilon (a minute or two)")
    plan = flow.plan(request)
    workers = workers or default_workers()
    flow.estimate(plan, workers)
    say(text.plan_text(plan), soft_wrap=True)
    if max_time is not None and plan.estimated_seconds and plan.estimated_seconds > max_time:
        raise ConfigError(
            f"the plan is estimated at {plan.estimated_seconds:.0f} s, over --max-time "
            f"{max_time:g}; lower --repeats or --candidates, or raise --max-time"
        )
    out = out or Path(f"advise-{data.stem}")
    record, table = flow.run_advice(
        plan, out, workers, quiet or as_json, lambda line: say(line, soft_wrap=True)
    )
    spent = flow.looking_cost(plan, out)
    report = text.write_report(plan, record, table, spent, out)
    if as_json:
        print(
            json.dumps(text.advice_json(plan, record, table, spent, out), indent=1, default=float)
        )
        return
    console.print(text.release_text(plan, record, out), soft_wrap=True)
    console.print(text.exact_text(plan, record, table), soft_wrap=True)
    console.print(text.spent_text(plan, spent), soft_wrap=True)
    console.print(f"report: {report}", soft_wrap=True)
    if math.isnan(spent["total"]):
        err_console.print("warning: the comparison's total epsilon could not be computed")
