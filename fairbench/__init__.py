"""fairbench: differentially private fair learning, compared on the same footing."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dp-fairbench")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
