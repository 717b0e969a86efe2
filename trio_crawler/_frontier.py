"""The frontier: the two interfaces every store implements, and the values they pass.

Theory of operation
-------------------
A crawl's decisions are the core's (:class:`~trio_crawler._state.CrawlState`); what it has
still to do and what it has seen are its *store's*. Three stores exist: in memory (the
default), a SQLite file (``--state``) and a Redis server shared by many processes
(``--frontier``). They meet the rest of the crawler at two seams, declared here as
:class:`typing.Protocol` classes so that ``mypy --strict`` holds each store to them:

* :class:`Frontier`, what the pure core calls. It is synchronous and never blocks: the
  core runs between two checkpoints of the engine, so a store answers from memory and
  keeps what must reach its file or server for the shell to send. The operations are the
  ones any frontier needs: take the next request at ``now``; note that it started; retry,
  retry later or give back a request; settle an origin's robots.txt; and *finish* a URL,
  which hands the store a :class:`Completion` (the URL's record and the links it offers)
  and a function to call with the store's :class:`Settled` answer once the change is kept.
  In memory that is at once; in a file, when the transaction commits; on a server, when
  the script has run. Until then the URL stays in flight, so the crawl cannot finish
  around an unwritten change.
* :class:`StoreShell`, what the engine shell (:class:`~trio_crawler._crawler.CrawlerBase`)
  awaits: open a session for the length of ``crawl()``; anything a request needs before
  it goes out; flush the changes that wait; settle a finished URL (return once it is
  kept); and, for the report and the outputs, the records and notes a store contributes.
  The memory store's versions return at once.

Per-origin scheduling (queues, robots.txt state, politeness clocks, in-flight limits) is
a building block, :class:`~trio_crawler._scheduler.OriginScheduler`, that each store
*uses*; no store subclasses another. Which stores exist is known in one place only, the
factory :func:`trio_crawler._stores.open_store`.

Time is an input. The core passes the engine's clock reading ``now`` to every operation
that depends on time, and the shell hands each store a :class:`StoreRuntime` whose clock is
the engine's. The one conversion to wall-clock time, for what outlives the process (a
``Retry-After`` wait kept in a state file), is :meth:`StoreRuntime.wall_time`.

This module imports nothing async, so the core can import it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeVar

from ._events import FetchRequest

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator, Mapping
    from contextlib import AbstractAsyncContextManager

    from ._events import RobotsRequest
    from ._output import ArchiveOutput, RecordOutput
    from ._report import Listing
    from ._robots import RobotsRules
    from ._stats import FetchStatistic, Stamp

__all__ = [
    "GROUP_SIZE",
    "GROUP_WINDOW",
    "OUT_OF_BUDGET",
    "Completion",
    "Disallowed",
    "Frontier",
    "FrontierLost",
    "Offer",
    "OutOfBudget",
    "OutputMode",
    "Resumed",
    "RobotsState",
    "RunInThread",
    "RunShielded",
    "Settled",
    "Store",
    "StoreRuntime",
    "StoreShell",
    "Taken",
    "Unfetchable",
]

_T = TypeVar("_T")


class RunInThread(Protocol):
    """The engine's shielded worker-thread call (``trio.to_thread.run_sync`` in a shielded
    scope): a blocking function that started is always finished and its result applied."""

    def __call__(self, function: Callable[[], _T], /) -> Awaitable[_T]: ...


class RunShielded(Protocol):
    """The engine's shielded await: a call to a server either completes or fails."""

    def __call__(self, function: Callable[[], Awaitable[_T]], /) -> Awaitable[_T]: ...


class RobotsState(enum.Enum):
    """Where an origin's robots.txt stands; it decides what :meth:`Frontier.take` may
    hand out for that origin."""

    UNKNOWN = "unknown"  # not asked yet: the origin's next request is its robots.txt
    FETCHING = "fetching"  # in flight: the origin's URLs wait for it
    KNOWN = "known"  # rules in hand: URLs go out as they allow
    FAILED = "failed"  # could not be fetched: URLs are settled unfetched, with the error


