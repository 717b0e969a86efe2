"""trio_crawler: the 500 Lines asyncio web crawler, ported to Trio.

The public API is :class:`Crawler` (the Trio engine), :class:`FetchStatistic` (one record
per finished URL) and :class:`Page` (what a page handler is given). The private modules are
re-exported here so that their names can change without breaking anyone.
"""

from ._handler import Page as Page
from ._options import ConfigError as ConfigError
from ._stats import FetchStatistic as FetchStatistic
from ._version import __version__ as __version__
from .engine_trio import Crawler as Crawler

__all__ = ["ConfigError", "Crawler", "FetchStatistic", "Page", "__version__"]
