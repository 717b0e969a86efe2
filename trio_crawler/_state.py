"""CrawlState: every decision of a crawl, with no I/O.

Theory of operation
-------------------
The chapter's crawler kept its decisions inside the coroutine that fetched: the seen-set,
the redirect budget, the retry loop and the ``asyncio.Queue`` whose ``join()`` said when the
crawl was over. Here all of that lives in one synchronous object, and an engine only moves
data between it and the network:

1. ``next_request()`` hands out the next URL to fetch (FIFO, as the chapter's queue), or
   None when there is nothing to do *yet*. Handing a request out moves it from the frontier
   to the in-flight set.
2. The engine makes one HTTP attempt and calls ``attempt_finished(request, outcome)``.
   The core answers with a retry (the same URL, ``attempt + 1``; still in flight) or None,
   in which case the URL has its record and has left the in-flight set. Links found on a
   page and redirect targets join the frontier here.
3. ``finished`` is true when nothing is queued and nothing is in flight. This count of
   pending work replaces ``Queue.join()``: the engine that sees it true ends its workers.

Time is an input. Manners need a clock (``--delay``, ``Crawl-delay``, ``Retry-After``), so
``next_request(now=...)`` and ``attempt_finished(..., now=...)`` take the engine's clock
reading, and when every host with work is waiting, ``next_request`` returns None and
:meth:`CrawlState.next_wakeup` says when to ask again. The engine sleeps; the core never does.

The frontier is kept per origin (scheme, host and port), because robots.txt, ``--delay``
and ``--max-per-host`` all apply per origin, and waiting for one host must not hold back
URLs of another. Each origin has a FIFO of *batches*: the new links of one page share their
depth and redirect budget, so a batch stores them as a list of plain strings and a request
object is made only when a URL is handed out (a million queued URLs cost a list slot each,
not an object each). A heap of ready origins, keyed by the sequence number of each one's
oldest batch, hands URLs out in the order they were found, as the chapter's FIFO queue did,
whenever no host limit is in the way.

robots.txt: before the first URL of an origin, ``next_request`` hands out a request for
that origin's ``/robots.txt`` (``request.robots`` is true) and holds the origin's URLs
until its outcome arrives, so concurrent workers wait for that one fetch rather than
fetching it again; other origins go on meanwhile. See :mod:`trio_crawler._robots` for how
its status and body become rules.

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
import heapq
import logging
from collections import Counter, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import urldefrag, urljoin, urlsplit

from ._config import MAX_HOST_DELAY
from ._events import (
    FetchError,
    FetchRequest,
    Outcome,
    Response,
    RobotsRequest,
    describe_exception,
)
from ._links import PARSED_MEDIA_TYPES, choose_encoding, extract_links, parse_content_type
from ._robots import MAX_ROBOTS_REDIRECTS, RobotsRules, origin_of, robots_url
from ._stats import FetchStatistic
from ._urls import normalize_url

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from ._config import CrawlConfig

LOGGER = logging.getLogger("trio_crawler")

_AnyRequest = TypeVar("_AnyRequest", bound=FetchRequest)

# The chapter's redirect statuses plus 308 (RFC 7538, Permanent Redirect).
REDIRECT_STATUSES = frozenset({300, 301, 302, 303, 307, 308})
# Statuses that mean "not now" rather than "no": with a Retry-After header they are retried
# after it (RFC 9110 section 15.6.4; RFC 6585 section 4), like Scrapy's RETRY_HTTP_CODES.
RETRY_LATER_STATUSES = frozenset({429, 503})
# The report's counters for URLs that never got a record, or links that were never queued.
LINKS_TOO_LONG = "links_too_long"
BEYOND_MAX_DEPTH = "beyond_max_depth"
ROBOTS_DISALLOWED = "robots_disallowed"
RETRIED_LATER = "retried_after_wait"


@dataclass(frozen=True, slots=True, kw_only=True)
class CrawlStatistics:
    """A snapshot of a crawl's progress, for progress displays and the report.

    Attributes:
        queued: URLs waiting in the frontier.
        in_flight: URLs handed to an engine and not yet finished (robots.txt included).
        done: URLs with a record.
        seen: URLs queued, in flight or done.
        failed: Records with an exception.
    """

    queued: int
    in_flight: int
    done: int
    seen: int
    failed: int

    @property
    def todo(self) -> int:
        """URLs queued but not finished: the report's ``Todo``."""
        return self.queued + self.in_flight