@dataclass(frozen=True, slots=True)
class Unfetchable:
    """A URL taken off the frontier unfetched: its origin's robots.txt failed with ``error``.

    Not in flight; the core records it as a failure so a dead host shows in the output.
    """

    request: FetchRequest
    error: str


@dataclass(frozen=True, slots=True)
class Disallowed:
    """A URL taken off the frontier unfetched: its origin's robots.txt forbids it."""

    request: FetchRequest


class OutOfBudget(enum.Enum):
    """The next request would start a new URL, and :meth:`Frontier.take` was told
    none may start (the ``max_pages`` budget is spent). Nothing was taken."""

    TOKEN = "out of budget"


OUT_OF_BUDGET = OutOfBudget.TOKEN

Taken = FetchRequest | Unfetchable | Disallowed | OutOfBudget


@dataclass(frozen=True, slots=True)
class Offer:
    """Links a finished URL offers the frontier, all with the same depth and budgets.

    Attributes:
        urls: The links, in the order they are to be queued.
        depth: Their depth (a root's is 0).
        redirects_left: Their redirect budget.
        sitemap: Their sitemap level (0: pages).
        first: Queue them ahead of their origin's queue (sitemaps, after robots.txt).
        queue: False for links beyond a limit: they are only counted, if unseen.
        over_depth: Links not queued count as beyond ``--max-depth`` in the report.
        referrer: The URL that offers them (a page, a sitemap, a redirect), which each
            keeps as its referrer if it is new; None for the roots.
    """

    urls: tuple[str, ...]
    depth: int
    redirects_left: int
    sitemap: int = 0
    first: bool = False
    queue: bool = True
    over_depth: bool = True
    referrer: str | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """A URL done, as one change to the frontier: the URL leaves it, its links join it.

    The core makes it; a store applies it whole (one transaction, one script), so that the
    URL is done exactly when its record and its links are kept. Its answer, a
    :class:`Settled`, completes the record: only the store knows which links were new.

    Attributes:
        request: The request that finished; None for links alone (the roots, the sitemaps
            robots.txt names).
        leased: Whether it was in flight (False for a URL settled unfetched).
        record: Its record, made for this completion alone, with ``num_new_urls`` still 0
            and none of where and when (:meth:`final_record` completes it); None for a
            request that gets no record.
        offers: The links it offers.
        counts_new: Whether the record's ``num_new_urls`` counts the new links.
        links: A page's links, kept by a durable store so a recrawl can follow them when
            the page answers 304; None when there is nothing to keep.
        etag: The page's ``ETag``, for a recrawl's ``If-None-Match``.
        last_modified: Its ``Last-Modified``, for ``If-Modified-Since``.
        items: The items the page handler made of the page, each one line of JSON: a
            durable store keeps them with the record (written to ``--items`` as it is).
        stamp: When its last attempt started and how long it took, for the record;
            None when no attempt was made.
    """

    request: FetchRequest | None
    leased: bool
    record: FetchStatistic | None
    offers: tuple[Offer, ...] = ()
    counts_new: bool = True
    links: tuple[str, ...] | None = None
    etag: str | None = None
    last_modified: str | None = None
    items: tuple[str, ...] = ()
    stamp: Stamp | None = None

    def final_record(self, settled: Settled) -> FetchStatistic | None:
        """The record, completed: the count of new links the store answered, where the
        request was found (its depth and referrer) and when it was fetched.

        Completed in place, once the answer is in: the core made the record for this
        completion alone, and nothing else holds it until this returns (a durable store
        may ask twice, for the same answer, and gets the same values). Setting five fields
        of it costs a fifth of making the record again, which took 1.5 % of a crawl's
        instructions per page (measured with callgrind, 1000 pages of nginx).
        """
        record, request, stamp = self.record, self.request, self.stamp
        if record is None or request is None:
            return record
        complete = object.__setattr__  # the record is frozen for all who get it after this
        if self.counts_new and settled.new:
            complete(record, "num_new_urls", settled.new)
        complete(record, "depth", request.depth)
        complete(record, "referrer", request.referrer)
        if stamp is not None:
            complete(record, "fetched_at", stamp.fetched_at)
            complete(record, "elapsed", stamp.elapsed)
        return record


