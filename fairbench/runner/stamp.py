"""The reproducibility stamp every trial row carries: which code, which libraries, which
machine produced it (the dataset checksums, the device and the ledger are in the row too)."""

from __future__ import annotations

import platform
import subprocess
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

LIBRARIES = ("opacus", "dp-accounting", "numpy", "pandas", "scipy")


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    """Output of a git command in fairbench's source tree; None outside a checkout."""
    source = Path(__file__).resolve().parent.parent
    try:
        done = subprocess.run(
            ["git", *args], cwd=source, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


@cache
def environment() -> dict[str, Any]:
    """Versions and the git commit (with whether the tree had uncommitted changes), computed
    once per process."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {
        "fairbench": _version("dp-fairbench"),
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
        "python": platform.python_version(),
        # torch's own version string: its build tag (+cpu, +cu130) is missing from some
        # installs' package metadata, and which build ran matters for reproducing a number
        "torch": torch.__version__,
        **{name: _version(name) for name in LIBRARIES},
        "machine": platform.machine(),
        "system": platform.system(),
    }


def stamp(device: str) -> dict[str, Any]:
    """The stamp of one trial: the environment plus the device it actually ran on."""
    return {**environment(), "device": device}
