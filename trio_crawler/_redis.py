"""The crawler's own Redis client: the few commands a shared crawl sends, on AnyIO streams.

A shared crawl (``--frontier``) says little to its server: its Lua scripts (``EVALSHA``,
falling back to ``EVAL`` once per connection when the server does not have one cached), a
few reads (``HGET``, ``HMGET``) and one subscription to the crawl's channel. A general
client pays for what it offers besides: a crawl of many hosts makes a step call for about
every second request, and each call through one went through retry policies, per-command
reply callbacks and a reader task per connection, several times the CPU of the round trip
itself, and importing it took 0.16 s of CPU on every process's start (with its runtime
type checker). This module speaks RESP2, Redis's wire protocol, directly:

* :class:`Redis` is one connection, commands one at a time (Redis serves a connection's
  commands in order anyway; a process's calls are few and short). A connection that fails,
  times out or is cancelled in the middle of an exchange is dropped, since its next reply
  could be the last command's; the next command connects again. The caller decides
  whether to retry (:meth:`~trio_crawler._cluster_session.ClusterSession.call` does, for
  up to a lease).
* :func:`subscribe` opens a connection of its own for the channel, as Redis requires: a
  subscribed connection takes no other commands. Leaving closes it; the server forgets the
  subscription with the connection.
* Connecting sends ``AUTH`` (with the URL's user, if any), ``SELECT`` and ``CLIENT
  SETNAME`` in one write, and reads their three answers. ``rediss://`` verifies the
  server's certificate and that it names the host, unless the URL's query says otherwise
  (:data:`TLS_QUERY_OPTIONS` in :mod:`~trio_crawler._option_checks`).

Failures are of two kinds, as the callers need them: :class:`RedisLost` (an
:class:`OSError`: no connection, or it broke), :exc:`TimeoutError` and :class:`Unavailable`
(a server loading its data, or busy) mean try again later; :class:`RedisError` is the
server's refusal of a command, with subclasses for the refusals that ask the operator for
something (a password, other credentials).
"""

from __future__ import annotations

import hashlib
import os
import socket
import ssl
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

import anyio
import anyio.abc

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Sequence

__all__ = [
    "AuthenticationFailed",
    "AuthenticationRequired",
    "Endpoint",
    "NotPermitted",
    "Redis",
    "RedisError",
    "RedisLost",
    "Script",
    "Unavailable",
    "subscribe",
]

# Bytes asked of the stream at a time: a step call's answer is tens of kilobytes at most.
_RECEIVE = 65536


class RedisLost(ConnectionError):
    """No connection to the server, or it broke during an exchange."""


class RedisError(Exception):
    """The server refused a command; the message is its own (``ERR ...``)."""


class AuthenticationRequired(RedisError):
    """``NOAUTH``: the server wants a password and none was given."""


class AuthenticationFailed(RedisError):
    """``WRONGPASS`` (or an older server's ``invalid password``): the credentials are wrong."""


class NotPermitted(RedisError):
    """``NOPERM``: the user may not run a command or touch a key it needs."""


class Unavailable(RedisError):
    """The server cannot answer now and may soon: ``LOADING`` (a restarted server reading
    its data), ``BUSY`` (another client's script running long), ``MASTERDOWN``,
    ``TRYAGAIN``. Nothing was done; the command may be sent again."""


# The codes of :class:`Unavailable`.
_UNAVAILABLE = frozenset({"LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN"})


def _refusal(text: str) -> RedisError:
    """The exception for the server's error reply ``text``, its generic ``ERR`` code
    left out (what follows is the message)."""
    text = text.removeprefix("ERR ")
    code = text.split(" ", 1)[0]
    if code == "NOAUTH":
        return AuthenticationRequired(text)
    if code == "WRONGPASS" or text.startswith(("invalid password", "AUTH")):
        return AuthenticationFailed(text)
    if code == "NOPERM":
        return NotPermitted(text)
    if code in _UNAVAILABLE:
        return Unavailable(text)
    return RedisError(text)


# -- the wire --------------------------------------------------------------------------------