@dataclass(frozen=True, slots=True)
class Settled:
    """A store's answer to a :class:`Completion`.

    Attributes:
        new: Links not seen before (queued or not).
        disallowed: Of the queued new ones, how many known robots.txt rules turned away.
        beyond: Of the new ones, how many were only counted (``queue=False``).
    """

    new: int = 0
    disallowed: int = 0
    beyond: int = 0


@dataclass(frozen=True, slots=True)
class Resumed:
    """What a durable store kept of a crawl it resumes, for the core's counts.

    Attributes:
        records: Records made so far in this pass.
        kinds: Of those, how many of each :attr:`~trio_crawler._stats.FetchStatistic.kind`
            (the report's classes: ``fail``, ``error``...).
        limit_counts: The report's limit counters so far.
    """

    records: int
    kinds: Mapping[str, int]
    limit_counts: Mapping[str, int]


# Group commit, for the durable stores: a flush waits GROUP_WINDOW seconds before it writes,
# unless GROUP_SIZE completions already wait, so that the pages finishing around the same
# time share one transaction (SQLite) or one script call (Redis). Each costs a trip to the
# writer thread and a few statements, each of which trades the GIL with the event loop's
# thread, or a round trip; measured on the 10 000-page synthetic site at --max-tasks 100,
# 5 ms took the state file's transactions from about 1 600 to 500 and the process's context
# switches from 31 000 to 13 000. A worker waits for its page's write anyway (the stores'
# settle()), so the window costs latency, not work.
GROUP_WINDOW = 0.005
GROUP_SIZE = 64


class FrontierLost(Exception):
    """A durable store the crawl can no longer write: a state file on a full disk, a
    shared frontier's server gone for longer than a lease.

    The store is as its last applied change left it; the crawl stops, keeping every
    record it made (``Finish reason: frontier-lost``).
    """


class OutputMode(enum.Enum):
    """How a store's crawl writes the output files (``-o``, ``--warc``): the one road
    for records (:mod:`trio_crawler._output`) asks the store, never its kind."""

    NEW = "new"  # a new crawl: the files are written from the start
    RECONCILE = "reconcile"  # the store holds the records: cut back and caught up from it
    APPEND = "append"  # records are this process's share: appended to, never truncated


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreRuntime:
    """What the engine shell gives a store for a session: its clock and its primitives.

    Attributes:
        clock: The engine's clock (``trio.current_time()`` or the event loop's), the
            ``now`` that the core passes too.
        wall_offset: Seconds to add to ``clock()`` for the time of day; see
            :meth:`wall_time`.
        run_in_thread: Run a blocking function in a worker thread, shielded: a
            transaction that started is finished and applied, even in a cancelled crawl.
        shielded: Await a function shielded from cancellation, likewise.
        wake: Wake the dispatcher (work came, or the end).
        on_lost: Called when the store can no longer be written or reached.
        scheduling: Whether the core still hands out requests.
        limit_counts: The core's limit counters, for a store that keeps them.
        loop_clock: Whether ``clock`` is the event loop's (AnyIO's ``current_time()``), on
            which a store may time a wait of its own (``anyio.move_on_at``); False for a
            store driven by hand, whose clock moves only where its test moves it.
    """

    clock: Callable[[], float]
    wall_offset: float
    run_in_thread: RunInThread
    shielded: RunShielded
    wake: Callable[[], None]
    on_lost: Callable[[FrontierLost], None]
    scheduling: Callable[[], bool]
    limit_counts: Callable[[], Mapping[str, int]]
    loop_clock: bool = True

    def wall_time(self, now: float) -> float:
        """The time of day (seconds since the epoch) at the engine's clock reading ``now``.

        The one conversion from the engine's clock to the wall clock: a store keeps a
        deadline that must outlive the process (a ``Retry-After`` wait in a state file)
        as a time of day, since the next process's engine clock starts anew. The offset
        is read once, by the shell, when the session opens.
        """
        return now + self.wall_offset


