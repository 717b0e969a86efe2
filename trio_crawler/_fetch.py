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
    _decoders.ResponseTooLarge (body above max_size) ................ not retryable
    _decoders.DecodingError (its Content-Encoding cannot undo it) ... not retryable

httpx2, httpx's maintained fork, has the same tree under the same names. Which library the
crawler's own clients come from is chosen by :func:`choose_http_library` where a crawler is
made (httpx2 when installed, else httpx, or ``TRIO_CRAWLER_HTTP``), and handed to
:func:`open_client`; the errors of every installed library are mapped whatever the choice,
since a caller's own ``client=`` may be of either.

Anything else escaping :func:`fetch` is unexpected; the engine records it for that URL and
logs its traceback. Timeouts of a whole attempt are the engine's business (a cancel scope
around the call), so the clients made here carry no httpx timeouts of their own.

Bodies are read raw and decoded by :class:`~trio_crawler._decoders.BodyDecoder`, not by
httpx, so that decompression is bounded by ``max_size`` (see ``_decoders.py`` for why and
how). A robots.txt is the one body read to a different limit, :data:`ROBOTS_MAX_SIZE`, and
the one that is cut rather than failed when it is larger: :func:`fetch` does both.

Bodies are always either read to the end (which lets httpx reuse the connection) or closed
(leaving the ``stream()`` block closes the response, and httpcore drops a connection whose
body was not drained), so an error or a cancellation never leaves a pool slot taken.
"""

from __future__ import annotations

import base64
import contextlib
import email.utils
import functools
import http.cookiejar
import importlib
import logging
import os
import ssl
import time
import urllib.request
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
import httpx

from ._config import DEFAULT_MAX_SIZE, ConfigError
from ._decoders import BodyDecoder, DecodingError, ResponseTooLarge
from ._events import Exchange, FetchError, FetchRequest, Outcome, Response, describe_exception
from ._robots import PRODUCT_TOKEN
from ._sitemaps import MAX_SITEMAP_BYTES
from ._transport import choose_transport, lean_transport_class
from ._version import __version__

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping
    from types import ModuleType

# What servers see: the product token robots.txt groups are matched on, and our version.
DEFAULT_USER_AGENT = f"{PRODUCT_TOKEN}/{__version__}"

# The encodings BodyDecoder can undo with the standard library, and so the only ones we ask for.
ACCEPT_ENCODING = "gzip, deflate"
# How much of a robots.txt is read: RFC 9309, section 2.5, asks crawlers to parse at least
# 500 KiB and lets them ignore the rest. A larger file is cut there, not failed.
ROBOTS_MAX_SIZE = 500 * 1024


@functools.cache
def installed_http_libraries() -> tuple[ModuleType, ...]:
    """httpx, and httpx2 after it when it is installed: the libraries we can work with.

    httpx is the dependency; httpx2 is its maintained fork with the same API (``pip install
    'trio-crawler[httpx2]'``). Looked for once, on first use, not when this module is
    imported, so that importing the crawler never tries an import it does not need.
    """
    installed = [httpx]
    with contextlib.suppress(ImportError):
        installed.append(importlib.import_module("httpx2"))
    return tuple(installed)


def choose_http_library(environ: Mapping[str, str] = os.environ) -> ModuleType:
    """The library the crawler's own clients come from.

    ``TRIO_CRAWLER_HTTP`` in ``environ`` names it (``httpx`` or ``httpx2``); unset or empty,
    httpx2 is used when installed, else httpx. Called where a crawler that makes its own
    clients is made, and by the command line before it starts, so that a wrong name is
    one line saying so, not a traceback from deep inside a crawl.

    Raises:
        ConfigError: If ``TRIO_CRAWLER_HTTP`` names no installed library.
    """
    installed = installed_http_libraries()
    wanted = environ.get("TRIO_CRAWLER_HTTP")
    if not wanted:
        return installed[-1]
    for library in installed:
        if library.__name__ == wanted:
            return library
    names = ", ".join(library.__name__ for library in installed)
    raise ConfigError(
        "TRIO_CRAWLER_HTTP", f"must name an installed library ({names}), not {wanted!r}"
    )


@functools.cache
def _retryable_errors() -> tuple[type[Exception], ...]:
    """The exceptions another attempt may not meet, of every installed library.

    Every library's, not only the chosen one's: a caller's own ``client=`` may be either.
    """
    return tuple(
        error
        for library in installed_http_libraries()
        for error in (
            library.TimeoutException,
            library.NetworkError,
            library.RemoteProtocolError,
            library.ProxyError,
        )
    )


@functools.cache
def _not_retryable_errors() -> tuple[type[Exception], ...]:
    """The exceptions another attempt would meet again (checked after the retryable ones,
    of which some are subclasses of these)."""
    return (
        *(
            error
            for library in installed_http_libraries()
            for error in (library.HTTPError, library.InvalidURL)
        ),
        ResponseTooLarge,
        DecodingError,
    )


def environment_names_a_proxy() -> bool:
    """Whether HTTP_PROXY, HTTPS_PROXY or ALL_PROXY (any case) would give httpx a proxy.

    Asked once per crawl, so that :func:`open_client` can skip httpx's own look at the
    environment for each of a thousand clients when there is nothing to find.
    """
    proxies = urllib.request.getproxies()
    return any(proxies.get(scheme) for scheme in ("http", "https", "all"))


def open_client(
    *,
    library: ModuleType,
    max_connections: int,
    ssl_context: ssl.SSLContext | None = None,
    user_agent: str = DEFAULT_USER_AGENT,
    proxy_from_environment: bool = True,
    transport: str | None = None,
) -> Client:
    """Make a client of ``library`` (see :func:`choose_http_library`) set up for crawling.

    Redirects are not followed (the core decides which to follow and records each hop).
    The pool holds ``max_connections`` connections with no pool timeout: httpx's defaults
    (100 connections, 5 s to wait for one) make requests above C=100 fail with PoolTimeout
    while they merely wait their turn. Passing one ``ssl_context`` to several clients
    saves building a new one (about 1 MiB and a few ms) per client.

    With an ``ssl_context``, httpx reads the environment only for proxies, and reading it
    costs 0.5 ms per client (nine-tenths of making one): ``proxy_from_environment=False``,
    for a caller that has checked :func:`environment_names_a_proxy`, skips it. Without an
    ``ssl_context`` the environment is always read, as it may name the CA certificates.

    The client is a :class:`TransportClient` on the crawler's own transport
    (:mod:`trio_crawler._transport`: one keep-alive connection per origin, h11, no pool),
    unless ``TRIO_CRAWLER_TRANSPORT`` says ``httpx`` or the environment names a proxy: then
    it is an ``AsyncClient`` on httpx's own transport, which handles proxies. ``transport``
    (``lean`` or ``httpx``) overrides the variable.
    """
    trust_env = proxy_from_environment or ssl_context is None
    chosen = transport if transport is not None else choose_transport()
    headers = {"user-agent": user_agent, "accept": "*/*", "accept-encoding": ACCEPT_ENCODING}
    if chosen == "lean" and not (trust_env and environment_names_a_proxy()):
        context = ssl_context if ssl_context is not None else _default_ssl_context()
        return TransportClient(library, lean_transport_class(library)(context), headers)
    client: httpx.AsyncClient = library.AsyncClient(
        trust_env=trust_env,
        follow_redirects=False,
        timeout=library.Timeout(None),
        limits=library.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        headers=headers,
        # The crawler's clients keep no cookies, on either transport: see TransportClient.
        cookies=_NO_COOKIES,
        verify=ssl_context if ssl_context is not None else True,
        event_hooks={"response": [_set_location_aside]},
    )
    return client


class _RefuseCookies(http.cookiejar.DefaultCookiePolicy):
    """A cookie policy that accepts no cookie, so a jar under it stays empty."""

    def set_ok(self, cookie: http.cookiejar.Cookie, request: object) -> bool:
        return False


# One empty jar for every client of the stock transport: it never takes a cookie.
_NO_COOKIES = http.cookiejar.CookieJar(policy=_RefuseCookies())


class TransportClient:
    """A worker's own client: each request goes straight to the crawler's transport.

    ``httpx.AsyncClient.send`` wraps every request in machinery a crawler's worker never
    uses: a cookie jar it reads and writes on each response, auth and redirect flows,
    event hooks, headers merged anew. Measured (``benchmarks/bench_transport.py``), that
    layer cost more than a third of a worker's whole fetch. What the crawler needs of it
    is kept here: the request is an ``httpx.Request`` (so httpx parses and checks the URL,
    and ``InvalidURL`` makes a record as before), credentials in a URL go out as Basic
    auth as httpx sends them, and the answer is an ``httpx.Response`` read by the same
    :func:`fetch`. What is dropped is dropped on purpose:

    * cookies: a worker keeping the cookies its earlier responses set would make what a
      server sees depend on which worker a URL happened to go to; the crawler's clients
      (on either transport) send none, as a crawler that sees a site as a new visitor;
    * proxies: a client is made this way only when the environment names no proxy;
      otherwise the crawler's clients are ``AsyncClient``s on httpx's own transport.

    It has the two methods of ``AsyncClient`` that :func:`fetch` calls, ``stream`` and
    ``build_request``, and closes its transport (its connections) on ``aclose``.
    """

    def __init__(
        self,
        library: ModuleType,
        transport: httpx.AsyncBaseTransport,
        headers: Mapping[str, str],
    ) -> None:
        self._library = library
        self._transport = transport
        self.headers = library.Headers(headers)

    def build_request(
        self, method: str, url: str, *, headers: Mapping[str, str] | None = None
    ) -> httpx.Request:
        """The request as it will be sent: our headers, then ``headers`` over them."""
        merged = self.headers.copy()
        if headers:
            merged.update(headers)
        request: httpx.Request = self._library.Request(method, url, headers=merged)
        if request.url.userinfo:
            # As AsyncClient does for a URL with credentials (httpx's BasicAuth).
            credentials = f"{request.url.username}:{request.url.password}".encode()
            request.headers["authorization"] = "Basic " + base64.b64encode(credentials).decode()
        return request

    @asynccontextmanager
    async def stream(
        self, method: str, url: str, *, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[httpx.Response]:
        """Send a request and yield its response, whose body is closed on the way out."""
        request = self.build_request(method, url, headers=headers)
        response = await self._transport.handle_async_request(request)
        response.request = request
        try:
            yield response
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> TransportClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


Client = httpx.AsyncClient | TransportClient
"""What a worker sends with: a caller's or a stock ``AsyncClient``, or a TransportClient."""


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
    client: Client,
    url: str,
    *,
    max_size: int = DEFAULT_MAX_SIZE,
    keep_exchange: bool = False,
    robots: bool = False,
    user_agent: str | None = None,
    conditions: Mapping[str, str] | None = None,
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

    Returns:
        A Response for any completed exchange, or a FetchError saying whether a retry
        could help. Cancellation propagates (the response, if any, is closed first).
    """
    response: httpx.Response | None = None
    raw_chunks: list[bytes] | None = [] if keep_exchange else None
    try:
        headers = dict(conditions) if conditions else None
        if user_agent is not None:
            headers = {**(headers or {}), "user-agent": user_agent}
        async with client.stream("GET", url, headers=headers) as response:
            fields = _fields(response)
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
            location = response.extensions.get(_LOCATION)  # set aside by the hook
            return Response(
                status=response.status_code,
                content_type=fields.get("content-type"),
                location=location if location is not None else fields.get("location"),
                body=body,
                retry_after=_retry_after(fields.get("retry-after")),
                etag=fields.get("etag"),
                last_modified=fields.get("last-modified"),
                exchange=_exchange(url, client, response, raw_chunks, None, robots, cut=cut),
            )
    except _retryable_errors() as exc:
        error, retryable = describe_exception(exc), True
    except _not_retryable_errors() as exc:
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
    {b"content-encoding", b"content-type", b"location", b"retry-after", b"etag", b"last-modified"}
)


def _fields(response: httpx.Response) -> dict[str, str]:
    """The headers :func:`fetch` reads, in one pass over the response's header lines.

    Values are decoded and repeated fields joined as ``response.headers.get`` would
    (whose every call walks all the lines again).
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
        found[field_name] = f"{found[field_name]}, {text}" if field_name in found else text
    return found


