"""HTTP/1.1 for a client that sends one request at a time: the request's head as bytes,
and a reader that turns the bytes of the answer into a head, body pieces and an end.

Why not h11? h11 is the reference here: the rules below are its rules, and the tests
(``tests/test_http11.py``) feed both the same bytes, split anywhere, and require the same
answer. But h11 is a general state machine for both sides of a connection, built of event
objects, per-header checks and state transitions, and on a crawl of small pages it was the
largest single part of a request's CPU (a sixth of it, in a profile of the broad-crawl
benchmark). A client of the crawler's kind needs much less: it writes a GET, then reads
one response. So this module does only that, with a regular expression over the whole
request head and one over each response header line, and slices of one buffer.

What it accepts and refuses, as h11 does:

* a status line ``HTTP/x.y NNN reason`` (the reason may be missing); lines that end in
  ``\\n`` as well as ``\\r\\n``; obsolete line folding (joined with a space);
* at most 16 KiB of head (or of a chunk header, or of trailers) before it is complete;
* 1xx answers are skipped (101 is refused: the crawler never asks to switch protocols);
* framing as RFC 9112 section 6.3 says: no body for a HEAD request, 204 and 304; chunked
  when ``Transfer-Encoding`` says so (the only transfer coding accepted), else
  ``Content-Length`` (several equal ones are one; different ones are refused), else the
  body runs to the connection's close;
* a connection is kept for another request only over HTTP/1.1, when neither side said
  ``Connection: close``, the body was framed, and nothing came after it.

Errors are :class:`RemoteProtocolError` (the server broke HTTP) and
:class:`LocalProtocolError` (a request that cannot be written: a header with a line break
in it, a missing ``Host``); the transport raises them as the HTTP library's own.
"""

from __future__ import annotations

import re
from typing import Final

# As h11 (DEFAULT_MAX_INCOMPLETE_EVENT_SIZE): how much of a head may wait for its end.
MAX_INCOMPLETE = 16 * 1024
# As h11 (CONTENT_LENGTH_MAX_DIGITS): a longer Content-Length is refused.
CONTENT_LENGTH_MAX_DIGITS = 20


class RemoteProtocolError(Exception):
    """The server's bytes are not HTTP/1.1 as this reader accepts it."""


class LocalProtocolError(Exception):
    """The request cannot be written as HTTP/1.1."""


# The grammar, from RFC 9110 and 9112, as h11 writes it.
_TOKEN = rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+"
_FIELD_VCHAR = rb"[^\x00\s]"
_FIELD_VALUE = rb"(?:" + _FIELD_VCHAR + rb"+(?:[ \t]+" + _FIELD_VCHAR + rb"+)*)?"
# A header line, name and value. The space before the value is matched possessively
# (``*+``): it can never be part of the value, and giving it back a character at a time
# would make a long run of spaces before a bad byte cost time in the square of its length.
_HEADER_LINE = re.compile(rb"(" + _TOKEN + rb"):[ \t]*+(" + _FIELD_VALUE + rb")[ \t]*")
_STATUS_LINE = re.compile(
    rb"HTTP/([0-9]\.[0-9]) ([0-9]{3})(?: ((?:[ \t]|" + _FIELD_VCHAR + rb")*))?"
)
_CHUNK_HEADER = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;.*)?[ \t]*\r\n")
_BLANK_LINE = re.compile(rb"\n\r?\n")
# A request's whole head after its request line: every header as this module writes it.
_REQUEST_HEADERS = re.compile(rb"(?:" + _TOKEN + rb": " + _FIELD_VALUE + rb"\r\n)*")
_TOKEN_ONLY = re.compile(_TOKEN)  # a method, or a header's name
_VALUE_ONLY = re.compile(_FIELD_VALUE)
_TARGET = re.compile(rb"[\x21-\x7e]+")
_CONTENT_LENGTH = re.compile(rb"[0-9]{1,%d}" % CONTENT_LENGTH_MAX_DIGITS)