class Frontier(Protocol):
    """What the pure core calls: synchronous, never blocking (see the module docstring).

    Counts have one meaning on every store: ``queued`` is every URL of the crawl that this
    process does not hold and may yet be handed (waiting in memory, in the file, on the
    server, and in a shared crawl those other processes hold, which come back if their
    process dies: so a process is not finished while any may); ``held_elsewhere`` the part
    of ``queued`` that other processes hold; ``in_flight_count`` the requests this process
    holds (robots.txt included) and changes of its own not yet kept; ``seen_count`` every
    URL the crawl has seen.
    """

    @property
    def queued(self) -> int:
        """URLs this process does not hold and may yet be handed, wherever they are kept."""
        ...

    @property
    def held_elsewhere(self) -> int:
        """URLs other processes of a shared crawl hold (leased, not done), counted in
        :attr:`queued` too; 0 for a crawl of one process."""
        ...

    @property
    def held_by_none(self) -> tuple[int, float] | None:
        """Of :attr:`held_elsewhere`, the leases of processes that stopped renewing them
        (killed, or cut off): how many, and the time of day by which they come back;
        None when there are none (always, for a crawl of one process)."""
        ...

    @property
    def in_flight(self) -> frozenset[str]:
        """Page URLs this process holds (robots.txt fetches not included)."""
        ...

    @property
    def in_flight_count(self) -> int:
        """Requests this process holds, robots.txt included, and changes not yet kept."""
        ...

    @property
    def seen_count(self) -> int:
        """URLs the crawl has seen: queued, in flight, done or turned away."""
        ...

    def seen_urls(self) -> set[str]:
        """The URLs the crawl has seen, as far as this process can list them: every one
        in memory and in a state file (read from it: for after the crawl); in a shared
        crawl, the ones this process was handed or added (the server's whole set is not
        copied into every process; its size is :attr:`seen_count`)."""
        ...

    def take(self, *, now: float, start_new: bool) -> Taken | None:
        """The next request that may go out at ``now``, now in flight; None if none may
        yet. With ``start_new`` false, :data:`OUT_OF_BUDGET` instead of a URL's first
        attempt (nothing taken)."""
        ...

    def next_wakeup(self) -> float | None:
        """When a request held back by a delay may go out; None if none is."""
        ...

    def started(self, request: FetchRequest, *, now: float) -> bool:
        """An attempt for ``request`` starts at ``now`` (its request is written): its
        origin's delay runs from here. Whether that let the origin's next request go, which
        a request handed out holds until it starts (a dispatcher waiting may look again)."""
        ...

    def answered(
        self,
        request: FetchRequest,
        *,
        pushback: bool,
        started: float,
        now: float,
        ended: float | None = None,
    ) -> None:
        """An attempt for ``request``, in flight, that started at ``started`` got an answer
        at ``now``; ``pushback`` when it was a 429 or 503, a timeout or a failed
        connection. Its origin's pace learns from it (:mod:`trio_crawler._pace`), as of
        ``ended`` when given: the timeout of an attempt whose server the engine then
        waited for, until ``now`` (the origin's delay runs from ``now``; what the pace
        measures is the attempt, not that wait)."""
        ...

    @property
    def slowed(self) -> tuple[int, int]:
        """Origins slowed by their pace now, and at any point of the crawl."""
        ...

    @property
    def paced(self) -> bool:
        """Whether any origin has had a delay (``--delay``, a ``Crawl-delay``) or a pace
        slowed by pushback; never false again once true. From then on the engines read
        pages in turns after the requests that are due (``_turns.py``)."""
        ...

    def retry(self, request: FetchRequest, *, at_once: bool = False) -> bool:
        """A retry of ``request``: True to attempt it at once, False if it was queued again
        to wait its origin's turn (never with ``at_once``: a stopping crawl's retries)."""
        ...

    def retry_later(self, request: FetchRequest, *, not_before: float, now: float) -> None:
        """Queue ``request`` again, first in line; its origin waits until ``not_before``."""
        ...

    def give_back(self, request: FetchRequest) -> None:
        """Take back a request handed out but never attempted."""
        ...

    def held_back(self, request: FetchRequest, *, now: float) -> bool:
        """Whether ``request``, handed out and not started, must not start at ``now``:
        its origin was told to wait (a ``Retry-After``) since; give it back instead."""
        ...

    def is_leased(self, request: FetchRequest) -> bool:
        """Whether ``request`` is in flight here."""
        ...

    def robots_settled(
        self,
        request: RobotsRequest,
        *,
        rules: RobotsRules | None = None,
        failure: str | None = None,
        delay: float | None = None,
        now: float,
    ) -> None:
        """An origin's robots.txt is decided: its ``rules``, or the ``failure`` to fetch it;
        ``delay``, if given, is its new delay from ``now``."""
        ...

    def finish(self, completion: Completion, then: Callable[[Completion, Settled], object]) -> None:
        """Apply ``completion`` whole; call ``then`` with it and the answer once it is
        kept (at once in memory, after the transaction or script otherwise)."""
        ...


