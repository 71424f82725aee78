"""`fairbench list` and the `data` group: what is installed, and the raw datasets."""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer
from rich.table import Table

from fairbench.cli.common import console, key_values
from fairbench.errors import DataError

data_app = typer.Typer(help="Inspect and fetch the raw datasets.", no_args_is_help=True)


class Listable(str, Enum):
    methods = "methods"
    datasets = "datasets"
    configs = "configs"


def list_(what: Listable) -> None:
    """List installed method plugins, dataset adapters or bundled configs."""
    if what is Listable.methods:
        from fairbench.methods import registry as methods

        found = sorted(methods().items())
        width = max(len(name) for name, _ in found)
        for name, cls in found:
            tags = ["private" if cls.private else "non-private"]
            tags += [f"knob: {cls.knob.name}"] if cls.knob else []
            tags += ["needs A at test"] if cls.sensitive_at_test else []
            tags += [f"reconstructed: {cls.reconstructed}"] if cls.reconstructed else []
            print(f"{name:{width}s} {cls.description} [{'; '.join(tags)}]")
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


@data_app.command("fetch")
def data_fetch(
    dataset: str,
    option: Annotated[
        list[str] | None,
        typer.Option(metavar="KEY=VALUE", help="adapter option, e.g. state=AL (repeatable)"),
    ] = None,
) -> None:
    """Download a dataset's raw files from their public source into the data folder."""

    from fairbench.datasets import get_dataset
    from fairbench.datasets.base import Dataset
    from fairbench.datasets.files import data_root

    adapter = get_dataset(dataset, **key_values(option, "--option", "state=AL"))
    if not adapter.files and type(adapter).fetch is Dataset.fetch:
        console.print(f"{dataset} is generated; nothing to fetch")
        return
    written = adapter.fetch(data_root())
    console.print(f"{dataset}: {len(written)} file(s) downloaded and verified under {data_root()}")
