"""One writer per run directory: an exclusive `flock` on RUN_DIR/.lock.

Two runs writing into one directory would both do all the work and race on config.yaml and
the report; the second one is refused at once instead, naming the process that holds the
directory. The lock is an advisory `fcntl.flock` on RUN_DIR/.lock, whose text says who holds
it (pid, start time, command line) for that message.

No stale locks: the kernel releases a flock when the last descriptor of it closes, which
happens when the holding process ends, however it ends (SIGKILL and power loss included). So
a lock whose holder is gone is simply free, and nothing ever has to clean one up. The
descriptor is not inherited by the worker processes the run starts (Python opens it
non-inheritable, and workers are spawned), so an orphaned worker cannot keep it either.

The file is removed on release, so that finished run directories hold only results (a
killed holder leaves the file behind, unlocked: the next run takes it over). A
process that opened the file just before its holder removed it could otherwise lock a file
no longer at that path while a third one locks the new file; taking the lock therefore
checks that the locked file is still the one at the path, and retries when it is not.

Re-entrant per thread: a caller may hold the lock around several steps (`fairbench run`:
writing the config, the trials, the report) that each take it too. Another thread of the
same process is refused like another process, since flock locks belong to open files.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fairbench.errors import RunLockedError

LOCK_FILE = ".lock"

_held: dict[tuple[int, Path], int] = {}  # (thread, resolved run directory) -> depth


@contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run directory's lock for the duration of the block, creating the directory
    (call it only once the run is validated: nothing is written before). Raises
    `RunLockedError` naming the holder when another process, or thread, holds it."""
    key = (threading.get_ident(), Path(run_dir).resolve())
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    fd = _acquire(Path(run_dir))
    _held[key] = 1
    try:
        yield
    finally:
        del _held[key]
        os.unlink(Path(run_dir) / LOCK_FILE)  # while still holding it: see the module note
        os.close(fd)  # releases the flock


def _acquire(run_dir: Path) -> int:
    """An open descriptor of RUN_DIR/.lock, exclusively flocked, with this process named in
    the file."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunLockedError(_refusal(run_dir, holder)) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:  # removed by the holder that released it
            same = False
        if same:
            break
        os.close(fd)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    record = {"pid": os.getpid(), "started": started, "command": " ".join(sys.argv)}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)
    return fd


def _holder(fd: int) -> dict[str, object]:
    """What the holder wrote about itself; {} when it has not written it yet."""
    try:
        return json.loads(os.pread(fd, 4096, 0) or b"{}")
    except ValueError:
        return {}


def _refusal(run_dir: Path, holder: dict[str, object]) -> str:
    if "pid" not in holder:  # it is between taking the lock and writing its name
        return f"{run_dir} is in use by another fairbench process; wait for it to finish"
    pid = holder["pid"]
    return (
        f"{run_dir} is in use by fairbench process {pid} (started {holder.get('started', '?')}); "
        f"wait for it to finish, or stop it (kill {pid}): the lock goes when it exits"
    )
