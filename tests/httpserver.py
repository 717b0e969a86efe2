"""A small programmable HTTP/1.1 server for the test suite.

Why not hypercorn, which the demo site uses? The crawler's behaviour tests need a server
that misbehaves on demand (never answers, answers slowly, hangs up without a response),
that counts what it saw (every request target, and how many requests were in flight at
once, which is the crawler's concurrency as the web sees it), and that runs under Trio's
virtual clock. A server in a thread, or one that looks up ``localhost`` (in a worker
thread), would let ``MockClock(autojump_threshold=0)`` jump past every deadline.

Theory of operation: ``open_test_server`` listens on 127.0.0.1, port 0, and serves every
connection in a task group of its own, so the server lives exactly as long as the ``async
with`` block. Each connection is a loop over h11's state machine: read bytes until h11
gives a ``Request``, wait for the end of its (ignored) body, ask the route's handler for a
``Reply``, send it, and start the next keep-alive cycle, or hang up when h11 says the
connection must close. Everything is written on AnyIO, so the same server runs under Trio
and under asyncio. Given an ``ssl_context``, it serves HTTPS instead (AnyIO's TLS listener
does the handshake; the rest is the same), and with a ``handshake_delay`` it waits that
long before each handshake, as a far or busy server does: the client's connection then
takes that long before its request can go.
"""

from __future__ import annotations

import collections
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
import anyio.streams.tls
import h11

# Bytes per read; the same figure as h11's examples/trio-server.py (MAX_RECV).
MAX_RECEIVE = 2**16


@dataclass(frozen=True, slots=True, kw_only=True)
class Reply:
    """One response. ``content-length`` is added from ``body`` unless ``headers`` set it."""

    status: int = 200
    headers: Sequence[tuple[str, str]] = ()
    body: bytes = b""

    @classmethod
    def html(cls, text: str, *, status: int = 200, charset: str | None = "utf-8") -> Reply:
        """An HTML page, encoded with ``charset`` (UTF-8 when the header names none)."""
        content_type = "text/html" if charset is None else f"text/html; charset={charset}"
        return cls(
            status=status,
            headers=(("content-type", content_type),),
            body=text.encode(charset or "utf-8"),
        )

    @classmethod
    def redirect(cls, location: str, *, status: int = 302) -> Reply:
        return cls(status=status, headers=(("location", location),))


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str  # the raw request target, e.g. "/a?b=1"
    headers: Mapping[str, str]  # lower-case names; a repeated header keeps its last value


class DropConnection(Exception):
    """Raise from a handler: the server closes the connection without sending a response."""


Handler = Reply | Callable[[Request], Awaitable[Reply]]


async def _not_found(request: Request) -> Reply:
    return Reply.html("not found", status=404)