def _retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header value asks for (RFC 9110 section 10.2.3), or None."""
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
            _header_pairs(response.extensions.get(_RAW_HEADERS, response.headers.raw))
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
        keep_exchanges: Attach each attempt as sent and received to its outcome (``--warc``).

    Raises:
        ConfigError: If ``client`` is None and ``TRIO_CRAWLER_HTTP`` names no installed
            library.
    """

    def __init__(
        self,
        *,
        client: httpx.AsyncClient | None,
        max_size: int,
        timeout: float,
        user_agent: str,
        keep_exchanges: bool,
    ) -> None:
        self.client = client
        self._library = choose_http_library() if client is None else None
        self._max_size = max_size
        self._timeout = timeout
        self._user_agent = user_agent
        self._keep_exchanges = keep_exchanges
        # Whether worker clients take a proxy from the environment: asked when the first
        # one is made, not for each (see open_client).
        self._proxy_from_environment: bool | None = None

    def new_client(self) -> Client:
        """A client for one worker, which makes one request at a time.

        A client per worker rather than one shared: see the README's "HTTP clients" for
        the measurements. The SSL context is built once per process and shared, since
        building one costs about a megabyte and tens of milliseconds.
        """
        assert self._library is not None, "a crawl given a client makes none"
        if self._proxy_from_environment is None:
            self._proxy_from_environment = environment_names_a_proxy()
        return open_client(
            library=self._library,
            max_connections=1,
            ssl_context=_default_ssl_context(),
            user_agent=self._user_agent,
            proxy_from_environment=self._proxy_from_environment,
        )

    async def fetch(self, client: Client, request: FetchRequest) -> Outcome:
        """One attempt for ``request`` with this crawl's options (see :func:`fetch`)."""
        return await fetch(
            client,
            request.url,
            # A sitemap may be larger than a page, but never beyond the protocol's limit.
            max_size=min(self._max_size, MAX_SITEMAP_BYTES) if request.sitemap else self._max_size,
            keep_exchange=self._keep_exchanges,
            robots=request.robots,
            # Our own clients carry the User-Agent already; a caller's gets it per request.
            user_agent=self._user_agent if client is self.client else None,
            conditions=_conditions(request),
        )

    def timed_out(self, request: FetchRequest) -> FetchError:
        """The outcome of an attempt that its cancel scope cut short: a network error."""
        error = f"TimeoutError: attempt took longer than {self._timeout:g} s"
        exchange = None
        if self._keep_exchanges:
            exchange = Exchange(
                url=request.url,
                request_headers=(("user-agent", self._user_agent),),
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


@functools.cache
def _default_ssl_context() -> ssl.SSLContext:
    """The system's default verifying context, made once: contexts are safe to share."""
    return ssl.create_default_context()


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