def encode(args: Sequence[str | bytes]) -> bytes:
    """A command as RESP: an array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


class _Incomplete(Exception):
    """The buffer ends inside a reply: read more."""


_INCOMPLETE = _Incomplete()


def parse(buffer: bytes | bytearray, start: int) -> tuple[Any, int]:
    """The reply that begins at ``start`` in ``buffer``, and where the next one begins.

    Bulk strings are text (UTF-8; Redis keeps what the crawl wrote, all of it text), nil
    is None, an error reply is a :class:`RedisError` returned as a value (an array may hold
    one, as a pipeline's answers do).

    Raises:
        _Incomplete: The reply is not all in ``buffer`` yet.
        RedisLost: What is there is not RESP: the connection cannot be trusted.
    """
    end = buffer.find(b"\r\n", start)
    if end < 0:
        raise _INCOMPLETE
    kind = buffer[start]
    line = buffer[start + 1 : end]
    after = end + 2
    try:
        if kind == 36:  # $ bulk string
            size = int(line)
            if size < 0:
                return None, after
            if len(buffer) < after + size + 2:
                raise _INCOMPLETE
            return buffer[after : after + size].decode(), after + size + 2
        if kind == 42:  # * array
            count = int(line)
            if count < 0:
                return None, after
            items = []
            for _ in range(count):
                item, after = parse(buffer, after)
                items.append(item)
            return items, after
        if kind == 58:  # : integer
            return int(line), after
        if kind == 43:  # + simple string
            return line.decode(), after
        if kind == 45:  # - error
            return _refusal(line.decode(errors="replace")), after
    except (ValueError, UnicodeDecodeError) as exc:
        raise RedisLost(f"the server's reply is not RESP: {exc}") from None
    raise RedisLost(f"the server's reply is not RESP: starts with {bytes([kind])!r}")


# -- where the server is ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the server is and how to log in: what a ``redis://`` or ``rediss://`` URL
    says (the URL is checked with the options: :func:`~trio_crawler._option_checks
    .frontier_url`)."""

    host: str
    port: int
    username: str | None
    password: str | None
    database: int
    tls: ssl.SSLContext | None

    @classmethod
    def from_url(cls, url: str, *, password_variable: str | None = None) -> Endpoint:
        """The endpoint ``url`` names; the password, when the URL has none, from the
        environment variable ``password_variable``."""
        parts = urlsplit(url)
        password = unquote(parts.password) if parts.password else None
        if password is None and password_variable:
            password = os.environ.get(password_variable) or None
        username = unquote(parts.username) if parts.username else None
        database = parts.path.removeprefix("/")
        return cls(
            host=parts.hostname or "localhost",
            port=parts.port or 6379,
            username=username,
            password=password,
            database=int(database) if database.isdigit() else 0,
            tls=_tls_context(parts.query) if parts.scheme == "rediss" else None,
        )

    def login(self, name: str) -> list[list[str]]:
        """The commands that open a session: authenticate, pick the database, name the
        connection (``CLIENT LIST`` on the server then says whose it is)."""
        commands = []
        if self.password is not None:
            user = [self.username] if self.username else []
            commands.append(["AUTH", *user, self.password])
        if self.database:
            commands.append(["SELECT", str(self.database)])
        commands.append(["CLIENT", "SETNAME", name])
        return commands


_TRUE = ("true", "yes", "1", "t", "y")


def _tls_context(query: str) -> ssl.SSLContext:
    """The TLS context a ``rediss://`` URL's query asks for: by default the system's
    certificate authorities (or ``ssl_ca_certs``), the certificate required and its name
    checked; ``ssl_cert_reqs`` and ``ssl_check_hostname`` may loosen that, and
    ``ssl_certfile``/``ssl_keyfile`` give a client certificate."""
    options = dict(parse_qsl(query, keep_blank_values=True))
    context = ssl.create_default_context(cafile=options.get("ssl_ca_certs"))
    check = options.get("ssl_check_hostname", "true").lower() in _TRUE
    required = options.get("ssl_cert_reqs", "required").lower()
    context.check_hostname = check and required != "none"
    context.verify_mode = {
        "none": ssl.CERT_NONE,
        "optional": ssl.CERT_OPTIONAL,
    }.get(required, ssl.CERT_REQUIRED)
    if "ssl_certfile" in options:
        context.load_cert_chain(options["ssl_certfile"], options.get("ssl_keyfile"))
    return context


# -- a connection ----------------------------------------------------------------------------


class _Link:
    """One open connection: a stream and what has been read from it but not parsed."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self.buffer = bytearray()

    async def read(self) -> Any:
        """The next reply (a :class:`RedisError` as a value)."""
        replies = await self.read_many(1)
        return replies[0]

    async def read_many(self, count: int) -> list[Any]:
        """The next ``count`` replies (as :meth:`read`). A pipeline's replies arrive
        together: each is parsed where it lies, and the buffer is cut once they are read
        (or once more must come), not after each, which would move the rest of the buffer
        for every reply."""
        buffer = self.buffer
        replies: list[Any] = []
        start = 0
        while len(replies) < count:
            if start < len(buffer):
                try:
                    reply, start = parse(buffer, start)
                except _Incomplete:
                    pass
                else:
                    replies.append(reply)
                    continue
            del buffer[:start]
            start = 0
            try:
                buffer += await self.stream.receive(_RECEIVE)
            except (anyio.EndOfStream, anyio.BrokenResourceError) as exc:
                raise RedisLost("the server closed the connection") from exc
        del buffer[:start]
        return replies

    async def send(self, data: bytes) -> None:
        try:
            await self.stream.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise RedisLost("the connection to the server broke") from exc

    async def close(self) -> None:
        await anyio.aclose_forcefully(self.stream)


async def _open(endpoint: Endpoint, name: str, connect_timeout: float) -> _Link:
    """A connection to ``endpoint``, logged in and named ``name``.

    Raises:
        RedisLost: No connection within ``connect_timeout`` seconds, or TLS refused.
        RedisError: The server refused to log in (a password, the database).
    """
    try:
        with anyio.fail_after(connect_timeout):
            if endpoint.tls is None:
                stream: anyio.abc.ByteStream = await anyio.connect_tcp(endpoint.host, endpoint.port)
            else:
                stream = await anyio.connect_tcp(
                    endpoint.host,
                    endpoint.port,
                    ssl_context=endpoint.tls,
                    tls_hostname=endpoint.host,
                    # Redis closes without TLS's close_notify; its replies say where they end.
                    tls_standard_compatible=False,
                )
    except TimeoutError:
        raise RedisLost(
            f"no connection to {endpoint.host}:{endpoint.port} within {connect_timeout:g} s"
        ) from None
    except (OSError, anyio.BrokenResourceError) as exc:
        # Refused, unreachable; the certificate refused (ssl.SSLError, which AnyIO may
        # carry as the cause of a broken stream).
        raise RedisLost(f"cannot connect to {endpoint.host}:{endpoint.port}") from exc
    _keep_alive(stream)
    link = _Link(stream)
    try:
        commands = endpoint.login(name)
        with anyio.fail_after(connect_timeout):
            await link.send(b"".join(encode(command) for command in commands))
            for _ in commands:
                reply = await link.read()
                if isinstance(reply, RedisError):
                    raise reply
    except BaseException:
        await link.close()
        raise
    return link


# TCP keepalive on every connection: probed after KEEPALIVE_IDLE seconds without traffic,
# then every KEEPALIVE_INTERVAL, and given up after KEEPALIVE_PROBES unanswered.
KEEPALIVE_IDLE = 60
KEEPALIVE_INTERVAL = 10
KEEPALIVE_PROBES = 3


def _keep_alive(stream: anyio.abc.ByteStream) -> None:
    """Have the kernel probe the connection while it is idle.

    A subscription can wait minutes for a message. Were the server's machine to vanish,
    or a firewall or NAT on the way to forget the connection, no error would ever come,
    and the process would not hear the crawl's news again (it would still look for work
    once a lease period). Probed, the connection fails within about 90 s, and the listener
    subscribes again; the probes also keep a middlebox from forgetting it in the first
    place. Redis's own ``tcp-keepalive`` probes from the server's side only.
    """
    sock = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
    if sock is None:
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    # Linux names; macOS has TCP_KEEPALIVE for the idle time (and the other two since 10.15).
    idle = getattr(socket, "TCP_KEEPIDLE", getattr(socket, "TCP_KEEPALIVE", None))
    for option, value in (
        (idle, KEEPALIVE_IDLE),
        (getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL),
        (getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_PROBES),
    ):
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


@dataclass(frozen=True, slots=True)
class Script:
    """A Lua script, called by its SHA once the server has it."""

    source: str
    sha: str

    @classmethod
    def of(cls, source: str) -> Script:
        # The SHA is Redis's name for the script, not a security measure: allowed where
        # FIPS mode forbids SHA-1 for security.
        return cls(source, hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest())


class Redis:
    """A connection to a Redis server, for commands one at a time (see the module
    docstring).

    Args:
        endpoint: Where the server is.
        name: The connection's name on the server (``CLIENT SETNAME``).
        connect_timeout: Seconds to connect and log in.
        answer_timeout: Seconds to wait for one reply before the connection counts as lost.
    """

    def __init__(
        self, endpoint: Endpoint, *, name: str, connect_timeout: float, answer_timeout: float
    ) -> None:
        self.endpoint = endpoint
        self.name = name
        self.connect_timeout = connect_timeout
        self.answer_timeout = answer_timeout
        self._link: _Link | None = None
        self._lock = anyio.Lock()

    async def __aenter__(self) -> Redis:
        async with self._lock:
            await self._connected()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        link, self._link = self._link, None
        if link is not None:
            await link.close()

    async def _connected(self) -> _Link:
        if self._link is None:
            self._link = await _open(self.endpoint, self.name, self.connect_timeout)
        return self._link

    async def _exchange(self, data: bytes) -> Any:
        """Send ``data`` (one command) and read its reply, on a connection made if there
        is none. Any failure in between, cancellation included, drops the connection."""
        replies = await self._exchange_many(data, 1)
        return replies[0]

    async def _exchange_many(self, data: bytes, count: int) -> list[Any]:
        """Send ``data`` (``count`` commands) in one write and read their ``count``
        replies, all within the answer timeout, as :meth:`_exchange` does one's."""
        async with self._lock:
            link = await self._connected()
            try:
                with anyio.fail_after(self.answer_timeout):
                    await link.send(data)
                    return await link.read_many(count)
            except BaseException:
                self._link = None
                await link.close()
                raise

    async def execute(self, *args: str) -> Any:
        """Run one command; its reply.

        Raises:
            RedisError: The server refused it.
            RedisLost, TimeoutError: No answer came.
        """
        reply = await self._exchange(encode(args))
        if isinstance(reply, RedisError):
            raise reply
        return reply

    async def run_script(self, script: Script, keys: Sequence[str], args: Sequence[str]) -> Any:
        """Run ``script`` with ``keys`` and ``args``: by its SHA, or its text where the
        server does not hold it (it then keeps it for the next call)."""
        head = [str(len(keys)), *keys, *args]
        reply = await self._exchange(encode(["EVALSHA", script.sha, *head]))
        if isinstance(reply, RedisError) and str(reply).startswith("NOSCRIPT"):
            reply = await self._exchange(encode(["EVAL", script.source, *head]))
        if isinstance(reply, RedisError):
            raise reply
        return reply

    async def hget(self, key: str, field: str) -> str | None:
        value: str | None = await self.execute("HGET", key, field)
        return value

    async def hmget(self, key: str, fields: Sequence[str]) -> list[str | None]:
        values: list[str | None] = await self.execute("HMGET", key, *fields)
        return values

    async def pipeline(self, commands: Sequence[Sequence[str]]) -> list[Any]:
        """Run ``commands`` in one round trip: written together, their replies read in
        order. Read one by one, ``n`` hashes cost ``n`` round trips, and on a loaded
        machine each is a wake-up of the server and of this process: in a broad crawl,
        a lease bringing a process up to 56 origins new to it took up to 24 ms to read
        them (137-139 ms in all for each of two joiners), while their requests waited.

        Raises:
            RedisError: The server refused one of them (the first refusal; every command
                ran or was refused all the same).
            RedisLost, TimeoutError: Not every reply came.
        """
        if not commands:
            return []
        data = b"".join(encode(command) for command in commands)
        replies = await self._exchange_many(data, len(commands))
        for reply in replies:
            if isinstance(reply, RedisError):
                raise reply
        return replies


