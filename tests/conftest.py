"""Shared fixtures and markers. Real data comes from $FAIRBENCH_DATA (CI: ../shared/datasets):
a test that reads a real file says which with `@pytest.mark.data("adult/adult.data", ...)` and is
skipped where one is absent (`-m "not data"` deselects them all). Nothing here downloads."""

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
ADULT_FILES = ("adult/adult.data", "adult/adult.test")
needs_adult = pytest.mark.data(*ADULT_FILES)


def present(path: str) -> bool:
    """Whether the real data folder holds `path` (relative to it)."""
    return SHARED_DATA is not None and (SHARED_DATA / path).is_file()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that use `adult_copy` read the real Adult files; every `data` test is skipped where a
    file it names is absent."""
    for item in items:
        if "adult_copy" in getattr(item, "fixturenames", ()):
            item.add_marker(needs_adult)
        missing = [f for mark in item.iter_markers("data") for f in mark.args if not present(f)]
        if missing:
            item.add_marker(pytest.mark.skip(reason=f"real data file absent: {missing[0]}"))


@pytest.fixture(autouse=True)
def _data_env(monkeypatch):
    """Every test sees the real data folder (if any) unless it points elsewhere itself."""
    if SHARED_DATA is not None:
        monkeypatch.setenv("FAIRBENCH_DATA", str(SHARED_DATA))
    else:
        monkeypatch.delenv("FAIRBENCH_DATA", raising=False)


@pytest.fixture
def adult_copy(tmp_path) -> Path:
    """A writable copy of the Adult files under a temporary data root (marked `data`)."""
    assert SHARED_DATA is not None  # skipped at collection otherwise
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