class _Batch:
    """URLs queued together (one page's new links), handed out from ``next_index`` on."""

    __slots__ = ("depth", "next_index", "redirects_left", "sequence", "urls")

    def __init__(self, sequence: int, urls: list[str], *, depth: int, redirects_left: int):
        self.sequence = sequence
        self.urls = urls
        self.depth = depth
        self.redirects_left = redirects_left
        self.next_index = 0


class _Origin:
    """One origin's queue, robots.txt rules and politeness clock."""

    __slots__ = (
        "batches",
        "delay",
        "failure",
        "in_flight",
        "key",
        "next_start",
        "queued",
        "ready",
        "requeued",
        "robots",
        "robots_pending",
        "sleeping",
        "unstarted",
    )

    def __init__(self, key: str, *, delay: float, robots: RobotsRules | None) -> None:
        self.key = key
        self.batches: deque[_Batch] = deque()
        # Requests put back (a Retry-After wait, an engine handing work back): they go
        # first, and keep their attempt count.
        self.requeued: deque[FetchRequest] = deque()
        self.queued = 0
        self.in_flight = 0
        self.delay = delay
        self.next_start = 0.0  # the earliest time the next request may start
        self.robots = robots  # None: not fetched yet
        self.robots_pending = False
        # With a delay: URLs handed out whose attempt has not started yet. The delay runs
        # from a request's start, so none follows until the one before it has started.
        self.unstarted: set[str] = set()
        self.failure: str | None = None  # robots.txt could not be fetched: this error
        self.ready = False  # has an entry in the ready heap
        self.sleeping = False  # has an entry in the sleeping heap

    def head_sequence(self) -> int:
        return -1 if self.requeued else self.batches[0].sequence

    def pop(self) -> FetchRequest:
        self.queued -= 1
        if self.requeued:
            return self.requeued.popleft()
        batch = self.batches[0]
        url = batch.urls[batch.next_index]
        batch.next_index += 1
        if batch.next_index == len(batch.urls):
            self.batches.popleft()
        return FetchRequest(url=url, redirects_left=batch.redirects_left, depth=batch.depth)


