"""The version, written once here: ``pyproject.toml`` reads it for the package's metadata.

A constant rather than a lookup in the installed metadata, which imports
``importlib.metadata`` and reads the distribution's files: a quarter of the crawler's
start-up for one string.
"""

__version__ = "0.1.0"