class TestServer:
    """The state of a running server: its routes, and what it has seen so far.

    Tests may change ``routes`` while the server runs; the next request sees the change.
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        port: int,
        routes: Mapping[str, Handler],
        *,
        scheme: str = "http",
        host: str = "127.0.0.1",
    ) -> None:
        self.port = port
        self.scheme = scheme
        self.host = host
        self.routes: dict[str, Handler] = dict(routes)
        self.requests: list[str] = []  # targets in the order requests arrived
        self.arrivals: list[float] = []  # when each of them arrived (its head was read)
        self.hits: collections.Counter[str] = collections.Counter()
        self.connections = 0  # connections accepted
        self.hung_up = 0  # connections the client closed between two requests
        self._hang_up: anyio.Event | None = None  # set at the next one (made when awaited)
        self.in_flight = 0  # requests received and not yet answered (or dropped)
        self.max_in_flight = 0
        self._fallback: Callable[[Request], Awaitable[Reply]] = _not_found
        self._drops_left: collections.Counter[str] = collections.Counter()

    def url(self, target: str = "/") -> str:
        return f"{self.scheme}://{self.host}:{self.port}{target}"

    def route(self, target: str, handler: Handler) -> None:
        self.routes[target] = handler

    def fallback(self, handler: Callable[[Request], Awaitable[Reply]]) -> None:
        """Answer every target missing from ``routes`` with ``handler`` instead of a 404."""
        self._fallback = handler

    async def wait_hung_up(self, count: int) -> None:
        """Return once clients have closed ``count`` connections between requests."""
        while self.hung_up < count:
            self._hang_up = anyio.Event()
            await self._hang_up.wait()

    def drop_first(self, target: str, count: int) -> None:
        """Hang up on the next ``count`` requests for ``target`` without answering."""
        self._drops_left[target] = count

    async def _reply(self, request: Request) -> Reply:
        if self._drops_left[request.target] > 0:
            self._drops_left[request.target] -= 1
            raise DropConnection
        handler = self.routes.get(request.target, self._fallback)
        return handler if isinstance(handler, Reply) else await handler(request)

    async def _serve_connection(self, stream: anyio.abc.ByteStream) -> None:
        self.connections += 1
        connection = h11.Connection(h11.SERVER)
        async with stream:
            try:
                while await self._serve_one(connection, stream):
                    connection.start_next_cycle()
            except (h11.RemoteProtocolError, anyio.BrokenResourceError):
                pass  # the client broke the protocol or reset the connection: hang up

    async def _serve_one(self, connection: h11.Connection, stream: anyio.abc.ByteStream) -> bool:
        """Serve one request; return whether the connection may carry another."""
        event = await _next_event(connection, stream)
        if not isinstance(event, h11.Request):
            # h11.ConnectionClosed: the client hung up between requests
            self.hung_up += 1
            if self._hang_up is not None:
                self._hang_up.set()
            return False
        request = Request(
            method=event.method.decode("ascii"),
            target=event.target.decode("ascii"),
            headers={
                name.decode("ascii"): value.decode("latin-1") for name, value in event.headers
            },
        )
        self.requests.append(request.target)
        self.arrivals.append(anyio.current_time())
        self.hits[request.target] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            while not isinstance(await _next_event(connection, stream), h11.EndOfMessage):
                pass  # discard the request body
            reply = await self._reply(request)
            await _send(connection, stream, request, reply)
        except DropConnection:
            return False
        finally:
            self.in_flight -= 1
        return connection.our_state is h11.DONE and connection.their_state is h11.DONE


async def _next_event(connection: h11.Connection, stream: anyio.abc.ByteStream) -> h11.Event:
    """The next event from the client, reading from the socket as often as h11 needs."""
    while (event := connection.next_event()) is h11.NEED_DATA:
        try:
            data = await stream.receive(MAX_RECEIVE)
        except anyio.EndOfStream:
            data = b""  # tells h11 the client closed its side
        connection.receive_data(data)
    assert not isinstance(event, type), f"h11 paused unexpectedly: {event!r}"
    return event


async def _send(
    connection: h11.Connection, stream: anyio.abc.ByteStream, request: Request, reply: Reply
) -> None:
    headers = list(reply.headers)
    if not any(name.lower() == "content-length" for name, _ in headers):
        headers.append(("content-length", str(len(reply.body))))
    data = connection.send(h11.Response(status_code=reply.status, headers=headers)) or b""
    if request.method != "HEAD":  # RFC 9110, 9.3.2: a response to HEAD has no content
        data += connection.send(h11.Data(data=reply.body)) or b""
    data += connection.send(h11.EndOfMessage()) or b""
    await stream.send(data)


class _DelayedListener(anyio.abc.Listener[anyio.abc.SocketStream]):
    """A TCP listener that hands each connection on ``delay`` seconds after it came."""

    def __init__(self, listener: anyio.abc.Listener[anyio.abc.SocketStream], delay: float):
        self._listener = listener
        self._delay = delay

    async def serve(
        self,
        handler: Callable[[anyio.abc.SocketStream], Any],
        task_group: anyio.abc.TaskGroup | None = None,
    ) -> None:
        async def delayed(stream: anyio.abc.SocketStream) -> None:
            try:
                await anyio.sleep(self._delay)
            except BaseException:  # the server closing: the connection goes with it
                await anyio.aclose_forcefully(stream)
                raise
            await handler(stream)

        await self._listener.serve(delayed, task_group)

    async def aclose(self) -> None:
        await self._listener.aclose()

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self._listener.extra_attributes


@asynccontextmanager
async def open_test_server(
    routes: Mapping[str, Handler] | None = None,
    *,
    ssl_context: ssl.SSLContext | None = None,
    host: str = "127.0.0.1",
    handshake_delay: float = 0.0,
) -> AsyncIterator[TestServer]:
    """Serve on ``host``, port 0, in a task group of its own; HTTPS with ``ssl_context``,
    each handshake begun ``handshake_delay`` seconds after its connection came.

    ``host`` is a loopback address: Linux routes all of 127.0.0.0/8 to ``lo``, so servers
    on 127.0.0.2, 127.0.0.3, ... are distinct hosts to a crawler without any DNS.

    On exit, stop serving and close every connection, cancelling any handler still
    running (one that sleeps forever, say). An exception from the body of the ``async
    with`` block propagates unchanged, not wrapped in the task group's exception group,
    so ``pytest.raises`` around the block works; cancellation and any failure of the
    server's own tasks (a bug here) propagate as the task group raises them.
    """
    tcp = await anyio.create_tcp_listener(local_host=host, local_port=0)
    port = tcp.extra(anyio.abc.SocketAttribute.local_port)
    listener: anyio.abc.Listener[anyio.abc.ByteStream] = tcp
    if ssl_context is not None:
        # A client that rejects the certificate only ends its own connection: AnyIO's TLS
        # listener logs the failed handshake and goes on serving.
        listener = anyio.streams.tls.TLSListener(
            _DelayedListener(tcp, handshake_delay) if handshake_delay else tcp,
            ssl_context,
            standard_compatible=False,
        )
    body_error: Exception | None = None
    async with listener, anyio.create_task_group() as task_group:
        scheme = "http" if ssl_context is None else "https"
        server = TestServer(port, routes or {}, scheme=scheme, host=host)
        task_group.start_soon(listener.serve, server._serve_connection, task_group)
        try:
            yield server
        except Exception as exc:
            body_error = exc  # re-raised below, outside the task group, so it is not wrapped
        finally:
            task_group.cancel_scope.cancel("test server closed")
    if body_error is not None:
        raise body_error


async def open_hosts(stack: AsyncExitStack, count: int) -> list[TestServer]:
    """``count`` test servers on 127.0.0.2, 127.0.0.3, ...: that many hosts to a crawler,
    open until ``stack`` closes."""
    return [
        await stack.enter_async_context(open_test_server(host=f"127.0.0.{index + 2}"))
        for index in range(count)
    ]
