"""Shared fixtures. Real data comes from $FAIRBENCH_DATA (CI: ../shared/datasets); tests that
need it are skipped where it is absent. Nothing here downloads."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _shared_data() -> Path | None:
    for candidate in (os.environ.get("FAIRBENCH_DATA"), REPO.parent / "shared" / "datasets"):
        if candidate and (Path(candidate) / "adult" / "adult.data").is_file():
            return Path(candidate).resolve()
    return None


SHARED_DATA = _shared_data()
needs_adult = pytest.mark.skipif(SHARED_DATA is None, reason="real Adult files not present")


@pytest.fixture(autouse=True)
def _data_env(monkeypatch):
    """Every test sees the real data folder (if any) unless it points elsewhere itself."""
    if SHARED_DATA is not None:
        monkeypatch.setenv("FAIRBENCH_DATA", str(SHARED_DATA))
    else:
        monkeypatch.delenv("FAIRBENCH_DATA", raising=False)


@pytest.fixture
def adult_copy(tmp_path) -> Path:
    """A writable copy of the Adult files under a temporary data root."""
    if SHARED_DATA is None:
        pytest.skip("real Adult files not present")
    (tmp_path / "adult").mkdir()
    for name in ("adult.data", "adult.test"):
        shutil.copy(SHARED_DATA / "adult" / name, tmp_path / "adult" / name)
    return tmp_path


@pytest.fixture
def cli(monkeypatch, capsys):
    """Run `fairbench ARGS...` in-process through the real entry point; returns
    (exit code, stdout, stderr)."""
    from fairbench.cli import main

    def invoke(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["fairbench", *args])
        code = 0
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err

    return invoke
