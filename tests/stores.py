"""Stores as a test axis: the core stepped by hand over any store, with no event loop.

The core's scenario tables (test_state.py, test_sitemaps.py) call ``CrawlState`` directly
and assert what it answers and counts after each step. :func:`make_core` builds that core
over the store a test is parametrised with, and, for a store that keeps its changes
elsewhere, drives the store's side by hand: before the core hands a request out and after
it takes an outcome, what waits is kept (a SQLite transaction committed at once, through
:meth:`StoredFrontier.commit_waiting`, in this thread). So a scenario sees the store's
answer as an engine's worker sees it once its URL is settled: an outcome that made a
record answers :class:`Recorded`, whichever store made it.

The Redis store is not on this table: its scheduling (delays, robots.txt, leases) runs in
the server's scripts on the server's clock, which a scenario on a virtual clock cannot
step; its scripts have a seeded fuzzer of their own (test_cluster_scripts.py), and the
crawl-level suites run on it through real servers (test_cluster.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trio_crawler._config import CrawlConfig
from trio_crawler._events import Committing, Recorded
from trio_crawler._frontier import FrontierLost, StoreRuntime
from trio_crawler._state import CrawlState
from trio_crawler._stats import FetchStatistic
from trio_crawler._store_sqlite import StoredFrontier
from trio_crawler._stores import open_store

# The stores every core scenario runs on.
STORES = ("memory", "sqlite")

# The time of day at the virtual clock's zero: what a store keeps as a wall-clock time.
WALL_AT_ZERO = 1_800_000_000.0


def _inline(function: Any) -> Any:
    raise AssertionError("a store driven by hand never awaits")


def _lost(exc: FrontierLost) -> None:
    raise exc


def make_core(
    store: str, roots: list[str], directory: Path, **options: Any
) -> tuple[CrawlState, list[FetchStatistic]]:
    """A core over ``store`` for a crawl of ``roots``, and the list its records go to."""
    written: list[FetchStatistic] = []
    if store == "sqlite":
        path = directory / f"crawl-{len(list(directory.iterdir()))}.db"
        options = {"state": str(path), **options}
    config = CrawlConfig.create(roots, **options)
    frontier = open_store(config)
    state = CrawlState(
        config,
        frontier=frontier,
        on_record=written.append,
        resumed=frontier.resumed(),
        keep_records=True,
    )
    if isinstance(frontier, StoredFrontier):
        _drive_by_hand(state, frontier, written)
    return state, written


def manual_runtime(state: CrawlState) -> StoreRuntime:
    """A runtime for a store driven by hand: a clock at zero, and nothing to await."""
    return StoreRuntime(
        clock=lambda: 0.0,
        wall_offset=WALL_AT_ZERO,
        run_in_thread=_inline,
        shielded=_inline,
        wake=lambda: None,
        on_lost=_lost,
        scheduling=lambda: not state.scheduling_stopped,
        limit_counts=lambda: state.limit_counts,
    )


def _drive_by_hand(state: CrawlState, store: StoredFrontier, written: list[FetchStatistic]) -> None:
    """Commit what waits around each step of the core, as the engine shell would await it."""
    store.use_runtime(manual_runtime(state))
    store.commit_waiting()  # the roots
    next_request = state.next_request
    attempt_finished = state.attempt_finished
    put_back = state.put_back

    def next_request_kept(*, now: float) -> Any:
        store.commit_waiting()  # the window's rows
        request = next_request(now=now)
        store.commit_waiting()  # the records of URLs settled unfetched
        return request

    def attempt_finished_kept(request: Any, outcome: Any, *, now: float) -> Any:
        result = attempt_finished(request, outcome, now=now)
        made = len(written)
        store.commit_waiting()
        if isinstance(result, Committing):
            assert len(written) == made + 1, "the transaction made no record"
            return Recorded(written[-1])
        return result

    def put_back_kept(request: Any) -> None:
        put_back(request)
        store.commit_waiting()

    state.next_request = next_request_kept  # type: ignore[method-assign]
    state.attempt_finished = attempt_finished_kept  # type: ignore[method-assign]
    state.put_back = put_back_kept  # type: ignore[method-assign]
