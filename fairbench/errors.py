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
