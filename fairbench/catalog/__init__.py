"""Descriptions of installed methods and datasets, as data (`fairbench describe` prints them).

`describe(name)` resolves a name among both registries: a method card or a dataset card. A name
that is neither (or, from a third-party plugin, both) is one `ConfigError` naming the close
matches or the known names.
"""

from __future__ import annotations

import dataclasses
import difflib
import math

from fairbench.catalog.datasets import DatasetCard, describe_dataset
from fairbench.catalog.methods import MethodCard, describe_method
from fairbench.errors import ConfigError


def describe(name: str) -> MethodCard | DatasetCard:
    from fairbench.datasets import registry as datasets
    from fairbench.methods import registry as methods

    method, dataset = methods().get(name), datasets().get(name)
    if method is not None and dataset is not None:
        raise ConfigError(
            f"{name!r} names both a method ({method.__module__}) and a dataset "
            f"({dataset.__module__}); uninstall or rename one of the plugins"
        )
    if method is not None:
        return describe_method(method)
    if dataset is not None:
        return describe_dataset(dataset)
    if name.lower().endswith((".csv", ".tsv", ".txt")):
        raise ConfigError(
            f"{name!r} is a file: your own CSV's card is `fairbench data check --csv {name} "
            "--label COL --sensitive COL`"
        )
    known = sorted(methods()) + sorted(datasets())
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    hint = (
        f"did you mean {' or '.join(close)}?"
        if close
        else f"known: methods {', '.join(sorted(methods()))}; "
        f"datasets {', '.join(sorted(datasets()))}"
    )
    raise ConfigError(f"no method or dataset named {name!r}; {hint} (see `fairbench list`)")


def as_json(card: MethodCard | DatasetCard) -> dict:
    """The card as plain JSON data: dataclasses as objects, a non-finite float (an `inf`
    default such as sgda's clip_norm) as the string "inf", which strict JSON parsers accept."""
    return _finite(dataclasses.asdict(card))


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


__all__ = [
    "DatasetCard",
    "MethodCard",
    "as_json",
    "describe",
    "describe_dataset",
    "describe_method",
]
