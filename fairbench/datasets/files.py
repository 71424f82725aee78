"""Raw data files: where they live, checksum verification and the real download path."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from fairbench.errors import DataError

DATA_ENV = "FAIRBENCH_DATA"


@dataclass(frozen=True)
class DataFile:
    """A raw file a dataset adapter reads, with its published checksum and download URL."""

    path: str  # relative to the data root, e.g. "adult/adult.data"
    sha256: str  # "" where no verified checksum exists: the adapter verifies the content
    url: str
    direct: bool = True  # False: a landing page (login, link in a README), not the file itself


def data_root() -> Path:
    """The data folder: ``$FAIRBENCH_DATA`` if set, else the user cache dir."""
    env = os.environ.get(DATA_ENV)
    return Path(env).expanduser() if env else Path(platformdirs.user_cache_dir("fairbench"))


def _where(root: Path) -> str:
    source = f"${DATA_ENV}" if os.environ.get(DATA_ENV) else "the default cache"
    return f"{root} ({source})"


_verified: dict[tuple[str, int, int], str] = {}


def sha256_of(path: Path) -> str:
    """Checksum of a file, memoised on (path, size, mtime) so repeated loads stay cheap."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _verified:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
        _verified[key] = digest.hexdigest()
    return _verified[key]


def locate(dataset: str, files: tuple[DataFile, ...], root: Path | None = None) -> dict[str, Path]:
    """Find and verify a dataset's files; raise a one-line `DataError` naming the fix otherwise."""
    root = data_root() if root is None else root
    found: dict[str, Path] = {}
    for f in files:
        path = root / f.path
        if not path.is_file():
            raise DataError(
                f"{dataset}: missing data file {path}; looked in {_where(root)}. "
                f"Run `fairbench data fetch {dataset}` or set {DATA_ENV} to a folder "
                f"holding {f.path}"
            )
        actual = sha256_of(path)
        if actual != f.sha256:
            raise DataError(
                f"{dataset}: checksum mismatch for {path} (sha256 {actual[:12]}…, expected "
                f"{f.sha256[:12]}…); the file is corrupted or a different version: delete it and "
                f"run `fairbench data fetch {dataset}`"
            )
        found[f.path] = path
    return found


def fetch(dataset: str, files: tuple[DataFile, ...], root: Path | None = None) -> list[Path]:
    """Download missing files from their public source, verify them, and move them into place.

    A file is written under its final name only after its checksum matched, so an interrupted
    or corrupted download never leaves a file that later loads would trust.
    """
    root = data_root() if root is None else root
    written = []
    for f in files:
        target = root / f.path
        if target.is_file() and sha256_of(target) == f.sha256:
            continue
        if not f.direct:
            raise DataError(
                f"{dataset}: {f.path} has no direct download; get it from {f.url} and put it at "
                f"{target} (sha256 {f.sha256[:12]}…)"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=target.parent, delete=False) as tmp:
            try:
                with urllib.request.urlopen(f.url, timeout=60) as response:
                    shutil.copyfileobj(response, tmp)
            except OSError as exc:
                os.unlink(tmp.name)
                raise DataError(f"{dataset}: could not download {f.url}: {exc}") from exc
        actual = sha256_of(Path(tmp.name))
        if f.sha256 and actual != f.sha256:
            os.unlink(tmp.name)
            raise DataError(
                f"{dataset}: downloaded {f.url} but its sha256 is {actual[:12]}…, expected "
                f"{f.sha256[:12]}…; the source changed or the download was corrupted"
            )
        os.replace(tmp.name, target)
        written.append(target)
    return written
