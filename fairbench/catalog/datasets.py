"""What `fairbench describe DATASET` and `fairbench data check` show, as data.

A dataset is described from its adapter (files, checksums, options), its card (`datasets/
NAME.md` in a source checkout: source, licence, documented counts) and, where its files are
present and verify, the task it loads (rows, features, groups, label, split sizes). Without
the files the description still stands; the counts that need the data are None and
`problem` says what is missing and how to fetch it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from fairbench.catalog.fields import FieldRow, field_rows
from fairbench.datasets.base import Dataset
from fairbench.datasets.files import data_root, sha256_of
from fairbench.errors import DataError
from fairbench.task import Task

CARDS = Path(__file__).resolve().parent / "cards"  # package data: in a wheel install too
Status = Literal["verified", "generated", "missing", "corrupted"]


@dataclass(frozen=True)
class FileStatus:
    """One raw file under the data folder: `sha256_ok` is True when it matches the published
    checksum (or, lacking one, the adapter verified its content on load), False on a
    mismatch, None when absent or unchecked; `read` says the adapter reads this one."""

    dataset: str
    path: str
    present: bool
    sha256: str | None
    expected_sha256: str | None
    sha256_ok: bool | None
    read: bool
    url: str | None = None


@dataclass(frozen=True)
class Group:
    name: str
    rows: int


@dataclass(frozen=True)
class DataSummary:
    """Counts read off the loaded task (seed 0; the split sizes hold for every seed of a
    stratified split)."""

    rows: int
    features: int
    sensitive_attribute: str
    groups: list[Group]
    label: list[str]  # class names; [] for a regression target
    positive_rate: float | None
    splits: dict[str, int]


@dataclass(frozen=True)
class DatasetCard:
    kind: Literal["dataset"]
    name: str
    description: str
    version: str
    status: Status
    problem: str | None  # what is wrong and how to fix it, when not verified/generated
    data_root: str
    files: list[FileStatus]
    card_path: str | None
    card: dict[str, str]  # the card's key/value table (Source, Licence, Rows, ...)
    summary: DataSummary | None
    options: list[FieldRow] = field(default_factory=list)


def describe_dataset(cls: type[Dataset]) -> DatasetCard:
    adapter = cls()
    status, problem, task = load_status(adapter)
    card_path = CARDS / f"{cls.name}.md"
    return DatasetCard(
        kind="dataset",
        name=cls.name,
        description=cls.description,
        version=cls.version,
        status=status,
        problem=problem,
        data_root=str(data_root()),
        files=file_statuses(adapter, task),
        card_path=str(card_path) if card_path.is_file() else None,
        card=card_fields(card_path.read_text()) if card_path.is_file() else {},
        summary=None if task is None else summarise(task),
        options=field_rows(cls.Options),
    )


def load_status(adapter: Dataset) -> tuple[Status, str | None, Task | None]:
    """Load with the default options (seed 0): the task, or why not (the adapter's own
    one-line `DataError`, which names the fix)."""
    try:
        task = adapter.load(seed=0)
    except DataError as exc:
        missing = "missing data file" in str(exc)
        return ("missing" if missing else "corrupted"), str(exc), None
    return ("verified" if _declared(adapter) or _located(adapter) else "generated"), None, task


def file_statuses(adapter: Dataset, task: Task | None) -> list[FileStatus]:
    """The adapter's declared files and the ones it actually reads (an adapter such as credit
    reads the first present of several formats), each checked against its checksum."""
    root = data_root()
    declared = {f.path: f for f in adapter.files}
    read = _located(adapter) if task is not None else {}
    rows = []
    for rel in dict.fromkeys([*declared, *read]):
        spec, path = declared.get(rel), root / rel
        present = path.is_file()
        actual = sha256_of(path) if present else None
        expected = spec.sha256 if spec is not None and spec.sha256 else None
        if expected is not None and actual is not None:
            ok: bool | None = actual == expected
        else:
            ok = True if rel in read else None
        rows.append(
            FileStatus(
                adapter.name,
                rel,
                present,
                actual,
                expected,
                ok,
                rel in read,
                (spec.url or None) if spec is not None else None,
            )
        )
    return rows


def _declared(adapter: Dataset) -> bool:
    return bool(adapter.files)


def _located(adapter: Dataset) -> dict[str, Path]:
    try:
        return adapter.locate()
    except DataError:
        return {}


def summarise(task: Task) -> DataSummary:
    splits = {"train": task.train, "validation": task.val, "test": task.test}
    groups = np.concatenate([s.s for s in splits.values()])
    y = np.concatenate([s.y for s in splits.values()])
    sizes = np.bincount(groups, minlength=task.n_groups)
    return DataSummary(
        rows=len(y),
        features=task.n_features,
        sensitive_attribute=task.sensitive_name,
        groups=[Group(n, int(k)) for n, k in zip(task.group_names, sizes, strict=True)],
        label=list(task.label_names),
        positive_rate=float((y == 1).mean()) if len(task.label_names) == 2 else None,
        splits={name: len(part) for name, part in splits.items()},
    )


def card_fields(markdown: str) -> dict[str, str]:
    """The rows of a card's key/value table (the one with an empty header, `| | |`), with
    markdown backticks removed; {} for a card without one."""
    fields: dict[str, str] = {}
    in_table = False
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and all(c == "" for c in cells):
            in_table = True
        elif in_table and line.startswith("|") and not set("".join(cells)) <= set("-: "):
            fields[cells[0]] = "|".join(cells[1:]).replace("`", "")
        elif in_table and not line.startswith("|"):
            break
    return fields
