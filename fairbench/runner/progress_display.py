"""How a running grid shows its progress: rich's live bar on a terminal, plain lines elsewhere.

A live bar redraws one line in place, which a CI log or `2> run.log` cannot show: there it
printed nothing until the end. Off a terminal, one line such as
`trials 37/120 (31%) elapsed 1m12s eta 2m30s, 0 failed` goes to stderr at most every
FAIRBENCH_PROGRESS_INTERVAL seconds (10 by default) as trials finish, and once at the end:
enough to see a job is alive and when it will end, without flooding the log. `quiet`
silences both.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich import get_console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from fairbench.errors import ConfigError

INTERVAL_ENV = "FAIRBENCH_PROGRESS_INTERVAL"
DEFAULT_INTERVAL = 10.0

Advance = Callable[[bool], None]  # called once per finished trial: advance(failed)


def duration(seconds: float) -> str:
    """45s, 1m12s, 2h03m: short enough for a log line, precise enough for an ETA."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class PlainProgress:
    """Progress lines on stderr, at most one per `interval` seconds, plus the final one."""

    def __init__(
        self,
        total: int,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
        noun: str = "trials",
    ):
        self.total, self.interval, self.clock, self.noun = total, interval, clock, noun
        self.done = self.failed = 0
        self.start = self.last = clock()
        self.shown: int | None = None  # `done` at the last line printed

    def advance(self, failed: bool) -> None:
        self.done += 1
        self.failed += failed
        if self.clock() - self.last >= self.interval:
            self.show()

    def finish(self) -> None:
        if self.total and self.shown != self.done:
            self.show()

    def line(self) -> str:
        elapsed = self.clock() - self.start
        eta = duration(elapsed / self.done * (self.total - self.done)) if self.done else "?"
        percent = 100 * self.done / self.total if self.total else 100.0
        return (
            f"{self.noun} {self.done}/{self.total} ({percent:.0f}%) elapsed "
            f"{duration(elapsed)} eta {eta}, {self.failed} failed"
        )

    def show(self) -> None:
        print(self.line(), file=sys.stderr, flush=True)
        self.last, self.shown = self.clock(), self.done


def progress_interval() -> float:
    """Seconds between plain progress lines, from FAIRBENCH_PROGRESS_INTERVAL."""
    raw = os.environ.get(INTERVAL_ENV)
    if raw is None:
        return DEFAULT_INTERVAL
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise ConfigError(f"{INTERVAL_ENV}={raw!r}: set it to a number of seconds >= 0, e.g. 10")
    return value


@contextmanager
def trial_progress(total: int, quiet: bool, noun: str = "trials") -> Iterator[Advance]:
    """`advance(failed)` for each of `total` trials (or other units of work, `noun`), shown as
    the output allows (module docstring); nothing when `quiet`."""
    if quiet:
        yield lambda failed: None
    elif get_console().is_terminal:
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
        )
        with Progress(*columns) as bar:
            task = bar.add_task(noun, total=total)
            yield lambda failed: bar.advance(task)
    else:
        plain = PlainProgress(total, progress_interval(), noun=noun)
        yield plain.advance
        plain.finish()
