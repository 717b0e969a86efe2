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
import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urldefrag, urljoin, urlsplit

from ._events import FetchError, FetchRequest, Outcome, Response, describe_exception
from ._links import PARSED_MEDIA_TYPES, choose_encoding, extract_links, parse_content_type
from ._stats import FetchStatistic
from ._urls import normalize_url

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._config import CrawlConfig

LOGGER = logging.getLogger("trio_crawler")

# The chapter's redirect statuses plus 308 (RFC 7538, Permanent Redirect).
REDIRECT_STATUSES = frozenset({300, 301, 302, 303, 307, 308})


@dataclass(frozen=True, slots=True, kw_only=True)
class CrawlStatistics:
    """A snapshot of a crawl's progress, for progress displays and the report.

    Attributes:
        queued: URLs waiting in the frontier.
        in_flight: URLs handed to an engine and not yet finished.
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
        self._on_record = on_record
        self._frontier: deque[FetchRequest] = deque()
        self._in_flight: set[str] = set()
        self._failed = 0
        self._scheduling = True
        for root in config.roots:
            self._enqueue(root, redirects_left=config.max_redirect, depth=0)

    # -- what engines call -------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """True when no URL is queued (or scheduling has stopped) and none is in flight."""
        return not self._in_flight and (not self._frontier or not self._scheduling)

    def next_request(self) -> FetchRequest | None:
        """The next URL to fetch, now counted as in flight; None if there is none yet.

        None does not mean the crawl is over: a page in flight may still add links. Check
        :attr:`finished` for that.
        """
        if not self._scheduling or not self._frontier:
            return None
        request = self._frontier.popleft()
        self._in_flight.add(request.url)
        return request

    def attempt_finished(self, request: FetchRequest, outcome: Outcome) -> FetchRequest | None:
        """Take the outcome of one attempt; return the retry to make, or None when done.

        Raises:
            RuntimeError: If ``request`` is not in flight (an engine bug).
        """
        if request.url not in self._in_flight:
            raise RuntimeError(
                f"{request.url} is not in flight; an engine finished it twice or never "
                "got it from next_request()"
            )
        if isinstance(outcome, FetchError):
            return self._failed_attempt(request, outcome)
        if outcome.status in REDIRECT_STATUSES and outcome.location:
            self._redirected(request, outcome)
        else:
            self._page(request, outcome)
        return None

    def stop_scheduling(self) -> None:
        """Hand out no more requests; the crawl is finished once in-flight URLs are done."""
        self._scheduling = False

    @property
    def in_flight(self) -> frozenset[str]:
        """URLs handed out and not yet finished."""
        return frozenset(self._in_flight)

    def statistics(self) -> CrawlStatistics:
        """A frozen snapshot of the crawl's counts."""
        return CrawlStatistics(
            queued=len(self._frontier),
            in_flight=len(self._in_flight),
            done=len(self.done),
            seen=len(self.seen_urls),
            failed=self._failed,
        )

    # -- decisions ----------------------------------------------------------------------

    def _enqueue(self, url: str, *, redirects_left: int, depth: int) -> None:
        self.seen_urls.add(url)
        self._frontier.append(FetchRequest(url=url, redirects_left=redirects_left, depth=depth))

    def _record(self, stat: FetchStatistic) -> None:
        self._in_flight.remove(stat.url)
        self.done.append(stat)
        if stat.exception is not None:
            self._failed += 1
        if self._on_record is not None:
            self._on_record(stat)

    def _failed_attempt(self, request: FetchRequest, failure: FetchError) -> FetchRequest | None:
        if failure.retryable:
            LOGGER.info("try %d for %s raised %s", request.attempt, request.url, failure.error)
            if request.attempt < self.config.max_tries:
                return dataclasses.replace(request, attempt=request.attempt + 1)
            LOGGER.warning("%s failed after %d tries", request.url, request.attempt)
        else:
            LOGGER.warning("%s failed: %s", request.url, failure.error)
        self._record(
            FetchStatistic(url=request.url, status=failure.status, exception=failure.error)
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
        elif request.redirects_left > 0:
            LOGGER.info("redirect to %s from %s", target, request.url)
            self._enqueue(target, redirects_left=request.redirects_left - 1, depth=request.depth)
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
                links = extract_links(response.body, request.url, encoding)
            except Exception as exc:
                # The extractor promises never to raise; if a page still breaks it, that page
                # gets a record saying so and the crawl goes on.
                LOGGER.exception("could not extract links from %s", request.url)
                exception = describe_exception(exc)
        scope = self.config.scope
        in_scope = {link for link in links if scope.allows(link)}
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
        # Sorted so that a crawl visits pages in the same order on every run (sets of str
        # iterate in a hash order that changes per process).
        for link in sorted(new_links):
            self._enqueue(link, redirects_left=self.config.max_redirect, depth=request.depth + 1)


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
    # An http(s) URL that failed to normalise has a bad host or port: no usable target.
    return other if scheme and scheme not in ("http", "https") else None
