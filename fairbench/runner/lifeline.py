"""Worker processes that end with the process that started them.

When the parent of a run is SIGKILLed (an OOM kill, `kill -9`, a crashed notebook kernel), no
handler runs and nothing terminates its workers: pool processes sit blocked on a pipe and Dask
workers wait minutes for a scheduler heartbeat to time out, holding cores and memory. Each
worker therefore arranges, as it starts, to die on its own when its parent goes:

- on Linux, `prctl(PR_SET_PDEATHSIG, SIGKILL)`: the kernel kills the worker the moment its
  parent exits (strictly, when the parent's thread that started it exits; fairbench's
  executors start workers from threads that live as long as the run);
- everywhere, a daemon thread that polls `os.getppid()` and exits the worker once it changes
  (an orphan is re-parented): the portable fallback, which also covers the thread subtlety
  above, at the cost of up to `POLL_SECONDS` of delay.

Both compare with the pid of the process that spawned the worker, read from multiprocessing,
so a parent that died before this ran is noticed too.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from typing import Any

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
POLL_SECONDS = 1.0
ORPHANED_EXIT = 3  # the status of a worker that exits because its parent is gone


def die_with_parent() -> None:
    """Make this worker process end when its parent does (see the module docstring)."""
    parent = multiprocessing.parent_process()
    parent_pid = parent.pid if parent is not None and parent.pid is not None else os.getppid()
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    watch_parent(parent_pid, POLL_SECONDS)


def watch_parent(parent_pid: int, interval: float) -> None:
    """Exit this process (status ORPHANED_EXIT) as soon as its parent is no longer
    `parent_pid`: checked now, then every `interval` seconds by a daemon thread."""

    def orphaned() -> bool:
        return os.getppid() != parent_pid

    if orphaned():
        os._exit(ORPHANED_EXIT)

    def watch() -> None:
        while not orphaned():
            time.sleep(interval)
        os._exit(ORPHANED_EXIT)  # no cleanup: the parent that would want results is gone

    threading.Thread(target=watch, name="fairbench-parent-watch", daemon=True).start()


def ignore_interrupts() -> None:
    """Leave SIGINT to the parent: a terminal's Ctrl-C reaches every process of the
    foreground group, and the parent, not each worker, decides what stops (and prints)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def dask_setup(worker: Any) -> None:
    """Dask preload hook (`LocalCluster(preload=[__name__])`), run in each local worker
    process as it starts: the same guarantees as for pool workers."""
    ignore_interrupts()
    die_with_parent()
