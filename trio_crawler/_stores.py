"""The one place that knows which stores exist: a crawl's options in, a store out.

Everything else (the core, the engine shell, the command line, the outputs) talks to a
store through the seams of :mod:`trio_crawler._frontier` and never asks which kind it
holds. Adding a store is a module that implements those two interfaces, and a branch here.

Each durable store's module is imported only by a crawl that uses it: sqlite3, and the
scripts and client of the shared frontier, would add tens of milliseconds to the start of
every crawl in memory.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._options import ConfigError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ._config import CrawlConfig, CrawlOptions
    from ._frontier import Store
    from ._statefile_checks import StoredCrawl


def open_store(config: CrawlConfig) -> Store:
    """The store the options ask for: ``frontier`` (Redis), ``state`` (SQLite), or memory.

    A durable store is opened and checked here, before the crawl starts: a state file
    that is not ours, or in use, is refused now, having changed nothing. A shared frontier
    is reached when its session opens (``crawl()``), and refused then.

    Raises:
        ConfigError: The store cannot be used (a ``StateFileError``, a ``ClusterError``).
    """
    if config.frontier is not None:
        from ._store_redis import RedisFrontier

        return RedisFrontier(config)
    if config.state is not None:
        from ._store_sqlite import open_state_store

        return open_state_store(config)
    from ._store_memory import MemoryFrontier

    return MemoryFrontier(
        delay=config.delay, obey_robots=config.obey_robots, max_per_host=config.max_per_host
    )


def stored_crawl_now(*, state: str | None, roots: Sequence[str]) -> StoredCrawl | None:
    """What a state file says of the crawl it holds (its roots, and the options the run
    that made it had), for a later run given ``roots`` (normalised; empty to resume);
    None when the options name no state file, or it holds no crawl yet and roots are given.

    Only looks: the file is opened for the crawl by :func:`open_store`.

    Raises:
        ConfigError: The file holds no crawl and no roots are given, or another crawl;
            it cannot be used.
    """
    if state is None:
        return None
    from ._statefile_checks import stored_crawl

    return stored_crawl(state, roots=roots)


def check_output(options: CrawlOptions, output: str | None) -> None:
    """Refuse an ``-o`` file that the store would cut back to hold another pass's records:
    with ``state``, a file that holds the records of an earlier pass (a ``--recrawl`` is a
    new pass, and each pass writes a file of its own). The memory store writes a new file
    by design, and a shared frontier's process appends to its own.

    Only looks, before anything is opened for writing (see :mod:`trio_crawler._output`).

    Raises:
        ConfigError: The file holds another pass's records; the state file cannot be used.
    """
    if options.state is None or output is None or output == "-":
        return
    from ._statefile_checks import earlier_pass_written

    earlier = earlier_pass_written(options.state, output, recrawl=options.recrawl)
    if earlier is not None:
        raise ConfigError(
            "output", f"{output} holds the records of pass {earlier}; give a new file for this pass"
        )
