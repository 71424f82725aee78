"""Method plugins, discovered through the `fairbench.methods` entry-point group."""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from typing import Any

from fairbench.errors import ConfigError
from fairbench.methods.base import FairnessSpec, Fitted, Method

GROUP = "fairbench.methods"


@cache
def registry() -> dict[str, type[Method]]:
    """Every installed method plugin, by name (built-ins register through entry points too)."""
    return {ep.name: ep.load() for ep in entry_points(group=GROUP)}


def method_class(name: str) -> type[Method]:
    """The plugin class registered as `name`; one clear error for an unknown name."""
    known = registry()
    if name not in known:
        raise ConfigError(f"unknown method {name!r}; known methods: {', '.join(sorted(known))}")
    return known[name]


def get_method(name: str, **hparams: Any) -> Method:
    """A method instance with validated hyperparameters."""
    return method_class(name)(**hparams)


__all__ = ["FairnessSpec", "Fitted", "Method", "get_method", "method_class", "registry"]
