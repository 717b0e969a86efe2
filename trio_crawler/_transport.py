"""The crawler's own HTTP/1.1 transport: one request at a time, keep-alive, no locks.

Theory of operation
-------------------
A crawler's worker makes one request at a time, and the crawler gives each worker a
client of its own. httpx's default transport (httpcore) is built for the general case: a
pool that many tasks share, with locks, waiting lists, an HTTP/2 path and the bookkeeping
that goes with them. For one task with one request at a time all of that is cost without
use. This transport takes an idle connection to the origin (scheme, host, port) if there is
one, else opens one; the request owns it until the response was read to its end, and then
it is kept idle only if the response says the connection can carry another; in every other
case it is closed. So there is nothing to strand: a connection is either idle, or owned by the
one request using it.

What the transports of one crawl share is a :class:`~trio_crawler._connections.CrawlConnections`:
the idle connections, one pool by origin, so that a worker reuses the connection another
worker left (on a broad crawl consecutive requests to a host come from different
workers), under a cap (the least recently used one is closed when keeping another would
pass it, so that a crawl of thousands of hosts stays within the process's file limit);
and a cache of host-name lookups, so that a host is resolved once per crawl rather than
once per connection. The transport connects to the addresses the cache gives, and speaks
TLS to the host name. A transport made on its own has one of its own.

The protocol is :mod:`trio_crawler._http11`'s: h11's rules (the parser underneath httpcore)
in a reader made for one request at a time, at a fraction of h11's CPU; this module only
moves bytes between it and an AnyIO byte stream, which runs on Trio and on asyncio alike.
TLS uses the crawler's shared SSL context, with the host as SNI and for verification. The
transport may be given the function that makes that context rather than the context: it
is then made at the first https connection, so a crawl of http:// sites never loads the
system's CA certificates (20-40 ms of every start).

Of httpcore's ``trace`` events (a request's extension) it sends the two the crawler
needs, under the same names: ``http11.send_request_headers.started``
(:data:`HEAD_STARTED`), when the crawl may still withdraw the request (its origin was told
to wait while the connection was made; the connection, on which nothing was written, then
waits idle for the origin's next request), and ``http11.send_request_headers.complete``
(:data:`HEAD_WRITTEN`), from which a host's delay runs (docs/manners.md, "When the delay's
clock starts").

On Linux, on Trio's real clock, a plain connection's reads also bring the kernel's
receive time of what they return (``_connections.receive_stamped``), and a response read
to its end carries, as its :data:`ANSWER_ARRIVED` extension, when its last bytes reached
the machine: with one request at a time, a host's delay runs from then, not from when a
busy process got to read them (docs/manners.md, "When the delay's clock starts").

What it does not do: HTTP/2, proxies (the crawler uses httpx's own transport when the
environment names a proxy), request bodies other than bytes (the crawler sends GETs).
Timeouts are the engine's: a cancel scope bounds each attempt, and a cancellation at any
point closes the connection it interrupted, but one: a request written and not yet
answered is still the server's, and its connection goes to the request's
:class:`Unanswered` (the :data:`UNANSWERED` extension), where the engine waits, bounded,
for the server to answer or close before the origin's next request (docs/manners.md, "A
request the crawler gave up on").

Errors are raised as the HTTP library's own exceptions (``ConnectError``, ``ReadError``,
``WriteError``, ``RemoteProtocolError``, ``LocalProtocolError``), so ``_fetch`` classifies
them exactly as it does httpcore's. An idle connection is checked before it is reused, as
httpcore checks: one the server closed meanwhile has become readable, and is dropped; so is
one idle for nearly as long as its server announced it would wait (``Keep-Alive:
timeout=N``). A request lost on a reused connection before any byte of an answer (the
server's close was on its way) is a failed attempt as any other, never sent again here;
the pool sends its retry on a new connection (``IdleConnections.lose``).

``TRIO_CRAWLER_TRANSPORT=httpx`` chooses httpx's own transport instead, to compare the
two or to rule this one out.
"""

from __future__ import annotations

import contextlib
import functools
import os
import select
import ssl
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.streams.tls

from ._connections import (
    CrawlConnections,
    on_trio,
    open_connection,
    receive_stamped,
    stamped_reader,
)
from ._http11 import (
    CLOSED,
    END,
    NEED_DATA,
    Event,
    LocalProtocolError,
    RemoteProtocolError,
    ResponseHead,
    ResponseReader,
    request_head,
)
from ._lookups import HostLookupError
from ._options import ConfigError

