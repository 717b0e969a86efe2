"""Per-origin scheduling: which queued URL may go out next, politely.

Theory of operation
-------------------
Every store needs the same answer to "what may be fetched now?": per-origin queues, handed
out in the order URLs were found, subject to each origin's robots.txt state, its politeness
clock (``--delay``, ``Crawl-delay``, ``Retry-After``) and its in-flight limit
(``--max-per-host``). :class:`OriginScheduler` is that answer as a building block: the
memory store schedules its whole queue with one, the SQLite store the window of its file
it has loaded, the Redis store the requests the server leased to this process. Each store
*has* a scheduler; none is one. The scheduler knows nothing of the seen set, of records,
or of where a queue is kept for good: that is the store's.

It reads no clock: every operation that depends on time takes ``now`` from the engine. It
owns every count of work it holds, each kept in one place: :attr:`queued` changes only in
``_push``/``_pop``, the in-flight set only in ``_lease``/``_release``, and the robots.txt
fetches in flight only in ``_set_robots``.

Layout in memory. The frontier is kept per origin (scheme, host and port), because
robots.txt, ``--delay`` and ``--max-per-host`` all apply per origin, and waiting for one
host must not hold back URLs of another. Each origin has a FIFO of *batches*: the new links
of one page share their depth, redirect budget and referrer (that page), so a batch stores
them as a list of plain strings and a request object is made only when a URL is handed out
(a million queued URLs cost a list slot each, not an object each). A heap of ready
origins, keyed by when each could first go and then by the sequence number of its oldest
batch, hands URLs out in the order they were found, as the chapter's FIFO queue did,
whenever no delay is in the way, and with delays hands each origin out in its turn, first
the one that has waited longest (:meth:`OriginScheduler._make_ready` says why); a second
heap holds the origins waiting out their delay, keyed by when they may start again. The
data of one origin (its batches, robots.txt state and clock) is
:mod:`trio_crawler._origins`'s; the decisions over it are here.

robots.txt, per origin, is a small state machine (:class:`RobotsState`)::

    UNKNOWN --take()--> FETCHING --robots_settled(rules)----> KNOWN
                            |  \\--robots_settled(failure)--> FAILED
                            \\--give_back()--> UNKNOWN

Before an origin's first URL, :meth:`OriginScheduler.take` hands out its ``/robots.txt``
and holds the origin's URLs until the outcome arrives, so concurrent workers wait for that
one fetch rather than fetching it again; other origins go on meanwhile. A URL of a FAILED
origin is handed out as :class:`~trio_crawler._frontier.Unfetchable` (it gets a failure
record, unfetched), and a URL its KNOWN rules forbid as
:class:`~trio_crawler._frontier.Disallowed`.
"""

from __future__ import annotations

import heapq
import logging
from typing import TYPE_CHECKING

from ._events import FetchRequest, RobotsRequest
from ._frontier import OUT_OF_BUDGET, Disallowed, RobotsState, Taken, Unfetchable
from ._origins import Batch, Origin, OriginState
from ._pace import Pace, PaceTally
from ._robots import MAX_ROBOTS_REDIRECTS, ROBOTS_MAX_AGE, RobotsRules, origin_of, robots_url

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["OriginScheduler", "OriginState"]

LOGGER = logging.getLogger("trio_crawler")


