"""Dataset adapters, discovered through the `fairbench.datasets` entry-point group."""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from typing import Any

from fairbench.datasets.base import Dataset
from fairbench.errors import ConfigError

GROUP = "fairbench.datasets"


@cache
def registry() -> dict[str, type[Dataset]]:
    """Every installed dataset adapter, by name (built-ins register through entry points too)."""
    return {ep.name: ep.load() for ep in entry_points(group=GROUP)}


def get_dataset(name: str, **options: Any) -> Dataset:
    """An adapter instance with validated options; one clear error for an unknown name.

    `csv` (a user's file, `datasets.csv_file`) is known here but not registered: every
    registered adapter loads without options, which listings and contract checks rely on.
    """
    if name == "csv":
        from fairbench.datasets.csv_file import CsvFile

        return CsvFile(**options)
    known = registry()
    if name not in known:
        raise ConfigError(
            f"unknown dataset {name!r}; known datasets: {', '.join(sorted(known))}, or a CSV "
            "file (`csv: PATH` with `label:` and `sensitive:`)"
        )
    return known[name](**options)


__all__ = ["Dataset", "get_dataset", "registry"]
