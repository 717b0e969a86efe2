"""A raw-socket HTTP server that misbehaves on purpose, for tests/test_hostile.py.

Why raw sockets? The crawler must survive servers that break HTTP: a reply that is not HTTP
at all, a header section that never ends, a Content-Length the body never reaches, a reset
in the middle of a body, a Location header no URL parser accepts. Real HTTP libraries will
not send those. h11 (and hypercorn, built on it) refuses to put a malformed response on the
wire (``LocalProtocolError``), checks Content-Length against the body it is given, and always
ends a header section; tests/httpserver.py is built on h11 for that very reason, to be
correct. So this server writes the bytes itself.

Theory of operation: :func:`open_hostile_server` listens on 127.0.0.1, port 0, in a task
group of its own, so the server lives exactly as long as the ``async with`` block and runs
in the same event loop as the crawler (on Trio, on asyncio, and under Trio's virtual clock,
where the sleeps below cost no real time). For each connection it reads a request head,
up to the blank line, and takes the method and target from the request line; nothing
else of the request is parsed. The target picks a *behaviour* from the routes (or the
fallback): an async function given the connection's byte stream and the request, that
writes whatever bytes it likes, resets the connection, or never answers. It returns
whether the connection may carry another request. A client that hangs up or resets while
a behaviour writes ends that connection quietly: the crawler giving up is expected.

Behaviours are made by the factories below, each a few lines: well-formed responses
(:func:`response`, :func:`page`, :func:`redirect`) to build the rest of a site, and the
hostile ones. Nothing large is built in memory: a huge body is streamed block by block, and
the gzip bomb is a 1 MiB deflate stream made from one repeated block (:func:`gzip_bomb`).
"""

from __future__ import annotations

import collections
import functools
import http
import socket
import struct
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import anyio.abc

# Bytes per read; the same figure as h11's examples/trio-server.py (MAX_RECV).
MAX_RECEIVE = 2**16
# A longer request head is not a request this server answers: the crawler's are a few
# hundred bytes, and h11 refuses more than 16 KiB (DEFAULT_MAX_INCOMPLETE_EVENT_SIZE).
MAX_REQUEST_HEAD = 2**16
# Block size for streamed bodies: large enough to be quick, small enough to stop soon.
BLOCK = 2**16


@dataclass(frozen=True, slots=True)
class RawRequest:
    method: str
    target: str  # as sent, e.g. "/a?b=1"


Behaviour = Callable[[anyio.abc.SocketStream, RawRequest], Awaitable[bool]]
"""Answers one request; returns whether the connection may carry another."""


