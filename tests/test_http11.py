"""The crawler's HTTP/1.1 reader and writer (trio_crawler/_http11.py) against h11.

h11 is the reference: the module keeps its rules, at a fraction of its CPU. So the
properties here build responses of every kind, well formed and not (status lines, header
lines and their endings, folded lines, every framing and its faults, interim answers,
bytes after the end, a close anywhere), cut them into random pieces, and feed the same
pieces to both: each must give the same head, the same body bytes, the same end or error,
and the same answer to "may the connection carry another request?". Requests are checked
the same way: the same bytes on the wire, or both refuse.

The cases after the properties pin what a property would find only by chance: the 16 KiB
limit on a head that never ends, TLS bytes on a plain connection, a 101 nobody asked for.
The transport over real sockets is tests/test_transport.py's, and the crawl against
misbehaving servers tests/test_hostile.py's.
"""

from __future__ import annotations

import os
from typing import Any

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trio_crawler._http11 import (
    CLOSED,
    END,
    MAX_INCOMPLETE,
    NEED_DATA,
    LocalProtocolError,
    RemoteProtocolError,
    ResponseHead,
    ResponseReader,
    request_head,
)

EXAMPLES = int(os.environ.get("TRIO_CRAWLER_HTTP11_EXAMPLES", "400"))
PROPERTY = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

Outcome = list[Any]