class StoreShell(Protocol):
    """What the engine shell awaits of a store (see the module docstring)."""

    output_mode: OutputMode

    def resumed(self) -> Resumed | None:
        """What the store kept of a crawl it resumes, for the core; None for a new one."""
        ...

    def session(self, runtime: StoreRuntime) -> AbstractAsyncContextManager[None]:
        """Be open for the length of ``crawl()``: connect, join, listen; leave on exit.

        Raises:
            ConfigError: The store cannot be used (a server unreachable before joining).
        """
        ...

    def attach_output(self, output: RecordOutput) -> None:
        """An ``-o`` file the outputs opened, before the first record: a RECONCILE store
        cuts it back to what it says the file held, writes the records it missed, and
        keeps its position from then on; the others leave it alone."""
        ...

    def attach_archive(self, archive: ArchiveOutput) -> None:
        """A ``--warc`` file the outputs opened: a RECONCILE store cuts it back to its
        size at the last change kept, and keeps its size from then on."""
        ...

    async def request_sent(self, request: FetchRequest) -> None:
        """Anything ``request`` needs once it has gone out (the Redis store tells the
        server that a request to a host with a delay has started), before its answer is
        read: for a transport that does not say when a request is written, before the
        attempt."""
        ...

    def has_work(self, *, starved: bool) -> bool:
        """Whether :meth:`flush` would do anything now; ``starved``: the dispatcher has
        nothing to hand out."""
        ...

    async def flush(self, *, starved: bool = False) -> None:
        """Keep the changes that wait (and, when ``starved``, fetch more work).

        Raises:
            FrontierLost: The store can no longer be written or reached.
        """
        ...

    async def settle(self, request: FetchRequest) -> None:
        """Return once the finished ``request``'s change is kept and its record made.

        Raises:
            FrontierLost: The store can no longer be written or reached.
        """
        ...

    def records(self) -> Iterator[FetchStatistic] | None:
        """The crawl's records, if the store keeps them, in the order made; None when the
        core's in-memory list is the record. Read after the crawl, one at a time: a long
        crawl's do not fit in memory.
        """
        ...

    def listing(self) -> Listing | None:
        """The report's lines of :meth:`records`, in URL order, and their counters, if the
        store keeps them; None when the report is made from the core's list. Read after
        the crawl, one line at a time.
        """
        ...

    def report_notes(self) -> list[str]:
        """Lines the store adds to the report (a shared crawl's totals)."""
        ...

    def close(self) -> None:
        """Keep what still waits and close, after the crawl's tasks have ended."""
        ...


class Store(Frontier, StoreShell, Protocol):
    """A store: both seams, as :func:`trio_crawler._stores.open_store` returns it."""