class CrawlState:
    """The frontier, the seen-set, the budgets and the records of one crawl.

    Args:
        config: The crawl's validated options; its roots are queued at once.
        on_record: Called with each record as it is made, before the method that made it
            returns, so an output file can hold every finished URL even if the crawl is
            interrupted right after. It must not raise.
    """

    def __init__(
        self,
        config: CrawlConfig,
        *,
        on_record: Callable[[FetchStatistic], None] | None = None,
    ) -> None:
        self.config = config
        self.seen_urls: set[str] = set()
        self.done: list[FetchStatistic] = []
        self.limit_counts: Counter[str] = Counter()
        self.limit_reached: str | None = None
        self._on_record = on_record
        self._origins: dict[str, _Origin] = {}
        self._ready: list[tuple[int, str]] = []  # heap of (head sequence, origin key)
        self._sleeping: list[tuple[float, str]] = []  # heap of (next start, origin key)
        self._sequence = 0
        self._queued = 0
        self._in_flight: set[str] = set()
        self._robots_in_flight = 0
        self._started = 0  # URLs handed out for the first time, or recorded unfetched
        self._failed = 0
        self._scheduling = True
        for root in config.roots:  # a batch each, so that roots go out in the order given
            self._enqueue([root], redirects_left=config.max_redirect, depth=0)

    # -- what engines call -------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """True when no URL is queued (or scheduling has stopped) and none is in flight."""
        return (
            not self._in_flight
            and not self._robots_in_flight
            and (not self._queued or not self._scheduling)
        )

    def next_request(self, *, now: float = 0.0) -> FetchRequest | None:
        """The next URL to fetch, now counted as in flight; None if there is none yet.

        None does not mean the crawl is over: a page in flight may still add links, and a
        host may be waiting out its delay (see :meth:`next_wakeup`). Check :attr:`finished`.
        A robots.txt request (``request.robots``) comes before an origin's first URL.

        Args:
            now: The engine's clock, in seconds, for per-host delays.
        """
        while self._sleeping and self._sleeping[0][0] <= now:
            _, key = heapq.heappop(self._sleeping)
            origin = self._origins[key]
            origin.sleeping = False
            self._make_ready(origin)
        while self._scheduling and self._ready:
            _, key = heapq.heappop(self._ready)
            origin = self._origins[key]
            origin.ready = False
            if not self._can_start(origin):
                continue  # made ready again when robots.txt arrives or a request ends
            if origin.next_start > now:
                origin.sleeping = True
                heapq.heappush(self._sleeping, (origin.next_start, key))
                continue
            request = self._take(origin, now)
            if origin.queued:
                self._make_ready(origin)
            if request is not None:
                return request
        return None

    def next_wakeup(self) -> float | None:
        """When a host now waiting out its delay may start a request; None if none waits."""
        return self._sleeping[0][0] if self._sleeping and self._scheduling else None

    def attempt_finished(
        self, request: FetchRequest, outcome: Outcome, *, now: float = 0.0
    ) -> FetchRequest | None:
        """Take the outcome of one attempt; return the retry to make, or None when done.

        Args:
            request: The request the attempt was for, as handed out.
            outcome: What the attempt produced.
            now: The engine's clock, for ``Retry-After``.

        Raises:
            RuntimeError: If ``request`` is not in flight (an engine bug).
        """
        if isinstance(request, RobotsRequest):
            self._started_now(self._origin_of(request), request)
            return self._robots_finished(request, outcome, now)
        if request.url not in self._in_flight:
            raise RuntimeError(
                f"{request.url} is not in flight; an engine finished it twice or never "
                "got it from next_request()"
            )
        origin = self._origins[origin_of(request.url)]
        self._started_now(origin, request)
        if isinstance(outcome, FetchError):
            retry = self._failed_attempt(request, outcome)
            if retry is not None and origin.delay:
                # A host with a delay gets it between tries too: the retry waits its turn.
                self._requeue(origin, retry)
                return None
            if retry is not None:
                return retry
        elif (
            outcome.status in RETRY_LATER_STATUSES
            and outcome.retry_after is not None
            and request.attempt < self.config.max_tries
        ):
            self._retry_later(origin, request, outcome, now)
            return None
        elif outcome.status in REDIRECT_STATUSES and outcome.location:
            self._redirected(request, outcome)
        else:
            self._page(request, outcome)
        self._request_ended(origin)
        return None

    def attempt_started(self, request: FetchRequest, *, now: float = 0.0) -> None:
        """Note that an attempt for ``request`` starts now: its host's delay runs from here.

        ``next_request`` already starts the delay when it hands a request out, but a
        request can wait for an idle worker after that; timing the delay from the real
        start keeps requests to one host ``delay`` apart however long they waited.
        """
        origin = self._origin_of(request)
        if origin.delay:
            origin.next_start = max(origin.next_start, now + origin.delay)
        self._started_now(origin, request)

    def _origin_of(self, request: FetchRequest) -> _Origin:
        if isinstance(request, RobotsRequest):
            return self._origins[request.origin]
        return self._origins[origin_of(request.url)]

    def _started_now(self, origin: _Origin, request: FetchRequest) -> None:
        """``request`` has started (or ended, or gone back): the next may be handed out."""
        if origin.unstarted:
            origin.unstarted.discard(request.url)
            if not origin.unstarted:
                self._make_ready(origin)

    def put_back(self, request: FetchRequest) -> None:
        """Return a request that was handed out but never attempted, to be handed out again.

        For an engine that took more requests than it could start (the asyncio engine's
        queue, when the crawl stops early): the URL counts as queued again, not in flight.
        """
        if isinstance(request, RobotsRequest):
            self._robots_in_flight -= 1
            origin = self._origins[request.origin]
            origin.robots_pending = False
            origin.unstarted.discard(request.url)
            self._make_ready(origin)
        else:
            if request.url not in self._in_flight:
                raise RuntimeError(f"{request.url} is not in flight; it cannot be put back")
            if request.attempt == 1:
                self._started -= 1  # it counts toward max_pages when it is handed out again
            origin = self._origins[origin_of(request.url)]
            self._started_now(origin, request)
            self._requeue(origin, request)

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
        return frozenset(self._in_flight)

    def statistics(self) -> CrawlStatistics:
        """A frozen snapshot of the crawl's counts."""
        return CrawlStatistics(
            queued=self._queued,
            in_flight=len(self._in_flight) + self._robots_in_flight,
            done=len(self.done),
            seen=len(self.seen_urls),
            failed=self._failed,
        )

    # -- the frontier -------------------------------------------------------------------

    def _enqueue(self, urls: Iterable[str], *, redirects_left: int, depth: int) -> None:
        """Queue URLs (new, in scope, in order), grouped into one batch per origin."""
        by_origin: dict[str, list[str]] = {}
        for url in urls:
            self.seen_urls.add(url)
            key = origin_of(url)
            origin = self._origins.get(key)
            if (
                origin is not None
                and origin.robots is not None
                and not self._robots_allow(origin, url)
            ):
                continue
            by_origin.setdefault(key, []).append(url)
        for key, batch_urls in by_origin.items():
            origin = self._origins.get(key)
            if origin is None:
                origin = self._origins[key] = _Origin(
                    key,
                    delay=self.config.delay,
                    robots=None if self.config.obey_robots else RobotsRules(),
                )
            self._sequence += 1
            origin.batches.append(
                _Batch(self._sequence, batch_urls, depth=depth, redirects_left=redirects_left)
            )
            origin.queued += len(batch_urls)
            self._queued += len(batch_urls)
            self._make_ready(origin)

    def _make_ready(self, origin: _Origin) -> None:
        if origin.ready or origin.sleeping or not origin.queued:
            return
        origin.ready = True
        heapq.heappush(self._ready, (origin.head_sequence(), origin.key))

    def _can_start(self, origin: _Origin) -> bool:
        if origin.robots_pending or origin.unstarted:
            return False
        limit = self.config.max_per_host
        return limit is None or origin.in_flight < limit

    def _take(self, origin: _Origin, now: float) -> FetchRequest | None:
        """Hand out the origin's next request, or settle one URL without fetching it."""
        if origin.robots is None and origin.failure is None:
            origin.robots_pending = True
            self._robots_in_flight += 1
            origin.next_start = now + origin.delay
            url = robots_url(origin.key)
            if origin.delay:
                origin.unstarted.add(url)
            LOGGER.debug("fetching %s", url)
            return RobotsRequest(url=url, redirects_left=MAX_ROBOTS_REDIRECTS, origin=origin.key)
        request = origin.pop()
        self._queued -= 1
        first_try = request.attempt == 1
        if first_try:
            limit = self.config.max_pages
            if limit is not None and self._started >= limit:
                self._put_back(origin, request)
                self.limit_reached = "max-pages"
                self.stop_scheduling()
                LOGGER.info("--max-pages %d reached: scheduling no more URLs", limit)
                return None
        if origin.failure is not None:
            # robots.txt could not be fetched: the host is down, and each of its URLs gets
            # a failure record with that error rather than vanishing from the output.
            self._started += 1
            self._record(FetchStatistic(url=request.url, exception=origin.failure))
            return None
        assert origin.robots is not None
        if first_try and not self._robots_allow(origin, request.url):
            return None
        if first_try:
            self._started += 1
        self._in_flight.add(request.url)
        origin.in_flight += 1
        origin.next_start = now + origin.delay
        if origin.delay:
            origin.unstarted.add(request.url)
        return request

    def _robots_allow(self, origin: _Origin, url: str) -> bool:
        assert origin.robots is not None
        if origin.robots.allowed(url):
            return True
        self.limit_counts[ROBOTS_DISALLOWED] += 1
        LOGGER.info("robots.txt disallows %s", url)
        return False

    def _put_back(self, origin: _Origin, request: FetchRequest) -> None:
        origin.requeued.appendleft(request)
        origin.queued += 1
        self._queued += 1
        # An origin already in the ready heap keeps its entry, made for its old head: a
        # stale sequence is only a little early or late.
        self._make_ready(origin)

    def _request_ended(self, origin: _Origin) -> None:
        origin.in_flight -= 1
        self._make_ready(origin)

    def _requeue(self, origin: _Origin, request: FetchRequest) -> None:
        """Move an in-flight request back to the front of its origin's queue."""
        self._in_flight.remove(request.url)
        origin.in_flight -= 1
        self._put_back(origin, request)

    def _retry_later(
        self, origin: _Origin, request: FetchRequest, response: Response, now: float
    ) -> None:
        assert response.retry_after is not None
        wait = min(response.retry_after, MAX_HOST_DELAY)
        LOGGER.info(
            "try %d for %s got %d; retrying after %g s",
            request.attempt,
            request.url,
            response.status,
            wait,
        )
        self.limit_counts[RETRIED_LATER] += 1
        # The whole host waits: Retry-After speaks for the server, not for one URL.
        origin.next_start = max(origin.next_start, now + wait)
        self._requeue(origin, dataclasses.replace(request, attempt=request.attempt + 1))

    # -- robots.txt ---------------------------------------------------------------------

    def _robots_finished(
        self, request: RobotsRequest, outcome: Outcome, now: float
    ) -> FetchRequest | None:
        origin = self._origins.get(request.origin)
        if origin is None or not origin.robots_pending:
            raise RuntimeError(f"{request.url} is not in flight; an engine finished it twice")
        if isinstance(outcome, FetchError):
            retry = self._retry(request, outcome)
            if retry is not None:
                return retry
            LOGGER.warning(
                "%s failed: %s; not fetching from %s", request.url, outcome.error, origin.key
            )
            origin.failure = outcome.error
        elif outcome.status in REDIRECT_STATUSES and outcome.location:
            target = normalize_url(outcome.location, request.url)
            if target is not None and request.redirects_left > 0:
                LOGGER.debug("%s redirects to %s", request.url, target)
                return dataclasses.replace(
                    request, url=target, redirects_left=request.redirects_left - 1, attempt=1
                )
            # Too many redirects, or nowhere usable: the file is unavailable (RFC 9309).
            origin.robots = RobotsRules()
        else:
            origin.robots = RobotsRules.from_response(outcome.status, outcome.body)
            LOGGER.debug("%s: status %d", request.url, outcome.status)
            crawl_delay = origin.robots.crawl_delay
            if crawl_delay is not None and crawl_delay > origin.delay:
                origin.delay = min(crawl_delay, MAX_HOST_DELAY)
                origin.next_start = max(origin.next_start, now + origin.delay)
        origin.robots_pending = False
        self._robots_in_flight -= 1
        self._make_ready(origin)
        return None

    # -- records ------------------------------------------------------------------------

    def _record(self, stat: FetchStatistic) -> None:
        # discard, not remove: a URL of an origin whose robots.txt failed is recorded
        # without ever being in flight. attempt_finished() has checked the others.
        self._in_flight.discard(stat.url)
        self.done.append(stat)
        if stat.exception is not None:
            self._failed += 1
        if self._on_record is not None:
            self._on_record(stat)

    def _retry(self, request: _AnyRequest, failure: FetchError) -> _AnyRequest | None:
        """The next try of a network error while the URL has tries left (logged), or None."""
        if not failure.retryable:
            return None
        LOGGER.info("try %d for %s raised %s", request.attempt, request.url, failure.error)
        if request.attempt < self.config.max_tries:
            return dataclasses.replace(request, attempt=request.attempt + 1)
        return None

    def _failed_attempt(self, request: FetchRequest, failure: FetchError) -> FetchRequest | None:
        retry = self._retry(request, failure)
        if retry is not None:
            return retry
        if failure.retryable:
            LOGGER.warning("%s failed after %d tries", request.url, request.attempt)
        else:
            LOGGER.warning("%s failed: %s", request.url, failure.error)
        media_type: str | None = None
        encoding: str | None = None
        if failure.status == 200:
            # The contract gives every status-200 record a type and an encoding. The body
            # was not read, so the encoding is the one a page of a type we do not parse
            # gets: the Content-Type charset, else UTF-8.
            media_type, charset = parse_content_type(failure.content_type)
            encoding = choose_encoding(b"", charset)
        self._record(
            FetchStatistic(
                url=request.url,
                status=failure.status,
                exception=failure.error,
                content_type=media_type,
                encoding=encoding,
            )
        )
        return None

    def _redirected(self, request: FetchRequest, response: Response) -> None:
        assert response.location is not None
        target = _redirect_target(response.location, request.url)
        if target is None:
            # An unparsable Location is no redirect at all: record it as the chapter records
            # a 3xx without one, like any other non-200 status.
            LOGGER.info("unusable Location %r from %s", response.location, request.url)
            self._page(request, dataclasses.replace(response, location=None))
            return
        self._record(FetchStatistic(url=request.url, next_url=target, status=response.status))
        if not self.config.scope.allows(target):
            LOGGER.info("redirect to %s from %s is out of scope", target, request.url)
        elif target in self.seen_urls:
            LOGGER.debug("redirect to %s from %s: already seen", target, request.url)
        elif len(target) > self.config.max_url_length:
            self.limit_counts[LINKS_TOO_LONG] += 1
            LOGGER.info("redirect to a URL longer than --max-url-length from %s", request.url)
        elif request.redirects_left > 0:
            LOGGER.info("redirect to %s from %s", target, request.url)
            self._enqueue([target], redirects_left=request.redirects_left - 1, depth=request.depth)
        else:
            LOGGER.warning("redirect limit reached for %s from %s", target, request.url)

    def _page(self, request: FetchRequest, response: Response) -> None:
        if response.status != 200:
            self._record(
                FetchStatistic(url=request.url, status=response.status, size=len(response.body))
            )
            return
        media_type, charset = parse_content_type(response.content_type)
        parsed = media_type in PARSED_MEDIA_TYPES
        encoding = choose_encoding(response.body if parsed else b"", charset)
        links: set[str] = set()
        exception = None
        if parsed:
            try:
                links = extract_links(response.body, request.url, encoding, normalized=True)
            except Exception as exc:
                # The extractor promises never to raise; if a page still breaks it, that page
                # gets a record saying so and the crawl goes on.
                LOGGER.exception("could not extract links from %s", request.url)
                exception = describe_exception(exc)
        config = self.config
        max_length = config.max_url_length
        too_long = 0
        in_scope = set()
        for link in links:
            if len(link) > max_length:
                too_long += 1
            elif config.scope.allows(link):
                in_scope.add(link)
        if too_long:
            self.limit_counts[LINKS_TOO_LONG] += too_long
            LOGGER.debug("skipped %d links longer than %d on %s", too_long, max_length, request.url)
        new_links = in_scope - self.seen_urls
        if in_scope:
            LOGGER.debug("got %d distinct urls from %s", len(in_scope), request.url)
        self._record(
            FetchStatistic(
                url=request.url,
                status=response.status,
                exception=exception,
                size=len(response.body),
                content_type=media_type,
                encoding=encoding,
                num_urls=len(in_scope),
                num_new_urls=len(new_links),
            )
        )
        if not new_links:
            return
        depth = request.depth + 1
        if config.max_depth is not None and depth > config.max_depth:
            self.limit_counts[BEYOND_MAX_DEPTH] += len(new_links)
            LOGGER.debug("%d links beyond --max-depth on %s", len(new_links), request.url)
            return
        # Sorted so that a crawl visits pages in the same order on every run (sets of str
        # iterate in a hash order that changes per process).
        self._enqueue(sorted(new_links), redirects_left=config.max_redirect, depth=depth)


def _redirect_target(location: str, base: str) -> str | None:
    """The absolute, fragment-free target of a Location header, or None if it has none.

    http(s) targets are normalised like every other URL; a target with another scheme is
    kept as written (made absolute) so the record shows where the server pointed.
    """
    target = normalize_url(location, base)
    if target is not None:
        return target
    try:
        other = urldefrag(urljoin(base, location.strip())).url
        scheme = urlsplit(other).scheme
    except ValueError:
        return None
    if not scheme or scheme in ("http", "https"):
        # An http(s) URL that failed to normalise has a bad host or port: no usable target.
        return None
    try:
        other.encode("utf-8")
    except UnicodeEncodeError:
        return None  # lone surrogates: no JSON Lines writer could write this next_url
    return other
