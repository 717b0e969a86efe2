"""One attempt in, one outcome out: every httpx exception the crawler can meet, mapped.

Theory of operation
-------------------
:func:`fetch` turns one GET into a :class:`~trio_crawler._events.Response` (any status) or a
:class:`~trio_crawler._events.FetchError`, and this module is the only place that knows
httpx's exception tree. The core retries what is marked retryable and records the rest. The
clients it sends with are made in :mod:`trio_crawler._clients`.

How httpx's exceptions are mapped::

    httpx.HTTPError
    ├── RequestError
    │   ├── TransportError
    │   │   ├── TimeoutException (Connect/Read/Write/PoolTimeout) ... retryable
    │   │   ├── NetworkError (ConnectError, ReadError, WriteError,
    │   │   │                 CloseError) ........................... retryable
    │   │   ├── ProtocolError
    │   │   │   ├── RemoteProtocolError (the server broke HTTP) ..... retryable
    │   │   │   └── LocalProtocolError (our request is invalid) ..... not retryable
    │   │   ├── ProxyError .......................................... retryable
    │   │   └── UnsupportedProtocol ................................. not retryable
    │   ├── DecodingError (httpx's; we decode bodies ourselves) ..... (not raised)
    │   └── TooManyRedirects (cannot happen: redirects not followed)
    └── HTTPStatusError (cannot happen: raise_for_status never called)
    httpx.InvalidURL ................................................ not retryable
    _decoders.ResponseTooLarge (body above max_size) ................ not retryable
    _decoders.DecodingError (its Content-Encoding cannot undo it) ... not retryable

httpx2, httpx's maintained fork, has the same tree under the same names; the errors of every
installed library are mapped, whichever one the crawler's own clients come from, since a
caller's own ``client=`` may be of either.

Anything else escaping :func:`fetch` is unexpected; the engine records it for that URL and
logs its traceback.

Bodies are read raw and decoded by :class:`~trio_crawler._decoders.BodyDecoder`, not by
httpx, so that decompression is bounded by ``max_size`` (see ``_decoders.py`` for why and
how). A robots.txt is the one body read to a different limit, :data:`ROBOTS_MAX_SIZE`, and
the one that is cut rather than failed when it is larger: :func:`fetch` does both.

Bodies are always either read to the end (which lets httpx reuse the connection) or closed
(leaving the ``stream()`` block closes the response, and httpcore drops a connection whose
body was not drained), so an error or a cancellation never leaves a pool slot taken.
"""

from __future__ import annotations

import datetime
import email.utils
import functools
import logging
import re
import time
from typing import TYPE_CHECKING

import anyio

from ._clients import (
    LOCATION,
    RAW_HEADERS,
    choose_http_library,
    default_ssl_context,
    environment_names_a_proxy,
    imported_http_libraries,
    open_client,
)
from ._config import DEFAULT_MAX_SIZE
from ._connections import CrawlConnections
from ._decoders import BodyDecoder, DecodingError, ResponseTooLarge
from ._events import Exchange, FetchError, FetchRequest, Outcome, Response, describe_exception
from ._sitemaps import MAX_SITEMAP_BYTES
from ._transport import ANSWER_ARRIVED, HEAD_STARTED, HEAD_WRITTEN, UNANSWERED, close_idle

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence
    from types import ModuleType
    from typing import Any, TypeAlias

    import httpx

    from ._clients import Client
    from ._transport import TLSContext, Unanswered

    #: What an attempt awaits once its request has been written (see :func:`fetch`).
    OnSent: TypeAlias = Callable[[], Awaitable[None]]
    #: What an attempt asks just before its request's head is written (see :func:`fetch`).
    MaySend: TypeAlias = Callable[[], bool]

# How much of a robots.txt is read: RFC 9309, section 2.5, asks crawlers to parse at least
# 500 KiB and lets them ignore the rest. A larger file is cut there, not failed.
ROBOTS_MAX_SIZE = 500 * 1024

#: The ``trace`` events of httpx's transports (httpcore's) and of ours once a request's
#: head has been written to its connection, over HTTP/1.1 or (a caller's client) HTTP/2:
#: from then on the server may have it.
SENT_EVENTS = frozenset({HEAD_WRITTEN, "http2.send_request_headers.complete"})
HEAD_STARTED_EVENTS = frozenset({HEAD_STARTED, "http2.send_request_headers.started"})


