"""`fairbench list` and the `data` group: what is installed, and the raw datasets."""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from fairbench.cli.common import console, key_values
from fairbench.cli.csv_card import print_csv_card
from fairbench.errors import ConfigError

data_app = typer.Typer(help="Inspect and fetch the raw datasets.", no_args_is_help=True)


class Listable(str, Enum):
    methods = "methods"
    datasets = "datasets"
    configs = "configs"


def list_(
    what: Listable,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """List installed method plugins, dataset adapters or bundled configs."""
    if what is Listable.methods:
        from fairbench.methods import registry as methods

        found = sorted(methods().items())
        if as_json:
            print(json.dumps([_method_entry(name, cls) for name, cls in found]))
            return
        width = max(len(name) for name, _ in found)
        for name, cls in found:
            tags = ["private" if cls.private else "non-private"]
            tags += [f"knob: {cls.knob.name}"] if cls.knob else []
            tags += ["needs A at test"] if cls.sensitive_at_test else []
            tags += [f"reconstructed: {cls.reconstructed}"] if cls.reconstructed else []
            print(f"{name:{width}s} {cls.description} [{'; '.join(tags)}]")
    elif what is Listable.datasets:
        from fairbench.datasets import registry as datasets

        adapters = sorted(datasets().items())
        if as_json:
            print(json.dumps([{"name": n, "description": c.description} for n, c in adapters]))
            return
        for name, adapter in adapters:
            print(f"{name:12s} {adapter.description}")
    else:
        from fairbench.runner.config_files import KINDS, bundled

        configs = [(kind, path) for kind in KINDS for path in bundled(kind)]
        if as_json:
            print(json.dumps([{"name": p.stem, "kind": k, "path": str(p)} for k, p in configs]))
            return
        for kind, path in configs:
            print(f"{path.stem:28s} {kind:4s} {path}")


def _method_entry(name: str, cls) -> dict:
    knob = cls.knob if cls.knob is None or isinstance(cls.knob, str) else cls.knob.name
    return {
        "name": name,
        "description": cls.description,
        "private": cls.private,
        "knob": knob,
        "sensitive_at_test": cls.sensitive_at_test,
        "reconstructed": cls.reconstructed,
    }


@data_app.command("check")
def data_check(
    as_json: Annotated[
        bool, typer.Option("--json", help="print one JSON object per file (dataset, path, ...)")
    ] = False,
    csv: Annotated[
        Path | None, typer.Option(metavar="PATH", help="check your own CSV file and print its card")
    ] = None,
    label: Annotated[str | None, typer.Option(metavar="COL", help="--csv: label column")] = None,
    sensitive: Annotated[
        str | None, typer.Option(metavar="COL", help="--csv: sensitive column (its groups)")
    ] = None,
    positive: Annotated[
        str | None, typer.Option(metavar="VALUE", help="--csv: the label value that is 1")
    ] = None,
    numeric: Annotated[
        list[str] | None, typer.Option(metavar="COL", help="--csv: force a column numeric")
    ] = None,
    categorical: Annotated[
        list[str] | None, typer.Option(metavar="COL", help="--csv: force one categorical")
    ] = None,
    drop: Annotated[
        list[str] | None, typer.Option(metavar="COL", help="--csv: leave a column out")
    ] = None,
    missing: Annotated[
        str, typer.Option(metavar="drop|impute", help="--csv: rows with a missing feature")
    ] = "drop",
    group: Annotated[
        list[str] | None,
        typer.Option(metavar="VALUE=NAME", help="--csv: rename (merge) a sensitive value"),
    ] = None,
    other: Annotated[
        list[str] | None, typer.Option(metavar="VALUE", help="--csv: merge a value into other")
    ] = None,
    bounds: Annotated[
        Path | None, typer.Option(metavar="FILE", help="--csv: public bounds YAML")
    ] = None,
    strict: Annotated[bool, typer.Option(help="--csv: a group under 30 training rows fails")] = (
        False
    ),
    include_sensitive: Annotated[
        bool, typer.Option(help="--csv: the sensitive column is also an input")
    ] = False,
    delimiter: Annotated[str, typer.Option(help="--csv: the field separator")] = ",",
) -> None:
    """Verify every known dataset under the data folder: presence, checksum, rows, features.
    Exit 1 if a present file does not verify (missing files are reported, not failed).

    With --csv PATH --label COL --sensitive COL: check your own file instead (the options of
    a config's `csv:` entry, as flags) and print its card; a problem is one error line."""
    if csv is not None:
        from fairbench.datasets import get_dataset

        if label is None or sensitive is None:
            raise ConfigError("--csv needs --label COL and --sensitive COL")
        adapter = get_dataset(
            "csv",
            path=str(csv),
            label=label,
            sensitive=sensitive,
            positive=positive,
            numeric=numeric or [],
            categorical=categorical or [],
            drop=drop or [],
            missing=missing,
            groups=key_values(group, "--group", "Asian=other"),
            other=other or [],
            bounds=None if bounds is None else str(bounds),
            strict=strict,
            include_sensitive=include_sensitive,
            delimiter=delimiter,
        )
        print_csv_card(adapter, as_json)
        return
    from fairbench.catalog.datasets import file_statuses, load_status
    from fairbench.datasets import registry as datasets
    from fairbench.datasets.files import data_root

    checked = []
    for name, cls in sorted(datasets().items()):
        adapter = cls()
        status, problem, task = load_status(adapter)
        checked.append((name, status, problem, task, file_statuses(adapter, task)))
    bad = any(status == "corrupted" for _, status, _, _, _ in checked)
    if as_json:
        print(
            json.dumps(
                [
                    entry
                    for name, status, problem, _, files in checked
                    for entry in _file_entries(name, status, problem, files)
                ]
            )
        )
    else:
        _print_check(checked, data_root())
    if bad:
        raise typer.Exit(1)


def _file_entries(dataset: str, status: str, problem: str | None, files) -> list[dict]:
    """One object per raw file (path, present, sha256 ok, ...) with its dataset's status; a
    generated dataset, which has no file, gets one object with path null."""
    if not files:
        return [
            {
                "dataset": dataset,
                "path": None,
                "present": None,
                "sha256_ok": None,
                "status": status,
                "problem": problem,
            }
        ]
    return [{**dataclasses.asdict(f), "status": status, "problem": problem} for f in files]


def _print_check(checked, root) -> None:
    import numpy as np

    table = Table(title=f"datasets under {root}")
    for col in ("dataset", "status", "rows", "features", "groups", "label rate (mean) per group"):
        table.add_column(col)
    for name, status, problem, task, _ in checked:
        if task is None:
            shown = "missing" if status == "missing" else "[red]corrupted[/red]"
            table.add_row(name, shown, "", "", "", problem if status != "missing" else "")
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
        table.add_row(
            name,
            f"[green]{status}[/green]",
            f"{rows:,}",
            str(task.n_features),
            str(task.n_groups),
            ", ".join(rates),
        )
    console.print(table)


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


@data_app.command("bounds-template")
def bounds_template(
    csv: Annotated[Path, typer.Argument(metavar="CSV", help="your CSV file")],
    label: Annotated[str, typer.Option(metavar="COL", help="the label column")],
    sensitive: Annotated[str, typer.Option(metavar="COL", help="the sensitive column")],
    numeric: Annotated[
        list[str] | None, typer.Option(metavar="COL", help="force a column numeric")
    ] = None,
    categorical: Annotated[
        list[str] | None, typer.Option(metavar="COL", help="force one categorical")
    ] = None,
    drop: Annotated[
        list[str] | None, typer.Option(metavar="COL", help="leave a column out")
    ] = None,
    delimiter: Annotated[str, typer.Option(help="the field separator")] = ",",
    fill_from_data: Annotated[
        bool, typer.Option(help="fill ranges and lists from the data (NOT private; says so)")
    ] = False,
) -> None:
    """Print a public-bounds YAML to edit (`> bounds.yaml`): the feature columns with their
    inferred roles, ranges left empty for you to fill from public knowledge."""
    from fairbench.datasets.csv_bounds import bounds_template as template

    print(
        template(
            csv.absolute(),
            label,
            sensitive,
            numeric=numeric or [],
            categorical=categorical or [],
            drop=drop or [],
            delimiter=delimiter,
            fill_from_data=fill_from_data,
        ),
        end="",
    )