if TYPE_CHECKING:
    import socket
    from collections.abc import AsyncIterator, Callable, Iterable
    from types import ModuleType
    from typing import TypeAlias

    import httpx

    # An SSL context, or the function that makes it when it is first needed.
    TLSContext: TypeAlias = ssl.SSLContext | Callable[[], ssl.SSLContext]

TRANSPORT_VARIABLE = "TRIO_CRAWLER_TRANSPORT"
TRANSPORTS = ("lean", "httpx")
READ_SIZE = 65536
# An idle connection whose server announced ``Keep-Alive: timeout=N`` (Apache and Node.js
# send 5 by default) is not reused once it has been idle N less this many seconds: the
# server's clock started before ours (when it sent the end of the response), and the next
# request takes a while to reach it. A delay close to N would otherwise meet each close.
KEEP_ALIVE_MARGIN = 1.0
DEFAULT_PORTS = {b"http": 80, b"https": 443, "http": 80, "https": 443}
# httpcore's ``trace`` events just before an HTTP/1.1 request's head is written, and once
# it is, which this transport sends under the same names.
HEAD_STARTED = "http11.send_request_headers.started"
HEAD_WRITTEN = "http11.send_request_headers.complete"
# The response extension that says when the answer's last bytes reached this machine, on
# the event loop's clock, where the kernel stamps the connection's reads (see
# ``_connections.receive_stamped``); absent elsewhere.
ANSWER_ARRIVED = "trio_crawler.answer_arrived"
# The request extension that takes an :class:`Unanswered`: where a request cut short after
# it was written, with no answer yet, leaves its connection (see the module docstring).
UNANSWERED = "trio_crawler.unanswered"


def choose_transport() -> str:
    """``lean`` (this module's) or ``httpx`` (the library's own), from the environment.

    Raises:
        ConfigError: For a value that names neither.
    """
    value = os.environ.get(TRANSPORT_VARIABLE, "lean").strip().lower() or "lean"
    if value not in TRANSPORTS:
        raise ConfigError(
            TRANSPORT_VARIABLE, f"must be one of {', '.join(TRANSPORTS)}, not {value!r}"
        )
    return value


def made_context(context: TLSContext) -> ssl.SSLContext:
    """``context``, made now if it was given as the function that makes it."""
    return context if isinstance(context, ssl.SSLContext) else context()


class _Connection:
    """One HTTP/1.1 connection: a byte stream and the reader of its responses."""

    __slots__ = (
        "answered",
        "arrived",
        "idle_until",
        "keep_for",
        "reader",
        "socket",
        "stamped",
        "stream",
        "written_at",
    )

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.reader = ResponseReader()
        # Looked up once: a stream's extra() builds its table of attributes at each call.
        self.socket = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        # Whether any byte came back since the last request was sent: a request on a
        # reused connection that fails before one did was lost to the server's close.
        self.answered = False
        # The idle time the server's last response announced (Keep-Alive: timeout=N), and
        # when, on the event loop's clock, this connection stops being worth reusing.
        self.keep_for: float | None = None
        self.idle_until: float | None = None
        # Where the kernel stamps what this connection receives (Linux, on Trio's clock):
        # the socket read with recvmsg, when the newest bytes read arrived (time.time()'s
        # clock, or None until a read says), and when the request was written (the
        # loop's clock), before which no answer can have come.
        self.stamped = stamped_reader(stream, self.socket)
        self.arrived: float | None = None
        self.written_at = 0.0

    async def next_event(self) -> Event:
        reader = self.reader
        while True:
            event = reader.next_event()
            if event is not NEED_DATA:
                return event
            try:
                if self.stamped is None:
                    data = await self.stream.receive(READ_SIZE)
                else:
                    data, arrived = await receive_stamped(self.stamped, READ_SIZE)
                    if arrived is not None:
                        self.arrived = arrived
            except anyio.EndOfStream:
                data = b""
            else:
                self.answered = True
            reader.receive_data(data)

    def answer_arrival(self) -> float | None:
        """When the bytes read last reached this machine, on the event loop's clock: now,
        less how long ago the kernel received them, and never before the request was
        written (a wall clock stepped forward meanwhile cannot move it earlier than
        that). None where the kernel does not stamp this connection's reads."""
        arrived = self.arrived
        if arrived is None:
            return None
        now = anyio.current_time()
        lag = time.time() - arrived
        return now if lag <= 0 else max(self.written_at, now - lag)

    async def close(self) -> None:
        """Close without waiting on the peer.

        A plain TCP stream's own ``aclose()`` already sends nothing and waits for nothing
        (Trio closes the socket, asyncio aborts its transport): only its checkpoint is left,
        which the caller's shield keeps from raising. A TLS stream's would send close_notify
        and wait to write it, so it is closed forcefully, in a cancelled scope. Forcing a
        plain stream too would cost that scope and a Cancelled raised and caught, which a
        crawl's end pays once for each worker's connection: 40 ms at 500 workers.
        """
        if isinstance(self.stream, anyio.abc.SocketStream):
            await self.stream.aclose()
        else:
            await anyio.aclose_forcefully(self.stream)


