"""Config files: the bundled ones found by kind and name, and the reading every loader shares.

Bundled configs live in one folder per kind (`configs/runs/`, `configs/tunes/`), so a name says
which command runs it. A config may start from another with `extends: BASE`: it inherits
BASE's keys and states only how it differs, under one merge rule (`merge`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from fairbench.errors import ConfigError

BUNDLED = Path(__file__).resolve().parent.parent / "configs"
KINDS = {"run": "runs", "tune": "tunes"}  # kind (its command) -> its folder under BUNDLED
EXTENDS = "extends"


def bundled(kind: str) -> list[Path]:
    """The bundled configs of one kind, sorted by name."""
    return sorted((BUNDLED / KINDS[kind]).glob("*.yaml"))


def resolve_path(name_or_path: str, kind: str) -> Path:
    """A config path, or the name of a bundled config of `kind` (`default`, `smoke`, ...)."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    own = BUNDLED / KINDS[kind] / f"{name_or_path}.yaml"
    if own.is_file():
        return own
    for other, folder in KINDS.items():
        if other != kind and (BUNDLED / folder / f"{name_or_path}.yaml").is_file():
            raise ConfigError(
                f"config {name_or_path!r} is a {other} config: run it with "
                f"`fairbench {other} {name_or_path}`"
            )
    names = ", ".join(p.stem for p in bundled(kind))
    raise ConfigError(
        f"{kind} config {name_or_path!r} not found: give a YAML path or one of: {names}"
    )


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`override` over `base`: where both hold a mapping under a key, the two are merged key by
    key (recursively); any other value (a list, a number, a string, null) replaces the base's
    whole, so a list is restated in full, never appended to."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def read_config(path: Path, kind: str) -> dict[str, Any]:
    """The keys a config file states, merged over those of its `extends:` chain."""
    return _read(path, kind, ())


def _read(path: Path, kind: str, chain: tuple[Path, ...]) -> dict[str, Any]:
    if path.resolve() in chain:
        cycle = " -> ".join(p.name for p in (*chain, path.resolve()))
        raise ConfigError(f"{chain[0]}: extends cycle: {cycle}; remove one of these `extends:`")
    data = read_yaml(path)
    base = data.pop(EXTENDS, None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"{path}: extends: give one config name or path, got {base!r}")
    return merge(_read(_base(path, base, kind), kind, (*chain, path.resolve())), data)


def _base(path: Path, base: str, kind: str) -> Path:
    """`extends: BASE` of the file at `path`: a path relative to that file's folder (`.yaml`
    may be left off), else a bundled config of the same kind by name."""
    for candidate in (path.parent / base, path.parent / f"{base}.yaml"):
        if candidate.is_file():
            return candidate
    bundled_base = BUNDLED / KINDS[kind] / f"{base}.yaml"
    if bundled_base.is_file():
        return bundled_base
    raise ConfigError(
        f"{path}: extends {base!r}: no such file beside it and no bundled {kind} config of "
        f"that name (`fairbench list configs`)"
    )


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML file that must hold a mapping of keys; malformed YAML named by its line."""
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(
            f"{path}:{where} malformed YAML ({getattr(exc, 'problem', exc)})"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys, got {type(data).__name__}")
    return data
