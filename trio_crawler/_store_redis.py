"""The Redis store (``--frontier``): one crawl shared by many processes.

Theory of operation
-------------------
The seen set, the queues, the per-origin rules and clocks, the leases and the pending count
live on the server, and change only inside the scripts of
:mod:`~trio_crawler._cluster_scripts`, each of which Redis runs whole. A process holds a
*window* of that frontier: the requests it leased, in an
:class:`~trio_crawler._scheduler.OriginScheduler` that hands them to the core as usual (with
no delay or host limit of its own: the server applies those for every process at once).
This module is the window: what the process holds, and what it has still to tell the
server. It talks to the server through a :class:`~trio_crawler._cluster_session.ClusterSession`
(the connection, the clock, joining, the calls and their retries, listening,
renewing), and writes and reads its operations with :mod:`~trio_crawler._cluster_ops`.

Every change a process makes is an operation in a list; :meth:`RedisFrontier.flush` sends
the list as one script call (one round trip for the links of many pages, their
completions, lease renewals, and a lease of more work), and applies the answer. A finished
URL goes through two of them:

1. its links are added (the answer says which were new, which its record counts);
2. its record is written to this process's output, and only then is the URL marked done.

So a process killed between the two leaves the URL leased; its lease runs out and another
process fetches it again: a duplicate record, never a lost one.

A URL is leased for ``lease`` seconds, renewed every third of that while the process works
on it; a process that stops renewing (it died) loses its leases to whichever process asks
for work next. A process stopped by Ctrl-C gives its leases back on the way out.

Termination: the script that brings queued + leased to zero marks the crawl finished and
publishes ``finished``; every process listens on that channel, so none polls and none
waits for an idle timer. A process that finds less to lease than it asked for is put among
the idle ones, and is told (``work``) when something is queued or given back, or when a
host will be ready sooner than it would look (``work N T``); it also wakes when the
earliest delay or lease ends, which the server's answer says.

Leases ahead. On a host with a delay, the call that marks a URL done (or settles its
robots.txt) asks for the host's next URL too, and the server may lease it at once with the
time the delay ends (:meth:`RedisFrontier._lease_ahead` says when): the window holds the
host until then and starts it on this process's clock, with no call and no wake-up, as one
process would. A host the server keeps for the others is taken so too: an idle process
calls a little before the time it was told work comes, and leases what comes by then
ahead (:data:`~trio_crawler._cluster_session.EARLY`). Every leased URL comes with the time
its host could go, and the window hands hosts out in that order.

Budget. ``--max-pages`` counts the URLs the whole crawl starts: the server counts a URL at
its first lease (a lease again after one ran out or was given back does not count), and
leases no new URL once the budget is spent. A process whose window is then empty answers
the core's ``take`` with ``OUT_OF_BUDGET`` (its report says ``max-pages``) once no URL the
budget counted is left undone elsewhere: a process that dies leaves its URLs to the others.

Time. Leases, per-host delays and paces are compared on the server's clock, which every
process sends its engine's clock on the scale of (lua/prelude.lua); the give-up deadline of
a lost server and the idle wake-ups are timed on the engine's clock.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import math
from collections import deque
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio

from ._cluster_ops import (
    MAKES_WORK,
    Leases,
    Operation,
    SharedPace,
    back_operation,
    done_operation,
    give_back_operations,
    link_operations,
    origin_state,
    read_leases,
    seconds,
    settled_from,
)
from ._cluster_session import ClusterSession, early_wait
from ._events import FetchRequest, RobotsRequest
from ._frontier import (
    GROUP_SIZE,
    GROUP_WINDOW,
    OUT_OF_BUDGET,
    Completion,
    Disallowed,
    FrontierLost,
    Offer,
    OutputMode,
    Resumed,
    Settled,
    Taken,
    Unfetchable,
)
from ._robots import RobotsRules, origin_of
from ._scheduler import OriginScheduler

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

    from ._cluster import SharedCounts
    from ._config import CrawlConfig
    from ._frontier import StoreRuntime
    from ._output import ArchiveOutput, RecordOutput
    from ._report import Listing
    from ._stats import FetchStatistic

LOGGER = logging.getLogger("trio_crawler")

# The longest a call waits for company in a broad crawl's steady state (_linger): at a
# 1 s delay and 500 hosts in three processes, a page's call carried it alone.
LINGER = 0.05

# The most one call leases: the server leases a call's requests in one script, and none of
# them starts before its answer. A process that starts with 500 idle workers, or takes over
# a few hundred hosts at once, asked for all of them in one call, whose script took 11-17
# ms; leased 64 at a time, the first requests go out while the next are leased.
LEASE_STEP = 64

# A completion waiting for its links to be added: with its callback, and where its
# operations are in the call that carries them.
_Waiting = tuple[Completion, "Callable[[Completion, Settled], object]", int, int]


class RedisFrontier:
    """The window of a shared crawl that this process works on (see the module docstring),
    for ``config``'s ``frontier``, ``crawl_id`` and ``lease``; ``delay``, ``max_per_host``
    and ``obey_robots`` are kept on the server by the process that creates the crawl."""

    output_mode = OutputMode.APPEND

    def __init__(self, config: CrawlConfig) -> None:
        # Politeness is the server's: locally, no delay and no host limit.
        self.scheduler = OriginScheduler(delay=0.0, obey_robots=True, max_per_host=None)
        # The URLs this process was handed or offered (the shared seen set is the server's),
        # and the roots: create.lua queues them as it makes the crawl, and a process that
        # joins has the crawl's roots (other roots are refused), so the server has every
        # one before this process's first call, and none is sent again.
        self._seen: set[str] = set(config.roots)
        self.config = config
        self.link = ClusterSession(config)
        self.where = self.link.where
        self.crawl_id = config.crawl_id
        self.lease = config.lease
        self._scheduling: Callable[[], bool] = lambda: True
        self._runtime: StoreRuntime | None = None
        # Changes not sent yet: operations, completions waiting for their links to be
        # added, and URLs whose record is written and which wait to be marked done.
        self._ops: list[Operation] = []
        self._waiting: list[tuple[Completion, Callable[[Completion, Settled], object]]] = []
        self._dones: list[Operation] = []
        # URLs a worker finished, until the call that marks them done is answered.
        self._unsettled: set[str] = set()
        self._flushing = False
        self._sending = 0  # operations in the call under way
        self._hurry: anyio.Event | None = None  # set: a lingering flush goes (_linger)
        self._flushed: anyio.Event | None = None  # made in session()
        # Leases this process holds: URL (or "r ORIGIN") -> the request, or None while
        # its robots.txt waits to be taken.
        self._held: dict[str, FetchRequest | None] = {}
        self._robots_tickets: deque[str] = deque()
        self._delays: dict[str, float] = {}
        # Whether any delay learnt from the server (another process's robots.txt) is above
        # 0; this process's own are the scheduler's (robots_settled), and so is its pace.
        self._delayed = False
        self._starting: set[str] = set()
        # URL -> when its last answer ended, on the server's clock, for its done operation.
        self._ended: dict[str, float] = {}
        # Requests leased ahead whose time has not come (by the engine's clock, a heap with
        # the URLs still waiting): they hold no worker yet, so they leave room to lease.
        self._ahead: list[tuple[float, str]] = []
        self._waiting_ahead: set[str] = set()
        self._pace = SharedPace(adapt=config.adapt)
        self._closed = False

    @property
    def owner(self) -> str:
        """The name this process's leases are held under on the server."""
        return self.link.owner

    @property
    def shared(self) -> SharedCounts:
        """The shared crawl's counts, as the server last said."""
        return self.link.shared

    @property
    def lost(self) -> str | None:
        """Why the server can no longer be used, once it cannot."""
        return self.link.lost

    # -- counts: the window, and the rest of the shared crawl ------------------------------

    @property
    def finished_shared(self) -> bool:
        """Whether the server said the shared crawl is finished."""
        return self.shared.finished

    @property
    def queued(self) -> int:
        """Queued here and on the server, and leased by other processes: all the work this
        process does not hold (so a stopped process is finished once its own is done)."""
        # A robots.txt leased ahead and not handed out yet counts nowhere, as in memory
        # (its origin's pages are queued on the server).
        window = self.scheduler.queued
        if self.shared.finished:
            return window
        others = max(0, self.shared.leased - len(self._held))
        if self._closed:
            return self.shared.queued + self.shared.leased
        return window + self.shared.queued + others

    @property
    def held_elsewhere(self) -> int:
        """URLs other processes hold: the server's leases, less this process's."""
        if self.shared.finished:
            return 0
        return max(0, self.shared.leased - len(self._held))

    @property
    def held_by_none(self) -> tuple[int, float] | None:
        """Leases of processes that stopped renewing them (killed, or cut off from the
        server), as this process last heard when it found nothing to lease: how many, and
        the time of day by which they come back to the queue; None when there are none."""
        stranded = self.link.stranded
        if stranded is None or self._runtime is None or self._now() >= stranded[1]:
            return None
        return stranded[0], self.link.runtime.wall_time(stranded[1])

    @property
    def in_flight_count(self) -> int:
        """Requests in flight here, and changes that hold a lease until they are sent."""
        if self._closed:
            return 0
        return (
            self.scheduler.in_flight_count
            + len(self._waiting)
            + len(self._dones)
            + len(self._ops)
            + self._sending
        )

    @property
    def seen_count(self) -> int:
        return max(self.shared.seen, len(self._seen))

    @property
    def in_flight(self) -> frozenset[str]:
        return self.scheduler.in_flight

    def seen_urls(self) -> set[str]:
        """The URLs this process was handed or offered: the shared seen set is the
        server's (its size is :attr:`seen_count`), too big to copy into every process."""
        return self._seen

    # -- the core's changes ------------------------------------------------------------------

    def finish(self, completion: Completion, then: Callable[[Completion, Settled], object]) -> None:
        """Keep ``completion`` for the next call; ``then`` runs once its links are added."""
        offers = self._unsent(completion.offers)
        if completion.request is None and not any(offer.urls for offer in offers):
            # Links alone, every one already on the server (the roots, say): nothing to
            # send, and the server's answer is known, none new.
            then(completion, Settled())
            return
        if offers is not completion.offers:
            completion = dataclasses.replace(completion, offers=offers)
        self._waiting.append((completion, then))
        if completion.leased and completion.request is not None:
            self._unsettled.add(completion.request.url)

    def _unsent(self, offers: tuple[Offer, ...]) -> tuple[Offer, ...]:
        """``offers`` without the links this process has offered or been handed before
        (``offers`` itself when there are none).

        The server has every one of those by the time this completion's call is applied
        (calls go in order, and a lease comes from the server), and would answer each
        "not new": on a site whose pages link to their neighbours, most of a page's links.
        Left out, they cost neither their JSON nor a lookup in the script. The rest join
        the links this process has seen, as they will be once the call is applied."""
        seen = self._seen
        kept: list[Offer] = []
        changed = False
        for offer in offers:
            if offer.queue:  # links only counted are not kept as seen: always sent
                fresh = tuple(url for url in offer.urls if url not in seen)
                seen.update(fresh)
                if len(fresh) != len(offer.urls):
                    offer, changed = dataclasses.replace(offer, urls=fresh), True
            kept.append(offer)
        return tuple(kept) if changed else offers

    def take(self, *, now: float, start_new: bool) -> Taken | None:
        if self._robots_tickets:
            key = self._robots_tickets.popleft()
            request = self.scheduler.take_robots(key, now=now)
            self._held["r " + key] = request
            return request
        taken = self.scheduler.take(now=now, start_new=start_new)
        if isinstance(taken, Disallowed):
            self._waiting_ahead.discard(taken.request.url)
            self._leave(taken.request, {"k": "drop"})
        elif isinstance(taken, Unfetchable):
            self._waiting_ahead.discard(taken.request.url)
        elif isinstance(taken, FetchRequest):  # leased ahead: spaced by the server's gap
            self._waiting_ahead.discard(taken.url)
            self._pace.space(self.scheduler, taken.url, now)
        return OUT_OF_BUDGET if taken is None and self._out_of_budget() else taken

    def _out_of_budget(self) -> bool:
        """Whether the crawl's ``--max-pages`` budget, kept on the server, is spent and
        nothing it counted is left to this process: no URL it started is queued again or
        leased elsewhere (a process that dies leaves its URLs to the others, so they wait
        for them), and no change of its own that could give some back waits to be sent."""
        if self.link.budget is None or self.scheduler.queued or self._ops:
            return False
        spent, pending = self.link.budget
        mine = {member for member in self._held if not member.startswith("r ")}
        return spent and pending <= len(mine | self._unsettled)

    def started(self, request: FetchRequest, *, now: float) -> bool:
        """Note the start, with its time, for the server, when the host has a delay.

        The server times the host's next start from this one, as every process sees it.
        One request at a time to a host (``--max-per-host 1``, the broad crawl's setting)
        needs the note only for the pace, since the next request waits for this one's end
        anyway: it goes with the next call. With more at a time, the host's next request
        waits for the note, so it is sent as soon as the request has gone
        (:meth:`request_sent`).
        """
        released = self.scheduler.started(request, now=now)
        if request.robots or self._delay_of(origin_of(request.url)) <= 0:
            return released
        op: Operation = {"k": "started", "u": request.url}
        if self.config.max_per_host == 1:
            op["t"] = self.link.runtime.wall_time(now)
        else:
            # Sent at once, and answered, with no time of its own: the server's clock at
            # the call, after the request was written, so never before it went.
            self._starting.add(request.url)
        self._ops.append(op)
        return released

    async def request_sent(self, request: FetchRequest) -> None:
        """Tell the server that ``request`` has gone, when its host has a delay and may
        have another request out (see :meth:`started`); a lost server stops the crawl."""
        if request.url in self._starting:
            try:
                await self.sync()
            except FrontierLost as exc:
                assert self._runtime is not None
                self._runtime.on_lost(exc)

    def answered(
        self,
        request: FetchRequest,
        *,
        pushback: bool,
        started: float,
        now: float,
        ended: float | None = None,
    ) -> None:
        runtime = self.link.runtime
        # The host's next request waits a delay from this answer's end, not from the call
        # that says it is done, which follows the record's writing (see lua/step.lua).
        if not request.robots:
            self._ended[request.url] = runtime.wall_time(now)
        # The pace learns as of the attempt's own end: a timed-out request whose server was
        # waited for is told of with the wait's end, but its cut is the timeout's.
        learnt = now if ended is None else ended
        op = self._pace.operation(
            origin_of(request.url),
            pushback,
            learnt - started,
            runtime.wall_time(started),
            ended=None if ended is None else runtime.wall_time(ended),
        )
        if op is not None:
            self._ops.append(op)

    @property
    def slowed(self) -> tuple[int, int]:
        return self.shared.slowed_now, self.shared.slowed_ever

    @property
    def paced(self) -> bool:
        # The crawl's delay as the server keeps it, the delays learnt from it, the paces
        # slowed anywhere in the crawl, and what this process's scheduler saw itself.
        return (
            self._delayed
            or self.link.base_delay > 0
            or self.shared.slowed_ever > 0
            or self.scheduler.paced
        )

    def retry(self, request: FetchRequest, *, at_once: bool = False) -> bool:
        """A retry waits its turn on a host with a delay; else it goes at once."""
        key = "" if request.robots or at_once else origin_of(request.url)
        if not key or self._delay_of(key) <= 0:
            return self.scheduler.retry(request)
        self._back(request, wait=0.0)
        return False

    def retry_later(self, request: FetchRequest, *, not_before: float, now: float) -> None:
        if request.robots:
            self.scheduler.retry_later(request, not_before=not_before)
            return
        # The server holds the origin for every process; the window holds what it has
        # of the origin already leased.
        self._back(request, wait=max(0.0, not_before - now))
        self.scheduler.wait_origin(origin_of(request.url), until=not_before)

    def held_back(self, request: FetchRequest, *, now: float) -> bool:
        return self.scheduler.held_back(request, now=now)

    def is_leased(self, request: FetchRequest) -> bool:
        return self.scheduler.is_leased(request)

    def give_back(self, request: FetchRequest) -> None:
        """A request handed out and never attempted goes back to the front of the window,
        its lease still held (and renewed): it goes out next, as in memory. The server
        gets back what the window still holds when the session ends."""
        self.scheduler.give_back(request)
        if isinstance(request, RobotsRequest):
            self._robots_tickets.appendleft(request.origin)

    def robots_settled(
        self,
        request: RobotsRequest,
        *,
        rules: RobotsRules | None = None,
        failure: str | None = None,
        delay: float | None = None,
        now: float,
    ) -> None:
        self.scheduler.robots_settled(request, rules=rules, failure=failure, delay=delay, now=now)
        self._held.pop("r " + request.origin, None)
        # The origin's first page waits a delay from this answer's end (see answered()).
        op: Operation = {
            "k": "robots",
            "o": request.origin,
            "t": self.link.runtime.wall_time(now),
        }
        if rules is not None:
            op.update(st="k", rt=rules.as_text())
        else:
            op.update(st="x", rf=failure or "robots.txt failed")
        if delay is not None:
            op["dl"] = delay
            self._delays[request.origin] = delay
        self._ops.append(op)

    def _back(self, request: FetchRequest, *, wait: float) -> None:
        """Give a request in flight back to the server, first in its origin's line: a
        retry with when its attempt ended, from which the server times the origin's
        delay, as for a URL done."""
        self.scheduler.release(request)
        self._starting.discard(request.url)
        ended = self._ended.pop(request.url, None)
        self._waiting_ahead.discard(request.url)
        self._held.pop(request.url, None)
        self._ops.append(back_operation(request, wait=wait, ended=ended))

    def _leave(self, request: FetchRequest, op: Operation) -> None:
        """A leased URL leaves the crawl with no record (robots.txt forbids it)."""
        self._held.pop(request.url, None)
        op.update(u=request.url, o=origin_of(request.url))
        self._ops.append(op)

    # -- what the engine asks ----------------------------------------------------------------

    def next_wakeup(self) -> float | None:
        local = self.scheduler.next_wakeup()
        # Nothing to ask the server for once the crawl is finished, or while every worker
        # has a request (a worker that finishes wakes the dispatcher anyway), or while a
        # call is under way: no other can go until it ends, and its end wakes the
        # dispatcher. Woken for a time already past meanwhile, the dispatcher would find
        # nothing to do and look again at once, until the answer came.
        remote = (
            None
            if self._flushing or self.shared.finished or not self._room()
            else self.link.idle_until
        )
        if remote is not None and math.isinf(remote):
            remote = None
        if local is None:
            return remote
        return local if remote is None else min(local, remote)

    def has_work(self, *, starved: bool) -> bool:
        """Whether :meth:`flush` would send anything now that should not wait: a start
        that nothing waits for (see :meth:`started`) goes with the next call."""
        if self._flushing or self.lost is not None or self._closed:
            return False
        if self._dones or self._waiting:
            return True
        if any(op["k"] != "started" or op["u"] in self._starting for op in self._ops):
            return True
        return starved and self._want() > 0

    def _want(self) -> int:
        """How many more requests to lease: enough for the idle workers, unless the server
        said that nothing is ready until later."""
        if self.link.idle_until is not None and self._now() < self.link.idle_until:
            return 0
        return self._room()

    def _room(self, *, ahead: bool = False) -> int:
        """How many more requests the window has workers for (0 once it takes no more):
        requests leased ahead take a worker only once their time has come, except when
        more are to be leased ahead (``ahead``), which a worker must be there for then."""
        if self.shared.finished or not self._scheduling() or self.lost is not None:
            return 0
        busy = self.scheduler.queued + self.scheduler.in_flight_count + len(self._robots_tickets)
        free = 0 if ahead else self._not_due()
        return max(0, self.config.max_tasks - busy + free)

    def _next_ahead(self) -> float | None:
        """The earliest time a request leased ahead comes due (it may be one taken since,
        whose time only makes a waiter look again); None if none waits.

        Asked with the clock read anew: a caller that has just been told that one waits
        (:meth:`_lingers` reads the clock more than once) may find it due by now.
        """
        return self._ahead[0][0] if self._not_due() else None

    def _not_due(self) -> int:
        """How many requests leased ahead wait for their time, in the window."""
        if self._ahead:
            now = self._now()
            while self._ahead and self._ahead[0][0] <= now:
                self._waiting_ahead.discard(heapq.heappop(self._ahead)[1])
        return len(self._waiting_ahead)

    async def settle(self, request: FetchRequest) -> None:
        """Return once ``request`` is done on the server: its links added, its record made
        and written, and the call that marks it done answered. A caller that waits for
        the flush under way is woken after each of its calls (see _flush).

        Raises:
            FrontierLost: The server could not be reached for ``lease`` seconds.
        """
        while request.url in self._unsettled and self.lost is None:
            if self._pages_waiting() >= GROUP_SIZE:
                self._hurry_flush()
            if self._flushing:
                assert self._flushed is not None
                await self._flushed.wait()
            else:
                await self._flush(starved=False, group=GROUP_WINDOW)

    async def sync(self) -> None:
        """Send what waits; return once it was sent (or a flush under way, which takes it,
        ended)."""
        self._hurry_flush()  # a caller waits for it
        while self._flushing:
            assert self._flushed is not None
            await self._flushed.wait()
        await self._flush(starved=False, group=0.0)

    async def flush(self, *, starved: bool = False) -> None:
        """Send the waiting changes a call at a time until none wait, leasing work
        (FrontierLost: the server could not be reached for ``lease`` seconds)."""
        await self._flush(starved=starved, group=0.0)

    async def _flush(self, *, starved: bool, group: float) -> None:
        """:meth:`flush`; with ``group`` seconds, the first call waits that long for more
        changes to join it (see :data:`~trio_crawler._frontier.GROUP_WINDOW`), unless
        enough already wait."""
        if self._flushing or self.lost is not None or not self.link.is_open:
            return
        self._flushing = True
        self._flushed = anyio.Event()
        leased_once = False
        try:
            if group and self._pages_waiting() < GROUP_SIZE:
                await anyio.sleep(group)  # let the pages finishing now join
                await self._linger()
            while True:
                ops, waiting = self._gather(lease=not leased_once)
                if not ops and not waiting:
                    break
                answer = None  # pages without links: nothing to send for them yet
                if ops:
                    leased_once = leased_once or ops[-1]["k"] == "lease"
                    self._sending = len(ops) + len(waiting)
                    try:
                        answer = await self.link.call(ops)
                    finally:
                        self._sending = 0
                await self._answered(answer, ops, waiting)
                # The settle() calls that wait look again after each call, not only once the
                # flush ends: while pages keep finishing, one call follows another, and
                # workers held until the last were missing from the next round of hosts.
                self._flushed.set()
                self._flushed = anyio.Event()
        finally:
            self._flushing = False
            self._flushed.set()
            self._wake_dispatcher()  # the dispatcher may have waited on this flush

    async def _linger(self) -> None:
        """Let more pages join a call while nothing needs it sooner: up to a tenth of the
        delay (and LINGER), while this process holds requests leased ahead, has workers
        to spare and nothing to lease before the server's time.

        That is a broad crawl at the delay's pace: each process finishes a page every few
        milliseconds, each page's call would carry it alone, and what the call asks for
        (the host's next URL, leased ahead) is not due for a delay. Anything that wants a
        call sooner ends the wait: the server's time for work coming, a "work" message,
        GROUP_SIZE pages waiting. A process with no lease ahead (a crawl without a delay,
        or its last pages) does not linger, so the end of a crawl is not held back.
        """
        limit = min(LINGER, self.link.base_delay / 10)  # the crawl's, as its server keeps it
        assert self._runtime is not None, "used outside a session"
        if limit <= 0 or not self._runtime.loop_clock:
            return
        deadline = self._now() + limit
        try:
            while self._now() < deadline and self._lingers():
                # Looked at again when the server's time comes, and when the next request
                # leased ahead is due: the last one due ends the wait.
                due = self._next_ahead()
                if due is None:  # the last came due as _lingers() read the clock again
                    break
                until = min(deadline, due)
                if self.link.idle_until is not None:
                    until = min(until, self.link.idle_until)
                self._hurry = anyio.Event()
                with anyio.move_on_at(until):
                    await self._hurry.wait()
        finally:
            self._hurry = None

    def _lingers(self) -> bool:
        """Whether a flush may wait longer for company (see :meth:`_linger`). A caller
        that awaits the call (:meth:`sync`) ends the wait instead."""
        if self._pages_waiting() >= GROUP_SIZE or self.lost is not None:
            return False
        return self._not_due() > 0 and self._room() > 0 and self._want() == 0

    def _pages_waiting(self) -> int:
        """Pages whose links or done wait for the next call."""
        return len(self._waiting) + len(self._dones)

    def _hurry_flush(self) -> None:
        """End a lingering flush's wait: something wants the call now."""
        if self._hurry is not None:
            self._hurry.set()

    def _gather(self, *, lease: bool) -> tuple[list[Operation], list[_Waiting]]:
        """The next call's operations: done URLs first, then links, then the rest."""
        ops: list[Operation] = self._dones + self._ops
        self._dones, self._ops = [], []
        waiting = []
        for completion, then in self._waiting:
            first = len(ops)
            ops += link_operations(completion, self.scheduler.turns_away)
            waiting.append((completion, then, first, len(ops)))
        self._waiting = []
        if any(self._makes_work(op) for op in ops):
            # This call itself may make work ready (before the lease it carries, which
            # the script applies last): no need to wait for the server's "work" message.
            self.link.idle_until = None
        room = self._lease_ahead(ops)
        want = min(self._want(), LEASE_STEP) if lease else 0
        if want > 0:
            op: Operation = {"k": "lease", "n": want}
            if room > 0:  # what comes soon, leased ahead (room only where the crawl does)
                op.update(h=self.link.early, e=room)
            ops.append(op)
        return ops, waiting

    def _makes_work(self, op: Operation) -> bool:
        """Whether ``op`` may make work ready at once (see MAKES_WORK): a URL done or a
        robots.txt settled at an origin with a delay frees it a delay later at the soonest
        (its next URL leased ahead, or announced then with a timed "work" message)."""
        return op["k"] in MAKES_WORK and not self._frees_later(op)

    def _frees_later(self, op: Operation) -> bool:
        """Whether ``op`` is a URL done or robots.txt settled at an origin with a delay."""
        return op["k"] in ("done", "robots") and self._delay_of(op["o"]) > 0

    def _lease_ahead(self, ops: list[Operation]) -> int:
        """Ask, with each done or robots.txt operation of an origin with a delay, for the
        origin's next URL, leased now to be started when its delay ends (their ``a``),
        while the window has workers for all it holds; return how many more it has
        workers for (the most a lease in the same call may take ahead, see
        :data:`~trio_crawler._cluster_session.EARLY`).

        The server would otherwise hand the origin out only once its delay had ended, to
        whichever process asked first then, each of them woken for it: a call more per page
        in every process, and a start late by a round trip and a wake-up. This process, as
        the one that finished the origin's last page, takes its next and starts it on its
        own clock when the delay ends, as one process would: the origin held in the window,
        in line with the others by the time the server gave (see :meth:`_take_leased`).
        The server leases ahead only while no origin waits there for a worker, so that a
        crawl short of workers goes in the server's order, and up to this process's share
        of the crawl's leases, so that the processes share the origins (lua/step.lua).
        Only with one request at a time to a host (``--max-per-host 1``, the broad crawl's
        setting), whose delay runs from the last answer's end: with more at a time, each
        start waits for the server to hear that the request before it has gone out
        (:meth:`request_sent`), which a lease ahead would skip.
        """
        if self.config.max_per_host != 1:
            return 0
        room = self._room(ahead=True)
        for op in ops:
            if room <= 0:
                break
            if self._frees_later(op):
                op["a"] = 1
                room -= 1
        return room

    async def _answered(
        self,
        answer: dict[str, Any] | None,
        ops: list[Operation],
        waiting: list[_Waiting],
    ) -> None:
        """Apply the server's answer to ``ops`` (None when there was nothing to send)."""
        results: list[Any] = [] if answer is None else answer["r"]
        for index, op in enumerate(ops):
            if op["k"] == "started":
                self._starting.discard(op["u"])
            elif op["k"] == "done":
                self._unsettled.discard(op["u"])
            elif op["k"] == "pace" and index < len(results):
                self._pace.learn(op, results[index])
        for completion, then, first, last in waiting:
            settled = settled_from(ops[first:last], results[first:last])
            request = completion.request
            if completion.leased:
                assert request is not None
                self.scheduler.complete(request)
            then(completion, settled)
            if request is not None and not request.robots:
                # The record is written (then() wrote it): now the URL may be marked done.
                self._held.pop(request.url, None)
                ended = self._ended.pop(request.url, None)
                self._dones.append(done_operation(request, completion.record, ended=ended))
        if answer is None:
            return
        number = answer.get("n")
        if isinstance(number, int) and ops and ops[-1]["k"] == "lease":
            self.link.last_call = max(self.link.last_call, number)
        leased = answer.get("l")
        leased = leased if isinstance(leased, list) else []
        leases = await self._take_leased(leased)
        asked = bool(ops) and ops[-1]["k"] == "lease"
        # A lease ahead (of an origin whose time has not come) says nothing of the origins
        # that are ready; a lease that got less than it asked for took all there was.
        short = asked and len(leased) < ops[-1]["n"]
        # Until the next call for the work to come: called for early, and leased ahead then.
        # The server's clock is this engine's (see ClusterSession.connect), to the
        # microsecond of its TIME.
        wait = early_wait(seconds(answer.get("w")), self.link.early)
        if not short and leases.any_ready:
            self.link.idle_until = None
        elif asked:
            # Woken by a "work" message before then.
            if self.shared.leased > len(self._held):  # another process's may run out,
                # or its holder be found to have stopped (then this process says so)
                wait = min(wait, seconds(answer.get("x")), seconds(answer.get("y")), self.lease)
            # Nothing to wait for (inf): no lease is asked for until something changes
            # (a "work" message, or a change of this process's own, see MAKES_WORK).
            self.link.idle_until = self._now() + wait
        elif self.link.idle_until is not None:
            # Not past the time an origin may go, which a change of this call may have set
            # (an origin left to 'ready' by a done, a start that frees one). Counted from
            # the answer, as the wait above: a host's delay timed from a start told before
            # its request went out ends that much early, and the round trip is slack.
            self.link.idle_until = min(self.link.idle_until, self._now() + wait)

    async def _take_leased(self, leased: list[Any]) -> Leases:
        """Queue what the server leased to this process in the window; return it, read."""
        leases = read_leases(leased)
        for key in leases.robots:
            self._robots_tickets.append(key)
            self._held["r " + key] = None
        for url in leases.damaged:
            self._ops.append({"k": "drop", "u": url, "o": ""})
        pages = leases.pages
        unknown = [
            key
            for key in dict.fromkeys(origin_of(p.url) for p in pages)
            if not self.scheduler.knows_origin(key)
        ]
        if unknown:
            await self._learn_origins(unknown)
        for request in pages:
            self._held[request.url] = request
            self._seen.add(request.url)
            # Its origin goes out here when the server would have let it, in the order
            # the server keeps: the origin that could go longest ago first.
            not_before = self.link.sent_at + leases.waits[request.url]
            self.scheduler.hold_origin(origin_of(request.url), not_before=not_before)
            if not_before > self.link.sent_at:  # leased ahead: no worker until then
                heapq.heappush(self._ahead, (not_before, request.url))
                self._waiting_ahead.add(request.url)
            self.scheduler.enqueue_one(request, first=request.attempt > 1)
        return leases

    async def _learn_origins(self, keys: list[str]) -> None:
        """Read the robots.txt state and delay of origins new to this process."""
        answers = await self.link.read_origins(keys)
        for key, answer in zip(keys, answers, strict=True):
            state = origin_state(key, answer)
            self._delays[key] = state.delay
            self._delayed = self._delayed or state.delay > 0
            self.scheduler.restore_origin(key, rules=state.rules, failure=state.failure, delay=None)

    def close(self) -> None:
        """Nothing to do: :meth:`session` leaves the shared crawl when ``crawl()`` ends."""

    def resumed(self) -> Resumed | None:
        """None: each process's report and outputs hold the records it makes."""
        return None

    def records(self) -> Iterator[FetchStatistic] | None:
        return None

    def listing(self) -> Listing | None:
        return None

    def attach_output(self, output: RecordOutput) -> None:
        """Nothing to reconcile: each process appends its own records."""

    def attach_archive(self, archive: ArchiveOutput) -> None:
        """Nothing to reconcile: each process appends its own exchanges."""

    def report_notes(self) -> list[str]:
        """One line for the whole shared crawl: each process reports its own records."""
        return [self.link.note()]

    def _delay_of(self, key: str) -> float:
        """Origin ``key``'s delay as the server keeps it: Crawl-delay, or ``--delay``."""
        return self._delays.get(key, self.link.base_delay)

    def _now(self) -> float:
        assert self._runtime is not None, "used outside a session"
        return self._runtime.clock()

    def _wake_dispatcher(self) -> None:
        self._hurry_flush()  # what wakes the dispatcher may want a call
        if self._runtime is not None:
            self._runtime.wake()

    # -- the session: what its tasks ask of the window (see ClusterSession.open) ---------

    @asynccontextmanager
    async def session(self, runtime: StoreRuntime) -> AsyncIterator[None]:
        """Join the shared crawl for the length of a ``crawl()`` (ClusterError: no server
        answers, or it holds another crawl under this name)."""
        self._runtime = runtime
        self._scheduling = runtime.scheduling
        self._flushed = anyio.Event()
        self._flushed.set()
        try:
            async with self.link.open(runtime, self):
                yield
        finally:
            self._closed = True

    def wake(self) -> None:
        self._wake_dispatcher()

    def hold(self, origin: str, until: float) -> None:
        """Another process's answer made ``origin`` wait (the channel's ``hold``): what
        this process leased of it and has not started is held back until then, as after
        an answer of its own (:meth:`retry_later`). An origin it has never had is left to
        the server, which holds it for every later lease."""
        if self.scheduler.knows_origin(origin):
            self.scheduler.wait_origin(origin, until=until)

    def queue_renewal(self) -> bool:
        """Have the next call renew every lease this process holds; say whether there
        was any (for :meth:`renew`, and for a caller that drives the clock itself)."""
        held = list(self._held)
        if not held or self.lost is not None:
            return False
        self._ops.append({"k": "renew", "u": held})
        return True

    async def renew(self) -> None:
        if self.queue_renewal():
            await self.sync()

    async def leave(self) -> None:
        # A URL a worker finished is not given back: the call below sends its completion,
        # writes its record and marks it done. Given back as well, another process could
        # lease it before the done arrived, and fetch and record it a second time.
        unsettled = self._unsettled
        leaving = {member: req for member, req in self._held.items() if member not in unsettled}
        self._ops += give_back_operations(leaving)
        self._robots_tickets.clear()
        self._held.clear()
        self._waiting_ahead.clear()
        if self.lost is None:
            self._scheduling = lambda: False
            await self.sync()
            # Then, alone, the call that says this process is gone (no longer idle, nor
            # timed as live): last, as a page's done goes in a call after its links', and
            # any call after it would count the process again.
            self._ops.append({"k": "bye"})
            await self.sync()
