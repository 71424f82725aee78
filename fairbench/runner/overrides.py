"""Command-line overrides of a config, Hydra-style: `epsilons=[0.5,1] seeds=3
methods.raco-dp.knobs=[0.05]`, applied to the YAML before validation, so an override is checked
exactly like the file and the run's config.yaml records the values that ran."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from fairbench.errors import ConfigError

ENTRY_LISTS = ("methods", "datasets", "references")  # lists whose entries a path names


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`data` with each `dotted.key=YAML value` set; an entry of a list is named by its label,
    its name or its index (`methods.raco-dp.knobs`, `methods.0.knobs`)."""
    out = copy.deepcopy(data)
    for item in overrides:
        path, sep, raw = item.partition("=")
        if not sep or not path:
            raise ConfigError(
                f"override {item!r}: write KEY=VALUE, e.g. epsilons=[0.5,1] or "
                "methods.raco-dp.knobs=[0.05]"
            )
        try:
            value = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise ConfigError(f"override {item!r}: the value is not valid YAML") from None
        _set(out, path.split("."), value, item)
    return out


def _set(node: Any, keys: list[str], value: Any, item: str) -> None:
    for depth, key in enumerate(keys[:-1]):
        child = _child(node, key, keys[: depth + 1], item)
        if child is None:
            child = node[key] = {}
        node = child
    last = keys[-1]
    if isinstance(node, list):
        node[_entry_index(node, last, keys, item)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError(f"override {item!r}: {'.'.join(keys[:-1])} is not a mapping")


def _child(node: Any, key: str, where: list[str], item: str) -> Any:
    if isinstance(node, dict):
        child = node.get(key)
        if key in ENTRY_LISTS and isinstance(child, list):  # entries written as bare names
            node[key] = child = [{"name": e} if isinstance(e, str) else e for e in child]
        return child
    if isinstance(node, list):
        return node[_entry_index(node, key, where, item)]
    raise ConfigError(f"override {item!r}: {'.'.join(where[:-1])} is not a mapping")


def _entry_index(entries: list[Any], key: str, where: list[str], item: str) -> int:
    """The entry `key` names: an index, or the one entry whose label (else name) is `key`."""
    if key.isdigit() and int(key) < len(entries):
        return int(key)
    names = [e.get("label") or e.get("name") if isinstance(e, dict) else e for e in entries]
    matches = [i for i, name in enumerate(names) if name == key]
    if len(matches) != 1:
        listed = ", ".join(str(n) for n in names)
        problem = "names no entry" if not matches else "names several entries (use an index)"
        raise ConfigError(
            f"override {item!r}: {'.'.join(where[:-1])}.{key} {problem}; entries there: {listed}"
        )
    return matches[0]