def request_head(
    method: str, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes = b""
) -> tuple[bytes, bool]:
    """The request's head, ready to write, and whether it lets the connection be kept.

    The headers are written in the order and case given, Host first. A body is sent as it is, so a
    request with one must say its length in ``Content-Length``.

    Raises:
        LocalProtocolError: For a method, target or header HTTP/1.1 cannot carry, no
            ``Host`` header or more than one, or a body whose length is not declared.
    """
    verb = method.encode("ascii", "replace")
    if _TOKEN_ONLY.fullmatch(verb) is None:
        raise LocalProtocolError(f"illegal method {method!r}")
    if _TARGET.fullmatch(target) is None:
        raise LocalProtocolError(f"illegal request target {target!r}")
    if headers and headers[0][0].lower() != b"host":
        # Host goes first, as RFC 9110 section 7.2 asks (and h11 writes it; httpx puts
        # it there already).
        headers = sorted(headers, key=lambda header: header[0].lower() != b"host")
    lines = b"".join([name + b": " + value + b"\r\n" for name, value in headers])
    # One match for them all; a value with a line break in it would pass as two headers
    # there, which the count of line ends sees.
    if _REQUEST_HEADERS.fullmatch(lines) is None or lines.count(b"\n") != len(headers):
        raise LocalProtocolError(_first_illegal(headers))
    hosts = 0
    keep_alive = True
    declared: bytes | None = None
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"host":
            hosts += 1
        elif lowered == b"connection":
            keep_alive = keep_alive and b"close" not in _comma_list(value)
        elif lowered == b"content-length":
            declared = value
        elif lowered == b"transfer-encoding":
            raise LocalProtocolError("only bodies of a declared length are sent")
    if hosts != 1:
        raise LocalProtocolError("a request needs exactly one Host header")
    if (body or declared is not None) and declared != str(len(body)).encode():
        raise LocalProtocolError("Content-Length does not match the body")
    return b"%s %s HTTP/1.1\r\n%s\r\n" % (verb, target, lines), keep_alive


def _first_illegal(headers: list[tuple[bytes, bytes]]) -> str:
    """The message for the first header that cannot be written (the slow path)."""
    for name, value in headers:
        if _TOKEN_ONLY.fullmatch(name) is None:
            return f"illegal header name {name!r}"
        if _VALUE_ONLY.fullmatch(value) is None:
            return f"illegal header value {value!r}"
    return "illegal header"  # pragma: no cover - the regular expressions agree


def _comma_list(value: bytes) -> list[bytes]:
    return [item.strip().lower() for item in value.split(b",")]


class ResponseHead:
    """A final response's status line and headers (names in lower case, as h11 gives them)."""

    __slots__ = ("headers", "http_version", "reason", "status_code")

    def __init__(
        self,
        http_version: bytes,
        status_code: int,
        reason: bytes,
        headers: list[tuple[bytes, bytes]],
    ) -> None:
        self.http_version = http_version
        self.status_code = status_code
        self.reason = reason
        self.headers = headers

    def __repr__(self) -> str:
        return f"<ResponseHead {self.status_code} {self.reason!r}>"


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NEED_DATA: Final = _Marker("NEED_DATA")
"""More bytes must come (or the connection's end, ``receive_data(b"")``) first."""
END: Final = _Marker("END")
"""The response's body is complete."""
CLOSED: Final = _Marker("CLOSED")
"""The connection ended before any byte of a response: the server hung up."""

Event = ResponseHead | bytes | _Marker

# What the reader waits for.
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _TO_CLOSE, _DONE = range(8)