class OriginScheduler:
    """Per-origin queues, robots.txt state and politeness clocks: the building block that
    every store schedules with (see the module docstring).

    Args:
        delay: Seconds between the starts of two requests to one origin, at least.
        obey_robots: Fetch each origin's robots.txt before its first URL. Without it every
            origin starts with rules that allow everything.
        max_per_host: Requests to one origin in flight at once, at most (None: no limit).
        adapt: Learn each origin's pace from its answers (:mod:`trio_crawler._pace`).
    """

    def __init__(
        self, *, delay: float, obey_robots: bool, max_per_host: int | None, adapt: bool = False
    ) -> None:
        self._delay = delay
        # Before this, no origin met for the first time may start (hold_every_origin()).
        self._new_not_before = 0.0
        self._adapt = adapt
        self._obey_robots = obey_robots
        self._max_per_host = max_per_host
        self._origins: dict[str, Origin] = {}
        # Heap of (when it could first go, head sequence, origin key): see _make_ready.
        self._ready: list[tuple[float, int, str]] = []
        self._sleeping: list[tuple[float, str]] = []  # heap of (next start, origin key)
        self._sequence = 0
        self._queued = 0
        self._in_flight: set[str] = set()
        self._robots_fetching = 0
        self._tally = PaceTally()
        # Whether any origin has rules that may refuse a URL: until one has, no link is
        # looked up (a crawl that ignores robots.txt, or whose files allow everything).
        self._may_turn_away = False
        # Whether any origin has had a delay: the crawl's, or a Crawl-delay (see paced).
        self._delayed = delay > 0

    # -- counts --------------------------------------------------------------------------

    @property
    def queued(self) -> int:
        """URLs waiting to be handed out."""
        return self._queued

    @property
    def in_flight(self) -> frozenset[str]:
        """Page URLs handed out and not yet completed (robots.txt fetches not included)."""
        return frozenset(self._in_flight)

    @property
    def in_flight_count(self) -> int:
        """Requests handed out and not yet completed, robots.txt fetches included."""
        return len(self._in_flight) + self._robots_fetching

    def holds(self, url: str) -> bool:
        """Whether the page ``url`` is handed out and not yet completed or given back."""
        return url in self._in_flight

    # -- queueing ------------------------------------------------------------------------

    def enqueue(
        self,
        urls: Iterable[str],
        *,
        depth: int,
        redirects_left: int,
        sitemap: int = 0,
        first: bool = False,
        referrer: str | None = None,
    ) -> int:
        """Queue ``urls`` (new to the crawl: the store deduplicates), one batch per origin,
        in order; say how many the origin's known robots.txt rules turned away.

        A URL whose origin's rules are known and forbid it is not queued (and logged); one
        whose origin's robots.txt is not known yet is queued and checked when it is taken.
        ``sitemap`` marks them as sitemaps of that level; ``first`` puts them ahead of
        their origin's queue (sitemaps, after robots.txt); ``referrer`` offers them."""
        by_origin: dict[str, list[str]] = {}
        disallowed = 0
        for url in urls:
            key = origin_of(url)
            origin = self._origins.get(key)
            if origin is not None and origin.rules is not None and not origin.rules.allowed(url):
                disallowed += 1
                LOGGER.info("robots.txt disallows %s", url)
                continue
            by_origin.setdefault(key, []).append(url)
        for key, batch_urls in by_origin.items():
            origin = self._origin_for(key)
            if first:
                origin.requeued.extendleft(
                    FetchRequest(
                        url=url,
                        redirects_left=redirects_left,
                        depth=depth,
                        sitemap=sitemap,
                        referrer=referrer,
                    )
                    for url in reversed(batch_urls)
                )
            else:
                self._sequence += 1
                origin.batches.append(
                    Batch(
                        self._sequence,
                        batch_urls,
                        depth=depth,
                        redirects_left=redirects_left,
                        sitemap=sitemap,
                        referrer=referrer,
                    )
                )
            self._push(origin, len(batch_urls))
        return disallowed

    def enqueue_one(self, request: FetchRequest, *, first: bool) -> None:
        """Queue one request a store loaded (deduplicated there), after the rest; with
        ``first``, after the other requests put back first in line.

        Consecutive URLs of one origin with the same budgets and referrer share a batch, as
        one page's links do; robots.txt rules are checked when it is taken.
        """
        origin = self._origin_for(origin_of(request.url))
        if first:
            origin.requeued.append(request)
        else:
            batch = origin.batches[-1] if origin.batches else None
            if not (
                batch is not None
                and batch.sequence == self._sequence
                and (batch.depth, batch.redirects_left, batch.sitemap, batch.referrer)
                == (request.depth, request.redirects_left, request.sitemap, request.referrer)
            ):
                self._sequence += 1
                batch = Batch(
                    self._sequence,
                    [],
                    depth=request.depth,
                    redirects_left=request.redirects_left,
                    sitemap=request.sitemap,
                    referrer=request.referrer,
                )
                origin.batches.append(batch)
            batch.urls.append(request.url)
            if request.known is not None:
                if batch.known is None:
                    batch.known = {}
                batch.known[request.url] = request.known
        self._push(origin, 1)

    def turns_away(self, url: str) -> bool:
        """Whether the known robots.txt rules of ``url``'s origin forbid it (False while
        its robots.txt is not known: it is checked when taken)."""
        if not self._may_turn_away:
            return False
        origin = self._origins.get(origin_of(url))
        return origin is not None and origin.rules is not None and not origin.rules.allowed(url)

    # -- origins a store kept ------------------------------------------------------------

    def restore_origin(
        self,
        key: str,
        *,
        rules: RobotsRules | None,
        failure: str | None,
        delay: float | None,
        robots_at: float | None = None,
    ) -> None:
        """An origin whose robots.txt a store kept: KNOWN with ``rules``, else FAILED with
        ``failure``.

        ``delay``, if given, is the origin's own (a ``Crawl-delay``), which applies where it
        is longer than this scheduler's: the delay of the run that restores the origin is
        the floor, whatever the run that kept it had. ``robots_at`` is when the robots.txt
        was decided, on the engine's clock (see :data:`ROBOTS_MAX_AGE`).
        """
        origin = self._origins[key] = self._new_origin(key, rules)
        origin.robots_at = robots_at
        self._note_rules(rules)
        if rules is None:
            origin.failure = failure
            origin.robots = RobotsState.FAILED
        if delay is not None:
            origin.delay = max(self._delay, delay)
            self._delayed = self._delayed or origin.delay > 0

    def hold_origin(self, key: str, *, not_before: float) -> None:
        """Hand nothing out for origin ``key`` before ``not_before`` (a kept Retry-After,
        or a shared crawl's time for the origin, which also orders it among the others)."""
        origin = self._origin_for(key)
        origin.next_start = max(origin.next_start, not_before)

    def hold_every_origin(self, now: float) -> None:
        """Hand nothing out for any origin before its delay has run from ``now``, those
        met later included (the crawl's delay, theirs not being known): for a crawl that
        goes on after a process that may have sent any of them a request as it stopped,
        a request nothing recorded."""
        for origin in self._origins.values():
            origin.next_start = max(origin.next_start, now + origin.spacing())
        self._new_not_before = now + self._delay

    def queued_at(self, key: str) -> int:
        """URLs of origin ``key`` waiting here (0 for an origin not known here)."""
        origin = self._origins.get(key)
        return 0 if origin is None else origin.queued

    def knows_origin(self, key: str) -> bool:
        """Whether origin ``key`` has been queued, restored or held here."""
        return key in self._origins

    def origin_state(self, key: str) -> OriginState:
        """What a store keeps of origin ``key`` (which must be known here)."""
        origin = self._origins[key]
        return OriginState(origin.robots, origin.rules, origin.failure, origin.delay)

    # -- taking --------------------------------------------------------------------------

    def take(self, *, now: float, start_new: bool) -> Taken | None:
        """The next request that may go out at ``now``, leased; None if none may yet.

        None does not mean the frontier is empty: an origin may be waiting out its delay
        (see :meth:`next_wakeup`), its robots.txt, or a slot under ``max_per_host``.

        Args:
            now: The engine's clock, in seconds.
            start_new: Whether a URL's first attempt may be handed out. If not, and the next
                request would be one, :data:`OUT_OF_BUDGET` comes back and nothing is taken.
        """
        while self._sleeping and self._sleeping[0][0] <= now:
            _, key = heapq.heappop(self._sleeping)
            origin = self._origins[key]
            origin.sleeping = False
            self._make_ready(origin)
        while self._ready:
            _, _, key = heapq.heappop(self._ready)
            origin = self._origins[key]
            origin.ready = False
            if not self._can_start(origin):
                continue  # made ready again when robots.txt arrives or a request ends
            if origin.next_start > now:
                origin.sleeping = True
                heapq.heappush(self._sleeping, (origin.next_start, key))
                continue
            if origin.robots is RobotsState.UNKNOWN or self._stale(origin, now):
                return self._take_robots(origin, now)
            if not start_new and origin.head_is_new():
                self._make_ready(origin)
                return OUT_OF_BUDGET
            request = self._pop(origin)
            self._make_ready(origin)
            if origin.robots is RobotsState.FAILED:
                assert origin.failure is not None
                return Unfetchable(request, origin.failure)
            assert origin.rules is not None
            if request.attempt == 1 and not origin.rules.allowed(request.url):
                LOGGER.info("robots.txt disallows %s", request.url)
                return Disallowed(request)
            self._lease(origin, request, now)
            return request
        return None

    def next_wakeup(self) -> float | None:
        """When an origin now waiting out its delay may start; None if none waits."""
        return self._sleeping[0][0] if self._sleeping else None

    # -- what happens to a request handed out ---------------------------------------------

    def started(self, request: FetchRequest, *, now: float) -> bool:
        """An attempt for ``request`` starts now (its request is written): its origin's
        delay runs from here, not from :meth:`take`, since a request handed out can wait
        for an idle worker, and for its connection. Whether the start let the origin's
        next request go (it had held the origin)."""
        origin = self._origin(request)
        if origin.pace is not None:
            origin.pace.started(now)
        spacing = origin.spacing()
        if spacing:
            origin.next_start = max(origin.next_start, now + spacing)
        return self._started_now(origin, request)

    def complete(self, request: FetchRequest) -> None:
        """``request``'s URL is done (it has its record): it leaves the frontier for good."""
        origin = self._origin(request)
        self._started_now(origin, request)
        self._release(origin, request)

    def retry(self, request: FetchRequest, *, at_once: bool = False) -> bool:
        """A retry of a request in flight: True to attempt it at once, on the same worker.

        On an origin with a delay, a page's retry waits its turn like any request: back to
        the front of the origin's queue, and False comes back (a learnt gap does not: the
        retry stays the worker's, and the gap spaces the origin's other requests). A
        robots.txt retry (or its redirect) is made at once, as is any with ``at_once`` (the
        crawl is stopping: it finishes what is in flight and takes nothing from the queue)."""
        origin = self._origin(request)
        self._started_now(origin, request)
        if at_once or not origin.delay or isinstance(request, RobotsRequest):
            return True
        self._requeue(origin, request)
        return False

    def retry_later(self, request: FetchRequest, *, not_before: float) -> None:
        """Put a request in flight back, first in line; its whole origin waits until then
        (``Retry-After`` speaks for the server, not for one URL)."""
        origin = self._origin(request)
        self._started_now(origin, request)
        self._wait(origin, not_before)
        self._requeue(origin, request)

    def wait_origin(self, key: str, *, until: float) -> None:
        """Origin ``key`` waits until ``until``, as its server asked (a ``Retry-After``),
        for a store that queues the answered request itself (the Redis store): nothing is
        handed out before, and what was handed out already is held back
        (:meth:`held_back`)."""
        self._wait(self._origin_for(key), until)

    def held_back(self, request: FetchRequest, *, now: float) -> bool:
        """Whether ``request``, handed out and not started, must not start at ``now``.

        Its origin was told to wait (a ``Retry-After``) after it was handed out: an answer
        another worker read meanwhile, while this request waited for an idle worker or in
        an engine's queue. Sent now, it would reach the server inside the wait it asked
        for; given back (:meth:`give_back`), it goes when the wait ends. robots.txt never
        is: nothing of an origin is answered before it.
        """
        if isinstance(request, RobotsRequest):
            return False
        return self._origin(request).wait_until > now

    def give_back(self, request: FetchRequest) -> None:
        """Take back a request handed out but never attempted: it goes out again later.

        A robots.txt request given back leaves its origin as if it was never asked for.

        Raises:
            RuntimeError: If ``request`` is not in flight (an engine bug).
        """
        if isinstance(request, RobotsRequest):
            origin = self._origins[request.origin]
            if origin.robots is not RobotsState.FETCHING:
                raise RuntimeError(f"{request.url} is not in flight; it cannot be given back")
            origin.unstarted.discard(request.url)
            origin.in_flight -= 1
            self._set_robots(origin, RobotsState.UNKNOWN)
            self._make_ready(origin)
            return
        if request.url not in self._in_flight:
            raise RuntimeError(f"{request.url} is not in flight; it cannot be put back")
        origin = self._origin(request)
        self._started_now(origin, request)
        self._requeue(origin, request)

    def is_leased(self, request: FetchRequest) -> bool:
        """Whether ``request`` was handed out and is not yet completed or given back."""
        if isinstance(request, RobotsRequest):
            origin = self._origins.get(request.origin)
            return origin is not None and origin.robots is RobotsState.FETCHING
        return request.url in self._in_flight

    # -- robots.txt ------------------------------------------------------------------------

    # The same signature as Frontier.robots_settled, on purpose: the stores hand it on.
    def robots_settled(
        self,
        request: RobotsRequest,
        *,
        rules: RobotsRules | None = None,
        failure: str | None = None,
        delay: float | None = None,
        now: float,
    ) -> None:
        """An origin's robots.txt is decided: its ``rules``, or the ``failure`` to fetch it.

        ``delay``, if given, is its new delay (a ``Crawl-delay`` over ``--delay``). The delay
        runs from ``now``, the answer's end: a robots.txt that reached the server late (a new
        connection, a crawl's first burst) is not followed by a page less than it after."""
        origin = self._origins[request.origin]
        self._started_now(origin, request)
        origin.in_flight -= 1
        origin.robots_at = now
        if rules is not None:
            origin.rules = rules
            self._note_rules(rules)
            self._set_robots(origin, RobotsState.KNOWN)
        else:
            assert failure is not None, "robots_settled() needs rules or a failure"
            origin.failure = failure
            self._set_robots(origin, RobotsState.FAILED)
        if delay is not None:
            origin.delay = delay
            self._delayed = self._delayed or delay > 0
        origin.next_start = max(origin.next_start, now + origin.spacing())
        self._make_ready(origin)

    def _stale(self, origin: Origin, now: float) -> bool:
        """Whether the origin's robots.txt rules are past :data:`ROBOTS_MAX_AGE`."""
        return origin.robots_at is not None and now - origin.robots_at >= ROBOTS_MAX_AGE

    def robots_time(self, key: str, at: float | None = None) -> float | None:
        """When origin ``key``'s robots.txt was decided (engine clock); ``at`` sets it."""
        if at is not None:
            self._origins[key].robots_at = at
        return self._origins[key].robots_at

    # -- pace ----------------------------------------------------------------------------

    def answered(
        self,
        request: FetchRequest,
        *,
        pushback: bool,
        started: float,
        now: float,
        ended: float | None = None,
    ) -> str | None:
        """An attempt in flight ended at ``now`` (``pushback``: a 429 or 503, a timeout, a
        failed connection): the pace learns (its change, logged, is returned), as of
        ``ended`` if given (an attempt whose server was waited for after its timeout, the
        frontier's ``answered`` says), and with a delay and one request at a time, the next
        waits a delay after ``now``, however late this one reached the server
        (docs/manners.md). Call it before it leaves."""
        origin = self._origin(request)
        if origin.delay and self._max_per_host == 1:
            origin.next_start = max(origin.next_start, now + origin.delay)
        learnt = now if ended is None else ended
        pace = origin.pace
        if pace is None or (not pushback and pace.idle(learnt - started)):
            return None
        slowed_before, gap_before = pace.active, pace.gap
        signal, change = origin.learn(pushback, started, learnt, self._max_per_host)
        self._tally.note(origin.key, pace, was_active=slowed_before)
        if change is not None:
            why = "pushback" if pushback else signal.value
            LOGGER.info("pace of %s: %s (%s from %s)", origin.key, change, why, request.url)
        if pace.gap > gap_before and pace.last_start >= 0.0:
            origin.next_start = max(origin.next_start, pace.last_start + origin.spacing())
        self._make_ready(origin)
        return change

    @property
    def slowed(self) -> tuple[int, int]:
        """Origins slowed by their pace now, and ever (the progress line, the report)."""
        return self._tally.counts

    @property
    def paced(self) -> bool:
        """Whether any origin has had a delay (the crawl's, a Crawl-delay) or a pace slowed
        by pushback: from then on a late request is lateness its host keeps."""
        return self._delayed or self._tally.counts[1] > 0

    def pace_of(self, key: str) -> Pace | None:
        """Origin ``key``'s pace, for a store to keep (None: --no-adapt, or unknown)."""
        origin = self._origins.get(key)
        return None if origin is None else origin.pace

    def restore_pace(self, key: str, gap: float, window: int, ceiling: float) -> None:
        """Origin ``key`` (known here) resumes with the pace a store kept: slowed."""
        pace = self._origins[key].pace
        if pace is None:
            return
        pace.restore(gap=gap, window=window, ceiling=ceiling)
        self._tally.note(key, pace, was_active=False)

    def take_robots(self, key: str, *, now: float) -> RobotsRequest:
        """Hand out origin ``key``'s robots.txt now, whatever its queue holds: for a store
        whose server decided that this process fetches it (the Redis store)."""
        origin = self._origin_for(key)
        self._set_robots(origin, RobotsState.UNKNOWN)
        return self._take_robots(origin, now)

    def release(self, request: FetchRequest) -> None:
        """Forget ``request``, in flight here, without queueing it again: its store has
        given it back to where it keeps its queue (the Redis store's server)."""
        origin = self._origin(request)
        self._started_now(origin, request)
        self._release(origin, request)

    # -- the only places the counts change ---------------------------------------------------

    def _push(self, origin: Origin, count: int) -> None:
        origin.queued += count
        self._queued += count
        self._make_ready(origin)

    def _pop(self, origin: Origin) -> FetchRequest:
        origin.queued -= 1
        self._queued -= 1
        if origin.requeued:
            return origin.requeued.popleft()
        batch = origin.batches[0]
        url = batch.urls[batch.next_index]
        batch.next_index += 1
        if batch.next_index == len(batch.urls):
            origin.batches.popleft()
        return FetchRequest(
            url=url,
            redirects_left=batch.redirects_left,
            depth=batch.depth,
            sitemap=batch.sitemap,
            known=None if batch.known is None else batch.known.get(url),
            referrer=batch.referrer,
        )

    def _lease(self, origin: Origin, request: FetchRequest, now: float) -> None:
        self._in_flight.add(request.url)
        origin.in_flight += 1
        spacing = origin.spacing()
        origin.next_start = now + spacing
        if spacing:
            origin.unstarted.add(request.url)

    def _release(self, origin: Origin, request: FetchRequest) -> None:
        self._in_flight.remove(request.url)
        origin.in_flight -= 1
        self._make_ready(origin)

    def _set_robots(self, origin: Origin, state: RobotsState) -> None:
        fetching = RobotsState.FETCHING
        self._robots_fetching += (state is fetching) - (origin.robots is fetching)
        origin.robots = state

    # -- helpers -----------------------------------------------------------------------------

    def _note_rules(self, rules: RobotsRules | None) -> None:
        if rules is not None and rules.may_refuse:
            self._may_turn_away = True

    def _origin_for(self, key: str) -> Origin:
        """Origin ``key``, made if new: its robots.txt UNKNOWN when robots.txt is obeyed."""
        origin = self._origins.get(key)
        if origin is None:
            rules = None if self._obey_robots else RobotsRules()
            origin = self._origins[key] = self._new_origin(key, rules)
        return origin

    def _new_origin(self, key: str, rules: RobotsRules | None) -> Origin:
        origin = Origin(key, delay=self._delay, rules=rules)
        origin.next_start = self._new_not_before
        if self._adapt:
            origin.pace = Pace()
        return origin

    def _origin(self, request: FetchRequest) -> Origin:
        if isinstance(request, RobotsRequest):
            return self._origins[request.origin]
        return self._origins[origin_of(request.url)]

    def _take_robots(self, origin: Origin, now: float) -> RobotsRequest:
        self._set_robots(origin, RobotsState.FETCHING)
        origin.in_flight += 1
        spacing = origin.spacing()
        origin.next_start = now + spacing
        url = robots_url(origin.key)
        if spacing:
            origin.unstarted.add(url)
        self._make_ready(origin)
        LOGGER.debug("fetching %s", url)
        return RobotsRequest(url=url, redirects_left=MAX_ROBOTS_REDIRECTS, origin=origin.key)

    def _requeue(self, origin: Origin, request: FetchRequest) -> None:
        """Move a request in flight back to the front of its origin's queue."""
        self._release(origin, request)
        origin.requeued.appendleft(request)
        # An origin already in the ready heap keeps its entry, made for its old head: a
        # stale sequence is only a little early or late.
        self._push(origin, 1)

    def _started_now(self, origin: Origin, request: FetchRequest) -> bool:
        """``request`` has started (or ended, or gone back): the next may be handed out.
        Whether it had held its origin."""
        if origin.unstarted:
            origin.unstarted.discard(request.url)
            if not origin.unstarted:
                self._make_ready(origin)
                return True
        return False

    def _wait(self, origin: Origin, until: float) -> None:
        origin.next_start = max(origin.next_start, until)
        origin.wait_until = max(origin.wait_until, until)

    def _make_ready(self, origin: Origin) -> None:
        """Line ``origin`` up by when it could first go, then by when its head was found:
        without delays that is the order URLs were found (the chapter's FIFO); with them,
        when workers and not delays are the limit, each host in its turn, where discovery
        order would serve the hosts found first again and again before the last ones."""
        if origin.ready or origin.sleeping or not origin.queued:
            return
        origin.ready = True
        heapq.heappush(self._ready, (origin.next_start, origin.head_sequence(), origin.key))

    def _can_start(self, origin: Origin) -> bool:
        if origin.robots is RobotsState.FETCHING or origin.unstarted:
            return False
        limit = self._max_per_host
        if limit is not None and origin.in_flight >= limit:
            return False
        pace = origin.pace
        return pace is None or not pace.window or origin.in_flight < pace.window