class RequestWithdrawn(Exception):
    """Raised from a request's ``trace`` just before its head is written, when the crawl
    says it may not go now: the transport stops with nothing of the request sent (and
    closes the connection, as for any failure there), and :func:`fetch` returns a
    :class:`~trio_crawler._events.FetchError` marked ``withdrawn``."""


@functools.cache
def _retryable_errors(libraries: tuple[ModuleType, ...]) -> tuple[type[Exception], ...]:
    """The exceptions another attempt may not meet, of every library in ``libraries``.

    Given every imported library (:func:`imported_http_libraries`), not only the chosen
    one: a caller's own ``client=`` may be either, and one not imported raises nothing.
    """
    return tuple(
        error
        for library in libraries
        for error in (
            library.TimeoutException,
            library.NetworkError,
            library.RemoteProtocolError,
            library.ProxyError,
        )
    )


@functools.cache
def _not_retryable_errors(libraries: tuple[ModuleType, ...]) -> tuple[type[Exception], ...]:
    """The exceptions another attempt would meet again (checked after the retryable ones,
    of which some are subclasses of these)."""
    return (
        *(error for library in libraries for error in (library.HTTPError, library.InvalidURL)),
        ResponseTooLarge,
        DecodingError,
    )


async def fetch(
    client: Client,
    url: str,
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    keep_exchange: bool = False,
    robots: bool = False,
    user_agent: str | None = None,
    conditions: Mapping[str, str] | None = None,
    headers: Sequence[tuple[str, str]] = (),
    on_sent: OnSent | None = None,
    may_send: MaySend | None = None,
    unanswered: Unanswered | None = None,
) -> Outcome:
    """Make one GET attempt for ``url``.

    Args:
        client: The client to send with.
        url: An absolute http(s) URL.
        max_size: Most body bytes to accept, after Content-Encoding is undone.
        keep_exchange: Attach an :class:`~trio_crawler._events.Exchange` (the attempt as
            sent and received, for ``--warc``) to the outcome. Off by default: it keeps a
            second copy of the body.
        robots: A robots.txt fetch: marked so in the exchange, and read up to
            :data:`ROBOTS_MAX_SIZE` whatever ``max_size`` says. A longer file is cut
            there, at the end of its last whole line, and the rest ignored.
        user_agent: A User-Agent for this request, over the client's own.
        conditions: Conditional request headers (``If-None-Match``,
            ``If-Modified-Since``) for a recrawl.
        headers: More headers for this request, over the client's own (the crawl's
            ``--header`` values, for a client that does not carry them).
        on_sent: Awaited once the request's head has been written to its connection
            (:data:`SENT_EVENTS`, through the request's ``trace`` extension), before its
            answer is read: the moment a host's delay runs from. Not awaited if the
            request never went (no connection), nor by a transport that does not trace.
        may_send: Asked (with ``on_sent``, through the same extension) once the
            connection is made, just before the request's head is written: False
            withdraws the request, and nothing of it is sent. A connection can take
            long to make, and the crawl may have learnt meanwhile that the origin must
            wait (a ``Retry-After`` another worker read).
        unanswered: Where the crawler's own transport leaves the connection if the
            attempt is cancelled once its request was written and before any byte of an
            answer (see :class:`~trio_crawler._transport.Unanswered`); the caller closes it.

    Returns:
        A Response for any completed exchange, or a FetchError saying whether a retry
        could help (or that the request was ``withdrawn``, never sent). Cancellation
        propagates (the response, if any, is closed first).
    """
    response: httpx.Response | None = None
    raw_chunks: list[bytes] | None = [] if keep_exchange else None
    try:
        sent = [*conditions.items()] if conditions else []
        if user_agent is not None:
            sent.append(("user-agent", user_agent))
        sent += headers
        extensions: dict[str, Any] = {}
        if on_sent is not None:
            extensions["trace"] = _SentTrace(on_sent, may_send)
        if unanswered is not None:
            extensions[UNANSWERED] = unanswered
        async with client.stream(
            "GET", url, headers=sent or None, extensions=extensions or None
        ) as response:
            fields = _fields(response)
            # Read as the headers arrive: a date is turned into seconds from now (see
            # _retry_after), and "now" is before the body, which may take a while.
            retry_after = _retry_after(fields.get("retry-after"), fields.get("date"))
            encoding = fields.get("content-encoding", "")
            decoder = BodyDecoder(encoding, ROBOTS_MAX_SIZE if robots else max_size)
            cut = False
            try:
                body = await _read_body(response, decoder, raw_chunks)
            except ResponseTooLarge:
                if not robots:
                    raise
                # RFC 9309, section 2.5: the rest of a long robots.txt may be ignored.
                body, cut = _whole_lines(decoder.prefix()), True
            location = response.extensions.get(LOCATION)  # set aside by the hook
            return Response(
                status=response.status_code,
                content_type=fields.get("content-type"),
                location=location if location is not None else fields.get("location"),
                body=body,
                retry_after=retry_after,
                etag=fields.get("etag"),
                last_modified=fields.get("last-modified"),
                x_robots_tags=tuple(fields["x-robots-tag"].split("\n"))
                if "x-robots-tag" in fields
                else (),
                headers=response.headers,
                exchange=_exchange(url, client, response, raw_chunks, None, robots, cut=cut),
                arrived=response.extensions.get(ANSWER_ARRIVED),
            )
    except RequestWithdrawn:
        return FetchError(error="not sent: its origin must wait", retryable=True, withdrawn=True)
    except _retryable_errors(imported_http_libraries()) as exc:
        error, retryable = describe_exception(exc), True
    except _not_retryable_errors(imported_http_libraries()) as exc:
        error, retryable = describe_exception(exc), False
    # A failure another try cannot fix keeps the status the server answered with (a body
    # too large is still a 200); a retryable one has no status, as the contract says.
    status: int | None = None
    content_type: str | None = None
    if response is not None and not retryable:
        status, content_type = response.status_code, response.headers.get("content-type")
    return FetchError(
        error=error,
        retryable=retryable,
        status=status,
        content_type=content_type,
        exchange=_exchange(url, client, response, raw_chunks, error, robots),
    )


