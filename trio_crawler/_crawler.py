"""What every engine's ``Crawler`` shares: options, state, attributes and failure outcomes.

Engines differ only in how they schedule: a nursery and a channel, a task group and a
memory object stream, or the chapter's queue with ``join()`` and ``cancel()``. Everything
else a crawler is lives here or in the core, so that the engine modules stay short enough
to read side by side and a behaviour fixed once is fixed for all of them.
"""

from __future__ import annotations

import functools
import logging
import ssl
from typing import TYPE_CHECKING, Literal

from ._config import (
    DEFAULT_MAX_REDIRECT,
    DEFAULT_MAX_SIZE,
    DEFAULT_MAX_TASKS,
    DEFAULT_MAX_TRIES,
    DEFAULT_MAX_URL_LENGTH,
    DEFAULT_TIMEOUT,
    ConfigError,
    CrawlConfig,
)
from ._events import Exchange, FetchError, describe_exception
from ._fetch import (
    DEFAULT_USER_AGENT,
    choose_http_library,
    environment_names_a_proxy,
    fetch,
    open_client,
)
from ._state import CrawlState, CrawlStatistics

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterable
    from types import ModuleType
    from typing import Any

    import httpx

    from ._events import FetchRequest, Outcome
    from ._stats import FetchStatistic

LOGGER = logging.getLogger("trio_crawler")

FinishReason = Literal["finished", "deadline", "interrupted", "max-pages"]

# How often ``on_progress`` is called: ten times a second is smooth to the eye and costs
# the crawl nothing measurable (one snapshot of five counters each time).
PROGRESS_INTERVAL = 0.1

# Closing clients and their connections takes microseconds on a healthy loop; five seconds
# only bounds a pathological close (a peer that never acknowledges), after which the
# sockets are left to the garbage collector rather than hanging Ctrl-C.
CLEANUP_TIMEOUT = 5.0


