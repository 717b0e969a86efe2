"""What every engine's ``Crawler`` shares: options, state, attributes and its lifecycle.

Engines differ only in how they schedule: a nursery and a channel, a task group and a
memory object stream, or the chapter's queue with ``join()`` and ``cancel()``. Everything
else a crawler is lives here, in the core it holds (:class:`~trio_crawler._state.CrawlState`)
or in the :class:`~trio_crawler._fetch.Fetcher` it holds (clients and attempts), so that the
engine modules stay short enough to read side by side and a behaviour fixed once is fixed
for all of them.

A Crawler lives once: :class:`Phase` NEW, then CRAWLING inside ``crawl()``, then ENDED.
:meth:`CrawlerBase.stop` may come in any phase; before ``crawl()`` it makes the crawl end
at once, during it the engine cuts the crawl short, after it nothing happens.
"""

from __future__ import annotations

import abc
import enum
import functools
import inspect
import logging
import os
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

from ._clients import DEFAULT_USER_AGENT
from ._config import CrawlConfig, CrawlOptions
from ._events import Committing, FetchError, PageRead, Response, Retry
from ._fetch import Fetcher
from ._frontier import FrontierLost, StoreRuntime
from ._handler import Page, check_handler, run_handler
from ._options import ConfigError, reject_unknown_options, takes_options
from ._output import OutputFiles
from ._state import CrawlState
from ._stores import check_output, open_store, with_stored_options
from ._transport import Unanswered
from ._turns import free_turn

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
    from contextlib import AbstractAsyncContextManager
    from typing import Unpack

    import httpx

    from ._clients import Client
    from ._config import CrawlKeywords
    from ._counts import CrawlCounts
    from ._events import Exchange, FetchRequest, Outcome
    from ._fetch import MaySend, OnSent
    from ._frontier import Store, StoreShell
    from ._handler import Handler
    from ._stats import FetchStatistic

LOGGER = logging.getLogger("trio_crawler")

_T = TypeVar("_T")

FinishReason = Literal["finished", "deadline", "interrupted", "max-pages", "frontier-lost"]


class Phase(enum.Enum):
    """Where a Crawler is in its one life; the only answer to "has it started?"."""

    NEW = "new"  # made; crawl() not called yet (stop() now makes crawl() end at once)
    CRAWLING = "crawling"  # inside crawl()
    ENDED = "ended"  # crawl() has returned or raised; the attributes describe the crawl


# How often ``on_progress`` is called: ten times a second is smooth to the eye and costs
# the crawl nothing measurable (one snapshot of five counters each time).
PROGRESS_INTERVAL = 0.1

# Closing clients and their connections takes microseconds on a healthy loop; five seconds
# only bounds a pathological close (a peer that never acknowledges), after which the
# sockets are left to the garbage collector rather than hanging Ctrl-C.
CLEANUP_TIMEOUT = 5.0


def _check_callback(name: str, callback: object) -> None:
    """Refuse a callback the crawl could not call: not callable, or ``async``.

    The callbacks are called from inside the core's synchronous decisions, without
    awaiting. An async function called so makes a coroutine that is never awaited: its
    body never runs, and nothing says so but a RuntimeWarning at garbage collection. So it
    is refused when the Crawler is made, on every engine alike, rather than accepted and
    silently ignored.
    """
    if callback is None:
        return
    if not callable(callback):
        raise ConfigError(name, f"must be a function, not {callback!r}")
    described = getattr(callback, "__qualname__", None) or repr(callback)
    # An object's own async __call__ counts too (iscoroutinefunction sees through
    # functools.partial and bound methods, not through __call__).
    call = type(callback).__call__
    if any(
        inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)
        for function in (callback, call)
    ):
        raise ConfigError(
            name,
            f"must be a plain function, not the async function {described}: the crawler "
            "calls it without awaiting, so its body would never run",
        )