class _SentTrace:
    """A request's ``trace`` extension: of all the events, only its head counts, as it is
    about to be written (the last moment to withdraw the request) and once it is.

    Through an HTTPS proxy httpcore first sends the tunnel's ``CONNECT`` with the same
    extensions, so the same events come for it first: its written head, announced by a
    ``.started`` event whose request is the ``CONNECT``, is not the request's.
    """

    __slots__ = ("_may_send", "_on_sent", "_tunnel")

    def __init__(self, on_sent: OnSent, may_send: MaySend | None = None) -> None:
        self._on_sent = on_sent
        self._may_send = may_send
        self._tunnel = False

    async def __call__(self, event: str, info: Mapping[str, Any]) -> None:
        if event in SENT_EVENTS:
            if self._tunnel:
                self._tunnel = False  # the tunnel's CONNECT went; the request comes next
            else:
                await self._on_sent()
        elif event in HEAD_STARTED_EVENTS:
            self._tunnel = getattr(info.get("request"), "method", None) == b"CONNECT"
            if not self._tunnel and self._may_send is not None and not self._may_send():
                raise RequestWithdrawn


async def _read_body(
    response: httpx.Response, decoder: BodyDecoder, raw_chunks: list[bytes] | None
) -> bytes:
    """Stream the body through ``decoder`` and return it decoded.

    Raises ResponseTooLarge or DecodingError from the decoder, once the read has stopped.
    """
    failure: ResponseTooLarge | DecodingError | None = None
    with anyio.CancelScope() as reading:
        async for raw in response.aiter_raw():
            if failure is not None:
                continue  # the cancellation strikes at httpcore's next read
            if raw_chunks is not None:
                raw_chunks.append(raw)
            try:
                decoder.feed(raw)
            except (ResponseTooLarge, DecodingError) as exc:
                # Stop reading by cancelling the read rather than by raising out of the
                # loop: the cancellation unwinds the async generators httpx and httpcore
                # nest under aiter_raw(), so they finish. Raised from here, it would leave
                # them suspended, and Trio warns about each one when it is collected.
                failure = exc
                reading.cancel()
    if failure is not None:
        raise failure
    return decoder.finish()


