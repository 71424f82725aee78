"""SIGINT and SIGTERM during a run: stop at once, and let the caller clean up.

A scheduler's SIGTERM (SLURM, CI timeouts, `docker stop`) would otherwise kill the run
without its cleanup: worker processes left running, the lock file left behind. Both signals
are turned into one exception, `Stopped`, raised in the main thread wherever it is (waiting
for workers, or inside a trial that runs in-process). It derives from BaseException, like
KeyboardInterrupt, so that the per-trial `except Exception` that records a failed trial does
not mistake it for one.

Abandoning is safe at any point: the store commits whole trials in one transaction each
(`rundir.store`), so a trial interrupted half-way is simply not there, and resuming reruns it.
While the caller cleans up (terminating workers takes a moment), further signals are
ignored, so that a second Ctrl-C cannot cut the cleanup short; SIGKILL still ends everything,
and `runner.lifeline` makes sure workers follow.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(BaseException):
    """SIGINT or SIGTERM arrived (`signum`) while `stop_on_signals` was active."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, _frame: FrameType | None) -> None:
    for sig in SIGNALS:  # the first signal wins; the cleanup it starts runs to its end
        signal.signal(sig, signal.SIG_IGN)
    raise Stopped(signum)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Stopped`; the previous handlers come back
    afterwards. Outside the main thread (where Python delivers no signals) it does nothing,
    and a KeyboardInterrupt there is the caller's as before."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():  # None: set outside Python, not restorable
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
