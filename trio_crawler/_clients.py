"""The HTTP clients the crawler sends with: which library, which transport, set up how.

Theory of operation
-------------------
Making a client and using one are two jobs, kept in two modules because they change for
different reasons. This one follows the libraries and the transports: httpx or httpx2, the
crawler's own transport or httpx's (a proxy needs the latter), what each costs to make a
thousand times. :mod:`trio_crawler._fetch` follows what an attempt means to the crawl: which
failure is worth a retry, how much of a body to read. Neither needs the other's details:
``_fetch`` asks a client for ``stream`` and ``build_request`` and nothing else.

httpx2, httpx's maintained fork, has the same API under the same names. Which library the
crawler's own clients come from is chosen by :func:`choose_http_library` where a crawler is
made (httpx2 when installed, else httpx, or ``TRIO_CRAWLER_HTTP``), and handed to
:func:`open_client`; ``_fetch`` maps the errors of every installed library whatever the
choice, since a caller's own ``client=`` may be of either.

Timeouts of a whole attempt are the engine's business (a cancel scope around the call), so
the clients made here carry no httpx timeouts of their own.
"""

from __future__ import annotations

import base64
import functools
import http.cookiejar
import importlib
import os
import ssl
import sys
import urllib.request
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from ._options import ConfigError
from ._robots import PRODUCT_TOKEN
from ._transport import choose_transport, lean_transport_class, made_context
from ._version import __version__

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence
    from types import ModuleType

    import httpx

    from ._connections import CrawlConnections
    from ._transport import TLSContext

# What servers see: the product token robots.txt groups are matched on, and our version.
DEFAULT_USER_AGENT = f"{PRODUCT_TOKEN}/{__version__}"

# The encodings BodyDecoder can undo with the standard library, and so the only ones we ask for.
ACCEPT_ENCODING = "gzip, deflate"


# The libraries we can work with: httpx, the dependency, then httpx2, its maintained fork with
# the same API (``pip install 'trio-crawler[httpx2]'``). The last one installed is the default.
HTTP_LIBRARIES = ("httpx", "httpx2")