class Unanswered:
    """Where an attempt's connection goes when the attempt is cancelled after its request
    was written and before any byte of an answer came: the request is still the server's.

    A server that takes longer than the crawler's ``--timeout`` is usually still working on
    the request (a busy backend, a stalled process): the crawler closing its connection
    does not tell it so, and a retry sent at once would reach it while it works on the
    first, two requests at once where ``--max-per-host 1`` allowed one (the broad benchmark
    once saw four for one URL when the server stalled for 40 s). So the transport leaves
    such a connection here, open, instead of closing it, and the engine waits
    (:meth:`wait`, bounded) for the server to show it is done: an answer, however late, or
    a close. Whatever happens, :meth:`aclose` closes it; the late answer is not read.

    Made by the caller, one per attempt, and given to the request as the
    :data:`UNANSWERED` extension; a transport that knows nothing of it (httpx's own)
    leaves it empty, and a connection is closed as before.
    """

    __slots__ = ("_connection",)

    def __init__(self) -> None:
        self._connection: _Connection | None = None

    @property
    def parked(self) -> bool:
        """Whether a connection waits here for its server."""
        return self._connection is not None

    def park(self, connection: _Connection) -> None:
        """Keep ``connection`` open for :meth:`wait` (by the transport, as it unwinds)."""
        self._connection = connection

    async def wait(self) -> None:
        """Return once the server answers (a first byte) or closes, or at once if no
        connection waits; cancel it to give up."""
        connection = self._connection
        if connection is None:
            return
        with contextlib.suppress(
            anyio.EndOfStream,
            anyio.BrokenResourceError,
            anyio.ClosedResourceError,
            OSError,
            ssl.SSLError,
        ):
            await connection.stream.receive(1)

    async def aclose(self) -> None:
        """Close the connection that waits here, if any, without waiting on the peer."""
        connection, self._connection = self._connection, None
        if connection is not None:
            await _close(connection)


