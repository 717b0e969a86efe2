"""Every httpx call the crawler makes: one attempt in, one outcome out.

Theory of operation
-------------------
:func:`fetch` turns one GET into a :class:`~trio_crawler._events.Response` (any status) or a
:class:`~trio_crawler._events.FetchError`, and this module is the only place that knows
httpx's exception tree. The core retries what is marked retryable and records the rest.

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
    ResponseTooLarge (ours: body above max_size) .................... not retryable
    DecodingError (ours: a body its Content-Encoding cannot undo) ... not retryable

httpx2, httpx's maintained fork, has the same tree under the same names; when it is
installed it makes the crawler's clients, and the errors of both libraries are mapped.

Anything else escaping :func:`fetch` is unexpected; the engine records it for that URL and
logs its traceback. Timeouts of a whole attempt are the engine's business (a cancel scope
around the call), so the clients made here carry no httpx timeouts of their own.

Bodies are decoded here, not by httpx, so that decompression is bounded: httpx inflates
each chunk off the wire in one call, and 64 KiB of gzip can inflate to 64 MiB, per worker.
:class:`_BodyDecoder` asks zlib for at most the bytes still allowed, so a gzip bomb costs no
more memory than ``max_size``. We offer only ``gzip`` and ``deflate`` in Accept-Encoding, so
we never need a brotli or zstd decoder; a body in an encoding we did not offer is kept as is,
as httpx does.

Bodies are always either read to the end (which lets httpx reuse the connection) or closed
(leaving the ``stream()`` block closes the response, and httpcore drops a connection whose
body was not drained), so an error or a cancellation never leaves a pool slot taken.
"""

from __future__ import annotations

import contextlib
import email.utils
import importlib
import os
import time
import urllib.request
import zlib
from typing import TYPE_CHECKING

import anyio
import httpx

from ._config import DEFAULT_MAX_SIZE, ConfigError
from ._events import Exchange, FetchError, Outcome, Response, describe_exception
from ._version import __version__ as __version__

# What servers see; robots.txt rules are matched on its product token (see _robots.py).
DEFAULT_USER_AGENT = f"trio-crawler/{__version__}"

if TYPE_CHECKING:
    import ssl
    from types import ModuleType


class ResponseTooLarge(Exception):
    """A body grew past the crawl's size limit; the rest was not read."""


class DecodingError(Exception):
    """A body that its Content-Encoding cannot undo (corrupt gzip or deflate data)."""


def _http_libraries() -> tuple[ModuleType, list[ModuleType], str | None]:
    """The library our own clients come from, every library whose errors we map, and what
    is wrong with ``TRIO_CRAWLER_HTTP`` (None if nothing).

    httpx is the dependency; httpx2, its maintained fork with the same API, is used for
    the clients the crawler makes when it is installed (``pip install
    'trio-crawler[httpx2]'``). ``TRIO_CRAWLER_HTTP=httpx`` (or ``httpx2``) picks one
    explicitly. Errors of both are mapped, since a caller's own ``client=`` may be either.
    A name that is not installed is reported by :func:`check_http_library`, not raised
    here: an import that fails can only be a traceback.
    """
    installed = [httpx]
    with contextlib.suppress(ImportError):
        installed.append(importlib.import_module("httpx2"))
    wanted = os.environ.get("TRIO_CRAWLER_HTTP")
    for library in installed:
        if library.__name__ == wanted:
            return library, installed, None
    problem = None
    if wanted:
        names = ", ".join(library.__name__ for library in installed)
        problem = f"must name an installed library ({names}), not {wanted!r}"
    return installed[-1], installed, problem


_HTTP, _LIBRARIES, _HTTP_PROBLEM = _http_libraries()
_RETRYABLE: tuple[type[Exception], ...] = tuple(
    error
    for library in _LIBRARIES
    for error in (
        library.TimeoutException,
        library.NetworkError,
        library.RemoteProtocolError,
        library.ProxyError,
    )
)
_NOT_RETRYABLE: tuple[type[Exception], ...] = (
    *(error for library in _LIBRARIES for error in (library.HTTPError, library.InvalidURL)),
    ResponseTooLarge,
    DecodingError,
)
# The encodings we can undo with the standard library, and so the only ones we ask for.
ACCEPT_ENCODING = "gzip, deflate"
# How much of a robots.txt is read: RFC 9309, section 2.5, asks crawlers to parse at least
# 500 KiB and lets them ignore the rest. A larger file is cut there, not failed.
ROBOTS_MAX_SIZE = 500 * 1024


def check_http_library() -> None:
    """Raise ConfigError if ``TRIO_CRAWLER_HTTP`` names no installed HTTP library.

    Asked when a crawler that makes its own clients is made, and by the command line
    before it starts, which reports it in one line.
    """
    if _HTTP_PROBLEM is not None:
        raise ConfigError("TRIO_CRAWLER_HTTP", _HTTP_PROBLEM)