@functools.cache
def _imported(name: str) -> ModuleType | None:
    """The library ``name`` imported, or None if it is not installed. Each is imported on
    first use, never when this module is: a crawl on httpx2 spends no start-up on httpx."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def installed_http_libraries() -> tuple[ModuleType, ...]:
    """The libraries of :data:`HTTP_LIBRARIES` that are installed, in its order."""
    return tuple(library for name in HTTP_LIBRARIES if (library := _imported(name)) is not None)


def imported_http_libraries() -> tuple[ModuleType, ...]:
    """The libraries of :data:`HTTP_LIBRARIES` imported so far, by the crawler or its caller:
    those whose clients and errors a crawl can meet. (A name ``sys.modules`` maps to None is
    one a program blocked from being imported.)"""
    return tuple(
        library for name in HTTP_LIBRARIES if (library := sys.modules.get(name)) is not None
    )


def choose_http_library(environ: Mapping[str, str] = os.environ) -> ModuleType:
    """The library the crawler's own clients come from.

    ``TRIO_CRAWLER_HTTP`` in ``environ`` names it (``httpx`` or ``httpx2``); unset or empty,
    httpx2 is used when installed, else httpx. Called where a crawler that makes its own
    clients is made, and by the command line before it starts, so that a wrong name is
    one line saying so, not a traceback from deep inside a crawl. Only the library chosen
    is imported.

    Raises:
        ConfigError: If ``TRIO_CRAWLER_HTTP`` names no installed library.
    """
    wanted = environ.get("TRIO_CRAWLER_HTTP")
    for name in reversed(HTTP_LIBRARIES):
        if (not wanted or wanted == name) and (library := _imported(name)) is not None:
            return library
    names = ", ".join(library.__name__ for library in installed_http_libraries())
    raise ConfigError(
        "TRIO_CRAWLER_HTTP", f"must name an installed library ({names}), not {wanted!r}"
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
    ssl_context: TLSContext | None = None,
    user_agent: str = DEFAULT_USER_AGENT,
    proxy_from_environment: bool = True,
    transport: str | None = None,
    connections: CrawlConnections | None = None,
    headers: Sequence[tuple[str, str]] = (),
) -> Client:
    """Make a client of ``library`` (see :func:`choose_http_library`) set up for crawling.

    Redirects are not followed (the core decides which to follow and records each hop).
    The pool holds ``max_connections`` connections with no pool timeout: httpx's defaults
    (100 connections, 5 s to wait for one) make requests above C=100 fail with PoolTimeout
    while they merely wait their turn. Passing one ``ssl_context`` to several clients
    saves building a new one (about 1 MiB and a few ms) per client. It may be given as the
    function that makes it (:func:`default_ssl_context`): the crawler's own transport
    then calls it at its first https connection, so a crawl of http:// sites never builds
    one; httpx's transport calls it at once.

    With an ``ssl_context``, httpx reads the environment only for proxies, and reading it
    costs 0.5 ms per client (nine-tenths of making one): ``proxy_from_environment=False``,
    for a caller that has checked :func:`environment_names_a_proxy`, skips it. Without an
    ``ssl_context`` the environment is always read, as it may name the CA certificates.

    The client is a :class:`TransportClient` on the crawler's own transport
    (:mod:`trio_crawler._transport`: one keep-alive connection per origin, no pool),
    unless ``TRIO_CRAWLER_TRANSPORT`` says ``httpx`` or the environment names a proxy: then
    it is an ``AsyncClient`` on httpx's own transport, which handles proxies. ``transport``
    (``lean`` or ``httpx``) overrides the variable.

    ``connections`` is what the crawler's own transports of one crawl share: the cap on
    their idle connections and the host-name cache (one for the crawl, passed to each
    client; None gives the client one of its own). httpx's own transport has neither: its
    pool keeps ``max_keepalive_connections`` idle (``max_connections`` here, which is 1 for
    a worker's client, so a crawl holds at most ``--max-tasks`` connections) and httpcore
    looks each connection's host up again; see :mod:`trio_crawler._connections`.

    ``headers`` (the crawl's ``--header`` values) go with every request the client sends, in
    the order given, after its own (User-Agent, Accept, Accept-Encoding), replacing one of
    those that they name.
    """
    trust_env = proxy_from_environment or ssl_context is None
    chosen = transport if transport is not None else choose_transport()
    own = {"user-agent": user_agent, "accept": "*/*", "accept-encoding": ACCEPT_ENCODING}
    replaced = {name.lower() for name, _ in headers}
    all_headers = [
        *((name, value) for name, value in own.items() if name not in replaced),
        *headers,
    ]
    if chosen == "lean" and not (trust_env and environment_names_a_proxy()):
        context = ssl_context if ssl_context is not None else default_ssl_context
        return TransportClient(
            library, lean_transport_class(library)(context, connections), all_headers
        )
    client: httpx.AsyncClient = library.AsyncClient(
        trust_env=trust_env,
        follow_redirects=False,
        timeout=library.Timeout(None),
        limits=library.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        headers=all_headers,
        # The crawler's clients keep no cookies, on either transport: see TransportClient.
        cookies=_NO_COOKIES,
        verify=made_context(ssl_context) if ssl_context is not None else True,
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
    :func:`~trio_crawler._fetch.fetch`. What is dropped is dropped on purpose:

    * cookies: a worker keeping the cookies its earlier responses set would make what a
      server sees depend on which worker a URL happened to go to; the crawler's clients
      (on either transport) send none, as a crawler that sees a site as a new visitor;
    * proxies: a client is made this way only when the environment names no proxy;
      otherwise the crawler's clients are ``AsyncClient``s on httpx's own transport.

    It has the two methods of ``AsyncClient`` that :func:`~trio_crawler._fetch.fetch`
    calls, ``stream`` and ``build_request``, and closes its transport (its connections) on
    ``aclose``.
    """

    def __init__(
        self,
        library: ModuleType,
        transport: httpx.AsyncBaseTransport,
        headers: Mapping[str, str] | Sequence[tuple[str, str]],
    ) -> None:
        self._library = library
        self._transport = transport
        self.headers = library.Headers(headers)

    def build_request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
        extensions: dict[str, Any] | None = None,
    ) -> httpx.Request:
        """The request as it will be sent: our headers, then ``headers`` over them."""
        merged = self.headers.copy()
        if headers:
            merged.update(headers)
        request: httpx.Request = self._library.Request(
            method, url, headers=merged, extensions=extensions
        )
        if request.url.userinfo:
            # As AsyncClient does for a URL with credentials (httpx's BasicAuth).
            credentials = f"{request.url.username}:{request.url.password}".encode()
            request.headers["authorization"] = "Basic " + base64.b64encode(credentials).decode()
        return request

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | Sequence[tuple[str, str]] | None = None,
        extensions: dict[str, Any] | None = None,
    ) -> AsyncIterator[httpx.Response]:
        """Send a request and yield its response, whose body is closed on the way out."""
        request = self.build_request(method, url, headers=headers, extensions=extensions)
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


if TYPE_CHECKING:
    # What a worker sends with: a caller's or a stock ``AsyncClient``, or a TransportClient.
    # A name for annotations only, so that importing this module does not import httpx.
    Client = httpx.AsyncClient | TransportClient


# Where _set_location_aside puts a response's Location header and its raw header lines, and
# where fetch() reads them back.
LOCATION = "trio_crawler.location"
RAW_HEADERS = "trio_crawler.raw_headers"


async def _set_location_aside(response: httpx.Response) -> None:
    """Take the Location header out of httpx's sight; ``_fetch.fetch()`` reads it back.

    Even with ``follow_redirects=False``, httpx builds the request it would redirect to for
    every 3xx with a Location, and raises (``RemoteProtocolError``, ``InvalidURL``) when the
    header is not a URL it can request: ``http://[::1``, ``javascript:...``. The crawler
    wants the response either way (an unusable Location makes a record like a 404; another
    scheme is recorded, not followed), so the header is moved into the response's
    extensions before httpx looks at it. Response hooks run just before that look.
    """
    if "location" in response.headers:
        response.extensions[RAW_HEADERS] = list(response.headers.raw)
        response.extensions[LOCATION] = response.headers["location"]
        del response.headers["location"]


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """The system's default verifying context, made once: contexts are safe to share."""
    return ssl.create_default_context()
