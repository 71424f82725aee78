"""fairbench: differentially private fair learning, compared on the same footing."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dp-fairbench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = ["Run", "__version__", "load_run", "run"]


def __getattr__(name: str):
    """`fairbench.run`, `fairbench.load_run` and `fairbench.Run`, imported on first use so that
    `import fairbench` (and the CLI's start-up) does not pay for pandas, torch or matplotlib."""
    if name in ("Run", "load_run", "run"):
        from fairbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'fairbench' has no attribute {name!r}")