class HostileServer:
    """A running server: its routes, and the requests it has seen.

    Tests may change ``routes`` and ``fallback`` while it runs; the next request sees them.
    """

    def __init__(self, port: int, routes: Mapping[str, Behaviour]) -> None:
        self.port = port
        self.routes: dict[str, Behaviour] = dict(routes)
        self.fallback: Behaviour = page(status=404)
        self.requests: list[str] = []  # targets in the order requests arrived
        self.hits: collections.Counter[str] = collections.Counter()

    def url(self, target: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{target}"

    async def _serve_connection(self, stream: anyio.abc.SocketStream) -> None:
        unread = bytearray()  # bytes received after the last request head
        async with stream:
            try:
                while (request := await _read_request_head(stream, unread)) is not None:
                    self.requests.append(request.target)
                    self.hits[request.target] += 1
                    behaviour = self.routes.get(request.target, self.fallback)
                    if not await behaviour(stream, request):
                        return
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass  # the crawler hung up or reset the connection: it gave up, as it should


async def _read_request_head(
    stream: anyio.abc.SocketStream, unread: bytearray
) -> RawRequest | None:
    """The next request's method and target, or None if the client is gone or talks nonsense."""
    while (end := unread.find(b"\r\n\r\n")) < 0:
        if len(unread) > MAX_REQUEST_HEAD:
            return None
        try:
            unread += await stream.receive(MAX_RECEIVE)
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return None
    request_line = bytes(unread[:end]).split(b"\r\n", 1)[0]
    del unread[: end + 4]  # a GET has no body, so the next request starts here
    words = request_line.split(b" ")
    if len(words) != 3:
        return None
    return RawRequest(method=words[0].decode("latin-1"), target=words[1].decode("latin-1"))


@asynccontextmanager
async def open_hostile_server(
    routes: Mapping[str, Behaviour] | None = None,
) -> AsyncIterator[HostileServer]:
    """Serve on 127.0.0.1:0 in a task group of its own, until the block exits.

    On exit every connection is closed, cancelling behaviours that never end. An exception
    from the block propagates unwrapped (so ``pytest.raises`` around it works); a failure
    of the server's own tasks (a bug here) propagates as the task group raises it.
    """
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    body_error: Exception | None = None
    async with listener, anyio.create_task_group() as task_group:
        server = HostileServer(listener.extra(anyio.abc.SocketAttribute.local_port), routes or {})
        task_group.start_soon(listener.serve, server._serve_connection, task_group)
        try:
            yield server
        except Exception as exc:
            body_error = exc  # re-raised outside the task group, so it is not wrapped
        finally:
            task_group.cancel_scope.cancel("hostile server closed")
    if body_error is not None:
        raise body_error


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens: connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def reset(stream: anyio.abc.SocketStream) -> None:
    """Close with SO_LINGER 0, which sends a TCP RST rather than a FIN (see socket(7))."""
    raw_socket = stream.extra(anyio.abc.SocketAttribute.raw_socket)
    raw_socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    await stream.aclose()


def _head(status: int, headers: Sequence[bytes]) -> bytes:
    try:
        reason = http.HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        reason = b"Whatever"
    lines = [b"HTTP/1.1 %d %s" % (status, reason), *headers]
    return b"".join(line + b"\r\n" for line in lines) + b"\r\n"


# -- well-formed responses, to build the rest of a site ---------------------------------


def response(
    status: int = 200,
    *,
    headers: Sequence[bytes] = (b"content-type: text/html; charset=utf-8",),
    body: bytes = b"",
    keep_alive: bool = True,
) -> Behaviour:
    """A complete response with a correct Content-Length; ``headers`` are raw lines."""
    lines = [*headers, b"content-length: %d" % len(body)]
    if not keep_alive:
        lines.append(b"connection: close")
    data = _head(status, lines)

    async def send_response(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
        await stream.send(data if request.method == "HEAD" else data + body)
        return keep_alive

    return send_response


def page(*hrefs: str, status: int = 200, keep_alive: bool = True) -> Behaviour:
    """An HTML page (UTF-8) with one ``<a>`` per href."""
    links = "".join(f'<a href="{href}">link</a>\n' for href in hrefs)
    body = f"<!doctype html><html><body>\n{links}</body></html>\n".encode()
    return response(status, body=body, keep_alive=keep_alive)


def redirect(location: bytes | None, *, status: int = 302) -> Behaviour:
    """A redirect whose Location header is ``location`` byte for byte (None: no Location)."""
    headers = [] if location is None else [b"location: " + location]
    return response(status, headers=headers)


# -- hostile behaviours ------------------------------------------------------------------


async def never_answer(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
    """Read the request, then say nothing until the client gives up."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


async def reset_before_response(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
    await reset(stream)
    return False


def reset_mid_body(*, declared: int = 10_000, sent: int = 1_000) -> Behaviour:
    """Send the head and ``sent`` of ``declared`` body bytes, then reset."""
    data = _head(200, [b"content-type: text/html", b"content-length: %d" % declared])
    data += b"x" * sent

    async def send_then_reset(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
        await stream.send(data)
        await reset(stream)
        return False

    return send_then_reset


def send_and_close(data: bytes) -> Behaviour:
    """Answer with ``data`` (not HTTP, or not all of it), then close normally."""

    async def send_garbage(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
        await stream.send(data)
        return False

    return send_garbage


def short_body(*, declared: int = 10_000, sent: int = 100) -> Behaviour:
    """Promise ``declared`` bytes in Content-Length, send ``sent``, then close normally."""
    return send_and_close(
        _head(200, [b"content-type: text/html", b"content-length: %d" % declared]) + b"x" * sent
    )


def endless_headers(interval: float) -> Behaviour:
    """A status line, then one more header line every ``interval`` seconds, forever."""

    async def drip_headers(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
        await stream.send(b"HTTP/1.1 200 OK\r\n")
        number = 0
        while True:
            await stream.send(b"x-never-ends-%d: yes\r\n" % number)
            number += 1
            await anyio.sleep(interval)

    return drip_headers


async def header_flood(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
    """A status line, then header lines as fast as the client takes them, forever."""
    await stream.send(b"HTTP/1.1 200 OK\r\n")
    block = b"".join(b"x-flood-%05d: yes\r\n" % number for number in range(200))
    while True:
        await stream.send(block)


def drip_body(interval: float) -> Behaviour:
    """A head promising a large body, then one byte every ``interval`` seconds, forever."""
    head = _head(200, [b"content-type: text/html", b"content-length: 1000000000"])

    async def drip(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
        await stream.send(head)
        while True:
            await stream.send(b"x")
            await anyio.sleep(interval)

    return drip


def huge_body(size: int | None) -> Behaviour:
    """An HTML body of ``size`` bytes (None: endless, ended by close), streamed in blocks."""
    length = [b"connection: close"] if size is None else [b"content-length: %d" % size]
    head = _head(200, [b"content-type: text/html", *length])
    block = b"x" * BLOCK

    async def stream_body(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
        await stream.send(head)
        left = size
        while left is None or left > 0:
            chunk = block if left is None or left >= BLOCK else block[:left]
            await stream.send(chunk)
            if left is not None:
                left -= len(chunk)
        return False

    return stream_body


# The CRC-32 of 2**30 zero bytes, which ends the bomb's gzip member (RFC 1952, section
# 2.3.1). Computing it costs about a second, so here is zlib.crc32(bytes(2**30)).
_CRC32_OF_1_GIB_OF_ZEROS = 0x5B64C2B0
# The gzip header (RFC 1952, 2.3): magic, deflate, no flags, no mtime, best compression, Unix.
_GZIP_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\x03"
BOMB_DECOMPRESSED_SIZE = 2**30


@functools.cache
def gzip_bomb_bytes() -> bytes:
    """A valid gzip member of about 1 MiB that decompresses to 1 GiB of zeros.

    Deflating 1 GiB takes about 20 s, so one MiB of zeros is deflated once and the block is
    repeated. Each block ends with a full flush (a byte-aligned empty stored block after
    which no match refers back), so the compressor is in the same state after every block,
    and the next block would come out byte for byte the same.
    """
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)  # raw deflate
    mebibyte = bytes(2**20)
    block = compressor.compress(mebibyte) + compressor.flush(zlib.Z_FULL_FLUSH)
    final_block = compressor.flush(zlib.Z_FINISH)
    trailer = struct.pack("<II", _CRC32_OF_1_GIB_OF_ZEROS, BOMB_DECOMPRESSED_SIZE % 2**32)
    copies = BOMB_DECOMPRESSED_SIZE // len(mebibyte)
    return _GZIP_HEADER + block * copies + final_block + trailer


async def gzip_bomb(stream: anyio.abc.SocketStream, request: RawRequest) -> bool:
    """``Content-Encoding: gzip`` on a 1 MiB body that inflates to 1 GiB of zeros."""
    bomb = gzip_bomb_bytes()
    head = _head(
        200,
        [
            b"content-type: text/html",
            b"content-encoding: gzip",
            b"content-length: %d" % len(bomb),
        ],
    )
    await stream.send(head)
    for start in range(0, len(bomb), BLOCK):
        await stream.send(bomb[start : start + BLOCK])
    return False