def h11_reads(method: str, pieces: list[bytes]) -> tuple[Outcome, bool | None]:
    """What h11 makes of ``pieces`` (``b""`` for the close), and whether it would keep
    the connection (None when the response did not end)."""
    connection = h11.Connection(h11.CLIENT)
    connection.send(h11.Request(method=method, target="/", headers=[("Host", "a")]))
    connection.send(h11.EndOfMessage())
    outcome: Outcome = []
    try:
        for piece in pieces:
            connection.receive_data(piece)
            while (event := connection.next_event()) is not h11.NEED_DATA:
                if isinstance(event, h11.InformationalResponse):
                    continue
                if isinstance(event, h11.Response):
                    outcome.append(_head(event.http_version, event.status_code, event.reason))
                    outcome.append(list(event.headers))
                elif isinstance(event, h11.Data):
                    _add_data(outcome, bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    outcome.append("end")
                    kept = (
                        connection.our_state is h11.DONE
                        and connection.their_state is h11.DONE
                        and connection.trailing_data == (b"", False)
                    )
                    return outcome, kept
                elif isinstance(event, h11.ConnectionClosed):
                    outcome.append("closed")
                    return outcome, None
                else:  # PAUSED
                    outcome.append("error")
                    return outcome, None
    except h11.RemoteProtocolError:
        outcome.append("error")
    return outcome, None


def ours_reads(method: str, pieces: list[bytes]) -> tuple[Outcome, bool | None]:
    """The same, read by :class:`ResponseReader`."""
    reader = ResponseReader()
    reader.expect(head_only=method == "HEAD")
    outcome: Outcome = []
    try:
        for piece in pieces:
            reader.receive_data(piece)
            while (event := reader.next_event()) is not NEED_DATA:
                if isinstance(event, ResponseHead):
                    outcome.append(_head(event.http_version, event.status_code, event.reason))
                    outcome.append(event.headers)
                elif isinstance(event, bytes):
                    _add_data(outcome, event)
                elif event is END:
                    outcome.append("end")
                    return outcome, reader.reusable
                else:
                    # The server hung up before answering. h11 raises there; the reader
                    # says so apart, and the transport raises RemoteProtocolError for it.
                    assert event is CLOSED
                    outcome.append("error")
                    return outcome, None
    except RemoteProtocolError:
        outcome.append("error")
    return outcome, None


def _head(version: bytes, status: int, reason: bytes) -> tuple[bytes, int, bytes]:
    return (bytes(version), status, bytes(reason))


def _add_data(outcome: Outcome, data: bytes) -> None:
    """Body pieces come at different cuts from the two readers: compare them joined."""
    if outcome and isinstance(outcome[-1], bytes):
        outcome[-1] += data
    elif data:
        outcome.append(data)


# -- building responses --------------------------------------------------------------------

_NAMES = [b"Server", b"Content-Type", b"X-A", b"Set-Cookie", b"ETag", b"Keep-Alive"]
_VALUES = [b"nginx", b"text/html; charset=utf-8", b"", b"a  b", b"\xff\xfe", b"\x01"]
_BAD_HEADER_LINES = [
    b"No colon",
    b"Bad Name: x",
    b": empty name",
    b"X:\x00",
    b"X-\xff: y",
    b"X: a\rb",
    b"X: x\x7f\x0b",
]
_BAD_STATUS_LINES = [
    b"HTTP/2.0x 200 OK",
    b"HTTP/1.x 200 OK",
    b"HTTP/11 200 OK",
    b"HTTP/1.1 20 OK",
    b"HTTP/1.1 099 Low",
    b"HTTP/1.1 101 Switching",
    b"HTTP/1.1 200 \x01",
    b"HTTP/1.1  200 OK",
    b"http/1.1 200 OK",
    b"ICY 200 OK",
]
# Framing headers that are wrong, or right in an unusual way.
_ODD_FRAMING = [
    b"Content-Length: 5, 5",
    b"Content-Length: 5,6",
    b"Content-Length: -1",
    b"Content-Length: 1e3",
    b"Content-Length: " + b"9" * 21,
    b"Transfer-Encoding: Chunked",
    b"Transfer-Encoding: gzip",
    b"Transfer-Encoding: gzip, chunked",
]
# What goes wrong, if anything: mostly nothing, else one thing at a time.
_FAULTS = [None] * 6 + ["status", "header", "framing", "chunk", "cut", "extra", "fold"]


@st.composite
def chunked(draw: st.DrawFn, body: bytes, fault: bool) -> bytes:
    """``body`` in chunks, with extensions, odd sizes and trailers; with ``fault``, one
    thing in it wrong."""
    where = draw(st.sampled_from(["size", "footer", "trailer", "last"])) if fault else None
    out = bytearray()
    rest = body
    while rest:
        size = draw(st.integers(1, len(rest)))
        piece, rest = rest[:size], rest[size:]
        digits = draw(st.sampled_from(["%x", "%X", "%04x"])) % len(piece)
        extension = draw(st.sampled_from([b"", b"", b";name=value", b" ", b";x\t"]))
        footer = b"\r\n"
        if where == "footer":
            footer, where = draw(st.sampled_from([b"\r\r", b"xx", b"\n\n"])), None
        out += digits.encode() + extension + b"\r\n" + piece + footer
    out += draw(st.sampled_from([b"0\r\n", b"000\r\n", b"0;end\r\n"]))
    out += draw(st.sampled_from([b"\r\n", b"\n", b"X-Trailer: 1\r\n\r\n", b"A: 1\nB: 2\n\n"]))
    if where == "size":
        out = b"zz\r\n" + out
    elif where == "trailer":
        out = out[: out.rindex(b"0")] + b"0\r\nbad trailer\r\n\r\n"
    elif where == "last":
        out = out[: out.rindex(b"0")] + b"0\r\n"  # no blank line after the last chunk
    return bytes(out)


@st.composite
def responses(draw: st.DrawFn) -> tuple[str, list[bytes]]:
    """A method, and a response to it (or bytes that are not one) cut into pieces, ending
    with the connection's close or not."""
    fault = draw(st.sampled_from(_FAULTS))
    # A fault in the chunks needs a body, so a chunked one.
    method = "GET" if fault == "chunk" else draw(st.sampled_from(["GET", "GET", "HEAD"]))
    wire = bytearray()
    for _ in range(draw(st.integers(0, 2))):
        wire += draw(
            st.sampled_from([b"HTTP/1.1 100 Continue\r\n\r\n", b"HTTP/1.1 103 \r\nA: b\n\n"])
        )
    version = draw(st.sampled_from([b"1.1", b"1.1", b"1.0"]))
    status = draw(st.sampled_from([b"200", b"200", b"204", b"304", b"404", b"999"]))
    if fault == "chunk":
        status = b"200"
    reason = draw(st.sampled_from([b" OK", b"", b" ", b" Not Found", b" a\tb", b" \xe9"]))
    lines = [b"HTTP/" + version + b" " + status + reason]
    if fault == "status":
        lines[0] = draw(st.sampled_from(_BAD_STATUS_LINES))
    for _ in range(draw(st.integers(0, 4))):
        space = draw(st.sampled_from([b" ", b"", b"\t", b"  "]))
        value = draw(st.sampled_from(_VALUES)) + draw(st.sampled_from([b"", b" ", b"\t"]))
        lines.append(draw(st.sampled_from(_NAMES)) + b":" + space + value)
    body = draw(st.binary(max_size=40))
    framing = draw(st.sampled_from(["length", "length", "chunked", "close"]))
    if fault == "chunk":
        framing = "chunked"
    if framing == "length":
        length = len(body) + draw(st.sampled_from([0, 0, 0, -1, 1]))
        name = draw(st.sampled_from([b"Content-Length", b"content-length"]))
        lines.append(name + b": " + str(max(0, length)).encode())
        if draw(st.integers(0, 5)) == 0:
            lines.append(lines[-1])  # the same length twice
    elif framing == "chunked":
        lines.append(b"Transfer-Encoding: " + draw(st.sampled_from([b"chunked", b"CHUNKED"])))
        if draw(st.booleans()):
            lines.append(b"Content-Length: 3")  # which chunked overrides
    connection = draw(st.sampled_from([None, None, b"close", b"keep-alive", b"Upgrade, Close"]))
    if connection is not None:
        lines.append(b"Connection: " + connection)
    if fault == "header":
        lines.insert(draw(st.integers(1, len(lines))), draw(st.sampled_from(_BAD_HEADER_LINES)))
    elif fault == "framing":
        lines.insert(draw(st.integers(1, len(lines))), draw(st.sampled_from(_ODD_FRAMING)))
    elif fault == "fold":
        lines.insert(draw(st.integers(1, len(lines))), draw(st.sampled_from([b" more", b"\tx y"])))
    ending = draw(st.sampled_from([b"\r\n", b"\n"]))
    wire += b"".join(line + draw(st.sampled_from([ending, b"\r\n"])) for line in lines)
    wire += ending
    wire += draw(chunked(body, fault == "chunk")) if framing == "chunked" else body
    if fault == "extra":
        wire += draw(st.sampled_from([b"HTTP/1.1 200 OK\r\n", b"\r\n", b"x"]))
    elif fault == "cut":
        wire = wire[: draw(st.integers(0, len(wire)))]
    cuts = sorted(draw(st.lists(st.integers(0, len(wire)), max_size=6)))
    pieces = [bytes(wire[a:b]) for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    pieces = [piece for piece in pieces if piece]
    if framing == "close" or draw(st.booleans()):
        pieces.append(b"")  # the server closes
    return method, pieces


@PROPERTY
@given(responses())
def test_reads_every_response_as_h11_does(case: tuple[str, list[bytes]]) -> None:
    method, pieces = case
    assert ours_reads(method, pieces) == h11_reads(method, pieces)


@PROPERTY
@given(
    method=st.sampled_from(["GET", "GET", "HEAD"]),
    wire=st.binary(max_size=80),
    close=st.booleans(),
)
def test_reads_any_bytes_as_h11_does(method: str, wire: bytes, close: bool) -> None:
    pieces = [wire[:7], wire[7:]] + ([b""] if close else [])
    pieces = [piece for piece in pieces[:-1] if piece] + pieces[-1:]
    assert ours_reads(method, pieces) == h11_reads(method, pieces)


# -- writing requests ------------------------------------------------------------------------


def h11_writes(method: str, target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes | None:
    connection = h11.Connection(h11.CLIENT)
    try:
        return connection.send(h11.Request(method=method, target=target, headers=headers))
    except h11.LocalProtocolError:
        return None


def ours_writes(method: str, target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes | None:
    try:
        return request_head(method, target, headers)[0]
    except LocalProtocolError:
        return None


@PROPERTY
@given(
    method=st.sampled_from(["GET", "HEAD", "G T", "GET\r\n", "PRI"]),
    target=st.sampled_from([b"/", b"/a?b=c", b"/a b", b"/\x7f", b"/\r\nX: y", b"", b"/\xff"]),
    headers=st.lists(
        st.tuples(
            st.sampled_from([b"Host", b"host", b"User-Agent", b"Accept", b"X Y", b"X\r\n", b""]),
            st.sampled_from([b"a", b"", b"a b", b" a", b"a ", b"a\r\nX: y", b"a\x00", b"\xff"]),
        ),
        max_size=5,
    ),
)
def test_writes_requests_as_h11_does(
    method: str, target: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    assert ours_writes(method, target, headers) == h11_writes(method, target, headers)


def test_a_request_says_whether_the_connection_may_be_kept() -> None:
    host = [(b"Host", b"a")]
    assert request_head("GET", b"/", host)[1]
    assert not request_head("GET", b"/", [*host, (b"Connection", b"Close")])[1]


def test_a_body_goes_with_its_declared_length_only() -> None:
    host = [(b"Host", b"a")]
    head, _ = request_head("POST", b"/", [*host, (b"Content-Length", b"2")], b"hi")
    assert head.endswith(b"Content-Length: 2\r\n\r\n")
    for headers, body in [
        (host, b"hi"),
        ([*host, (b"Content-Length", b"3")], b"hi"),
        ([*host, (b"Transfer-Encoding", b"chunked")], b"hi"),
    ]:
        with pytest.raises(LocalProtocolError):
            request_head("POST", b"/", headers, body)


# -- what a property finds only by chance ----------------------------------------------------


def read_all(pieces: list[bytes], method: str = "GET") -> Outcome:
    return ours_reads(method, pieces)[0]


def test_a_head_that_never_ends_is_refused_past_16_kib() -> None:
    start = b"HTTP/1.1 200 OK\r\n"
    filler = b"X-Filler: " + b"a" * 1000 + b"\r\n"
    reader = ResponseReader()
    reader.expect()
    reader.receive_data(start)
    while len(start) <= MAX_INCOMPLETE:
        assert reader.next_event() is NEED_DATA
        reader.receive_data(filler)
        start += filler
    with pytest.raises(RemoteProtocolError, match="too long"):
        reader.next_event()


def test_tls_bytes_on_a_plain_connection_are_refused_at_once() -> None:
    # A TLS alert, as a server speaking only TLS answers a plain request: no line end,
    # so without the first byte's check the reader would wait for more until a timeout.
    assert read_all([b"\x15\x03\x03\x00\x02\x02\x46"]) == ["error"]


def test_a_switch_of_protocols_nobody_asked_for_is_refused() -> None:
    assert read_all([b"HTTP/1.1 101 Switching\r\nUpgrade: h2c\r\n\r\n"]) == ["error"]


def test_interim_answers_are_skipped() -> None:
    outcome = read_all(
        [b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi"]
    )
    assert outcome == [(b"1.1", 200, b"OK"), [(b"content-length", b"2")], b"hi", "end"]


def test_an_answer_to_head_has_no_body_whatever_its_length() -> None:
    # RFC 9112 section 6.3: an answer to HEAD ends with its head. Its Content-Length is
    # the size a GET would get (RFC 9110 section 8.6); read as a body's, it would swallow
    # the next answer on a kept connection.
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"
    assert read_all([answer], method="HEAD") == [
        (b"1.1", 200, b"OK"),
        [(b"content-length", b"5")],
        "end",
    ]
    assert ours_reads("HEAD", [answer])[1] is True
    assert read_all([answer + b"hello"], method="GET")[-2:] == [b"hello", "end"]


def test_a_body_to_the_close_ends_the_connection() -> None:
    assert ours_reads("GET", [b"HTTP/1.1 200 OK\r\n\r\nabc", b""]) == (
        [(b"1.1", 200, b"OK"), [], b"abc", "end"],
        False,
    )


def test_a_hang_up_before_any_byte_is_told_apart() -> None:
    reader = ResponseReader()
    reader.expect()
    reader.receive_data(b"")
    assert reader.next_event() is CLOSED
    assert not reader.reusable


def test_the_connection_is_kept_only_when_both_sides_allow_it() -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
    assert ours_reads("GET", [answer]) == (
        [(b"1.1", 200, b"OK"), [(b"content-length", b"0")], "end"],
        True,
    )
    reader = ResponseReader()
    reader.expect(keep_alive=False)  # the request said Connection: close
    reader.receive_data(answer)
    assert isinstance(reader.next_event(), ResponseHead)
    assert reader.next_event() is END
    assert not reader.reusable
    # The next exchange on a kept connection starts clean.
    reader = ResponseReader()
    for _ in range(3):
        reader.expect()
        reader.receive_data(answer)
        assert isinstance(reader.next_event(), ResponseHead)
        assert reader.next_event() is END
        assert reader.reusable