def http_library() -> str:
    """The HTTP library in use and its version, for ``--version`` and bug reports."""
    return f"{_HTTP.__name__} {_HTTP.__version__}"


def environment_names_a_proxy() -> bool:
    """Whether HTTP_PROXY, HTTPS_PROXY or ALL_PROXY (any case) would give httpx a proxy.

    Asked once per crawl, so that :func:`open_client` can skip httpx's own look at the
    environment for each of a thousand clients when there is nothing to find.
    """
    proxies = urllib.request.getproxies()
    return any(proxies.get(scheme) for scheme in ("http", "https", "all"))


def open_client(
    *,
    max_connections: int,
    ssl_context: ssl.SSLContext | None = None,
    user_agent: str = DEFAULT_USER_AGENT,
    proxy_from_environment: bool = True,
) -> httpx.AsyncClient:
    """Make an AsyncClient set up for crawling.

    Redirects are not followed (the core decides which to follow and records each hop).
    The pool holds ``max_connections`` connections with no pool timeout: httpx's defaults
    (100 connections, 5 s to wait for one) make requests above C=100 fail with PoolTimeout
    while they merely wait their turn. Passing one ``ssl_context`` to several clients
    saves building a new one (about 1 MiB and a few ms) per client.

    With an ``ssl_context``, httpx reads the environment only for proxies, and reading it
    costs 0.5 ms per client (nine-tenths of making one): ``proxy_from_environment=False``,
    for a caller that has checked :func:`environment_names_a_proxy`, skips it. Without an
    ``ssl_context`` the environment is always read, as it may name the CA certificates.
    """
    client: httpx.AsyncClient = _HTTP.AsyncClient(
        trust_env=proxy_from_environment or ssl_context is None,
        follow_redirects=False,
        timeout=_HTTP.Timeout(None),
        limits=_HTTP.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        headers={"user-agent": user_agent, "accept-encoding": ACCEPT_ENCODING},
        verify=ssl_context if ssl_context is not None else True,
        event_hooks={"response": [_set_location_aside]},
    )
    return client


# Where _set_location_aside puts a response's Location header and its raw header lines.
_LOCATION = "trio_crawler.location"
_RAW_HEADERS = "trio_crawler.raw_headers"


async def _set_location_aside(response: httpx.Response) -> None:
    """Take the Location header out of httpx's sight; :func:`fetch` reads it back.

    Even with ``follow_redirects=False``, httpx builds the request it would redirect to for
    every 3xx with a Location, and raises (``RemoteProtocolError``, ``InvalidURL``) when the
    header is not a URL it can request: ``http://[::1``, ``javascript:...``. The crawler
    wants the response either way (an unusable Location makes a record like a 404; another
    scheme is recorded, not followed), so the header is moved into the response's
    extensions before httpx looks at it. Response hooks run just before that look.
    """
    if "location" in response.headers:
        response.extensions[_RAW_HEADERS] = list(response.headers.raw)
        response.extensions[_LOCATION] = response.headers["location"]
        del response.headers["location"]