class ResponseReader:
    """The answers to the requests written on one connection, one after another.

    Feed it what the connection gives (``receive_data``, with ``b""`` at its end) and take
    events (``next_event``) until :data:`NEED_DATA`: first a :class:`ResponseHead`, then the
    body as ``bytes`` pieces, then :data:`END`. ``expect`` starts each exchange.
    """

    __slots__ = (
        "_buffer",
        "_closed",
        "_head_only",
        "_remaining",
        "_search_from",
        "_state",
        "keep_alive",
    )

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._closed = False
        self._state = _DONE
        self._head_only = False
        self._remaining = 0
        self._search_from = 0
        # Whether both sides allow another request on this connection.
        self.keep_alive = False

    def expect(self, *, head_only: bool = False, keep_alive: bool = True) -> None:
        """A request was written: read its response (``head_only`` for a HEAD request,
        whose response has no body whatever its headers say)."""
        self._state = _HEAD
        self._head_only = head_only
        self._search_from = 0
        self.keep_alive = keep_alive

    @property
    def reusable(self) -> bool:
        """Whether the connection may carry another request: the response was read to
        its end, both sides keep the connection, and the server sent nothing more."""
        return self._state == _DONE and self.keep_alive and not self._buffer and not self._closed

    def receive_data(self, data: bytes) -> None:
        if data:
            self._buffer += data
        else:
            self._closed = True

    def next_event(self) -> Event:
        """The next part of the response, :data:`NEED_DATA` if it is not all here yet.

        Raises:
            RemoteProtocolError: For anything that is not HTTP/1.1, and for a connection
                that ended before the response did.
        """
        state = self._state
        if state == _LENGTH:
            return self._length_data()
        if state == _HEAD:
            return self._head()
        if state == _TO_CLOSE:
            if self._buffer:
                return self._take(len(self._buffer))
            if self._closed:
                self._state = _DONE
                self.keep_alive = False
                return END
            return NEED_DATA
        if state == _DONE:
            return END
        return self._chunked()

    def _take(self, size: int) -> bytes:
        buffer = self._buffer
        data = bytes(buffer[:size])
        del buffer[:size]
        return data

    def _length_data(self) -> Event:
        remaining = self._remaining
        if remaining == 0:
            self._state = _DONE
            return END
        if self._buffer:
            data = self._take(remaining)
            self._remaining = remaining - len(data)
            return data
        if self._closed:
            raise RemoteProtocolError(
                "peer closed connection without sending complete message body"
                f" ({remaining} bytes short)"
            )
        return NEED_DATA

    def _incomplete(self) -> _Marker:
        """NEED_DATA, unless the connection ended or too much waits without an end."""
        if len(self._buffer) > MAX_INCOMPLETE:
            raise RemoteProtocolError("Receive buffer too long")
        if self._closed:
            raise RemoteProtocolError("peer unexpectedly closed connection")
        return NEED_DATA

    def _head(self) -> Event:
        while True:
            buffer = self._buffer
            if not buffer:
                if self._closed:
                    self._state = _DONE
                    self.keep_alive = False
                    return CLOSED
                return NEED_DATA
            if buffer[0] < 0x21:  # a space, a line break or a control: not a status line
                raise RemoteProtocolError("illegal status line")
            found = _BLANK_LINE.search(buffer, self._search_from)
            if found is None:
                self._search_from = max(0, len(buffer) - 2)
                return self._incomplete()
            self._search_from = 0
            end = found.end()
            head = bytes(buffer[:end]).replace(b"\r\n", b"\n")  # ends in two line feeds
            del buffer[:end]
            first = head.find(b"\n")
            status = _STATUS_LINE.fullmatch(head, 0, first)
            if status is None:
                raise RemoteProtocolError(f"illegal status line: {head[: min(first, 100)]!r}")
            version, code, reason = status.groups()
            status_code = int(code)
            headers = _header_fields(head[first + 1 : -1])
            if status_code >= 200:
                return self._framed(ResponseHead(version, status_code, reason or b"", headers))
            if status_code == 101 or status_code < 100:
                raise RemoteProtocolError(f"unexpected status {status_code}")
            # Another 1xx: an interim answer, skipped; the final one follows.

    def _framed(self, head: ResponseHead) -> ResponseHead:
        """Set how the body ends, and whether the connection may be kept, from ``head``."""
        chunked = False
        length: bytes | None = None
        keep_alive = self.keep_alive and head.http_version >= b"1.1"
        # Whether a header must be written as h11 gives it: one Content-Length of one
        # number, a Transfer-Encoding in lower case. Rare, so the list is rebuilt only then.
        rewrite = False
        for name, value in head.headers:
            if name == b"content-length":
                lengths = set(_comma_list(value))
                if len(lengths) != 1:
                    raise RemoteProtocolError("conflicting Content-Length headers")
                (number,) = lengths
                if _CONTENT_LENGTH.fullmatch(number) is None:
                    raise RemoteProtocolError("bad Content-Length")
                if length is not None and length != number:
                    raise RemoteProtocolError("conflicting Content-Length headers")
                rewrite = rewrite or length is not None or number != value
                length = number
            elif name == b"transfer-encoding":
                if chunked:
                    raise RemoteProtocolError("multiple Transfer-Encoding headers")
                lowered = value.lower()
                if lowered != b"chunked":
                    raise RemoteProtocolError("Only Transfer-Encoding: chunked is supported")
                rewrite = rewrite or lowered != value
                chunked = True
            elif name == b"connection" and b"close" in _comma_list(value):
                keep_alive = False
        if rewrite:
            head.headers = _as_h11_gives(head.headers, length)
        self.keep_alive = keep_alive
        if self._head_only or head.status_code in (204, 304):
            self._state = _DONE
        elif chunked:
            self._state = _CHUNK_SIZE
        elif length is not None:
            self._state = _LENGTH
            self._remaining = int(length)
        else:
            self._state = _TO_CLOSE
            self.keep_alive = False
        return head

    def _chunked(self) -> Event:
        buffer = self._buffer
        while True:
            state = self._state
            if state == _CHUNK_DATA:
                if not buffer:
                    break
                data = self._take(self._remaining)
                self._remaining -= len(data)
                if self._remaining == 0:
                    self._state = _CHUNK_END
                return data
            if state == _CHUNK_SIZE:
                end = buffer.find(b"\r\n")
                if end < 0:
                    return self._incomplete()
                line = bytes(buffer[: end + 2])
                size = _CHUNK_HEADER.fullmatch(line)
                if size is None:
                    raise RemoteProtocolError(f"illegal chunk header: {line[:100]!r}")
                del buffer[: end + 2]
                self._remaining = int(size.group(1), 16)
                self._state = _CHUNK_DATA if self._remaining else _TRAILER
            elif state == _CHUNK_END:
                if len(buffer) < 2:
                    if buffer and buffer[0] != 0x0D:
                        raise RemoteProtocolError("malformed chunk footer")
                    break
                if buffer[:2] != b"\r\n":
                    raise RemoteProtocolError("malformed chunk footer")
                del buffer[:2]
                self._state = _CHUNK_SIZE
            else:  # _TRAILER: header lines up to a blank line, checked and dropped
                if buffer[:1] == b"\n" or buffer[:2] == b"\r\n":
                    del buffer[: 1 if buffer[0] == 0x0A else 2]
                    self._state = _DONE
                    return END
                found = _BLANK_LINE.search(buffer)
                if found is None:
                    return self._incomplete()
                section = bytes(buffer[: found.end()]).replace(b"\r\n", b"\n")
                del buffer[: found.end()]
                _header_fields(section[:-1])
                self._state = _DONE
                return END
        if self._closed:
            raise RemoteProtocolError(
                "peer closed connection without sending complete message body"
                " (incomplete chunked read)"
            )
        return NEED_DATA


