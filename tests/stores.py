"""Stores as a test axis: the core stepped by hand over any store, with no event loop.

The core's scenario tables (test_state.py, test_sitemaps.py) call ``CrawlState`` directly
and assert what it answers and counts after each step. :func:`make_core` builds that core
over the store a test is parametrised with, and, for a store that keeps its changes
elsewhere, drives the store's side by hand: before the core hands a request out and after
it takes an outcome, what waits is kept (a SQLite transaction committed at once, through
:meth:`StoredFrontier.commit_waiting`, in this thread). So a scenario sees the store's
answer as an engine's worker sees it once its URL is settled: an outcome that made a
record answers :class:`Recorded`, whichever store made it.

The Redis store runs against a real ``redis-server`` (one per test process, a crawl of
its own per scenario). Its session and its calls are async, so they run in an event loop
of their own, in a thread (an AnyIO blocking portal), while the scenario steps the core
in this one: each step's calls happen between two of the core's, as an engine's would.
Its scripts take the engine's clock on the server's scale (lua/prelude.lua), so a
scenario's virtual ``now`` is the time the server sees too.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from trio_crawler._config import CrawlConfig
from trio_crawler._events import Committing, Recorded
from trio_crawler._frontier import FrontierLost, StoreRuntime
from trio_crawler._state import CrawlState
from trio_crawler._stats import FetchStatistic
from trio_crawler._store_redis import RedisFrontier
from trio_crawler._store_sqlite import StoredFrontier
from trio_crawler._stores import open_store

# The stores every core scenario runs on.
STORES = ("memory", "sqlite", "redis")

T = TypeVar("T")
_crawl_ids = itertools.count()

# The time of day at the virtual clock's zero: what a store keeps as a wall-clock time.
WALL_AT_ZERO = 1_800_000_000.0


def _inline(function: Any) -> Any:
    raise AssertionError("a store driven by hand never awaits")


def _lost(exc: FrontierLost) -> None:
    raise exc


def make_core(
    store: str,
    roots: list[str],
    directory: Path,
    *,
    redis_url: str = "",
    cleanup: contextlib.ExitStack | None = None,
    writes_reported: bool = False,
    **options: Any,
) -> tuple[CrawlState, list[FetchStatistic]]:
    """A core over ``store`` for a crawl of ``roots``, and the list its records go to.

    A Redis store needs the server's URL, and ``cleanup`` to leave its session (and stop
    its event loop) when the test ends. With ``writes_reported`` the core is driven as by
    a transport that says when it writes a request (:func:`_report_writes`).
    """
    written: list[FetchStatistic] = []
    if store == "sqlite":
        path = directory / f"crawl-{len(list(directory.iterdir()))}.db"
        options = {"state": str(path), **options}
    elif store == "redis":
        # max_tasks sizes the leases the store takes ahead, for that many workers; a
        # scenario asks for as many requests as it likes, as no engine would.
        crawl_id = f"scenario-{next(_crawl_ids)}"
        options = {"frontier": redis_url, "crawl_id": crawl_id, "max_tasks": 1000, **options}
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
    elif isinstance(frontier, RedisFrontier):
        assert cleanup is not None, "a Redis store needs cleanup"
        _drive_through_portal(state, frontier, written, cleanup)
    if writes_reported:
        _report_writes(state)
    return state, written


def called_early(state: CrawlState) -> float:
    """How long before a host's time the core wakes to ask its store for it: the Redis
    store, waiting for work to come, calls that early and leases it ahead then (EARLY,
    with one request at a time to a host); the others wake at the time itself."""
    frontier = state.frontier
    return frontier.link.early if isinstance(frontier, RedisFrontier) else 0.0


def _report_writes(state: CrawlState) -> None:
    """Start each attempt as an engine does when its transport reports writes: the host
    held (``sent_later``) until ``request_sent``, which comes here at the same moment.

    A scenario then steps the path a crawl on the crawler's own transport takes, and must
    see what it sees on the other: a write at the attempt's start is the start."""
    attempt_started = state.attempt_started
    request_sent = state.request_sent

    def attempt_started_reported(request: Any, *, now: float) -> None:
        attempt_started(request, now=now, sent_later=True)
        request_sent(request, now=now)

    state.attempt_started = attempt_started_reported  # type: ignore[method-assign]


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
        loop_clock=False,
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

    def attempt_finished_kept(
        request: Any,
        outcome: Any,
        *,
        now: float,
        started: float | None = None,
        ended: float | None = None,
    ) -> Any:
        result = attempt_finished(request, outcome, now=now, started=started, ended=ended)
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


