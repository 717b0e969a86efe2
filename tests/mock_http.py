"""httpx.MockTransport whose responses arrive as a server's do: as a stream, unread.

A handler's ``httpx.Response(200, html=...)`` (or ``content=``, ``text=``, ``json=``) is read
and decoded by httpx the moment it is made, so ``client.stream()`` hands it over already
consumed, and ``aiter_raw()`` on it raises StreamConsumed. The crawler reads every body raw
and decodes it itself; :func:`streaming_transport` therefore rebuilds each response with its
raw body as an unread stream, so that tests through a mock take the same path as the wire.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import httpx

Handler = Callable[[httpx.Request], httpx.Response]


def streamed(
    status: int,
    body: bytes = b"",
    headers: list[tuple[str, str | bytes]] | None = None,
    *,
    library: ModuleType = httpx,
) -> httpx.Response:
    """A response whose ``body`` is sent as is (already encoded, if ``headers`` say so)
    with a Content-Length, as a server sends it."""
    response: httpx.Response = library.Response(
        status,
        headers=[*(headers or []), ("content-length", str(len(body)))],
        stream=library.ByteStream(body),
    )
    return response


def streaming_transport(handler: Handler, *, library: ModuleType = httpx) -> httpx.MockTransport:
    """A MockTransport of ``library`` answering with ``handler``'s responses, unread.

    A response the handler built with its body in hand is rebuilt around its raw bytes
    (httpx keeps them as its ``stream``, and its headers already carry Content-Length or
    Content-Type); one built with :func:`streamed` passes through as it is.
    """

    def handle(request: httpx.Request) -> httpx.Response:
        response = handler(request)
        if not response.is_stream_consumed:
            return response
        unread: httpx.Response = library.Response(
            response.status_code, headers=response.headers, stream=response.stream
        )
        return unread

    transport: httpx.MockTransport = library.MockTransport(handle)
    return transport
