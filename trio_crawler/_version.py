"""The installed version, read once from the package metadata."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("trio-crawler")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