@asynccontextmanager
async def subscribe(
    endpoint: Endpoint, channel: str, *, name: str, connect_timeout: float
) -> AsyncIterator[AsyncIterator[str]]:
    """Listen on ``channel``, on a connection of its own: the messages' data, in order.

    Subscribed once the context is entered. The iterator ends with :class:`RedisLost`
    when the connection does.

    Raises:
        RedisLost, RedisError: As :class:`Redis` connects.
    """
    link = await _open(endpoint, name, connect_timeout)
    try:
        await link.send(encode(["SUBSCRIBE", channel]))
        with anyio.fail_after(connect_timeout):
            confirmed = await link.read()
        if isinstance(confirmed, RedisError):
            raise confirmed
        if not (isinstance(confirmed, list) and confirmed[:1] == ["subscribe"]):
            raise RedisLost(f"the server answered {confirmed!r:.80} to SUBSCRIBE")
        yield _Messages(link)
    finally:
        await link.close()


class _Messages:
    """The data of the messages a subscribed connection receives (not an async generator:
    one left unfinished as the context exits would be finalised later, elsewhere)."""

    def __init__(self, link: _Link) -> None:
        self._link = link

    def __aiter__(self) -> _Messages:
        return self

    async def __anext__(self) -> str:
        while True:
            message = await self._link.read()
            if isinstance(message, list) and len(message) == 3 and message[0] == "message":
                data: str = message[2]
                return data