class CrawlerBase:
    """The chapter's ``Crawler`` minus its scheduling; see an engine's ``Crawler``.

    Args:
        roots: Start URLs. A root without ``://`` gets ``http://``; repeats are dropped.
        exclude: A regex; URLs where ``re.search`` matches are not followed.
        strict: Host matching: strict (equal, or modulo one ``www.``) or lenient (last
            two labels).
        max_redirect: Redirects followed from any one URL.
        max_tries: Attempts per URL on network errors.
        max_tasks: Concurrent workers, and so concurrent requests.
        client: An ``httpx.AsyncClient`` to share between the workers; it is left open.
            Without it each worker gets a client of its own, closed when the crawl ends.
        timeout: Seconds for one whole attempt, connect to last byte.
        max_time: Seconds for the whole crawl; when they pass, the crawl stops cleanly.
        max_size: Most body bytes read from one response, after Content-Encoding is undone.
        max_url_length: Links longer than this are skipped (and counted).
        max_pages: Stop handing out new URLs after this many; in-flight ones finish.
        max_depth: Link hops from a root to follow (a redirect is not a hop).
        obey_robots: Fetch each origin's robots.txt first and follow its rules.
        user_agent: The User-Agent header (robots.txt rules are matched on
            ``trio-crawler`` whatever it says).
        max_per_host: Concurrent requests to one origin (default: only ``max_tasks``).
        delay: Seconds between the starts of two requests to one origin.
        on_record: Called with each record the moment it is made (see
            :class:`~trio_crawler._state.CrawlState`).
        on_exchange: Called with every attempt as sent and received (robots.txt
            included), for archiving; see :class:`~trio_crawler._events.Exchange`.
        on_progress: Called with a :class:`~trio_crawler._state.CrawlStatistics` every
            ``progress_interval`` seconds while the crawl runs, from a task of its own.
        progress_interval: Seconds between two ``on_progress`` calls.

    Raises:
        ConfigError: At construction, for an unusable option.
    """

    def __init__(
        self,
        roots: Iterable[str],
        *,
        exclude: str | None = None,
        strict: bool = True,
        max_redirect: int = DEFAULT_MAX_REDIRECT,
        max_tries: int = DEFAULT_MAX_TRIES,
        max_tasks: int = DEFAULT_MAX_TASKS,
        client: httpx.AsyncClient | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_time: float | None = None,
        max_size: int = DEFAULT_MAX_SIZE,
        max_url_length: int = DEFAULT_MAX_URL_LENGTH,
        max_pages: int | None = None,
        max_depth: int | None = None,
        obey_robots: bool = True,
        user_agent: str | None = None,
        max_per_host: int | None = None,
        delay: float = 0.0,
        on_record: Callable[[FetchStatistic], None] | None = None,
        on_exchange: Callable[[Exchange], None] | None = None,
        on_progress: Callable[[CrawlStatistics], None] | None = None,
        progress_interval: float = PROGRESS_INTERVAL,
    ) -> None:
        self.config = CrawlConfig.create(
            roots,
            exclude=exclude,
            strict=strict,
            max_redirect=max_redirect,
            max_tries=max_tries,
            max_tasks=max_tasks,
            timeout=timeout,
            max_time=max_time,
            max_size=max_size,
            max_url_length=max_url_length,
            max_pages=max_pages,
            max_depth=max_depth,
            obey_robots=obey_robots,
            user_agent=user_agent,
            max_per_host=max_per_host,
            delay=delay,
        )
        if not (isinstance(progress_interval, int | float) and progress_interval > 0):
            raise ConfigError(
                "progress_interval",
                f"must be a positive number of seconds, not {progress_interval!r}",
            )
        # The library our own clients come from, chosen now so that a wrong choice stops
        # the crawler here; given a client, the crawler makes none and needs none.
        self._http_library: ModuleType | None = choose_http_library() if client is None else None
        self.state = CrawlState(self.config, on_record=on_record)
        self._user_agent = self.config.user_agent or DEFAULT_USER_AGENT
        # Whether the workers' clients take a proxy from the environment: asked when the
        # first one is made, not for each (see open_client).
        self._proxy_from_environment: bool | None = None
        self._on_exchange = on_exchange
        self._on_progress = on_progress
        self._progress_interval = float(progress_interval)
        self.finish_reason: FinishReason | None = None
        self.elapsed = 0.0
        self._client = client
        self._started = False
        self._prepare()

    def _prepare(self) -> None:
        """Make the engine's own primitives; runs at the end of ``__init__``."""

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
        """The records, in the order URLs finished."""
        return self.state.done

    def statistics(self) -> CrawlStatistics:
        """A frozen snapshot of the crawl's progress."""
        return self.state.statistics()

    @property
    def limit_counts(self) -> dict[str, int]:
        """What the limits kept out of the crawl: links too long or too deep, URLs
        robots.txt disallowed, 429/503 retries after a wait (zero counts are absent)."""
        return dict(self.state.limit_counts)

    def stop(self, grace: float = 0.0) -> None:
        """End the crawl, as Ctrl-C does.

        No new URL is started. With ``grace`` seconds, requests in flight may finish until
        then and are cancelled after; without, they are cancelled now. Calling it again
        with a shorter grace (or none) cuts the wait short. Safe to call from any task in
        the crawl's event loop, before or during ``crawl()``, which then returns with
        ``finish_reason == "interrupted"``.
        """
        raise NotImplementedError

    async def crawl(self) -> None:
        """Run the crawl until nothing is left to fetch, the deadline, or :meth:`stop`.

        Afterwards ``done``, ``seen_urls``, ``finish_reason`` and ``elapsed`` describe it,
        whichever way it ended. A Crawler crawls once.

        Raises:
            RuntimeError: If this Crawler has crawled before.
            ExceptionGroup: Only for a bug in the crawler; failures of the web are records.
        """
        raise NotImplementedError

    async def _attempt(self, client: httpx.AsyncClient, request: FetchRequest) -> Outcome:
        """One attempt bounded by the engine's cancel scope; raises only cancellation."""
        raise NotImplementedError

    def _now(self) -> float:
        """The engine's clock, which the core takes as an input for per-host delays."""
        raise NotImplementedError

    async def _crawl_url(self, client: httpx.AsyncClient, request: FetchRequest) -> None:
        """Attempt one URL until the core has its record (retries are the core's call)."""
        retry: FetchRequest | None = request
        while retry is not None:
            self.state.attempt_started(retry, now=self._now())
            outcome = await self._attempt(client, retry)
            if self._on_exchange is not None and outcome.exchange is not None:
                self._on_exchange(outcome.exchange)
            retry = self.state.attempt_finished(retry, outcome, now=self._now())

    def _fetch(
        self, client: httpx.AsyncClient, request: FetchRequest
    ) -> Coroutine[Any, Any, Outcome]:
        """``fetch()`` with this crawl's options: what an engine's ``_attempt`` awaits."""
        return fetch(
            client,
            request.url,
            max_size=self.config.max_size,
            keep_exchange=self._on_exchange is not None,
            robots=request.robots,
            # Our own clients carry the User-Agent already; a caller's gets it per request.
            user_agent=self._user_agent if client is self._client else None,
        )

    def _start(self) -> None:
        if self._started:
            raise RuntimeError("a Crawler crawls once; make a new Crawler for another crawl")
        self._started = True

    def _finish(self, *, deadline_passed: bool) -> None:
        """Settle ``finish_reason`` once a crawl returns normally."""
        if self.finish_reason is None:
            if deadline_passed:
                self.finish_reason = "deadline"
            elif self.state.limit_reached == "max-pages":
                self.finish_reason = "max-pages"
            else:
                self.finish_reason = "finished"

    def _timeout_failure(self, request: FetchRequest) -> FetchError:
        """The outcome of an attempt that its cancel scope cut short: a network error."""
        error = f"TimeoutError: attempt took longer than {self.config.timeout:g} s"
        exchange = None
        if self._on_exchange is not None:
            exchange = Exchange(
                url=request.url,
                request_headers=(("user-agent", self._user_agent),),
                error=error,
                robots=request.robots,
            )
        return FetchError(error=error, retryable=True, exchange=exchange)

    def _unexpected_failure(self, url: str, exc: Exception) -> FetchError:
        """The outcome of an attempt that raised what ``fetch()`` does not expect.

        It is logged with its traceback and recorded for that URL, not retried (the same
        bug would strike again) and not raised (one odd URL must not end the crawl).
        """
        LOGGER.error("unexpected error fetching %s", url, exc_info=exc)
        return FetchError(error=describe_exception(exc), retryable=False)

    def _new_worker_client(self) -> httpx.AsyncClient:
        """A client for one worker, which makes one request at a time.

        A client per worker rather than one shared: see the README's "HTTP clients" for
        the measurements. The SSL context is built once per process and shared, since
        building one costs about a megabyte and tens of milliseconds.
        """
        assert self._http_library is not None, "a crawler given a client makes none"
        if self._proxy_from_environment is None:
            self._proxy_from_environment = environment_names_a_proxy()
        return open_client(
            library=self._http_library,
            max_connections=1,
            ssl_context=_default_ssl_context(),
            user_agent=self._user_agent,
            proxy_from_environment=self._proxy_from_environment,
        )


@functools.cache
def _default_ssl_context() -> ssl.SSLContext:
    """The system's default verifying context, made once: contexts are safe to share."""
    return ssl.create_default_context()
