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
    │   ├── DecodingError (bad gzip/deflate/brotli body) ............ not retryable
    │   └── TooManyRedirects (cannot happen: redirects not followed)
    └── HTTPStatusError (cannot happen: raise_for_status never called)
    httpx.InvalidURL ................................................ not retryable
    ResponseTooLarge (ours: body above max_size) .................... not retryable

Anything else escaping :func:`fetch` is unexpected; the engine records it for that URL and
logs its traceback. Timeouts of a whole attempt are the engine's business (a cancel scope
around the call), so the clients made here carry no httpx timeouts of their own.

Bodies are always either read to the end (which lets httpx reuse the connection) or closed
(leaving the ``stream()`` block closes the response, and httpcore drops a connection whose
body was not drained), so an error or a cancellation never leaves a pool slot taken.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

import httpx

from ._events import FetchError, Outcome, Response, describe_exception

if TYPE_CHECKING:
    import ssl

try:
    __version__ = version("trio-crawler")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

USER_AGENT = f"trio-crawler/{__version__}"
# Bodies above this are cut off (after Content-Encoding is undone, so a gzip bomb stops
# here too). 10 MiB is wget's and Scrapy's order of magnitude for a warning, far above any
# real HTML page.
DEFAULT_MAX_SIZE = 10 * 1024 * 1024

_RETRYABLE = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.ProxyError,
)


class ResponseTooLarge(Exception):
    """A body grew past the crawl's size limit; the rest was not read."""


def open_client(
    *, max_connections: int, ssl_context: ssl.SSLContext | None = None
) -> httpx.AsyncClient:
    """Make an AsyncClient set up for crawling.

    Redirects are not followed (the core decides which to follow and records each hop).
    The pool holds ``max_connections`` connections with no pool timeout: httpx's defaults
    (100 connections, 5 s to wait for one) make requests above C=100 fail with PoolTimeout
    while they merely wait their turn. Passing one ``ssl_context`` to several clients
    saves building a new one (about 1 MiB and a few ms) per client.
    """
    return httpx.AsyncClient(
        follow_redirects=False,
        timeout=httpx.Timeout(None),
        limits=httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        ),
        headers={"user-agent": USER_AGENT},
        verify=ssl_context if ssl_context is not None else True,
    )


async def fetch(
    client: httpx.AsyncClient, url: str, *, max_size: int = DEFAULT_MAX_SIZE
) -> Outcome:
    """Make one GET attempt for ``url``.

    Returns:
        A Response for any completed exchange, or a FetchError saying whether a retry
        could help. Cancellation propagates (the response, if any, is closed first).
    """
    status: int | None = None
    try:
        async with client.stream("GET", url) as response:
            status = response.status_code
            body = await _read_body(response, max_size)
            return Response(
                status=status,
                content_type=response.headers.get("content-type"),
                location=response.headers.get("location"),
                body=body,
            )
    except _RETRYABLE as exc:
        return FetchError(error=describe_exception(exc), retryable=True)
    except (httpx.HTTPError, httpx.InvalidURL, ResponseTooLarge) as exc:
        return FetchError(error=describe_exception(exc), retryable=False, status=status)


async def _read_body(response: httpx.Response, max_size: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > max_size:
            raise ResponseTooLarge(f"body exceeds {max_size} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
