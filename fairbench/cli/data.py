"""`fairbench list` and the `data` group: what is installed, and the raw datasets."""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from typing import Annotated

import typer
from rich.table import Table

from fairbench.cli.common import console, key_values

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

        found = sorted(datasets().items())
        if as_json:
            print(json.dumps([{"name": n, "description": c.description} for n, c in found]))
            return
        for name, cls in found:
            print(f"{name:12s} {cls.description}")
    else:
        from fairbench.runner.config import BUNDLED

        paths = sorted(BUNDLED.glob("*.yaml"))
        if as_json:
            print(json.dumps([{"name": p.stem, "path": str(p)} for p in paths]))
            return
        for path in paths:
            print(f"{path.stem:12s} {path}")


def _method_entry(name: str, cls) -> dict:
    knob = cls.knob if cls.knob is None or isinstance(cls.knob, str) else cls.knob.name
    return {"name": name, "description": cls.description, "private": cls.private,
            "knob": knob, "sensitive_at_test": cls.sensitive_at_test,
            "reconstructed": cls.reconstructed}  # fmt: skip


@data_app.command("check")
def data_check(
    as_json: Annotated[
        bool, typer.Option("--json", help="print one JSON object per file (dataset, path, ...)")
    ] = False,
) -> None:
    """Verify every known dataset under the data folder: presence, checksum, rows, features.
    Exit 1 if a present file does not verify (missing files are reported, not failed)."""
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
        print(json.dumps([entry for name, status, problem, _, files in checked
                          for entry in _file_entries(name, status, problem, files)]))  # fmt: skip
    else:
        _print_check(checked, data_root())
    if bad:
        raise typer.Exit(1)


def _file_entries(dataset: str, status: str, problem: str | None, files) -> list[dict]:
    """One object per raw file (path, present, sha256 ok, ...) with its dataset's status; a
    generated dataset, which has no file, gets one object with path null."""
    if not files:
        return [{"dataset": dataset, "path": None, "present": None, "sha256_ok": None,
                 "status": status, "problem": problem}]  # fmt: skip
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
        table.add_row(name, f"[green]{status}[/green]", f"{rows:,}", str(task.n_features),
                      str(task.n_groups), ", ".join(rates))  # fmt: skip
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