def _whole_lines(text: bytes) -> bytes:
    """``text`` up to the end of its last whole line: a robots.txt rule cut in half is no
    rule (``Disallow: /private`` cut to ``Disallow: /pri`` would disallow too much)."""
    return text[: text.rfind(b"\n") + 1]


# The response headers fetch() reads.
_FIELDS = frozenset(
    {
        b"content-encoding",
        b"content-type",
        b"location",
        b"retry-after",
        b"date",
        b"etag",
        b"last-modified",
        b"x-robots-tag",
    }
)


def _fields(response: httpx.Response) -> dict[str, str]:
    """The headers :func:`fetch` reads, in one pass over the response's header lines.

    Values are decoded and repeated fields joined as ``response.headers.get`` would
    (whose every call walks all the lines again), except ``X-Robots-Tag``, whose lines are
    joined with a newline (which no header value holds): a rule that names a robot
    applies to the rest of its own line only, so the lines must stay apart.
    """
    headers = response.headers
    found: dict[str, str] = {}
    encoding = ""
    for name, value in headers.raw:
        key = name.lower()
        if key not in _FIELDS:
            continue
        encoding = encoding or headers.encoding
        field_name, text = key.decode("ascii"), value.decode(encoding)
        joint = "\n" if key == b"x-robots-tag" else ", "
        found[field_name] = f"{found[field_name]}{joint}{text}" if field_name in found else text
    return found


def _retry_after(
    value: str | None, date: str | None = None, *, received: float | None = None
) -> float | None:
    """Seconds a ``Retry-After`` header value asks for (RFC 9110 section 10.2.3), or None.

    The value is either a number of seconds or an HTTP date. A date is a time on the
    server's clock, and the core cannot use one: it has only the engine's clock, which is
    monotonic and starts anywhere, and it reads no clock itself. So a date becomes seconds
    here, at the boundary, which may read the wall clock. It is measured from the
    response's own ``Date`` (the server's clock as it answered, RFC 9110 section 6.6.1),
    the one reading that needs no agreement between the two clocks: a server whose clock
    is an hour off still gets the wait it asked for. Without a usable ``Date`` it is
    measured from ``received``, the local wall clock as the response arrived (read here
    when not given). A date already past is no wait at all.

    Args:
        value: The ``Retry-After`` header, or None.
        date: The response's ``Date`` header, or None.
        received: The wall clock (``time.time()``) when the response arrived.
    """
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # "²" is a digit to str.isdigit()
        return float(value)
    when = _http_date(value)
    if when is None:
        return None
    reference = _http_date(date) if date is not None else None
    if reference is None:
        reference = time.time() if received is None else received
    return max(0.0, when - reference)


# RFC 9110 section 5.6.7's obsolete asctime() format, the one HTTP date with no zone
# written in it ("Sun Nov  6 08:49:37 1994", GMT by definition).
_ASCTIME = re.compile(r"[A-Za-z]{3} [A-Za-z]{3} [ \d]\d \d\d:\d\d:\d\d \d{4}")


def _http_date(value: str) -> float | None:
    """An HTTP date (RFC 9110 section 5.6.7, any of its three formats) as a POSIX
    timestamp, or None. A date in another form with no zone is no HTTP date: its
    sender's time zone is anyone's guess."""
    value = value.strip()
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        if not _ASCTIME.fullmatch(value):
            return None
        when = when.replace(tzinfo=datetime.UTC)
    try:
        return when.timestamp()
    except (OverflowError, ValueError):  # a year the platform's clock cannot hold
        return None