@functools.cache
def lean_transport_class(
    library: ModuleType,
) -> Callable[[TLSContext, CrawlConnections | None], httpx.AsyncBaseTransport]:
    """The transport class for ``library`` (httpx or httpx2), whose base class, response
    class and exceptions it uses."""

    class LeanBody(library.AsyncByteStream):  # type: ignore[name-defined,misc]
        """A response body read from its connection; the connection goes back to the
        transport when the body was read to its end, and is closed otherwise."""

        def __init__(self, transport: Any, key: tuple[Any, ...], connection: _Connection):
            self._transport = transport
            self._key = key
            self._connection: _Connection | None = connection
            # The response's own extensions (httpx copies the ones it is given), where the
            # answer's arrival goes once the body has been read to its end.
            self.extensions: dict[str, Any] | None = None

        async def __aiter__(self) -> AsyncIterator[bytes]:
            connection = self._connection
            if connection is None:
                return
            try:
                while True:
                    event = await _mapped(library, connection.next_event)
                    if event.__class__ is bytes:
                        yield event
                    elif event is END:
                        arrival = connection.answer_arrival()
                        if arrival is not None and self.extensions is not None:
                            self.extensions[ANSWER_ARRIVED] = arrival
                        break
                    else:  # never: the reader gives a head only once
                        raise library.RemoteProtocolError(f"unexpected {event!r}")
            except BaseException:
                await self.aclose()
                raise
            self._connection = None
            if connection.reader.reusable:
                await self._transport._keep(self._key, connection)
            else:
                await _close(connection)

        async def aclose(self) -> None:
            connection, self._connection = self._connection, None
            if connection is not None:
                await _close(connection)

    class LeanTransport(library.AsyncBaseTransport):  # type: ignore[name-defined,misc]
        """See the module docstring."""

        def __init__(
            self, ssl_context: TLSContext, connections: CrawlConnections | None = None
        ) -> None:
            # The context, or what makes it when the first https connection needs it. Its
            # identity is part of each idle connection's key, so transports of different
            # TLS settings never share a connection.
            self._ssl_context = ssl_context
            self._shared = (
                connections if connections is not None else CrawlConnections.from_environment()
            )

        async def _keep(self, key: tuple[Any, ...], connection: _Connection) -> None:
            keep_for = connection.keep_for
            if keep_for is None:
                connection.idle_until = None
            elif keep_for <= KEEP_ALIVE_MARGIN:
                await _close(connection)  # its server will close it before it is used
                return
            else:
                connection.idle_until = anyio.current_time() + keep_for - KEEP_ALIVE_MARGIN
            await self._put_back(key, connection)

        async def _put_back(self, key: tuple[Any, ...], connection: _Connection) -> None:
            """Keep ``connection`` idle as it is (its ``idle_until`` unchanged)."""
            for evicted in self._shared.idle.keep(self, key, connection):
                await _close(evicted)  # the crawl's least recently used idle connection

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            url = request.url
            scheme = url.scheme
            if scheme not in ("http", "https"):
                raise library.UnsupportedProtocol(
                    f"the lean transport speaks http(s), not {scheme!r}"
                )
            host = url.raw_host.decode("ascii")
            port = url.port or DEFAULT_PORTS[scheme]
            key = (scheme, host, port, self._ssl_context)
            target = url.raw_path
            headers = list(request.headers.raw)
            body = request.read() if request.method not in ("GET", "HEAD") else b""
            connection = self._shared.idle.take(key, target)
            if connection is not None and not _reusable(connection):
                await _close(connection)  # the server let it go, or is about to
                connection = None
            reused = connection is not None
            if connection is None:
                connection = await self._connect(scheme, host, port)
            extensions = request.extensions
            try:
                return await self._exchange(
                    connection,
                    key,
                    request.method,
                    target,
                    headers,
                    body,
                    extensions.get("trace"),
                    extensions.get(UNANSWERED),
                )
            except (library.WriteError, library.ReadError, library.RemoteProtocolError):
                if reused and not connection.answered:  # lost to the server's close
                    for stale in self._shared.idle.lose(key, target):
                        await _close(stale)
                raise

        async def _connect(self, scheme: str, host: str, port: int) -> _Connection:
            """Look ``host`` up (through the crawl's cache), connect to its addresses,
            and over https do the TLS handshake with ``host`` as SNI and as the name the
            certificate must carry, as ``anyio.connect_tcp`` does."""
            try:
                addresses = await self._shared.lookups.addresses(host)
            except HostLookupError as exc:
                raise library.ConnectError(str(exc)) from exc
            try:
                tcp = await open_connection(addresses, port)
            except OSError as exc:  # "[Errno 111] Connection refused", as httpcore says it
                raise library.ConnectError(str(exc) or _describe(exc)) from exc
            if scheme != "https":
                return _Connection(tcp)
            try:
                stream = await anyio.streams.tls.TLSStream.wrap(
                    tcp,
                    server_side=False,
                    hostname=host,
                    ssl_context=made_context(self._ssl_context),
                    standard_compatible=False,
                )
            except BaseException as exc:
                await anyio.aclose_forcefully(tcp)
                if isinstance(exc, OSError | ssl.SSLError | anyio.BrokenResourceError):
                    raise library.ConnectError(_describe(exc)) from exc
                raise
            return _Connection(stream)

        async def _exchange(
            self,
            connection: _Connection,
            key: tuple[Any, ...],
            method: str,
            target: bytes,
            headers: list[tuple[bytes, bytes]],
            body: bytes,
            trace: Any,
            unanswered: Unanswered | None,
        ) -> httpx.Response:
            """Send the request and read the response's head; any failure or cancellation
            closes the connection, a withdrawal excepted, and a cancellation once the
            request was written with no answer yet, which leaves it to ``unanswered`` (if
            given) for the server's answer or close. ``trace`` (the request's extension,
            as httpcore takes it) hears of the two events the crawler needs: the head about
            to be written, when the crawl may still withdraw the request (its origin was
            told to wait while the connection was made), and the head written, the moment a
            host's delay runs from."""
            connection.answered = False
            connection.arrived = None
            written = False
            if trace is not None:
                try:
                    await trace(HEAD_STARTED, {})  # may withdraw the request
                except Exception:
                    # Withdrawn: nothing of it was written, so the connection is as it was,
                    # and waits for the origin's next request. Often it was made for this
                    # one (the origin's other connection is busy): closed, its handshake
                    # would be made again for nothing.
                    await self._put_back(key, connection)
                    raise
                except BaseException:
                    await _close(connection)
                    raise
            try:
                try:
                    head, keep_alive = request_head(method, target, headers, body)
                    await connection.stream.send(head + body if body else head)
                    written = True
                    if connection.stamped is not None:
                        connection.written_at = anyio.current_time()
                except LocalProtocolError as exc:
                    raise library.LocalProtocolError(str(exc)) from exc
                except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                    raise library.WriteError(_describe(exc)) from exc
                connection.reader.expect(head_only=method == "HEAD", keep_alive=keep_alive)
                if trace is not None:
                    await trace(HEAD_WRITTEN, {})
                event = await _mapped(library, connection.next_event)
                if event is CLOSED:
                    raise library.RemoteProtocolError(
                        "Server disconnected without sending a response."
                    )
                if not isinstance(event, ResponseHead):  # never: a head comes first
                    raise library.RemoteProtocolError(f"unexpected {event!r}")
            except anyio.get_cancelled_exc_class():
                if unanswered is not None and written and not connection.answered:
                    unanswered.park(connection)  # still the server's: see Unanswered
                else:
                    await _close(connection)
                raise
            except BaseException:
                await _close(connection)
                raise
            connection.keep_for = _keep_alive_timeout(event.headers)
            body_stream = LeanBody(self, key, connection)
            response: httpx.Response = library.Response(
                status_code=event.status_code,
                headers=event.headers,
                stream=body_stream,
                extensions={
                    "http_version": b"HTTP/" + event.http_version,
                    "reason_phrase": event.reason,
                },
            )
            if connection.stamped is not None:
                body_stream.extensions = response.extensions
            return response

        async def aclose(self) -> None:
            for connection in self._shared.idle.drop(self):
                await _close(connection)

    return LeanTransport


