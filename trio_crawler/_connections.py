"""What the transports of one crawl share: a cap on idle connections, and the name cache.

Theory of operation
-------------------
The crawler's transport (:mod:`trio_crawler._transport`) gives each worker a client of its
own, and keeps a connection to an origin open after its response (keep-alive) for the next
request to that origin. Where it keeps it decides two things.

Reuse. A worker makes one request at a time, and on a broad crawl consecutive requests to
one host are made by different workers (each took whichever host was ready next). Idle
connections kept per worker would be found again only by the worker that kept them: a
crawl of 500 hosts by 500 workers opened a connection for 8 of every 10 requests. So the
idle connections of all a crawl's transports are one pool, by origin (scheme, host, port,
TLS settings): a request takes the origin's most recently kept one, whoever kept it.

Bounds. On many hosts nearly every connection is idle, and long before tens of thousands
of them the process runs out of file descriptors (``EMFILE``, "Too many open files", at
1024 by default on Linux), after which every new connection fails, and so does opening
anything else.

:class:`IdleConnections` is that pool, with every idle connection also in one
:class:`~trio_crawler._lru.LRU` under a cap (:func:`default_idle_limit`). A transport hands
it a connection to keep idle (:meth:`~IdleConnections.keep`) and takes one out before
using it (:meth:`~IdleConnections.take`); when keeping one more would pass the cap, the
least recently used idle connection, whatever its origin, is taken out and handed back to
be closed. A connection in use is never in the pool: a request owns it from ``take`` until
its response is read to the end, so it is neither counted as idle nor ever closed by the
cap. A transport that closes (its worker is done) closes the idle connections it kept.

This needs no lock: keeping, taking and evicting are plain dictionary operations on one
event loop, with no await between reading and changing. Closing an evicted connection is
the one thing that awaits, and it is done by the task that kept the newer one: the
evicted connection is out of every dictionary by then, so no task can take it, and since
it was idle no task is blocked reading or writing it. A forceful, shielded close (the
transport's ``_close``) sends nothing and waits for nothing, which is what makes closing
a stream that another task opened safe on Trio and on asyncio alike.

Races. A server may close an idle connection at any moment: when its keep-alive timeout
runs out, or right after a response that did not say ``Connection: close``. The transport
checks a connection before reusing it, but a close on its way cannot be seen, and a request
sent into it is lost before any byte of an answer. HTTP lets a client send such a request
again (RFC 9112, section 9.3.1), and browsers do so at once, unseen. A crawler does not:
the loss is a failed attempt like any other, counted in ``--max-tries``, logged, and tried
again after the usual pause, so that a server never sees more requests than the crawler
says it made. What the pool adds (:meth:`~IdleConnections.lose`) is that the lost request
goes on a new connection when it is tried again, and that the origin's other idle
connections, likely closed too, are dropped; a retry cannot meet the same race.

:class:`CrawlConnections` is the one object of a crawl that every transport it builds is
given: the idle cap and the host-name cache (:class:`~trio_crawler._lookups.HostLookups`),
with :meth:`~CrawlConnections.statistics` to read what they did. :func:`open_connection`
connects to the addresses a lookup gave, trying the next one after 250 ms as
``anyio.connect_tcp`` does (happy eyeballs).

On Trio it connects a socket itself (:func:`connect_address`) and hands it to AnyIO
connected: ``anyio.connect_tcp`` runs a task group, a task and an event for each
connection, even to one address, which took 2.5 times the CPU of a connection (about 130
µs more on the 2-CPU VM). A broad crawl opens one connection per host in its first
seconds, all at once. On asyncio it still calls ``anyio.connect_tcp``: a socket AnyIO
wraps there keeps its transport reading, where the transport needs the kernel to hold
what an idle connection receives (see ``_alive`` in ``_transport.py``).

On Linux, with Trio's own clock, such a socket also asks the kernel for the time each
segment it receives arrived (``SO_TIMESTAMPNS``), and the transport reads it with
:func:`receive_stamped` (``recvmsg``) instead of AnyIO's ``receive``: a host's delay runs
from the end of its last answer, and a process busy with other hosts' pages reads that
end late by as long as it is busy. Timed from its arrival, the host's gap is the delay
again (docs/manners.md, "When the delay's clock starts"). Elsewhere (asyncio, whose
transport does the reading; a virtual clock, on which the kernel's times mean nothing;
another system) reads are as before, and the delay runs from the read.

With ``TRIO_CRAWLER_TRANSPORT=httpx`` (or a proxy in the environment) none of this is used:
each worker's ``AsyncClient`` has httpx's own pool, with ``limits=`` of one connection
(``max_connections=1``, so ``max_keepalive_connections`` is 1 too), so the crawl holds at
most ``--max-tasks`` connections, idle or not, and httpcore closes a client's idle
connection before it opens one to another origin; names are looked up by httpcore, once
per connection. A caller's own ``client=`` keeps its own limits.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import anyio.abc

from ._lookups import MIN_LOOKUP_THREADS, HostLookups, lookup_threads
from ._lru import LRU
from ._options import ConfigError

if TYPE_CHECKING:
    from collections.abc import Hashable, Mapping, Sequence


try:
    import resource
except ImportError:  # Windows: no RLIMIT_NOFILE to read
    resource = None  # type: ignore[assignment]

C = TypeVar("C")

# Linux's SO_TIMESTAMPNS, which Python's socket module does not name: 35 on the
# architectures that use the kernel's generic socket numbers (alpha, mips, parisc and
# sparc have numbers of their own, and are left out). A received segment's time comes
# with the read as a struct timespec, two C longs.
_GENERIC_NUMBERS = ("x86_64", "i386", "i686", "aarch64", "arm", "riscv64", "ppc64", "s390x")
RECEIVE_STAMP: int | None = (
    35 if sys.platform == "linux" and os.uname().machine.startswith(_GENERIC_NUMBERS) else None
)
_STAMP = struct.Struct("@ll")
_STAMP_SPACE = socket.CMSG_SPACE(_STAMP.size) if hasattr(socket, "CMSG_SPACE") else 0

# The variable that overrides the default cap: a number (0 keeps no connection idle), or
# "none" for no cap. For measurements and the test suite, like TRIO_CRAWLER_TRANSPORT.
MAX_IDLE_VARIABLE = "TRIO_CRAWLER_MAX_IDLE"

# File descriptors set aside for what is not a connection: stdin, stdout and stderr, the
# event loop's own (epoll, its wake-up socket pair), the -o, --items and --warc files, a
# --state file with its WAL and shared-memory files, Redis connections, a resolver's
# sockets. Two dozen is the most counted in a crawl using all of them; 64 leaves room.
RESERVED_DESCRIPTORS = 64

# The default cap however high the limit: a connection idle long is usually closed by its
# server anyway (nginx's keepalive_timeout is 75 s, Apache's KeepAliveTimeout 5 s), and each
# one holds kernel buffers and, over TLS, tens of KiB of OpenSSL's state. A broad crawl
# visits its hosts in turn, and least-recently-used eviction under a cap below the number
# of hosts evicts every connection before its host's next request (at 5000 hosts and a cap
# of 4096, one new connection per request, at 1.8 times the CPU): so the cap is set above
# the broad crawls the benchmarks run, where the file limit allows it.
MAX_IDLE_CONNECTIONS = 8192

# Without a limit to read (Windows, whose sockets are not file descriptors), a cap that
# still lets a crawl of a few hundred workers keep a connection each.
UNKNOWN_LIMIT_IDLE_CONNECTIONS = 512

# How many requests lost on a reused connection (IdleConnections.lose) are remembered, to
# go on a new connection when tried again. A retry comes within seconds of its loss, and
# losses are rare (a server's close racing the next request): this many is ample.
FRESH_REQUESTS_REMEMBERED = 1024

# RFC 8305 section 5's recommended Connection Attempt Delay, and anyio.connect_tcp's
# happy_eyeballs_delay: how long one address may take to connect before the next is tried.
CONNECTION_ATTEMPT_DELAY = 0.25


def default_idle_limit(soft_limit: int | None = None) -> int:
    """The default cap on a crawl's idle connections, from the process's file limit.

    Every connection is a file descriptor, and the soft ``RLIMIT_NOFILE`` (``ulimit -n``)
    is how many the process may have. :data:`RESERVED_DESCRIPTORS` of them are set aside
    for what is not a connection, and half of the rest may be idle connections; the other
    half is left for connections in use, one per request in flight (``--max-tasks``, 100
    by default), which are never closed to make room. So at the common limit of 1024, 480
    idle connections; at 256, 96; never more than :data:`MAX_IDLE_CONNECTIONS`.

    Args:
        soft_limit: The limit to work from; None reads the process's own.
    """
    if soft_limit is None:
        if resource is None:
            return UNKNOWN_LIMIT_IDLE_CONNECTIONS
        soft_limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft_limit == resource.RLIM_INFINITY:
            return MAX_IDLE_CONNECTIONS
    return max(0, min(MAX_IDLE_CONNECTIONS, (soft_limit - RESERVED_DESCRIPTORS) // 2))


def idle_limit_from_environment(environ: Mapping[str, str] = os.environ) -> int | None:
    """The cap :data:`MAX_IDLE_VARIABLE` sets (None for ``none``: no cap), else the default.

    Raises:
        ConfigError: For a value that is neither a number >= 0 nor ``none``.
    """
    value = environ.get(MAX_IDLE_VARIABLE, "").strip().lower()
    if not value:
        return default_idle_limit()
    if value == "none":
        return None
    if value.isdigit():
        return int(value)
    raise ConfigError(MAX_IDLE_VARIABLE, f"must be a number >= 0 or 'none', not {value!r}")


class IdleConnections(Generic[C]):
    """A crawl's idle keep-alive connections, one pool for all its transports, capped.

    An idle connection is kept under its origin's key, whichever transport made it or used
    it last, so that the next request to that origin takes it, from any worker: on one site
    a worker takes the connection another worker just finished with, and on many hosts,
    where consecutive requests to one host are made by different workers, the host's
    connection is reused instead of a new one being opened per request. Each connection
    also remembers the transport that kept it, which closes it when that transport closes
    (:meth:`drop`). See the module docstring.

    Args:
        limit: The most idle connections at once; 0 keeps none, None any number.
    """

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        # Each idle connection, least recently kept first, with its origin's key and owner.
        self._lru: LRU[C, tuple[Hashable, Hashable]] = LRU(limit)
        # The idle connections by origin, most recently kept last; an origin with none has
        # no entry, so that a crawl of many hosts does not keep a dictionary per host.
        self._by_origin: dict[Hashable, dict[C, None]] = {}
        # The idle connections by the transport that kept them.
        self._by_owner: dict[Hashable, dict[C, None]] = {}
        self.closed = 0  # idle connections the cap has evicted
        self.reused = 0  # requests that took an idle connection
        self.lost = 0  # requests lost on an idle connection the server had closed
        # The requests to send on a new connection, not an idle one: each was lost on a
        # reused connection (see lose()). Bounded: a request never tried again stays here
        # until newer ones push it out.
        self._fresh: LRU[tuple[Hashable, Hashable], bool] = LRU(FRESH_REQUESTS_REMEMBERED)

    def __len__(self) -> int:
        return len(self._lru)

    def keep(self, owner: Hashable, key: Hashable, connection: C) -> list[C]:
        """Keep ``connection``, now idle, for the next request to the origin ``key``.

        Returns:
            The connections evicted to stay within the cap, least recently used first,
            already out of the pool: the caller closes them. With a cap of 0, that is
            ``connection`` itself.
        """
        self._by_origin.setdefault(key, {})[connection] = None
        self._by_owner.setdefault(owner, {})[connection] = None
        evicted = self._lru.put(connection, (key, owner))
        for old, (old_key, old_owner) in evicted:
            self._forget(old, old_key, old_owner)
        self.closed += len(evicted)
        return [old for old, _ in evicted]

    def take(self, key: Hashable, request: Hashable = None) -> C | None:
        """Take the origin's most recently kept idle connection out, for a request to use;
        or None: there is none, or ``request`` (the request's target, say) was lost on a
        reused connection before (:meth:`lose`), and goes on a new one this time."""
        if self._fresh and self._fresh.pop((key, request)):
            return None
        pool = self._by_origin.get(key)
        if not pool:
            return None
        connection = next(reversed(pool))
        entry = self._lru.pop(connection)
        assert entry is not None, "an idle connection is in the pool and in the LRU"
        self._forget(connection, *entry)
        self.reused += 1
        return connection

    def lose(self, key: Hashable, request: Hashable = None) -> list[C]:
        """``request`` was lost on a connection to ``key`` taken from this pool: the server
        had closed it (or closed it as the request arrived) before sending a byte back.

        The request is marked to go on a new connection when it is tried again, so that a
        retry cannot meet the same race; and the origin's other idle connections are taken
        out too, since they were kept by the same rule from the same server, and a server
        that restarted, or that closes idle connections sooner than it says, has closed
        them as well.

        Returns:
            The origin's other idle connections, taken out: the caller closes them.
        """
        self.lost += 1
        self._fresh.put((key, request), True)
        connections = list(self._by_origin.get(key, ()))
        for connection in connections:
            entry = self._lru.pop(connection)
            assert entry is not None, "an idle connection is in the pool and in the LRU"
            self._forget(connection, *entry)
        return connections

    def drop(self, owner: Hashable) -> list[C]:
        """Take out every idle connection ``owner`` kept (that transport is closing): the
        caller closes them."""
        connections = list(self._by_owner.pop(owner, ()))
        for connection in connections:
            entry = self._lru.pop(connection)
            if entry is not None:
                self._forget_origin(connection, entry[0])
        return connections

    def drain(self) -> list[C]:
        """Take out every idle connection, least recently used first (the crawl is over):
        the caller closes them."""
        connections = self._lru.keys()
        self._lru.clear()
        self._by_origin.clear()
        self._by_owner.clear()
        return connections

    def _forget(self, connection: C, key: Hashable, owner: Hashable) -> None:
        self._forget_origin(connection, key)
        owned = self._by_owner[owner]
        del owned[connection]
        if not owned:
            del self._by_owner[owner]

    def _forget_origin(self, connection: C, key: Hashable) -> None:
        pool = self._by_origin[key]
        del pool[connection]
        if not pool:
            del self._by_origin[key]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionStatistics:
    """What a crawl's transports have shared so far.

    Attributes:
        idle: Idle keep-alive connections now.
        idle_limit: The cap on them (None: no cap).
        idle_closed: Idle connections closed to stay within the cap.
        idle_reused: Requests that took an idle connection rather than opening one.
        idle_lost: Requests lost on an idle connection the server had closed, before any
            byte of an answer (each is tried again on a new connection).
        lookups: Host names handed to the resolver.
        lookup_hits: New connections whose addresses came from the cache (or from a
            lookup already under way).
        lookup_failures: Lookups that failed.
        names_cached: Host names cached now, failures included.
    """

    idle: int
    idle_limit: int | None
    idle_closed: int
    idle_reused: int
    idle_lost: int
    lookups: int
    lookup_hits: int
    lookup_failures: int
    names_cached: int


class CrawlConnections:
    """The one object of a crawl that all the transports it builds share.

    It holds the cap on idle connections (:attr:`idle`) and the host-name cache
    (:attr:`lookups`); see the module docstring. Made once per crawl, before its first
    client, and used from that crawl's event loop only.

    Args:
        idle_limit: The cap on idle connections (None: no cap); see
            :meth:`from_environment` for the crawl's default.
        lookup_threads: Most host-name lookups at once (see :mod:`~trio_crawler._lookups`).
    """

    def __init__(self, *, idle_limit: int | None, lookup_threads: int = MIN_LOOKUP_THREADS) -> None:
        self.idle: IdleConnections[Any] = IdleConnections(idle_limit)
        self.lookups = HostLookups(threads=lookup_threads)

    @classmethod
    def from_environment(cls, *, workers: int = 0) -> CrawlConnections:
        """With the cap ``TRIO_CRAWLER_MAX_IDLE`` sets, else :func:`default_idle_limit`,
        and threads for the lookups of a crawl of ``workers`` workers.

        Raises:
            ConfigError: If ``TRIO_CRAWLER_MAX_IDLE`` is neither a number >= 0 nor ``none``.
        """
        return cls(idle_limit=idle_limit_from_environment(), lookup_threads=lookup_threads(workers))

    def statistics(self) -> ConnectionStatistics:
        lookups = self.lookups.statistics()
        return ConnectionStatistics(
            idle=len(self.idle),
            idle_limit=self.idle.limit,
            idle_closed=self.idle.closed,
            idle_reused=self.idle.reused,
            idle_lost=self.idle.lost,
            lookups=lookups.lookups,
            lookup_hits=lookups.hits,
            lookup_failures=lookups.failures,
            names_cached=lookups.cached,
        )


async def open_connection(addresses: Sequence[str], port: int) -> anyio.abc.SocketStream:
    """A TCP connection to the first of ``addresses`` that answers.

    One address is connected to directly. With several, the first is tried, and each next
    one :data:`CONNECTION_ATTEMPT_DELAY` later or as soon as the one before fails; the
    first to connect wins and the others are cancelled (or closed, if they connected too).

    Raises:
        OSError: If no address connected: the error itself for one address (``[Errno 111]
            Connection refused``, ``[Errno 24] Too many open files``), where
            ``anyio.connect_tcp`` says only "All connection attempts failed" and leaves the
            reason in its ``__cause__``; for several, one error naming each reason.
    """
    if len(addresses) == 1:
        return await connect_address(addresses[0], port)
    connected: anyio.abc.SocketStream | None = None
    errors: list[OSError] = []

    async def attempt(address: str, failed: anyio.Event) -> None:
        nonlocal connected
        try:
            stream = await connect_address(address, port)
        except OSError as exc:
            errors.append(exc)
            failed.set()
            return
        if connected is None:
            connected = stream
            attempts.cancel_scope.cancel("connected")
        else:
            await anyio.aclose_forcefully(stream)

    try:
        async with anyio.create_task_group() as attempts:
            for address in addresses:
                failed = anyio.Event()
                attempts.start_soon(attempt, address, failed)
                with anyio.move_on_after(CONNECTION_ATTEMPT_DELAY):
                    await failed.wait()
    except BaseException:
        if connected is not None:
            await anyio.aclose_forcefully(connected)
        raise
    if connected is None:
        reasons = "; ".join(dict.fromkeys(str(error) for error in errors))
        raise OSError(f"{len(addresses)} addresses, none connected: {reasons}") from (
            ExceptionGroup("connection attempts", errors)
        )
    return connected


async def connect_address(address: str, port: int) -> anyio.abc.SocketStream:
    """A TCP connection to one numeric ``address`` (IPv4, or IPv6 without brackets).

    On Trio the socket is connected here, with no task group around it (see the module
    docstring); a refusal says what Trio would say (``[Errno 111] Error connecting to
    ('127.0.0.1', 8000): Connection refused``). A socket that cannot be made at all says
    so as it is (``[Errno 24] Too many open files``). Cancelled, it closes the socket.
    """
    if not on_trio():
        try:
            return await anyio.connect_tcp(address, port)
        except OSError as exc:
            reason = _reason(exc)
            if reason is exc:
                raise
            raise reason from None
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if RECEIVE_STAMP is not None and _on_system_clock():
            with contextlib.suppress(OSError):  # a kernel without it: reads as before
                sock.setsockopt(socket.SOL_SOCKET, RECEIVE_STAMP, 1)
        try:
            sock.connect((address, port))
        except BlockingIOError:  # EINPROGRESS: writable once connected, or refused
            await anyio.wait_writable(sock)
            failure = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        except OSError as exc:
            if exc.errno is None or exc.errno <= 0:  # not the kernel's (a name, not a number)
                raise
            failure = exc.errno
        else:
            failure = 0
        if failure:  # worded as Trio words it
            words = os.strerror(failure)
            raise OSError(failure, f"Error connecting to {(address, port)!r}: {words}")
        return await anyio.abc.SocketStream.from_socket(sock)
    except BaseException:
        sock.close()
        raise


def on_trio() -> bool:
    """Whether the running event loop is Trio's (asked by Trio itself, if it is loaded)."""
    trio = sys.modules.get("trio")
    if trio is None:
        return False
    try:
        trio.lowlevel.current_task()
    except RuntimeError:
        return False
    return True


def _on_system_clock() -> bool:
    """Whether Trio's loop runs on its real clock (not a test's ``MockClock``), against
    which the kernel's receive times can be set."""
    trio = sys.modules["trio"]
    clock = trio.lowlevel.current_clock()
    return type(clock).__name__ == "SystemClock" and type(clock).__module__.startswith("trio.")


def stamped_reader(stream: object, raw: socket.socket | None) -> Any:
    """A Trio socket to read ``stream``'s bytes with their arrival time from
    (:func:`receive_stamped`), or None: only for a plain TCP stream that
    :func:`connect_address` asked the kernel to stamp."""
    if RECEIVE_STAMP is None or raw is None or not isinstance(stream, anyio.abc.SocketStream):
        return None
    trio = sys.modules.get("trio")
    if trio is None:
        return None
    try:
        if not raw.getsockopt(socket.SOL_SOCKET, RECEIVE_STAMP):
            return None
    except OSError:
        return None
    return trio.socket.from_stdlib_socket(raw)


async def receive_stamped(reader: Any, size: int) -> tuple[bytes, float | None]:
    """Up to ``size`` bytes from ``reader`` (a :func:`stamped_reader`), and when the newest
    of them reached this machine, by the kernel's clock (``time.time()``'s), or None if
    the read came without it. Errors and the end of the stream are AnyIO's, as the
    stream's own ``receive()`` raises them."""
    trio = sys.modules["trio"]
    try:
        data, ancillary, _flags, _address = await reader.recvmsg(size, _STAMP_SPACE)
    except trio.ClosedResourceError as exc:
        raise anyio.ClosedResourceError from exc
    except OSError as exc:
        if reader.fileno() < 0:
            raise anyio.ClosedResourceError from None
        raise anyio.BrokenResourceError from exc
    arrived = None
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == RECEIVE_STAMP and len(payload) >= _STAMP.size:
            seconds, nanoseconds = _STAMP.unpack_from(payload)
            arrived = seconds + nanoseconds / 1e9
    if not data:
        raise anyio.EndOfStream
    return data, arrived


def _reason(exc: OSError) -> OSError:
    """The error under ``anyio.connect_tcp``'s "All connection attempts failed"."""
    return exc.__cause__ if isinstance(exc.__cause__, OSError) else exc