def _exchange(
    url: str,
    client: Client,
    response: httpx.Response | None,
    raw_chunks: list[bytes] | None,
    error: str | None,
    robots: bool,
    *,
    cut: bool = False,
) -> Exchange | None:
    """The attempt as sent and received, when the crawl keeps them (else None)."""
    if raw_chunks is None:
        return None
    if response is not None:
        request_headers = response.request.headers
    else:
        # Failed before a response: the headers the client would have sent.
        request_headers = client.build_request("GET", url).headers
    sent = tuple(_header_pairs(request_headers.raw))
    if response is None:
        return Exchange(url=url, request_headers=sent, error=error, robots=robots)
    return Exchange(
        url=url,
        request_headers=sent,
        http_version=response.http_version,
        status=response.status_code,
        reason=response.reason_phrase,
        response_headers=tuple(
            _header_pairs(response.extensions.get(RAW_HEADERS, response.headers.raw))
        ),
        body=b"".join(raw_chunks),
        truncated=error is not None or cut,
        error=error,
        robots=robots,
    )


def _header_pairs(raw: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw]


LOGGER = logging.getLogger("trio_crawler")


class Fetcher:
    """One crawl's way of making attempts: its HTTP clients and its fetch options, made once.

    Every engine holds one and asks it for three things: a client for each worker
    (:meth:`new_client`, unless the caller shared one), an attempt (:meth:`fetch`), and the
    outcome of an attempt that never finished (:meth:`timed_out`, :meth:`unexpected`). The
    engine keeps only what differs between engines: its cancel scopes and its scheduling.

    Args:
        client: A caller's client, shared by every worker and left open; None to make a
            client per worker from the library ``TRIO_CRAWLER_HTTP`` chooses.
        max_size: Most body bytes accepted, after Content-Encoding is undone.
        timeout: Seconds one attempt may take (enforced by the engine; named in failures).
        user_agent: The User-Agent header.
        headers: More headers for every request (``--header``).
        keep_exchanges: Attach each attempt as sent and received to its outcome (``--warc``).
        workers: How many workers make attempts at once (``max_tasks``): the host-name
            lookups of the crawler's own clients get threads for that many.

    Attributes:
        connections: What the workers' clients share (the cap on idle connections, the
            host-name cache, and their counts), or None when a caller's client is used.
        reports_sending: Whether an attempt's ``on_sent`` will be awaited when its request
            is written: true for the crawler's own clients, and for a caller's once it was.

    Raises:
        ConfigError: If ``client`` is None and ``TRIO_CRAWLER_HTTP`` names no installed
            library, or ``TRIO_CRAWLER_MAX_IDLE`` is neither a number nor ``none``.
    """

    def __init__(
        self,
        *,
        client: httpx.AsyncClient | None,
        max_size: int,
        timeout: float,
        user_agent: str,
        keep_exchanges: bool,
        headers: Sequence[tuple[str, str]] = (),
        workers: int = 1,
    ) -> None:
        self.client = client
        self._library = choose_http_library() if client is None else None
        self._max_size = max_size
        self._timeout = timeout
        self._user_agent = user_agent
        self._headers = tuple(headers)
        self._keep_exchanges = keep_exchanges
        # Whether worker clients take a proxy from the environment: asked when the first
        # one is made, not for each (see open_client).
        self._proxy_from_environment: bool | None = None
        # What the workers' transports share: the cap on idle connections, the name cache.
        self.connections = (
            CrawlConnections.from_environment(workers=workers) if client is None else None
        )
        # Whether the transport says when a request has been written (see
        # sending_reported): ours and httpx's own do; a caller's client, once it has.
        self.reports_sending = client is None

    async def sending_reported(self) -> None:
        """A caller's client reported a written request: its transport traces (httpx's own
        does, a test's ``MockTransport`` does not), so from the next attempt on a host's
        delay runs from that moment rather than from the attempt's start."""
        self.reports_sending = True

    async def close_idle(self) -> None:
        """Close the workers' idle connections at once, the crawl being over, before the
        workers end (see :func:`~trio_crawler._transport.close_idle`)."""
        if self.connections is not None:
            await close_idle(self.connections)

    def new_client(self, *, ssl_context: TLSContext = default_ssl_context) -> Client:
        """A client for one worker, which makes one request at a time.

        A client per worker rather than one shared: see the README's "HTTP clients" for
        the measurements. The SSL context is built once per process and shared, since
        building one costs about a megabyte and tens of milliseconds, and only when the
        first https connection needs it. ``ssl_context`` replaces it for this client
        alone, and nothing else: the benchmark that measures what a context per client
        would cost gives each worker's client its own, and must compare like with like.
        """
        assert self._library is not None, "a crawl given a client makes none"
        if self._proxy_from_environment is None:
            self._proxy_from_environment = environment_names_a_proxy()
        return open_client(
            library=self._library,
            max_connections=1,
            ssl_context=ssl_context,  # by default, made at the first https connection
            user_agent=self._user_agent,
            proxy_from_environment=self._proxy_from_environment,
            connections=self.connections,
            headers=self._headers,
        )

    async def fetch(
        self,
        client: Client,
        request: FetchRequest,
        on_sent: OnSent | None = None,
        may_send: MaySend | None = None,
        unanswered: Unanswered | None = None,
    ) -> Outcome:
        """One attempt for ``request`` with this crawl's options (see :func:`fetch`).

        With DEBUG logging (``-vv``) each attempt is one line: URL, answer, time taken.
        Without, it costs one ``isEnabledFor`` per attempt.
        """
        debug = LOGGER.isEnabledFor(logging.DEBUG)
        started = time.perf_counter() if debug else 0.0
        outcome = await fetch(
            client,
            request.url,
            # A sitemap may be larger than a page, but never beyond the protocol's limit.
            max_size=min(self._max_size, MAX_SITEMAP_BYTES) if request.sitemap else self._max_size,
            keep_exchange=self._keep_exchanges,
            robots=request.robots,
            # Our own clients carry the User-Agent and the headers already; a caller's gets
            # them per request.
            user_agent=self._user_agent if client is self.client else None,
            conditions=_conditions(request),
            headers=self._headers if client is self.client else (),
            on_sent=on_sent,
            may_send=may_send,
            unanswered=unanswered,
        )
        if debug:
            _log_attempt(request, outcome, time.perf_counter() - started)
        return outcome

    def timed_out(self, request: FetchRequest) -> FetchError:
        """The outcome of an attempt that its cancel scope cut short: a network error."""
        error = f"TimeoutError: attempt took longer than {self._timeout:g} s"
        LOGGER.debug("GET %s%s: %s", request.url, _try(request), error)
        exchange = None
        if self._keep_exchanges:
            exchange = Exchange(
                url=request.url,
                request_headers=(("user-agent", self._user_agent), *self._headers),
                error=error,
                robots=request.robots,
            )
        return FetchError(error=error, retryable=True, exchange=exchange)

    def unexpected(self, url: str, exc: Exception) -> FetchError:
        """The outcome of an attempt that raised what :func:`fetch` does not expect.

        It is logged with its traceback and recorded for that URL, not retried (the same
        bug would strike again) and not raised (one odd URL must not end the crawl).
        """
        LOGGER.error("unexpected error fetching %s", url, exc_info=exc)
        return FetchError(error=describe_exception(exc), retryable=False)


