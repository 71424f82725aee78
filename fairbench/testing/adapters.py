"""The dataset-adapter contract, checked on an instance: a seed fixes a well-formed split."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from fairbench.datasets.base import Dataset
from fairbench.task import Split, Task

PARTS = ("train", "val", "test")


def _fail(name: str, check: str, why: str) -> None:
    raise AssertionError(" ".join(f"dataset {name}: check {check} failed: {why}".split()))


def _same(a: Task, b: Task) -> bool:
    """Bit-identical parts (features, labels, groups) and the same provenance."""
    return a.provenance == b.provenance and all(
        np.array_equal(getattr(getattr(a, p), f), getattr(getattr(b, p), f))
        for p in PARTS
        for f in ("X", "y", "s")
    )


def _split_problem(task: Task, part: str) -> str | None:
    """What is wrong with one part of a task, or None."""
    split: Split = getattr(task, part)
    if len(split) == 0:
        return "is empty"
    if not np.issubdtype(split.X.dtype, np.floating) or not np.isfinite(split.X).all():
        return f"X must be finite floats (dtype {split.X.dtype})"
    if split.X.shape[1] != len(task.feature_names):
        return f"X has {split.X.shape[1]} columns for {len(task.feature_names)} feature names"
    y = split.y
    labels = np.issubdtype(y.dtype, np.integer) and 0 <= y.min() <= y.max() < task.n_classes
    if task.kind == "classification" and not labels:
        return f"y must be integers in [0, {task.n_classes})"
    if task.kind == "regression" and not np.isfinite(split.y).all():
        return "y (regression) must be finite"
    s = split.s
    if not (np.issubdtype(s.dtype, np.integer) and 0 <= s.min() <= s.max() < task.n_groups):
        return f"s must be integers in [0, {task.n_groups}) (one per group name)"
    return None


def _sizes(task: Task) -> tuple[int, ...]:
    """Rows in train (before any `n_train` subsample), validation and test."""
    before = task.provenance.preprocessing.get("train_rows_before_subsample", len(task.train))
    return (before, len(task.val), len(task.test))


def iter_adapter_checks(adapter: Dataset, seed: int = 0, root: Path | None = None) -> Iterator[str]:
    """`check_adapter`, one check at a time (the names of those passed, as they pass)."""
    name = getattr(adapter, "name", type(adapter).__name__)
    first, again = adapter.load(seed, root), adapter.load(seed, root)
    if not _same(first, again):
        _fail(name, "deterministic-split", f"two loads with seed {seed} differ")
    yield "deterministic-split"
    for part in PARTS:
        problem = _split_problem(first, part)
        if problem:
            _fail(name, "task-fields", f"{part}: {problem}")
    if len(first.group_names) < 2 or len(first.label_names) == 1:
        _fail(name, "task-fields", "needs two or more group names and zero or 2+ label names")
    missing = set(range(first.n_groups)) - set(np.unique(first.train.s).tolist())
    if missing:
        _fail(name, "task-fields", f"groups {sorted(missing)} have no training rows")
    yield "task-fields"
    yield from _provenance(adapter, first, name)
    other = adapter.load(seed + 1, root)
    if _same(first, other):
        _fail(name, "seed-changes-split", f"seeds {seed} and {seed + 1} gave the same split")
    yield "seed-changes-split"
    if sum(_sizes(first)) != sum(_sizes(other)):
        _fail(
            name,
            "part-sizes",
            f"seeds {seed} and {seed + 1} split {sum(_sizes(first))} "
            f"and {sum(_sizes(other))} rows: a split must partition one fixed table",
        )
    yield "part-sizes"


def _provenance(adapter: Dataset, task: Task, name: str) -> Iterator[str]:
    """Each raw file read is named with its checksum, so a result can be traced to its data."""
    sha = task.provenance.sha256
    if not isinstance(sha, dict) or not all(isinstance(v, str) and v for v in sha.values()):
        _fail(name, "provenance-sha256", f"provenance.sha256 must map files to checksums: {sha}")
    if getattr(adapter, "files", ()) and not sha:
        _fail(name, "provenance-sha256", "the adapter reads files but records no checksum")
    if task.provenance.split_seed is None or task.provenance.dataset != task.name:
        _fail(name, "provenance-sha256", "provenance must name the dataset and the split seed")
    yield "provenance-sha256" + ("" if sha else " (no raw files read)")


def check_adapter(adapter: Dataset, seed: int = 0, root: Path | None = None) -> list[str]:
    """Load `adapter` (from `root`, default its data folder) with `seed` twice and with
    `seed + 1` once; return the checks passed, or raise `AssertionError` (one line naming the
    dataset and the check) at the first failure.

    Parts are checked non-empty and together of one size whatever the seed, not row by row:
    without the split's indices, duplicate records (common in one-hot tables: a third of
    COMPAS's distinct rows recur) make a row comparison unreliable."""
    return list(iter_adapter_checks(adapter, seed, root))
