"""Method plugins, discovered through the `fairbench.methods` entry-point group, or added at
run time with `register` (a script, a notebook, a test: no package metadata needed)."""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from typing import Any

from fairbench.errors import ConfigError
from fairbench.methods.base import Method
from fairbench.methods.trial import FairnessSpec, Fitted

GROUP = "fairbench.methods"
_REGISTERED: dict[str, type[Method]] = {}  # added by `register`; kept across cache_clear()


@cache
def registry() -> dict[str, type[Method]]:
    """Every installed method plugin, by name (built-ins register through entry points too),
    then those registered at run time."""
    return {ep.name: ep.load() for ep in entry_points(group=GROUP)} | _REGISTERED


def register(cls: type[Method]) -> type[Method]:
    """Add a method class to this process's registry under `cls.name` (usable as a decorator).
    This process only: a run with worker processes (`--workers` > 1, Dask) needs the entry point.
    Registering the same class twice is harmless; another class under a taken name is refused."""
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise ConfigError(f"register: {cls!r} is not a Method subclass")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"register: {cls.__name__} has no `name`")
    taken = registry().get(name)
    where = (cls.__module__, cls.__qualname__)
    if taken is not None and (taken.__module__, taken.__qualname__) != where:  # reload: same
        raise ConfigError(
            f"register: method name {name!r} is taken by {taken.__module__}.{taken.__qualname__}"
        )
    _REGISTERED[name] = cls
    registry.cache_clear()
    return cls


def method_class(name: str) -> type[Method]:
    """The plugin class registered as `name`; one clear error for an unknown name."""
    known = registry()
    if name not in known:
        raise ConfigError(f"unknown method {name!r}; known methods: {', '.join(sorted(known))}")
    return known[name]


def get_method(name: str, **hparams: Any) -> Method:
    """A method instance with validated hyperparameters."""
    return method_class(name)(**hparams)


__all__ = [
    "FairnessSpec",
    "Fitted",
    "Method",
    "get_method",
    "method_class",
    "register",
    "registry",
]