async def _shielded(function: Callable[[], Awaitable[T]]) -> T:
    with anyio.CancelScope(shield=True):
        return await function()


def channel_tells(state: CrawlState, told: Callable[[RedisFrontier], bool]) -> threading.Event:
    """An event set once the crawl's channel has woken the Redis store of ``state`` and
    ``told(store)`` holds: a scenario that steps a shared crawl's core by hand waits for it
    where an engine's dispatcher would be woken.

    A process that found nothing to lease looks again only when the server said it would
    have work, or when the channel tells it sooner (work comes, the crawl is finished).
    The message comes in the store's own event loop, in its own time: on a loaded machine
    it came after a scenario's next step, which found the process still idle for half a
    lease, or the crawl not finished."""
    frontier = state.frontier
    assert isinstance(frontier, RedisFrontier)
    heard = threading.Event()
    woken = frontier.wake

    def wake() -> None:
        woken()
        if told(frontier):
            heard.set()

    frontier.wake = wake  # type: ignore[method-assign]
    return heard


def _drive_through_portal(
    state: CrawlState,
    store: RedisFrontier,
    written: list[FetchStatistic],
    cleanup: contextlib.ExitStack,
) -> None:
    """Open the store's session in an event loop of its own, and around each step of the
    core make the calls the engine shell would await: a flush (and a lease of work) before
    a request is handed out, request_sent() as an attempt starts or, for a transport that
    reports when it writes a request, as the core is told so, settle() when a URL is done,
    a flush after anything else that changed the store."""
    portal: BlockingPortal = cleanup.enter_context(start_blocking_portal(backend="trio"))
    clock = [0.0]
    runtime = StoreRuntime(
        clock=lambda: clock[0],
        wall_offset=WALL_AT_ZERO,
        run_in_thread=_inline,
        shielded=_shielded,
        wake=lambda: None,
        on_lost=_lost,
        scheduling=lambda: not state.scheduling_stopped,
        limit_counts=lambda: state.limit_counts,
        loop_clock=False,
    )
    cleanup.enter_context(portal.wrap_async_context_manager(store.session(runtime)))

    def flush(*, starved: bool = False) -> None:
        # The scenario's clock jumps where the renewing task's would tick: renew each time.
        store.queue_renewal()
        portal.call(lambda: store.flush(starved=starved))

    next_request = state.next_request
    attempt_started = state.attempt_started
    request_sent = state.request_sent
    attempt_finished = state.attempt_finished
    put_back = state.put_back

    def next_request_kept(*, now: float) -> Any:
        clock[0] = max(clock[0], now)
        flush(starved=True)  # what waits, and a lease of work
        request = next_request(now=now)
        flush()  # the records of URLs settled unfetched, robots.txt turned away
        return request

    def attempt_started_kept(request: Any, *, now: float, sent_later: bool = False) -> None:
        clock[0] = max(clock[0], now)
        attempt_started(request, now=now, sent_later=sent_later)
        if not sent_later:
            portal.call(store.request_sent, request)

    def request_sent_kept(request: Any, *, now: float) -> bool:
        clock[0] = max(clock[0], now)
        let_go = request_sent(request, now=now)
        portal.call(store.request_sent, request)
        return let_go

    def attempt_finished_kept(
        request: Any,
        outcome: Any,
        *,
        now: float,
        started: float | None = None,
        ended: float | None = None,
    ) -> Any:
        clock[0] = max(clock[0], now)
        result = attempt_finished(request, outcome, now=now, started=started, ended=ended)
        made = len(written)
        if isinstance(result, Committing):
            portal.call(store.settle, request)
            assert len(written) == made + 1, "the shared frontier made no record"
            return Recorded(written[-1])
        flush()
        return result

    def put_back_kept(request: Any) -> None:
        put_back(request)
        flush()

    state.next_request = next_request_kept  # type: ignore[method-assign]
    state.attempt_started = attempt_started_kept  # type: ignore[method-assign]
    state.request_sent = request_sent_kept  # type: ignore[method-assign]
    state.attempt_finished = attempt_finished_kept  # type: ignore[method-assign]
    state.put_back = put_back_kept  # type: ignore[method-assign]
    flush()  # the roots


@contextlib.contextmanager
def no_cleanup() -> Iterator[None]:
    yield