async def fetch(
    client: httpx.AsyncClient,
    url: str,
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    keep_exchange: bool = False,
    robots: bool = False,
    user_agent: str | None = None,
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

    Returns:
        A Response for any completed exchange, or a FetchError saying whether a retry
        could help. Cancellation propagates (the response, if any, is closed first).
    """
    response: httpx.Response | None = None
    raw_chunks: list[bytes] | None = [] if keep_exchange else None
    try:
        headers = None if user_agent is None else {"user-agent": user_agent}
        async with client.stream("GET", url, headers=headers) as response:
            limit = ROBOTS_MAX_SIZE if robots else max_size
            body, cut = await _read_body(response, limit, raw_chunks, keep_prefix=robots)
            if cut:
                body = body[: body.rfind(b"\n") + 1]  # a rule cut in half is no rule
            return Response(
                status=response.status_code,
                content_type=response.headers.get("content-type"),
                location=_location(response),
                body=body,
                retry_after=_retry_after(response),
                exchange=_exchange(url, response, raw_chunks, None, robots, None, cut=cut),
            )
    except _RETRYABLE as exc:
        error, retryable = describe_exception(exc), True
    except _NOT_RETRYABLE as exc:
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
        exchange=_exchange(url, response, raw_chunks, error, robots, client),
    )


async def _read_body(
    response: httpx.Response,
    max_size: int,
    raw_chunks: list[bytes] | None,
    *,
    keep_prefix: bool = False,
) -> tuple[bytes, bool]:
    """The decoded body, and whether it was cut at ``max_size``.

    A body that grows past ``max_size`` raises ResponseTooLarge, or with ``keep_prefix``
    is cut there: its first ``max_size`` bytes come back, and the rest is not read.
    """
    if response.is_stream_consumed:
        # A response built with its body in hand (httpx.MockTransport): httpx has read
        # and decoded it already, so there is nothing left to bound but its size.
        if raw_chunks is not None:
            raw_chunks.append(response.content)
        if len(response.content) > max_size:
            if keep_prefix:
                return response.content[:max_size], True
            raise ResponseTooLarge(f"body exceeds {max_size} bytes")
        return response.content, False
    decoder = _BodyDecoder(response.headers.get("content-encoding", ""), max_size)
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
    if isinstance(failure, ResponseTooLarge) and keep_prefix:
        return decoder.prefix(), True
    if failure is not None:
        raise failure
    return decoder.finish(), False


class _BodyDecoder:
    """Undo a Content-Encoding chain chunk by chunk, never producing more than allowed.

    Raises ResponseTooLarge as soon as the decoded body passes ``max_size``, and
    DecodingError for data the named encoding cannot undo.
    """

    def __init__(self, content_encoding: str, max_size: int) -> None:
        self._max_size = max_size
        self._size = 0
        self._parts: list[bytes] = []
        # "Content-Encoding: gzip, deflate" means deflate was applied last, so undone first.
        codings = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
        self._stages = [_Inflater(c) for c in reversed(codings) if c in _INFLATE_WBITS]

    def feed(self, data: bytes) -> None:
        for stage in self._stages:
            data = stage.inflate(data, self._max_size - self._size + 1)
        self._take(data)

    def prefix(self) -> bytes:
        """The first ``max_size`` bytes, once ``feed`` has raised ResponseTooLarge."""
        return b"".join(self._parts)[: self._max_size]

    def finish(self) -> bytes:
        data = b""
        for stage in self._stages:
            data = stage.inflate(data, self._max_size - self._size + 1) + stage.flush()
        self._take(data)
        return b"".join(self._parts)

    def _take(self, data: bytes) -> None:
        if not data:
            return
        self._size += len(data)
        self._parts.append(data)  # kept even when too much: prefix() may want its start
        if self._size > self._max_size:
            raise ResponseTooLarge(f"body exceeds {self._max_size} bytes")


# zlib's wbits per coding: 32+15 reads a gzip or a zlib header; deflate is tried as zlib
# first, as RFC 9110 says it is, and as raw deflate (-15) if that fails, as some servers send.
_INFLATE_WBITS = {"gzip": 32 + 15, "x-gzip": 32 + 15, "deflate": 15}


class _Inflater:
    def __init__(self, coding: str) -> None:
        self._wbits = _INFLATE_WBITS[coding]
        self._raw_fallback = coding == "deflate"
        self._zlib = zlib.decompressobj(self._wbits)
        self._started = False

    def inflate(self, data: bytes, limit: int) -> bytes:
        """Inflate ``data``; at most ``limit`` bytes come out (then the caller raises)."""
        out: list[bytes] = []
        produced = 0
        while data and produced < limit:
            try:
                chunk = self._zlib.decompress(data, limit - produced)
            except zlib.error as exc:
                if self._raw_fallback and not self._started:
                    self._raw_fallback = False
                    self._zlib = zlib.decompressobj(-15)
                    continue
                raise DecodingError(f"{exc}") from None
            self._started = True
            out.append(chunk)
            produced += len(chunk)
            if self._zlib.eof:
                # Concatenated gzip members (RFC 1952) are one body: start the next member.
                data = self._zlib.unused_data
                self._zlib = zlib.decompressobj(self._wbits)
            else:
                data = self._zlib.unconsumed_tail
        return b"".join(out)

    def flush(self) -> bytes:
        try:
            return self._zlib.flush()
        except zlib.error as exc:
            raise DecodingError(f"{exc}") from None


def _location(response: httpx.Response) -> str | None:
    """The Location header, wherever it is (a client not made here has no hook)."""
    location: str | None = response.extensions.get(_LOCATION)
    return location if location is not None else response.headers.get("location")


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds a ``Retry-After`` header asks for (RFC 9110 section 10.2.3), or None."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # "²" is a digit to str.isdigit()
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    # A date needs the wall clock; this is the only place the crawler reads it.
    return max(0.0, when.timestamp() - time.time())


def _exchange(
    url: str,
    response: httpx.Response | None,
    raw_chunks: list[bytes] | None,
    error: str | None,
    robots: bool,
    client: httpx.AsyncClient | None,
    *,
    cut: bool = False,
) -> Exchange | None:
    """The attempt as sent and received, when the crawl keeps them (else None)."""
    if raw_chunks is None:
        return None
    if response is not None:
        request_headers = response.request.headers
    elif client is not None:
        # Failed before a response: the headers the client would have sent.
        request_headers = client.build_request("GET", url).headers
    else:
        request_headers = _HTTP.Headers()
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
            _header_pairs(response.extensions.get(_RAW_HEADERS, response.headers.raw))
        ),
        body=b"".join(raw_chunks),
        truncated=error is not None or cut,
        error=error,
        robots=robots,
    )


def _header_pairs(raw: list[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in raw]
