"""What the command modules share: the two consoles, parsing of KEY=VALUE options, the
executor options of `run` and `tune`, and the root group that keeps flags' help free of value
placeholders."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer
from rich.console import Console
from typer.core import TyperGroup, TyperOption

from fairbench.errors import ConfigError

console = Console()
err_console = Console(stderr=True)


class Executor(str, Enum):
    local = "local"
    dask = "dask"


ExecutorOption = Annotated[Executor, typer.Option(help="local processes, or a Dask cluster")]
SchedulerOption = Annotated[
    str | None, typer.Option(help="Dask scheduler address (default: a local cluster)")
]


def check_executor(executor: Executor, scheduler: str | None) -> None:
    """`--scheduler` only with `--executor dask`, and a cluster there that can run trials."""
    if scheduler is None:
        return
    if executor is not Executor.dask:
        raise ConfigError("--scheduler addresses a Dask cluster: add --executor dask")
    from fairbench.runner.dask_executor import check_scheduler

    check_scheduler(scheduler)


def key_values(items: list[str] | None, flag: str, example: str) -> dict[str, object]:
    """Repeated `FLAG KEY=VALUE` options as a dict, values parsed as YAML scalars."""
    import yaml

    parsed = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"{flag} {item!r}: write KEY=VALUE, e.g. {flag} {example}")
        parsed[key] = yaml.safe_load(value)
    return parsed


class BareFlagsGroup(TyperGroup):
    """The root command group. Typer's help shows a type placeholder after every option, so a
    flag reads `--json <bool>` as if it took a value: before the root parses anything, every
    flag in the command tree (`--help` included) has its placeholder removed."""

    # typer passes its own Context; the vendored click base it overrides has no public name
    def get_params(self, ctx: typer.Context) -> list:  # type: ignore[override]
        _bare_flags(self, ctx)
        return super().get_params(ctx)


def _bare_flags(command, ctx: typer.Context) -> None:
    for param in [*command.params, command.get_help_option(ctx)]:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _bare_flags(sub, ctx)