def _as_h11_gives(
    headers: list[tuple[bytes, bytes]], length: bytes | None
) -> list[tuple[bytes, bytes]]:
    """The headers with one Content-Length, of the one number they agree on, and the
    Transfer-Encoding in lower case."""
    kept: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        if name == b"content-length":
            if length is None:
                continue  # a repeat, already kept
            value, length = length, None
        elif name == b"transfer-encoding":
            value = value.lower()
        kept.append((name, value))
    return kept


def _header_fields(section: bytes) -> list[tuple[bytes, bytes]]:
    """A header section's lines (each ending in a line feed) as (name in lower case,
    value) pairs, folded lines joined first, as h11 joins them."""
    lines = section.split(b"\n")[:-1]
    if section[:1] in (b" ", b"\t"):
        raise RemoteProtocolError("continuation line at start of headers")
    if b"\n " in section or b"\n\t" in section:
        lines = _unfolded(lines)  # obsolete line folding: a line continues the one before
    fields: list[tuple[bytes, bytes]] = []
    for line in lines:
        field = _HEADER_LINE.fullmatch(line)
        if field is None:
            raise RemoteProtocolError(f"illegal header line: {line[:100]!r}")
        name, value = field.groups()
        fields.append((name.lower(), value))
    return fields


def _unfolded(lines: list[bytes]) -> list[bytes]:
    joined: list[bytes] = []
    for line in lines:
        stripped = line.lstrip(b" \t")
        if len(stripped) != len(line):
            joined[-1] += b" " + stripped
        else:
            joined.append(line)
    return joined
