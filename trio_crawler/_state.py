"""CrawlState: every decision of a crawl, with no I/O.

Theory of operation
-------------------
The chapter's crawler kept its decisions inside the coroutine that fetched: the seen-set,
the redirect budget, the retry loop and the ``asyncio.Queue`` whose ``join()`` said when the
crawl was over. Here they live in three rooms, and an engine only moves data between them
and the network:

* **decisions**, this module: budgets (tries, redirects, depth, ``max_pages``), scope, what
  each outcome means for the URL, and the records;
* **the frontier** (:mod:`trio_crawler._frontier`): the seen set, the per-origin queues,
  robots.txt state and the politeness clock, and every count of pending work;
* **page interpretation** (:mod:`trio_crawler._page`): a response read into a record and
  its in-scope links, as a pure function.

An engine drives it in three calls:

1. ``next_request(now=...)`` hands out the next URL to fetch (FIFO, as the chapter's
   queue), or None when there is nothing to do *yet*. Handing a request out moves it from
   the frontier's queue to its in-flight set. A robots.txt request (``request.robots``)
   comes before an origin's first URL.
2. The engine makes one HTTP attempt (after ``attempt_started(request, now=...)``) and calls
   ``attempt_finished(request, outcome, now=..., started=...)``. The answer says what happened
   (:data:`~trio_crawler._events.AttemptResult`): a :class:`~trio_crawler._events.Retry` to
   attempt now, a :class:`~trio_crawler._events.Recorded` URL, a request
   :class:`~trio_crawler._events.Requeued` to wait out its host's delay, or
   :class:`~trio_crawler._events.RobotsSettled`. Links found on a page and redirect targets
   join the frontier here. A crawl with a page handler gets a page read for links back as
   :class:`~trio_crawler._events.PageRead`, and hands over its handler's outcome with
   ``page_handled(...)``.
3. ``finished`` is true when nothing is queued and nothing is in flight. This count of
   pending work replaces ``Queue.join()``: the engine that sees it true ends its workers.

Time is an input, and a required one. Manners need a clock (``--delay``, ``Crawl-delay``,
``Retry-After``, a backoff), so every call that depends on time takes the engine's clock
reading as ``now``, and when every host with work is waiting, ``next_request`` returns None
and :meth:`CrawlState.next_wakeup` says when to ask again. The engine sleeps; the core never
does. Chance is an input too: a backoff's jitter is drawn from
:attr:`CrawlState.jitter_source`, which a test seeds to know every wait. So is the time of
day a record is stamped with (``fetched_at``): the engine's clock plus
:attr:`CrawlState.wall_offset`, which the shell reads once as the crawl starts.

Rule 1: nothing here awaits, sleeps, reads a clock or opens a socket. Every method runs to
completion between two checkpoints of whatever engine calls it, so no engine needs a lock,
and the state after an interrupted crawl is always consistent: ``done`` and ``seen_urls``
can be reported and flushed after a deadline or Ctrl-C.

Blame decides how errors travel. Whatever the web sends (a bad status, a broken page, a
failing connection) becomes a FetchStatistic. An engine that misuses the core (finishing a
URL that is not in flight) is a bug, and raises.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import random
from collections import Counter
from typing import TYPE_CHECKING

from ._config import MAX_HOST_DELAY
from ._counts import (
    BEYOND_MAX_DEPTH,
    LINKS_TOO_LONG,
    NOFOLLOW_PAGES,
    RETRIED_STATUS,
    ROBOTS_DISALLOWED,
    SLOWED_ORIGINS,
    CrawlCounts,
)
from ._events import (
    AttemptResult,
    Committing,
    FetchError,
    FetchRequest,
    Outcome,
    PageRead,
    Recorded,
    Requeued,
    Response,
    Retry,
    RobotsRequest,
    RobotsSettled,
)
from ._frontier import Completion, Disallowed, Offer, OutOfBudget, Settled, Unfetchable
from ._page import (
    PageReading,
    page_completion,
    read_failure,
    read_page,
    read_sitemap_response,
    redirect_completion,
    root_sitemaps,
    sitemap_offers,
)
from ._retry_policy import RETRY_STATUSES, pushes_back, retry_wait
from ._robots import RobotsRules, origin_of
from ._stats import FetchStatistic, Stamp
from ._urls import normalize_url

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._config import CrawlConfig
    from ._frontier import Frontier, Resumed
    from ._handler import Handled

LOGGER = logging.getLogger("trio_crawler")

# The chapter's redirect statuses plus 308 (RFC 7538, Permanent Redirect).
REDIRECT_STATUSES = frozenset({300, 301, 302, 303, 307, 308})


class CrawlState:
    """The decisions and the records of one crawl, over its frontier.

    Args:
        config: The crawl's validated options; its roots are queued at once.
        frontier: Its store, behind the core's seam
            (:class:`~trio_crawler._frontier.Frontier`); made by
            :func:`~trio_crawler._stores.open_store`.
        on_record: Called with each record as it is made, before the method that made it
            returns, so an output file can hold every finished URL even if the crawl is
            interrupted right after. It must not raise.
        resumed: What a durable store kept of the crawl it resumes; None for a new crawl.
        keep_records: Keep the records in :attr:`done`; by default only when not
            ``resumed`` (a durable store keeps them itself, so memory does not grow).
        jitter_source: Where a backoff's jitter is drawn from (:attr:`jitter_source`).
        hand_pages: The crawl has a page handler: a page read for links is answered
            :class:`~trio_crawler._events.PageRead`, for the engine to run the handler on.
        on_items: Called with a page's items (JSON lines) right after its record is passed
            to ``on_record``, when it has any. It must not raise.

    Attributes:
        jitter_source: A ``random.Random`` each backoff draws its jitter from: by default
            one seeded by the operating system when the state is made, so that two crawls
            (or two processes of one shared crawl) turned away together spread their
            retries apart. A test gives one with a known seed and knows every wait.
        wall_offset: Seconds to add to the engine's clock for the time of day (seconds
            since the epoch), which records' ``fetched_at`` are stamped with: the engine
            shell sets it as the crawl starts (it is the shell's one reading of the wall
            clock, :meth:`~trio_crawler._frontier.StoreRuntime.wall_time`); 0 until then.
    """

    def __init__(
        self,
        config: CrawlConfig,
        *,
        frontier: Frontier,
        on_record: Callable[[FetchStatistic], None] | None = None,
        resumed: Resumed | None = None,
        keep_records: bool | None = None,
        jitter_source: random.Random | None = None,
        hand_pages: bool = False,
        on_items: Callable[[tuple[str, ...]], None] | None = None,
    ) -> None:
        self.config = config
        self.frontier = frontier
        self.jitter_source = random.Random() if jitter_source is None else jitter_source
        self.wall_offset = 0.0
        # The records of this crawl, kept in memory unless a durable store keeps them.
        self.done: list[FetchStatistic] = []
        self._keep_records = resumed is None if keep_records is None else keep_records
        self.limit_counts: Counter[str] = Counter()
        self.limit_reached: str | None = None
        self._on_record = on_record
        self._on_items = on_items
        self._hand_pages = hand_pages
        # URLs handed out for their first attempt, or settled unfetched: the max_pages budget.
        self._started = 0
        # Records by kind (the report's classes), for the progress line's error and fail.
        self._kinds: Counter[str] = Counter()
        self._recorded = 0
        # Records the earlier runs of a resumed crawl made: not this run's (records_made).
        self._recorded_before = 0
        self._scheduling = True
        # When each page's attempt in flight started: for its origin's pace and delay.
        self._starts: dict[str, float] = {}
        # Sitemaps are read for the roots' origins only: robots.txt names them per origin.
        self._root_origins = frozenset(origin_of(root) for root in config.roots)
        if resumed is not None:
            # What a durable store kept of the crawl so far.
            self.limit_counts.update(resumed.limit_counts)
            self._started = self._recorded = self._recorded_before = resumed.records
            self._kinds.update(resumed.kinds)
        # A batch for each run of roots on one origin: roots go out in the order given,
        # and 100 000 of them on a few hosts are a few batches. A durable store that
        # resumes a crawl already has them, and says none is new.
        runs = itertools.groupby(config.roots, key=origin_of)
        self._offer(
            tuple(Offer(tuple(run), depth=0, redirects_left=config.max_redirect) for _, run in runs)
        )
        if config.sitemaps and not config.obey_robots:
            for origin in dict.fromkeys(origin_of(root) for root in config.roots):
                self._add_sitemaps(origin, (), None)

    # -- what engines call -------------------------------------------------------------

    @property
    def seen_urls(self) -> set[str]:
        """Every URL queued, in flight, done, or turned away by robots.txt."""
        return self.frontier.seen_urls()

    @property
    def finished(self) -> bool:
        """True when no URL is queued (or scheduling has stopped) and none is in flight."""
        return not self.frontier.in_flight_count and (
            not self.frontier.queued or not self._scheduling
        )

    def next_request(self, *, now: float) -> FetchRequest | None:
        """The next URL to fetch, now counted as in flight; None if there is none yet.

        None does not mean the crawl is over: a page in flight may still add links, and a
        host may be waiting out its delay (see :meth:`next_wakeup`). Check :attr:`finished`.

        Args:
            now: The engine's clock, in seconds, for per-host delays.
        """
        limit = self.config.max_pages
        while self._scheduling:
            taken = self.frontier.take(now=now, start_new=limit is None or self._started < limit)
            if taken is None or isinstance(taken, FetchRequest):
                if isinstance(taken, FetchRequest) and not taken.robots and taken.attempt == 1:
                    self._started += 1
                return taken
            if isinstance(taken, OutOfBudget):
                assert limit is not None
                self.limit_reached = "max-pages"
                self.stop_scheduling()
                LOGGER.info("--max-pages %d reached: scheduling no more URLs", limit)
            elif isinstance(taken, Unfetchable):
                # robots.txt could not be fetched: the host is down, and each of its URLs
                # gets a failure record with that error rather than vanishing from the output.
                self._started += 1
                self._settle(
                    Completion(
                        taken.request,
                        leased=False,
                        record=FetchStatistic(url=taken.request.url, exception=taken.error),
                    )
                )
            else:
                assert isinstance(taken, Disallowed)
                self.limit_counts[ROBOTS_DISALLOWED] += 1
        return None

    def next_wakeup(self) -> float | None:
        """When a host now waiting out its delay may start a request; None if none waits."""
        return self.frontier.next_wakeup() if self._scheduling else None

    def attempt_started(
        self, request: FetchRequest, *, now: float, sent_later: bool = False
    ) -> None:
        """Note that an attempt for ``request`` starts now: its answer is timed from here,
        and so is its host's delay, unless ``sent_later``.

        ``next_request`` already starts the delay when it hands a request out, but a
        request can wait for an idle worker after that; timing the delay from the real
        start keeps requests to one host ``delay`` apart however long they waited. With
        ``sent_later`` (the engine's transport reports when a request is written) the delay
        waits for :meth:`request_sent`, and the host holds its next request until then: a
        connection that takes part of the delay then takes none of the next gap.
        """
        self._starts[request.url] = now
        if not sent_later:
            self.frontier.started(request, now=now)

    def request_sent(self, request: FetchRequest, *, now: float) -> bool:
        """``request``'s head has been written to its connection: the host's delay runs
        from now. Called again (a proxy's tunnel, then the request), the later one counts.
        Whether this let the host's next request go: a dispatcher waiting may look again."""
        return self.frontier.started(request, now=now)

    def attempt_finished(
        self,
        request: FetchRequest,
        outcome: Outcome,
        *,
        now: float,
        started: float | None = None,
        ended: float | None = None,
    ) -> AttemptResult:
        """Take the outcome of one attempt; say what became of the request.

        Args:
            request: The request the attempt was for, as handed out (or retried).
            outcome: What the attempt produced.
            now: The engine's clock, for ``Retry-After``, a backoff and ``Crawl-delay``:
                the end of the attempt (its last byte, or its failure), as the server saw
                it: for an attempt that timed out with its request unanswered, when the
                engine stopped waiting for the server to answer or close.
            started: The engine's clock when the attempt started: a record made now says
                so (``fetched_at``) and how long it took (``elapsed``); None leaves both
                null.
            ended: When the attempt itself ended, if before ``now`` (the timeout of an
                attempt whose server was waited for): the end of its ``elapsed``.

        Returns:
            :class:`~trio_crawler._events.Retry` (attempt it again now, on the same worker),
            :class:`~trio_crawler._events.Recorded` (the URL is done),
            :class:`~trio_crawler._events.Requeued` (back in the frontier, to wait its
            host's delay, a Retry-After or a backoff) or
            :class:`~trio_crawler._events.RobotsSettled`.

        Raises:
            RuntimeError: If ``request`` is not in flight (an engine bug).
        """
        self._check_in_flight(request)
        if isinstance(request, RobotsRequest):
            return self._robots_finished(request, outcome, now)
        self._learn(request, outcome, now, ended)
        stamp = (
            None
            if started is None
            else Stamp.of_attempt(started, now if ended is None else ended, self.wall_offset)
        )
        if isinstance(outcome, FetchError):
            retry = self._retry(request, outcome)
            if retry is None:
                if outcome.retryable:
                    LOGGER.warning("%s failed after %d tries", request.url, request.attempt)
                else:
                    LOGGER.warning("%s failed: %s", request.url, outcome.error)
                record = read_failure(request.url, outcome)
                return self._settle(Completion(request, True, record, stamp=stamp))
            if self.frontier.retry(retry, at_once=not self._scheduling):
                return Retry(retry)
            return Requeued(retry)
        if outcome.status in RETRY_STATUSES:
            requeued = self._retry_status(request, outcome, now)
            if requeued is not None:
                return requeued
        if outcome.status in REDIRECT_STATUSES and outcome.location:
            return self._redirected(request, outcome, stamp)
        if request.sitemap:
            return self._sitemap(request, outcome, stamp)
        return self._page(request, outcome, stamp)

    def _check_in_flight(self, request: FetchRequest) -> None:
        if not self.frontier.is_leased(request):
            raise RuntimeError(
                f"{request.url} is not in flight; an engine finished it twice or never "
                "got it from next_request()"
            )

    def held_back(self, request: FetchRequest, *, now: float) -> bool:
        """Whether ``request``, handed out, must not start at ``now``: its origin was told
        to wait (a ``Retry-After`` another worker read) after it was handed out. The
        engine gives it back (:meth:`put_back`) rather than send it inside the wait."""
        return self.frontier.held_back(request, now=now)

    def attempt_withdrawn(self, request: FetchRequest) -> None:
        """The attempt :meth:`attempt_started` noted was withdrawn before its request's
        head was written (``sent_later``; its origin must wait, see :meth:`held_back`): no
        attempt was made, and the request goes back to be handed out again (:meth:`put_back`)."""
        self._starts.pop(request.url, None)
        self.put_back(request)

    def put_back(self, request: FetchRequest) -> None:
        """Return a request that was handed out but never attempted, to be handed out again.

        For an engine that took more requests than it could start (the asyncio engine's
        queue, when the crawl stops early): the URL counts as queued again, not in flight.

        Raises:
            RuntimeError: If ``request`` is not in flight (an engine bug).
        """
        self.frontier.give_back(request)
        if not request.robots and request.attempt == 1:
            self._started -= 1  # it counts toward max_pages when it is handed out again

    def stop_scheduling(self) -> None:
        """Hand out no more requests; the crawl is finished once in-flight URLs are done."""
        self._scheduling = False

    @property
    def scheduling_stopped(self) -> bool:
        """True once no more requests will be handed out (stop, or ``max_pages``)."""
        return not self._scheduling

    @property
    def in_flight(self) -> frozenset[str]:
        """URLs handed out and not yet finished (robots.txt fetches not included)."""
        return self.frontier.in_flight

    @property
    def records_made(self) -> int:
        """Records this run made: the crawl's, less those a resumed crawl's earlier runs
        made (the report's rate line is this run's)."""
        return self._recorded - self._recorded_before

    def statistics(self) -> CrawlCounts:
        """A frozen snapshot of the crawl's counts."""
        # A shared crawl's queued holds other processes' leases (work that may come back
        # here); the snapshot shows them apart, as --status does.
        elsewhere = self.frontier.held_elsewhere
        stranded = self.frontier.held_by_none
        return CrawlCounts(
            queued=max(0, self.frontier.queued - elsewhere),
            in_flight=self.frontier.in_flight_count,
            leased_elsewhere=elsewhere,
            leased_by_none=0 if stranded is None else stranded[0],
            back_by=None if stranded is None else stranded[1],
            done=self._recorded,
            seen=self.frontier.seen_count,
            error=self._kinds["error"],
            fail=self._kinds["fail"],
            slowed=self.frontier.slowed[0],
        )

    # -- decisions ------------------------------------------------------------------------

    def _learn(
        self, request: FetchRequest, outcome: Outcome, now: float, ended: float | None = None
    ) -> None:
        """The origin's pace and delay take the answer (before it leaves the flight)."""
        started = self._starts.pop(request.url, None)
        if started is None:
            return
        pushback = pushes_back(outcome)
        self.frontier.answered(request, pushback=pushback, started=started, now=now, ended=ended)

    def counters(self) -> dict[str, int]:
        """The report's limit counters, ``slowed_origins`` as the frontier counts it."""
        slowed = self.frontier.slowed[1]
        return {**self.limit_counts, SLOWED_ORIGINS: slowed} if slowed else dict(self.limit_counts)

    def _retry(self, request: FetchRequest, failure: FetchError) -> FetchRequest | None:
        """The next try of a network error while the URL has tries left (logged), or None."""
        if not failure.retryable:
            return None
        LOGGER.info("try %d for %s raised %s", request.attempt, request.url, failure.error)
        if request.attempt < self.config.max_tries:
            return dataclasses.replace(request, attempt=request.attempt + 1)
        return None

    def _retry_status(
        self, request: FetchRequest, response: Response, now: float
    ) -> Requeued | None:
        """The next try of an answer that means "not now" (:data:`RETRY_STATUSES`), after
        the wait the policy says (:func:`~trio_crawler._retry_policy.retry_wait`); None
        when it says none (the answer is then the URL's record).

        The wait holds the whole origin, not only this URL (``retry_later``): these
        answers speak for the server (it is overloaded, rate-limiting us, or its upstream is
        down), so its other URLs would get the same one now, and sending them would undo
        the wait. A shared crawl's server holds the origin for every process.
        """
        wait = retry_wait(
            request,
            response,
            max_tries=self.config.max_tries,
            max_retry_after=self.config.max_retry_after,
            draw=self.jitter_source.random,
        )
        if wait is None:
            return None
        self.limit_counts[RETRIED_STATUS] += 1
        retry = dataclasses.replace(request, attempt=request.attempt + 1)
        self.frontier.retry_later(retry, not_before=now + wait, now=now)
        return Requeued(retry)

    def _redirected(
        self, request: FetchRequest, response: Response, stamp: Stamp | None
    ) -> AttemptResult:
        redirect = redirect_completion(request, response, self.config, stamp)
        if redirect is None:
            # An unparsable Location is no redirect at all: record it as the chapter records
            # a 3xx without one, like any other non-200 status.
            return self._page(request, dataclasses.replace(response, location=None), stamp)
        completion, too_long = redirect
        if too_long:
            self.limit_counts[LINKS_TOO_LONG] += 1
        return self._settle(completion)

    def _page(
        self, request: FetchRequest, response: Response, stamp: Stamp | None
    ) -> AttemptResult:
        config = self.config
        known = request.known
        if response.status == 304 and known is not None:
            # A recrawl's "not modified": the page's links as the last pass kept them.
            reading = PageReading(
                record=FetchStatistic(url=request.url, status=304, num_urls=known.num_urls),
                links=known.links,
            )
            response = dataclasses.replace(
                response,
                etag=response.etag or known.etag,
                last_modified=response.last_modified or known.last_modified,
            )
        else:
            reading = read_page(
                request.url,
                response,
                scope=config.scope,
                max_url_length=config.max_url_length,
                obey_robots=config.obey_robots,
                x_robots_tags=response.x_robots_tags,
                for_handler=self._hand_pages,
            )
        if reading.nofollow:
            self.limit_counts[NOFOLLOW_PAGES] += 1
        if reading.too_long:
            self.limit_counts[LINKS_TOO_LONG] += reading.too_long
        if reading.parsed is not None:  # only with a handler: the engine runs it first
            return PageRead(request, response, reading, stamp)
        return self._settle(page_completion(request, reading, response, self.config, stamp))

    def page_handled(self, read: PageRead, handled: Handled) -> Recorded | Committing:
        """Take what the page handler made of a page the core answered :class:`PageRead`
        for: the links to queue and the items, or the error it raised. The answer is as
        :meth:`attempt_finished`'s for a page.

        Raises:
            RuntimeError: If the page's request is not in flight (an engine bug).
        """
        self._check_in_flight(read.request)
        reading = handled.reading(read.reading)
        return self._settle(
            page_completion(
                read.request, reading, read.response, self.config, read.stamp, handled.items
            )
        )

    def _settle(self, completion: Completion) -> Recorded | Committing:
        """Hand a finished URL to the frontier; its record is made once the frontier has
        applied it (at once in memory; when the transaction commits in a durable store)."""
        made: list[Recorded | None] = []
        self.frontier.finish(
            completion, lambda done, settled: made.append(self._made(done, settled))
        )
        if made and made[0] is not None:
            return made[0]
        assert completion.request is not None, "links alone go through _offer()"
        return Committing(completion.request)

    def _offer(self, offers: tuple[Offer, ...]) -> None:
        """Hand links alone to the frontier (the roots, the sitemaps robots.txt names)."""
        self.frontier.finish(Completion(None, False, None, offers), self._made)

    def _made(self, completion: Completion, settled: Settled) -> Recorded | None:
        """The record of a URL the frontier has settled: counted, kept and passed on."""
        if settled.disallowed:
            self.limit_counts[ROBOTS_DISALLOWED] += settled.disallowed
        if settled.beyond:
            self.limit_counts[BEYOND_MAX_DEPTH] += settled.beyond
        record = completion.final_record(settled)
        if record is None:  # links only: the roots, or the sitemaps robots.txt names
            return None
        if self._keep_records:
            self.done.append(record)
        self._recorded += 1
        self._kinds[record.kind] += 1
        if self._on_record is not None:
            self._on_record(record)
        if completion.items and self._on_items is not None:
            self._on_items(completion.items)
        return Recorded(record)

    # -- robots.txt ---------------------------------------------------------------------

    def _robots_finished(
        self, request: RobotsRequest, outcome: Outcome, now: float
    ) -> Retry | RobotsSettled:
        if isinstance(outcome, FetchError):
            retry = self._retry(request, outcome)
            if retry is not None:
                self.frontier.retry(retry)
                return Retry(retry)
            LOGGER.warning(
                "%s failed: %s; not fetching from %s", request.url, outcome.error, request.origin
            )
            self.frontier.robots_settled(request, failure=outcome.error, now=now)
            return RobotsSettled(request.origin)
        if outcome.status in REDIRECT_STATUSES and outcome.location:
            target = normalize_url(outcome.location, request.url)
            if target is not None and request.redirects_left > 0:
                LOGGER.debug("%s redirects to %s", request.url, target)
                redirected = dataclasses.replace(
                    request, url=target, redirects_left=request.redirects_left - 1, attempt=1
                )
                self.frontier.retry(request)
                return Retry(redirected)
            # Too many redirects, or nowhere usable: the file is unavailable (RFC 9309).
            self.frontier.robots_settled(request, rules=RobotsRules(), now=now)
            return RobotsSettled(request.origin)
        # Any status is an answer here, a 429 or 503 too (not retried as a page's would be):
        # RFC 9309 section 2.3.1 says what each means for the rules.
        rules = RobotsRules.from_response(outcome.status, outcome.body)
        LOGGER.debug("%s: status %d", request.url, outcome.status)
        delay = None
        if rules.crawl_delay is not None and rules.crawl_delay > self.config.delay:
            delay = min(rules.crawl_delay, MAX_HOST_DELAY)
        self.frontier.robots_settled(request, rules=rules, delay=delay, now=now)
        if self.config.sitemaps and request.origin in self._root_origins:
            self._add_sitemaps(request.origin, rules.sitemaps, request.url)
        return RobotsSettled(request.origin)

    # -- sitemaps ----------------------------------------------------------------------

    def _add_sitemaps(self, origin: str, named: tuple[str, ...], robots: str | None) -> None:
        """Queue a root origin's sitemaps first in its line: those robots.txt names (at
        ``robots``), or ``/sitemap.xml`` (see :func:`~trio_crawler._page.root_sitemaps`)."""
        config = self.config
        offer, too_long = root_sitemaps(
            origin,
            named,
            robots=robots,
            scope=config.scope,
            max_url_length=config.max_url_length,
            max_redirect=config.max_redirect,
        )
        if too_long:
            self.limit_counts[LINKS_TOO_LONG] += too_long
        self._offer((offer,))

    def _sitemap(
        self, request: FetchRequest, response: Response, stamp: Stamp | None
    ) -> Recorded | Committing:
        """A sitemap's record; its pages join the crawl one hop from the root, and the
        sitemaps an index names are read in turn, up to MAX_SITEMAP_LEVELS deep."""
        config = self.config
        reading = read_sitemap_response(
            request.url,
            response,
            scope=config.scope,
            max_url_length=config.max_url_length,
            max_size=config.max_size,
        )
        if reading.too_long:
            self.limit_counts[LINKS_TOO_LONG] += reading.too_long
        offers = sitemap_offers(
            request.url,
            reading,
            level=request.sitemap,
            max_redirect=config.max_redirect,
            max_depth=config.max_depth,
        )
        return self._settle(Completion(request, True, reading.record, offers, stamp=stamp))