class CrawlerBase(abc.ABC):
    """The chapter's ``Crawler`` minus its scheduling; see an engine's ``Crawler``.

    An engine provides its primitives (``_init_engine()``, made in ``__init__``),
    ``crawl()`` (its scheduling), ``_cut_short(grace)`` (what :meth:`stop` does to a
    running crawl), ``_attempt()`` (one fetch under its own cancel scope), ``_at_most()``
    (a bounded wait, for the server of a timed-out request) and ``_now()`` (its clock).
    Everything else is here, so that what a crawl is (its options, state, records,
    lifecycle and HTTP clients) is written once.

    Args:
        roots: Start URLs. A root without ``://`` gets ``http://``; repeats are dropped.
        client: An ``httpx.AsyncClient`` to share between the workers; it is left open.
            Without it each worker gets a client of its own, closed when the crawl ends.
        handler: Your function, called with a :class:`~trio_crawler._handler.Page` for
            every page the crawl reads for links, in the task that fetched it, before the
            page's links are queued: plain or ``async``, it returns None, an item (a
            ``dict``) or an iterable of items (a generator, an async generator too), and
            may edit ``page.links``. An exception it raises is the page's
            (``handler_error``), never the crawl's. See docs/handler.md.
        items: A file to write the handler's items to, one JSON line each (``"-"``:
            stdout), in the order pages finish; by the same rules as the command line's
            ``-o`` (new, reconciled with ``state``, appended to with ``frontier``).
        on_record: Called with each record the moment it is made (see
            :class:`~trio_crawler._state.CrawlState`). This and the other two callbacks
            are plain functions, called without awaiting: an ``async def`` is refused.
        on_exchange: Called with every attempt as sent and received (robots.txt
            included), for archiving; see :class:`~trio_crawler._events.Exchange`.
        on_progress: Called with a :class:`~trio_crawler._counts.CrawlCounts` every
            ``progress_interval`` seconds while the crawl runs, from a task of its own.
        progress_interval: Seconds between two ``on_progress`` calls.
        options: The crawl's options (``max_tasks=10``...), as keyword arguments; the
            signature and ``__init__``'s docs list them all, from their declarations in
            :class:`~trio_crawler._config.CrawlOptions`.

    Raises:
        ConfigError: At construction, for an unusable option, a callback that is not a
            plain function, a handler that cannot take a page, ``items`` without a
            handler, or an ``items`` path that cannot be written.
        TypeError: At construction, for a keyword that is no option (a misspelling).
    """

    @takes_options(CrawlOptions)
    def __init__(
        self,
        roots: Iterable[str],
        *,
        client: httpx.AsyncClient | None = None,
        handler: Handler | None = None,
        items: str | os.PathLike[str] | None = None,
        on_record: Callable[[FetchStatistic], None] | None = None,
        on_exchange: Callable[[Exchange], None] | None = None,
        on_progress: Callable[[CrawlCounts], None] | None = None,
        progress_interval: float = PROGRESS_INTERVAL,
        **options: Unpack[CrawlKeywords],
    ) -> None:
        """Check the roots and the options; ``crawl()`` runs the crawl."""
        reject_unknown_options(CrawlOptions, options, function=f"{type(self).__name__}.__init__")
        roots = list(roots) if not isinstance(roots, str) else roots
        # A stored crawl's roots and options, where this run leaves them out (the
        # factory knows where a store keeps them).
        roots, kept = with_stored_options(roots, options)
        options = cast("CrawlKeywords", kept)
        self.config = CrawlConfig.create(roots, **options)
        if not (isinstance(progress_interval, int | float) and progress_interval > 0):
            raise ConfigError(
                "progress_interval",
                f"must be a positive number of seconds, not {progress_interval!r}",
            )
        for name, callback in (
            ("on_record", on_record),
            ("on_exchange", on_exchange),
            ("on_progress", on_progress),
        ):
            _check_callback(name, callback)
        self._handler = None if handler is None else check_handler(handler)
        # The items file, looked at now and opened with the store's session (_output.py).
        self.item_files = self._item_files(items)
        # Given a client, the crawler makes none; without one, the HTTP library is chosen
        # now, so that a wrong TRIO_CRAWLER_HTTP stops the crawler here.
        self._fetcher = Fetcher(
            client=client,
            max_size=self.config.max_size,
            timeout=self.config.timeout,
            user_agent=self.config.user_agent or DEFAULT_USER_AGENT,
            keep_exchanges=on_exchange is not None,
            headers=cast("tuple[tuple[str, str], ...]", self.config.headers or ()),
            workers=self.config.max_tasks,
        )
        # The crawl's store, behind the two seams of _frontier.py: the core takes its
        # frontier, the shell awaits the rest (see _stores.py for which kinds exist).
        self.store: Store = open_store(self.config)
        self.state = CrawlState(
            self.config,
            frontier=self.store,
            on_record=on_record,
            resumed=self.store.resumed(),
            hand_pages=self._handler is not None,
            on_items=None if self.item_files is None else self.item_files.write_items,
        )
        # Called with the store once its session is open, before the first request: the
        # command line opens its output files there (see _output.py), so that a store that
        # refuses the run (a shared crawl of other roots) has changed no file.
        self.open_outputs: Callable[[StoreShell], None] | None = None
        self._on_exchange = on_exchange
        self._on_progress = on_progress
        self._progress_interval = float(progress_interval)
        self.finish_reason: FinishReason | None = None
        self.elapsed = 0.0
        self._phase = Phase.NEW
        # Whether stop() was called: the one answer to that question, whatever the phase.
        self._stopping = False
        # Whether the dispatcher's errand to the store (_store_errand) is under way.
        self._errand_running = False
        self._init_engine()

    def _item_files(self, items: str | os.PathLike[str] | None) -> OutputFiles | None:
        """The ``items`` file, checked before the store is opened (a refused run touches
        no file), not opened yet."""
        if items is None:
            return None
        if not isinstance(items, str | os.PathLike) or not os.fspath(items):
            raise ConfigError("items", f"must be a file path or '-', not {items!r}")
        if self._handler is None:
            raise ConfigError(
                "items", "needs {handler}: the items are what it returns", mentions=("handler",)
            )
        item_files = OutputFiles(items=str(os.fspath(items)))
        item_files.check()
        check_output(self.config, item_files.items_path, option="items")
        return item_files

    # The chapter's attribute names, read from the core so they survive the crawl.
    @property
    def roots(self) -> tuple[str, ...]:
        """The roots, normalised, in order, without repeats."""
        return self.config.roots

    @property
    def max_tasks(self) -> int:
        """The number of workers."""
        return self.config.max_tasks

    @property
    def seen_urls(self) -> set[str]:
        """Every URL queued or fetched."""
        return self.state.seen_urls

    @property
    def done(self) -> list[FetchStatistic]:
        """The records, in the order URLs finished.

        With ``state``, they are read from the file (the whole crawl's, every run of it),
        so read them after the crawl rather than during it. With ``frontier``, they are
        this process's records.
        """
        kept = self.store.records()
        return self.state.done if kept is None else list(kept)

    @property
    def records_made(self) -> int:
        """How many records this run made: ``len(done)``, except with ``state``, where
        ``done`` is the whole crawl's, every run of it (the report's rate line counts
        these)."""
        return self.state.records_made

    def statistics(self) -> CrawlCounts:
        """A frozen snapshot of the crawl's progress."""
        return self.state.statistics()

    @property
    def limit_counts(self) -> dict[str, int]:
        """What the limits kept out of the crawl: links too long or too deep, URLs
        robots.txt disallowed, retries after an answer, origins slowed (zero counts are
        absent)."""
        return self.state.counters()

    def stop(self, grace: float = 0.0) -> None:
        """End the crawl, as Ctrl-C does.

        No new URL is started. With ``grace`` seconds, requests in flight may finish until
        then and are cancelled after; without, they are cancelled now. Calling it again
        with a shorter grace (or none) cuts the wait short. Safe to call from any task in
        the crawl's event loop, before or during ``crawl()``, which then returns with
        ``finish_reason == "interrupted"``.
        """
        if self.finish_reason is None:
            self.finish_reason = "interrupted"
        self._stopping = True
        self.state.stop_scheduling()
        if self._phase is Phase.CRAWLING:
            self._cut_short(grace)

    # -- what each engine provides ---------------------------------------------------------

    @abc.abstractmethod
    def _init_engine(self) -> None:
        """Make the engine's own attributes (its primitives), at the end of ``__init__``.

        Engines do not override ``__init__``, whose signature is the chapter's and lists
        every option (see :func:`~trio_crawler._options.takes_options`).
        """

    @abc.abstractmethod
    async def crawl(self) -> None:
        """Run the crawl until nothing is left to fetch, the deadline, or :meth:`stop`.

        Afterwards ``done``, ``seen_urls``, ``finish_reason`` and ``elapsed`` describe it,
        whichever way it ended. A Crawler crawls once.

        Raises:
            RuntimeError: If this Crawler has crawled before.
            ExceptionGroup: Only for a bug in the crawler; failures of the web are records.
        """

    @abc.abstractmethod
    def _cut_short(self, grace: float) -> None:
        """:meth:`stop` during ``crawl()``: cancel the crawl now, or in ``grace`` seconds."""

    @abc.abstractmethod
    async def _attempt(
        self,
        client: Client,
        request: FetchRequest,
        on_sent: OnSent | None = None,
        may_send: MaySend | None = None,
        unanswered: Unanswered | None = None,
    ) -> Outcome:
        """One attempt bounded by the engine's cancel scope, asking ``may_send()`` just
        before its request's head is written and awaiting ``on_sent()`` once it is, and
        leaving its connection to ``unanswered`` if cut short with the request written and
        no answer yet (see :func:`~trio_crawler._fetch.fetch`); raises only cancellation."""

    @abc.abstractmethod
    async def _at_most(self, seconds: float, function: Callable[[], Awaitable[object]]) -> None:
        """Await ``function()`` for at most ``seconds``, under the engine's cancel scope;
        raises only cancellation from outside."""

    @abc.abstractmethod
    def _now(self) -> float:
        """The engine's clock, which the core takes as an input for per-host delays."""

    @abc.abstractmethod
    async def _in_thread(self, function: Callable[[], _T]) -> _T:
        """Run ``function`` in a worker thread, shielded: a cancellation that arrives
        meanwhile waits for it to return (a state transaction is finished and applied),
        and is delivered at the caller's next checkpoint."""

    @abc.abstractmethod
    async def _shielded(self, function: Callable[[], Awaitable[_T]]) -> _T:
        """Await ``function()`` shielded from cancellation, as :meth:`_in_thread` runs a
        thread: a call to the shared frontier either completes and is applied, or fails."""

    @abc.abstractmethod
    def _wake_dispatcher(self) -> None:
        """Wake the dispatcher to look at the core again (work came, or the end)."""

    # -- what the engines share ----------------------------------------------------------

    @asynccontextmanager
    async def _store_session(self) -> AsyncIterator[None]:
        """Around a crawl: the store's session (a shared crawl is joined and left here).

        Raises:
            ConfigError: The store cannot be used (a shared frontier's server cannot be
                reached, or holds another crawl by that name); nothing was fetched.
        """
        now = self._now()
        # The one reading of the wall clock: see StoreRuntime.wall_time. The core stamps
        # records with it too (their fetched_at).
        self.state.wall_offset = time.time() - now
        runtime = StoreRuntime(
            clock=self._now,
            wall_offset=self.state.wall_offset,
            run_in_thread=self._in_thread,
            shielded=self._shielded,
            wake=self._wake_dispatcher,
            on_lost=self._store_lost,
            scheduling=lambda: not self.state.scheduling_stopped,
            limit_counts=lambda: self.state.limit_counts,
        )
        async with self.store.session(runtime):
            if self.item_files is not None:
                self.item_files.open(self.store)
            if self.open_outputs is not None:
                self.open_outputs(self.store)
            yield

    def _store_lost(self, exc: FrontierLost) -> None:
        """The crawl's store cannot be written or reached: stop, keeping every record."""
        LOGGER.error("%s; stopping the crawl", exc)
        if self.finish_reason is None:
            self.finish_reason = "frontier-lost"
        self.stop()

    async def _crawl_url(self, client: Client, request: FetchRequest) -> None:
        """Attempt one URL until the core has its record (retries are the core's call)."""
        if self.state.held_back(request, now=self._now()):
            # Handed out before its origin was told to wait (another worker read a
            # Retry-After meanwhile): not sent inside the wait, but given back for after it.
            self.state.put_back(request)
            return
        while True:
            # The host's delay runs from when the request is written, which the transport
            # reports (on_sent), not from here: a slow connection is no part of the next
            # gap as the server sees it. A transport that does not report it: from here.
            on_sent: OnSent
            may_send: MaySend | None = None
            if self._fetcher.reports_sending:
                started = self._now()
                self.state.attempt_started(request, now=started, sent_later=True)
                on_sent = functools.partial(self._request_sent, request)
                # The connection may take long to make, and another worker may read a
                # Retry-After of this origin meanwhile: asked again as the head is about
                # to be written, the last moment a request can be kept from the server.
                may_send = functools.partial(self._may_send, request)
            else:
                self.state.attempt_started(request, now=self._now())
                await self.store.request_sent(request)
                started = self._now()
                on_sent = self._fetcher.sending_reported
            unanswered = Unanswered()
            try:
                outcome = await self._attempt(client, request, on_sent, may_send, unanswered)
                ended = answered = self._now()  # its last byte or failure, as read
                if isinstance(outcome, Response) and outcome.arrived is not None:
                    # As it reached this machine: a process busy with other hosts' pages
                    # reads it late, and the host's delay would carry that lateness.
                    answered = min(answered, outcome.arrived)
                if unanswered.parked and not self._stopping:
                    # Timed out with the request written and no answer: the server may still
                    # be working on it, so its origin gets nothing more from this worker
                    # until it answers or closes, for at most another timeout.
                    await self._at_most(self.config.timeout, unanswered.wait)
                    answered = self._now()
            finally:
                if unanswered.parked:
                    await unanswered.aclose()
            if isinstance(outcome, FetchError) and outcome.withdrawn:
                self.state.attempt_withdrawn(request)  # it goes when the wait ends
                return
            if self._on_exchange is not None and outcome.exchange is not None:
                self._on_exchange(outcome.exchange)
            # Reading the page waits its turn: after the requests that are due (_turns.py).
            async with self._page_turn():
                result = self.state.attempt_finished(
                    request, outcome, now=answered, started=started, ended=ended
                )
            if isinstance(result, PageRead):  # only with a handler: it runs here, in the
                assert self._handler is not None  # worker's task and cancel scope
                handled = await run_handler(self._handler, Page(result, self.config))
                result = self.state.page_handled(result, handled)
            if not isinstance(result, Retry):
                break
            request = result.request
        if isinstance(result, Committing):
            # A durable store makes the record once its change is written. The worker holds
            # its URL until then, so what a kill can cost is what the workers hold: at most
            # one URL each (--max-tasks in all), fetched again by the next run.
            try:
                await self.store.settle(request)
            except FrontierLost as exc:
                self._store_lost(exc)
        elif self.store.has_work(starved=False):
            await self._flush_store(starved=False)

    def _page_turn(self) -> AbstractAsyncContextManager[object]:
        """The turn in which a fetched page is read (see _turns.py); an engine that hands
        requests out through a dispatcher makes the pages wait for it."""
        return free_turn()

    def _paced(self) -> bool:
        """Whether pages take turns yet (_turns.py): once any origin has had a delay or a
        slowed pace, as its store says."""
        return self.store.paced

    def _may_send(self, request: FetchRequest) -> bool:
        """Whether ``request``, its connection made, may be written now (not held back)."""
        return not self.state.held_back(request, now=self._now())

    async def _request_sent(self, request: FetchRequest) -> None:
        """The transport wrote ``request``'s head: the host's delay runs from now, and a
        shared frontier is told before the host's next request may go."""
        if self.state.request_sent(request, now=self._now()):
            self._wake_dispatcher()  # it may be waiting with nothing to hand out
        await self.store.request_sent(request)

    async def _flush_store(self, *, starved: bool) -> None:
        """Keep what waits for the store (and, when ``starved``, load or lease more work);
        a store that cannot be written stops the crawl."""
        try:
            await self.store.flush(starved=starved)
        except FrontierLost as exc:
            self._store_lost(exc)

    def _store_needs(self) -> bool:
        """For a dispatcher with nothing to hand out: whether a flush could change that."""
        return self.store.has_work(starved=True)

    def _store_errand(self) -> Callable[[], Coroutine[Any, Any, None]] | None:
        """For a dispatcher with nothing to hand out now: the flush that could change that,
        to run in a task of its own beside the dispatcher, or None (nothing to do, or the
        last one still runs).

        Beside, not awaited: a transaction of the state file, or a call to the shared
        frontier, takes milliseconds, and a broad crawl has hosts coming due all the time.
        A dispatcher inside the flush handed none of them out until it returned, and a
        polite crawl never makes up a late request: measured on 500 hosts with --state,
        the rounds spread from 0.29 s to 0.38-0.47 s wide over the first five pages of
        each host, while the flushes loaded their links (docs/manners.md).
        """
        if self._errand_running or not self._store_needs():
            return None
        self._errand_running = True
        return self._run_errand

    async def _run_errand(self) -> None:
        try:
            await self._flush_store(starved=True)
        finally:
            self._errand_running = False
            self._wake_dispatcher()  # it may have loaded, or leased, work to hand out

    def _begin(self) -> float:
        """Enter ``crawl()``: check that this Crawler has not crawled; return the start time."""
        if self._phase is not Phase.NEW:
            raise RuntimeError("a Crawler crawls once; make a new Crawler for another crawl")
        self._phase = Phase.CRAWLING
        return self._now()

    def _end(self, start: float, *, deadline_passed: bool | None) -> None:
        """Leave ``crawl()``: settle ``finish_reason`` and ``elapsed``.

        ``deadline_passed`` is None when the crawl raised (a bug, or a cancellation from
        outside), which makes it "interrupted"; otherwise the reason is the deadline, the
        page budget, or a crawl that ran out of work (unless :meth:`stop` came first).
        """
        self._phase = Phase.ENDED
        self.elapsed = self._now() - start
        self.store.close()
        if self.item_files is not None:
            self.item_files.close()
        if deadline_passed is None:
            self.finish_reason = "interrupted"
        elif self.finish_reason is None:
            if deadline_passed:
                self.finish_reason = "deadline"
            elif self.state.limit_reached == "max-pages":
                self.finish_reason = "max-pages"
            else:
                self.finish_reason = "finished"
