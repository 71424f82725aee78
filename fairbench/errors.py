"""User-facing errors: each carries one line that names what is wrong and how to fix it.

The CLI prints ``error: <message>`` and exits non-zero for any of these; anything else is a bug
and keeps its traceback.
"""


class FairbenchError(Exception):
    """Base class for errors caused by the user's input or environment, not by a bug."""


class ConfigError(FairbenchError):
    """A malformed or invalid experiment config or command-line value."""


class DataError(FairbenchError):
    """A dataset file that is missing, corrupted or unparsable."""


class CalibrationError(ConfigError):
    """No noise scale or step count meets the target epsilon under these hyperparameters (e.g.
    a Laplace scale too small for epsilon 0.1). A config error for `fairbench run`; a search
    draw that is infeasible at that epsilon for `fairbench tune`, which counts it instead."""


class RunLockedError(FairbenchError):
    """The run directory is held by another running process (`rundir.lock`)."""


class Interrupted(Exception):
    """A run stopped by SIGINT (Ctrl-C) or SIGTERM: whole trials are stored, in-flight ones
    were abandoned and every worker is gone. Not a `FairbenchError`: nothing was wrong with
    the input. The CLI prints `interrupted: <this>` and exits `exit_code`, 128 + the signal
    number as shells report a process ended by a signal (130 for SIGINT, 143 for SIGTERM), so
    a script can tell a user's Ctrl-C from a scheduler's SIGTERM. `resume` is the command that
    continues the run; the layer that knows how the run was started may replace it."""

    def __init__(self, stored: int, total: int, signum: int, resume: str) -> None:
        super().__init__(stored, total, signum, resume)
        self.stored, self.total, self.signum, self.resume = stored, total, signum, resume

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def __str__(self) -> str:
        return f"{self.stored}/{self.total} trials stored; resume with: {self.resume}"