def _reusable(connection: _Connection) -> bool:
    """Whether an idle connection may carry the next request: still open, as far as can
    be seen, and not idle longer than its server said it would wait."""
    idle_until = connection.idle_until
    if idle_until is not None and anyio.current_time() >= idle_until:
        return False
    return _alive(connection)


def _keep_alive_timeout(headers: Iterable[tuple[bytes, bytes]]) -> float | None:
    """The ``timeout`` of a ``Keep-Alive`` header (``timeout=5, max=100``), in seconds.

    The header is HTTP/1.0's, never standardised, and still sent by Apache and Node.js to
    say how long they keep an idle connection open; anything that does not parse is
    ignored, as if the header were absent.
    """
    for name, value in headers:
        if name == b"keep-alive":
            for parameter in value.split(b","):
                word, _, number = parameter.partition(b"=")
                number = number.strip()
                if word.strip().lower() == b"timeout" and number.isdigit():
                    return float(number)
    return None


def _alive(connection: _Connection) -> bool:
    """Whether an idle connection may carry a request: its socket has nothing to read.

    An idle HTTP/1.1 connection that became readable was closed by the server (or is
    sending what nobody asked for); either way it is not reused. httpcore asks the same.
    """
    sock = connection.socket
    if sock is None:
        return True
    try:
        return not _readable(sock)
    except (OSError, ValueError):
        return False


def _readable(sock: socket.socket) -> bool:
    """Whether ``sock`` has something to read (or its peer hung up), without waiting.

    ``poll``, not ``select``: ``select`` takes no descriptor numbered 1024 or more, and a
    crawl holding that many sockets (a broad crawl's idle connections, a thousand workers)
    would find every later connection "dead" and open a new one for each request. Windows
    has no ``poll``, and no such limit on its ``select``.
    """
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


async def _mapped(library: ModuleType, read: Any) -> Event:
    """``read()``, with the reader's and the network's errors as the library's exceptions."""
    try:
        return await read()  # type: ignore[no-any-return]
    except RemoteProtocolError as exc:
        raise library.RemoteProtocolError(str(exc)) from exc
    except (OSError, ssl.SSLError, anyio.BrokenResourceError) as exc:
        raise library.ReadError(_describe(exc)) from exc


async def close_idle(connections: CrawlConnections) -> int:
    """Close every idle connection of a crawl that has ended, in the caller's task; return
    how many.

    Each worker's transport would close the ones it kept as the worker ends: a scope, a
    close and a checkpoint each, in turns with the other workers' ends, which took the
    last 90 ms of a 500-host crawl. On Trio no task waits on an idle connection's socket
    (a socket is registered for events only while a task waits on it), so each socket is
    closed as it is, in one loop; elsewhere (asyncio watches a transport's socket for as
    long as it is open) each is closed as a worker would, one after the other.
    """
    idle = connections.idle.drain()
    at_once = on_trio()
    for connection in idle:
        if at_once and connection.socket is not None:
            connection.socket.close()
        else:
            await _close(connection)
    return len(idle)


async def _close(connection: _Connection) -> None:
    """Close at once, even in a cancelled scope: a forceful close sends nothing it must
    wait for, so it cannot hang a cancelled task."""
    with anyio.CancelScope(shield=True):
        await connection.close()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