def _try(request: FetchRequest) -> str:
    """`` (try N)`` for an attempt after the first, for the log."""
    return f" (try {request.attempt})" if request.attempt > 1 else ""


def _log_attempt(request: FetchRequest, outcome: Outcome, elapsed: float) -> None:
    """The ``-vv`` line of one attempt: ``GET URL: 200 text/html, 2214 bytes in 0.004 s``
    (a redirect says where to, a failure what went wrong). Called only at DEBUG level."""
    if isinstance(outcome, Response):
        media_type = (outcome.content_type or "").partition(";")[0].strip()
        answer = f"{outcome.status} {media_type}".rstrip()
        if outcome.location is not None:
            answer += f" to {outcome.location}"
        LOGGER.debug(
            "GET %s%s: %s, %d bytes in %.3f s",
            request.url,
            _try(request),
            answer,
            len(outcome.body),
            elapsed,
        )
    else:
        LOGGER.debug("GET %s%s: %s in %.3f s", request.url, _try(request), outcome.error, elapsed)


def _conditions(request: FetchRequest) -> dict[str, str] | None:
    """A recrawl's conditional headers, from what the last pass kept of the page."""
    known = request.known
    if known is None:
        return None
    headers = {}
    if known.etag:
        headers["if-none-match"] = known.etag
    if known.last_modified:
        headers["if-modified-since"] = known.last_modified
    return headers or None
