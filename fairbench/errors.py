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
