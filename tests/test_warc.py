"""The WARC writer, checked with warcio's own reader and command-line tools.

Exchanges are built by hand, so no server or event loop is needed: what is under test is
the archive's layout (which records, in what order, linked how, holding which bytes) and
that warcio's checker accepts it. One point shapes several tests: ``warcio check`` (1.8.1)
exits 0 for a record cut short, reporting only "digest present but not checked" under
``-v``. So a file counts as checked here only when every record reports "digest pass".
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
from warcio.archiveiterator import ArchiveIterator  # type: ignore[import-untyped]

from trio_crawler._events import Exchange
from trio_crawler._version import __version__
from trio_crawler._warc import WarcWriter

WARCIO = Path(sys.executable).parent / "warcio"

PAGE_HTML = b"<html><a href='/b'>b</a></html>" * 40
PAGE = Exchange(
    url="http://site.test/a/page?x=1&y=2",
    request_headers=(
        ("Host", "site.test"),
        ("Accept", "*/*"),
        ("Accept-Encoding", "gzip, deflate"),
        ("User-Agent", f"trio-crawler/{__version__}"),
    ),
    http_version="HTTP/1.1",
    status=200,
    reason="OK",
    response_headers=(
        ("Content-Type", "text/html; charset=utf-8"),
        ("Transfer-Encoding", "chunked"),
        ("Content-Encoding", "gzip"),
        ("Set-Cookie", "a=1"),
        ("set-cookie", "b=2"),
    ),
    body=gzip.compress(PAGE_HTML, mtime=0),
)
# The Exchange constants here share a shape by design: one sample exchange per kind.
REDIRECT = Exchange(
    url="http://site.test/old",
    request_headers=(("Host", "site.test"),),
    http_version="HTTP/1.0",
    status=301,
    reason="Moved Permanently",
    response_headers=(("Location", "/a/page"), ("Content-Length", "0")),
)
NOT_FOUND = Exchange(
    url="http://site.test/missing",
    request_headers=(("Host", "site.test"),),
    http_version="HTTP/1.1",
    status=404,
    reason="Not Found",
    response_headers=(("Content-Type", "text/plain"), ("Content-Length", "9")),
    body=b"not found",
)
REFUSED = Exchange(
    url="http://dead.test/",
    request_headers=(("Host", "dead.test"),),
    error="ConnectError: [Errno 111] Connection refused",
)
ROBOTS = Exchange(
    url="http://site.test/robots.txt",
    request_headers=(("Host", "site.test"),),
    http_version="HTTP/1.1",
    status=200,
    reason="OK",
    response_headers=(("Content-Type", "text/plain"),),
    body=b"User-agent: *\nDisallow: /private\n",
    robots=True,
)
# The connection broke mid-body: a response, cut short, and the error that cut it.
BROKEN = Exchange(
    url="http://site.test/big",
    request_headers=(("Host", "site.test"),),
    http_version="HTTP/1.1",
    status=200,
    reason="OK",
    response_headers=(("Content-Type", "text/plain"), ("Content-Length", "100000")),
    body=b"x" * 5000,
    truncated=True,
    error="RemoteProtocolError: peer closed connection without sending complete message body",
)
CRAWL = [ROBOTS, PAGE, REDIRECT, NOT_FOUND, REFUSED, BROKEN]
# The record types each exchange of CRAWL writes, after the warcinfo record.
CRAWL_TYPES = [
    ["request", "response"],
    ["request", "response"],
    ["request", "response"],
    ["request", "response"],
    ["request", "metadata"],
    ["request", "response", "metadata"],
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Record:
    """One record as warcio reads it back, with its block as raw bytes."""

    type: str
    headers: dict[str, str]
    block: bytes


def read_records(data: bytes) -> list[Record]:
    """Every record warcio yields from ``data``, stopping quietly if it raises at the end."""
    records = []
    try:
        for record in ArchiveIterator(io.BytesIO(data), no_record_parse=True):
            records.append(
                Record(
                    type=record.rec_type,
                    headers=dict(record.rec_headers.headers),
                    block=record.raw_stream.read(),
                )
            )
    except Exception:  # a cut-off file may end in any of zlib's or warcio's errors
        pass
    return records


def write_warc(path: Path, exchanges: list[Exchange]) -> list[Record]:
    with WarcWriter.open(str(path)) as writer:
        for exchange in exchanges:
            writer.write_exchange(exchange)
    return read_records(path.read_bytes())


def warcio_check(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WARCIO), "check", "-v", str(path)], capture_output=True, text=True, check=False
    )


def assert_every_digest_passes(path: Path, record_count: int) -> None:
    """``warcio check`` exits 0 and verified a digest of every one of the records."""
    result = warcio_check(path)
    assert result.returncode == 0, result.stdout + result.stderr
    verdicts = [line.strip() for line in result.stdout.splitlines() if line.startswith("    ")]
    assert verdicts == ["digest pass"] * record_count, result.stdout


def test_the_file_starts_with_a_warcinfo_record(tmp_path: Path) -> None:
    [warcinfo] = write_warc(tmp_path / "crawl.warc", [])
    assert warcinfo.type == "warcinfo"
    assert warcinfo.headers["WARC-Filename"] == "crawl.warc"
    assert warcinfo.headers["Content-Type"] == "application/warc-fields"
    fields = dict(line.split(": ", 1) for line in warcinfo.block.decode().splitlines())
    assert fields == {
        "software": f"trio-crawler/{__version__}",
        "format": "WARC File Format 1.1",
        "conformsTo": (
            "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"
        ),
    }
    assert (tmp_path / "crawl.warc").read_bytes().startswith(b"WARC/1.1\r\n")


def test_a_response_is_archived_as_it_came_off_the_wire(tmp_path: Path) -> None:
    _, request, response = write_warc(tmp_path / "crawl.warc", [PAGE])

    assert request.type == "request"
    assert request.headers["WARC-Target-URI"] == PAGE.url
    assert request.headers["Content-Type"] == "application/http; msgtype=request"
    assert request.block == (
        b"GET /a/page?x=1&y=2 HTTP/1.1\r\n"
        b"Host: site.test\r\n"
        b"Accept: */*\r\n"
        b"Accept-Encoding: gzip, deflate\r\n"
        b"User-Agent: trio-crawler/" + __version__.encode() + b"\r\n"
        b"\r\n"
    )

    assert response.type == "response"
    assert response.headers["WARC-Target-URI"] == PAGE.url
    assert response.headers["Content-Type"] == "application/http; msgtype=response"
    assert response.headers["WARC-Concurrent-To"] == request.headers["WARC-Record-ID"]
    assert response.headers["WARC-Date"] == request.headers["WARC-Date"]
    assert "WARC-Truncated" not in response.headers
    # Transfer-Encoding is gone (the body is stored de-chunked); the rest is verbatim, in
    # order, repeated headers and their spelling included; the body is still gzip.
    assert response.block == (
        b"HTTP/1.1 200 OK\r\n"
        b"Content-Type: text/html; charset=utf-8\r\n"
        b"Content-Encoding: gzip\r\n"
        b"Set-Cookie: a=1\r\n"
        b"set-cookie: b=2\r\n"
        b"\r\n" + PAGE.body
    )


def test_a_reader_undoes_the_stored_content_encoding(tmp_path: Path) -> None:
    path = tmp_path / "crawl.warc"
    write_warc(path, [PAGE])
    with path.open("rb") as stream:
        # warcio reads a record's body only while the iterator is on it.
        bodies = [r.content_stream().read() for r in ArchiveIterator(stream)]
    # content_stream() would try to de-chunk too, had Transfer-Encoding been kept.
    assert bodies == [mock.ANY, b"", PAGE_HTML]


def test_a_body_that_looks_chunked_reads_back_as_it_came(tmp_path: Path) -> None:
    # Had the Transfer-Encoding header been kept, warcio would "de-chunk" this text to
    # b"0123456789" (as of 1.8.1, tried by hand).
    body = b"a\r\n0123456789\r\n0\r\n\r\nis this page's literal text"
    path = tmp_path / "crawl.warc"
    write_warc(
        path, [dataclasses.replace(PAGE, response_headers=(PAGE.response_headers[1],), body=body)]
    )
    with path.open("rb") as stream:
        bodies = [r.content_stream().read() for r in ArchiveIterator(stream)]
    assert bodies == [mock.ANY, b"", body]


def test_every_kind_of_attempt_gets_its_records(tmp_path: Path) -> None:
    warcinfo, *records = write_warc(tmp_path / "crawl.warc", CRAWL)

    assert warcinfo.type == "warcinfo"
    expected_types = [kind for kinds in CRAWL_TYPES for kind in kinds]
    assert [record.type for record in records] == expected_types
    expected_uris = [
        exchange.url for exchange, kinds in zip(CRAWL, CRAWL_TYPES, strict=True) for _ in kinds
    ]
    assert [record.headers["WARC-Target-URI"] for record in records] == expected_uris
    # Every record of an exchange points at its request, which opens the group.
    request_id = ""
    for record in records:
        if record.type == "request":
            request_id = record.headers["WARC-Record-ID"]
            assert "WARC-Concurrent-To" not in record.headers
        else:
            assert record.headers["WARC-Concurrent-To"] == request_id


@pytest.mark.parametrize(
    ("exchange", "status_line"),
    [
        (ROBOTS, b"HTTP/1.1 200 OK\r\n"),
        (REDIRECT, b"HTTP/1.0 301 Moved Permanently\r\n"),
        (NOT_FOUND, b"HTTP/1.1 404 Not Found\r\n"),
        # RFC 9112: the space before an empty reason phrase is still required.
        (dataclasses.replace(NOT_FOUND, reason=""), b"HTTP/1.1 404 \r\n"),
    ],
    ids=["robots", "redirect", "not-found", "no-reason"],
)
def test_status_lines(tmp_path: Path, exchange: Exchange, status_line: bytes) -> None:
    _, request, response = write_warc(tmp_path / "crawl.warc", [exchange])
    assert request.block.endswith(
        b" " + exchange.http_version.encode() + b"\r\nHost: site.test\r\n\r\n"
    )
    assert response.block.startswith(status_line)
    assert response.block.endswith(b"\r\n\r\n" + exchange.body)


@pytest.mark.parametrize(
    ("url", "request_line"),
    [
        ("http://h.test", b"GET / HTTP/1.1\r\n"),
        ("http://h.test/", b"GET / HTTP/1.1\r\n"),
        ("https://h.test:8443/a/b", b"GET /a/b HTTP/1.1\r\n"),
        ("http://h.test/a%20b?q=%C3%A9&r", b"GET /a%20b?q=%C3%A9&r HTTP/1.1\r\n"),
        ("http://h.test?only=query", b"GET /?only=query HTTP/1.1\r\n"),
    ],
)
def test_request_line_is_origin_form(tmp_path: Path, url: str, request_line: bytes) -> None:
    # No response came, so no version is known: HTTP/1.1 is assumed, as httpx sends.
    _, request, _ = write_warc(tmp_path / "crawl.warc", [Exchange(url=url, error="ConnectError")])
    assert request.headers["WARC-Target-URI"] == url
    assert request.block == request_line + b"\r\n"


def test_a_failed_attempt_is_a_request_and_a_metadata_record(tmp_path: Path) -> None:
    _, request, metadata = write_warc(tmp_path / "crawl.warc", [REFUSED])
    assert request.type == "request"
    assert request.block == b"GET / HTTP/1.1\r\nHost: dead.test\r\n\r\n"
    assert metadata.type == "metadata"
    assert metadata.headers["WARC-Target-URI"] == REFUSED.url
    assert metadata.headers["Content-Type"] == "application/json"
    assert metadata.headers["WARC-Concurrent-To"] == request.headers["WARC-Record-ID"]
    assert json.loads(metadata.block) == {"error": REFUSED.error}


def test_a_truncated_response_is_marked_and_kept(tmp_path: Path) -> None:
    _, _, response, metadata = write_warc(tmp_path / "crawl.warc", [BROKEN])
    assert response.headers["WARC-Truncated"] == "length"
    # The header still promises 100000 bytes; the record holds the 5000 that came.
    assert b"\r\nContent-Length: 100000\r\n" in response.block
    assert response.block.endswith(b"\r\n\r\n" + BROKEN.body)
    assert json.loads(metadata.block) == {"error": BROKEN.error}


def test_a_truncated_response_without_an_error_has_no_metadata(tmp_path: Path) -> None:
    cut_at_max_size = dataclasses.replace(BROKEN, error=None)
    _, _, response = write_warc(tmp_path / "crawl.warc", [cut_at_max_size])
    assert response.headers["WARC-Truncated"] == "length"


def test_a_non_ascii_header_value_is_percent_encoded_by_warcio(tmp_path: Path) -> None:
    # warcio writes HTTP headers as ASCII, percent-encoding any other value (RFC 8187),
    # so such a header is not stored byte for byte; the digests still match what is stored.
    path = tmp_path / "crawl.warc"
    disposition = ("Content-Disposition", 'attachment; filename="café.txt"')
    exchange = dataclasses.replace(NOT_FOUND, response_headers=(disposition,))
    _, _, response = write_warc(path, [exchange])
    assert b"\r\nContent-Disposition: attachment; filename*=UTF-8''caf%C3%A9.txt\r\n" in (
        response.block
    )
    assert_every_digest_passes(path, 3)


@pytest.mark.parametrize("suffix", [".warc", ".warc.gz", ".WARC.GZ"])
def test_gzip_follows_the_file_name(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"crawl{suffix}"
    records = write_warc(path, CRAWL)
    data = path.read_bytes()
    with path.open("rb") as stream:
        iterator = ArchiveIterator(stream)
        offsets = [iterator.get_record_offset() for _ in iterator]
    assert len(offsets) == len(records) == 1 + sum(map(len, CRAWL_TYPES))
    if suffix == ".warc":
        assert all(data[offset:].startswith(b"WARC/1.1\r\n") for offset in offsets)
    else:
        # One gzip member per record, so a reader can seek straight to any of them.
        ends = [*offsets[1:], len(data)]
        members = [data[start:end] for start, end in zip(offsets, ends, strict=True)]
        assert all(gzip.decompress(member).startswith(b"WARC/1.1\r\n") for member in members)
    assert read_records(data) == records


@pytest.mark.parametrize("suffix", [".warc", ".warc.gz"])
def test_warcio_check_and_index_accept_the_file(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"crawl{suffix}"
    records = write_warc(path, CRAWL)
    assert_every_digest_passes(path, len(records))

    result = subprocess.run(
        [str(WARCIO), "index", "-f", "warc-type,warc-target-uri,http:status", str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    index = [json.loads(line) for line in result.stdout.splitlines()]
    statuses = iter(str(exchange.status) for exchange in CRAWL if exchange.status is not None)
    expected: list[dict[str, str]] = [{"warc-type": "warcinfo"}]
    for exchange, kinds in zip(CRAWL, CRAWL_TYPES, strict=True):
        for kind in kinds:
            entry = {"warc-type": kind, "warc-target-uri": exchange.url}
            if kind == "response":
                entry["http:status"] = next(statuses)
            expected.append(entry)
    assert index == expected


@pytest.mark.parametrize(
    ("corrupt", "problems"),
    [
        # A byte of the body: both the payload and the block digest catch it.
        (lambda data: data.replace(b"not found", b"not f0und"), ["block", "payload"]),
        # A byte of the HTTP headers: only the block digest covers them.
        (lambda data: data.replace(b"text/plain", b"text/plaim"), ["block"]),
    ],
    ids=["body", "http-header"],
)
def test_warcio_check_really_checks_the_digests(
    tmp_path: Path, corrupt: Callable[[bytes], bytes], problems: list[str]
) -> None:
    path = tmp_path / "crawl.warc"
    write_warc(path, [NOT_FOUND])
    path.write_bytes(corrupt(path.read_bytes()))

    result = warcio_check(path)
    assert result.returncode == 1, result.stdout + result.stderr
    failures = [line.strip() for line in result.stdout.splitlines() if "digest failed" in line]
    assert [failure.split()[0] for failure in failures] == problems, result.stdout


@pytest.mark.parametrize("suffix", [".warc", ".warc.gz"])
def test_an_interrupted_crawl_leaves_a_whole_file(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"crawl{suffix}"
    writer = WarcWriter.open(str(path))
    try:
        for exchange in CRAWL:
            writer.write_exchange(exchange)
        # Not closed: this is what a killed process leaves behind.
        snapshot = tmp_path / f"snapshot{suffix}"
        snapshot.write_bytes(path.read_bytes())
    finally:
        writer.close()

    records = read_records(snapshot.read_bytes())
    assert records == read_records(path.read_bytes())
    assert len(records) == 1 + sum(map(len, CRAWL_TYPES))
    assert_every_digest_passes(snapshot, len(records))


@pytest.mark.parametrize("suffix", [".warc", ".warc.gz"])
def test_a_file_cut_mid_record_still_yields_every_earlier_record(
    tmp_path: Path, suffix: str
) -> None:
    path = tmp_path / f"crawl{suffix}"
    whole = write_warc(path, [PAGE, NOT_FOUND])
    data = path.read_bytes()
    with path.open("rb") as stream:
        iterator = ArchiveIterator(stream)
        last_offset = [iterator.get_record_offset() for _ in iterator][-1]
    cut = last_offset + (len(data) - last_offset) // 2

    survivors = read_records(data[:cut])
    assert survivors[: len(whole) - 1] == whole[:-1]
    # warcio 1.8.1 may yield the broken record too, without raising: short on a plain
    # file, headerless on a gzip one. Either way it is not the record that was written.
    assert len(survivors) <= len(whole)
    assert whole[-1] not in survivors


def test_open_raises_oserror_for_an_unwritable_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        WarcWriter.open(str(tmp_path / "no-such-dir" / "crawl.warc.gz"))
    with pytest.raises(IsADirectoryError):
        WarcWriter.open(str(tmp_path))


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_open_raises_oserror_when_the_warcinfo_cannot_be_written() -> None:
    with pytest.raises(OSError, match="No space left on device"):
        WarcWriter.open("/dev/full")


class FillingDisk(io.BytesIO):
    """A file that fails with ENOSPC once ``full`` is set, like a disk filling up."""

    full = False

    def write(self, data: object) -> int:
        if self.full:
            raise OSError(28, "No space left on device")
        assert isinstance(data, bytes | bytearray | memoryview)
        return super().write(data)


def test_a_write_error_is_logged_once_and_later_exchanges_are_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    disk = FillingDisk()
    writer = WarcWriter(disk, name="crawl.warc", gzip=False)
    writer.write_exchange(PAGE)
    disk.full = True
    writer.write_exchange(NOT_FOUND)
    writer.write_exchange(REFUSED)

    assert writer.failed
    assert [record.message for record in caplog.records] == [
        "cannot write to crawl.warc ([Errno 28] No space left on device); "
        "further exchanges are not archived"
    ]
    assert [record.levelno for record in caplog.records] == [logging.ERROR]
    assert [r.type for r in read_records(disk.getvalue())] == ["warcinfo", "request", "response"]


def test_closing_closes_the_file_and_may_be_repeated(tmp_path: Path) -> None:
    with (
        (tmp_path / "crawl.warc").open("wb") as stream,
        WarcWriter(stream, name="crawl.warc", gzip=False) as writer,
    ):
        pass
    assert stream.closed
    writer.close()
