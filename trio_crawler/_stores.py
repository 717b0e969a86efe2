"""The one place that knows which stores exist: a crawl's options in, a store out.

Everything else (the core, the engine shell, the command line, the outputs) talks to a
store through the seams of :mod:`trio_crawler._frontier` and never asks which kind it
holds. Adding a store is a module that implements those two interfaces, and a branch here.

Each durable store's module is imported only by a crawl that uses it: sqlite3, and the
scripts and client of the shared frontier, would add tens of milliseconds to the start of
every crawl in memory.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ._options import ConfigError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

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
        delay=config.delay,
        obey_robots=config.obey_robots,
        max_per_host=config.max_per_host,
        adapt=config.adapt,
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


def check_output(options: CrawlOptions, output: str | None, *, option: str = "output") -> None:
    """Refuse an ``-o`` file (or the ``option`` file, ``items``) that the store would cut
    back to hold another pass's lines: with ``state``, a file that holds those of an
    earlier pass (a ``--recrawl`` is a new pass, and each pass writes a file of its own).
    The memory store writes a new file by design, and a shared frontier's process appends
    to its own.

    Only looks, before anything is opened for writing (see :mod:`trio_crawler._output`).

    Raises:
        ConfigError: The file holds another pass's records; the state file cannot be used.
    """
    if options.state is None or output is None or output == "-":
        return
    from ._statefile_checks import earlier_pass_written

    earlier = earlier_pass_written(options.state, output, recrawl=options.recrawl)
    if earlier is not None:
        what = "records" if option == "output" else option
        raise ConfigError(
            option, f"{output} holds the {what} of pass {earlier}; give a new file for this pass"
        )


def with_stored_options(
    roots: list[str] | str, options: Mapping[str, Any]
) -> tuple[list[str] | str, Mapping[str, Any]]:
    """The roots and options a run of a stored crawl runs with, as far as can be known
    without a server: for a state file that holds a crawl, its roots when none are given
    and its stored values of the options that say what to crawl, where left out; the
    roots and options given otherwise. A shared crawl's are found by :func:`find_stored_options`,
    and checked again as its session joins.

    Raises:
        ConfigError: The file cannot be used, holds another crawl, or an option that says
            what to crawl is given another value.
    """
    state = options.get("state")
    if not (isinstance(state, str | os.PathLike) and os.fspath(state)):
        return roots, options  # no state file (or an unusable path: CrawlConfig says so)
    from ._between_runs import keep_what_to_crawl
    from ._config import normalize_roots

    path = str(os.fspath(state))
    stored = stored_crawl_now(state=path, roots=normalize_roots(roots) if roots else ())
    if stored is None:  # a new crawl
        return roots, options

    kept = keep_what_to_crawl(options, stored.options, where=path)
    return roots or list(stored.roots), kept


async def find_stored_options(
    roots: Sequence[str], options: Mapping[str, Any]
) -> tuple[Sequence[str], Mapping[str, Any]]:
    """As :func:`with_stored_options`, for a store that must be asked over the network: a
    shared crawl's roots when none are given (waiting for the crawl to be created) and
    its stored values of the shared options left out.

    Raises:
        ConfigError: No server answers; no roots are given and no such crawl comes; a
            shared option is given another value than the crawl's.
    """
    frontier = options.get("frontier")
    if frontier is None:
        return roots, options
    from ._cluster import options_for_joining

    return await options_for_joining(
        frontier, options.get("crawl_id", "crawl"), roots=roots, given=options
    )


async def read_status(options: Mapping[str, Any]) -> str:
    """``--status``: the stored crawl's counts, one per line, as its store keeps them (a
    shared crawl's, on its server); changes nothing.

    Raises:
        ConfigError: The store holds no such crawl, or cannot be reached.
    """
    frontier = options.get("frontier")
    if frontier is None:  # the command line refuses --status without --frontier
        raise ConfigError("status", "needs frontier")
    from ._cluster import read_status as read_shared_status

    status = await read_shared_status(frontier, options.get("crawl_id", "crawl"))
    return status.lines()
