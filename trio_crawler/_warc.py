"""WARC output: every HTTP attempt of the crawl, archived as it happens.

Theory of operation
-------------------
A WARC file (ISO 28500, here version 1.1) is a sequence of self-framing records, each a block
of ``WARC/1.1`` headers followed by exactly ``Content-Length`` bytes. :class:`WarcWriter`
writes one ``warcinfo`` record when it opens the file, then, for each
:class:`~trio_crawler._events.Exchange` an engine hands it:

- a ``request`` record: the request head, rebuilt from the headers that were sent;
- a ``response`` record when a response came: its status line, headers and the body as it
  came off the wire, linked to the request by ``WARC-Concurrent-To``;
- a ``metadata`` record when the attempt ended in an error, holding ``{"error": ...}`` as
  JSON and linked to the request the same way. WARC has no record type for "no response
  came"; a request with no response beside it, plus a machine-readable reason, is how the
  archive says the fetch was tried and what stopped it. When a response did come and the
  attempt failed later (the connection broke mid-body), it sits beside the response and
  says why that response is cut short.

Redirects, HTTP errors, retries and robots.txt fetches are all ordinary attempts, so each
gets its records; the archive is the crawl as the wire saw it, not just its pages.

warcio builds the records and computes ``WARC-Block-Digest`` and ``WARC-Payload-Digest``
(SHA-1), which ``warcio check`` verifies. A ``.gz`` file gets one gzip member per record,
the layout WARC readers expect so they can seek to any record.

Like the JSON Lines writer, this one is called synchronously from the event loop, and each
exchange's records are written and flushed before control returns. Every record is framed
by its own length and flushed whole, so a crawl that is killed leaves a file whose records
are all readable up to the last one that was completely written; no footer or index needs
finishing. Flushing hands the bytes to the operating system, which keeps them when the
process is killed; only an OS crash or power cut could lose the last records, and an
``fsync`` per exchange (a disk round trip per page) is too dear to guard against that.

The write is blocking for the same reason as in ``_output.py``: an exchange is a page or
two of bytes to a local file, cheaper to write than to hand to a thread, and it is never
left half-done across a checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import ExitStack
from io import BytesIO
from typing import TYPE_CHECKING, BinaryIO, Self
from urllib.parse import urlsplit

# warcio (1.8.1) ships no type information (no py.typed, no stubs on typeshed).
from warcio.statusandheaders import StatusAndHeaders  # type: ignore[import-untyped]
from warcio.warcwriter import WARCWriter  # type: ignore[import-untyped]

from ._version import __version__

if TYPE_CHECKING:
    from ._events import Exchange

LOGGER = logging.getLogger("trio_crawler")

SOFTWARE = f"trio-crawler/{__version__}"
# How crawlers name the format in warcinfo (Common Crawl's files carry this exact pair);
# the URL is where the IIPC publishes the WARC 1.1 specification.
WARC_FORMAT = "WARC File Format 1.1"
WARC_CONFORMS_TO = "https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/"
# Used when no response came, so the version spoken is unknown: what httpx sends by default.
DEFAULT_HTTP_VERSION = "HTTP/1.1"


class WarcWriter:
    """Writes a crawl's HTTP attempts to a WARC file, one group of records per attempt.

    The writer owns ``stream`` and closes it in :meth:`close`. A write error (a full disk, a
    closed file) is logged once and later exchanges are dropped, not raised, as
    :class:`~trio_crawler._output.JsonLinesWriter` does: the archive is one consumer of the
    crawl, and the file stays readable up to its last whole record.
    """

    def __init__(self, stream: BinaryIO, *, name: str, gzip: bool) -> None:
        """Wrap ``stream`` and write the warcinfo record to it at once.

        Raises:
            OSError: The warcinfo record could not be written.
        """
        self._stream = stream
        self.name = name
        self.failed = False
        self._records = WARCWriter(stream, gzip=gzip, warc_version="1.1")
        self._write_warcinfo()

    def _write_warcinfo(self) -> None:
        info = {"software": SOFTWARE, "format": WARC_FORMAT, "conformsTo": WARC_CONFORMS_TO}
        filename = os.path.basename(self.name)
        self._records.write_record(self._records.create_warcinfo_record(filename, info))
        self._stream.flush()

    @classmethod
    def open(cls, path: str, *, append: bool = False) -> WarcWriter:
        """Create (or truncate) ``path`` and write its warcinfo record.

        A name ending in ``.gz`` gets gzip compression, one gzip member per record.
        ``append`` keeps what the file holds, for a resumed crawl (see :meth:`resume`).

        Raises:
            OSError: ``path`` cannot be opened or written, as from :func:`open`.
        """
        with ExitStack() as on_failure:
            stream = on_failure.enter_context(open(path, "ab" if append else "wb"))
            writer = cls(stream, name=path, gzip=path.lower().endswith(".gz"))
            on_failure.pop_all()  # from here the writer owns the file
        return writer

    def write_exchange(self, exchange: Exchange) -> None:
        """Write one attempt's records and flush them to the file.

        Not a checkpoint and never raises for an I/O error (see the class docstring).
        """
        if self.failed:
            return
        try:
            self._write_records(exchange)
            # warcio flushes after each record already; flushing here as well makes the
            # "whole exchange handed to the OS before we return" promise this module's,
            # not a detail of warcio's current release.
            self._stream.flush()
        except (OSError, ValueError) as exc:  # ValueError: the file was closed
            self.failed = True
            LOGGER.error(
                "cannot write to %s (%s); further exchanges are not archived", self.name, exc
            )

    def cut_back(self, size: int | None) -> None:
        """Cut the file back to ``size`` bytes (its size at a state file's last commit),
        for a resumed crawl; None leaves it as it is.

        What lies beyond that size was written for URLs whose completion never committed:
        they are fetched again, and written again. The cut lands on a record boundary, so
        the file stays valid WARC; this run's warcinfo record, written before the cut, is
        written again after it.
        """
        if size is not None and size <= self._stream.tell():
            self._stream.flush()
            self._stream.truncate(size)
            self._stream.seek(0, os.SEEK_END)
            self._write_warcinfo()

    def position(self) -> int:
        """The file's size so far (what a state file keeps with each transaction)."""
        try:
            return self._stream.tell()
        except (OSError, ValueError):
            return 0

    def close(self) -> None:
        """Flush and close the file. Calling it again does nothing."""
        self._stream.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _write_records(self, exchange: Exchange) -> None:
        records = self._records
        # One date for the whole group: the specification asks concurrent records to carry
        # the same WARC-Date, and it saves a clock read per record.
        warc_date = records.curr_warc_date()
        http_version = exchange.http_version or DEFAULT_HTTP_VERSION

        request = records.create_warc_record(
            exchange.url,
            "request",
            payload=BytesIO(),
            length=0,
            warc_headers_dict={"WARC-Date": warc_date},
            http_headers=StatusAndHeaders(
                f"GET {_request_target(exchange.url)} {http_version}",
                list(exchange.request_headers),
                is_http_request=True,
            ),
        )
        records.write_record(request)
        request_id = request.rec_headers.get_header("WARC-Record-ID")

        if exchange.status is not None:
            warc_headers = {"WARC-Date": warc_date, "WARC-Concurrent-To": request_id}
            if exchange.truncated:
                warc_headers["WARC-Truncated"] = "length"
            response = records.create_warc_record(
                exchange.url,
                "response",
                payload=BytesIO(exchange.body),
                length=len(exchange.body),
                warc_headers_dict=warc_headers,
                http_headers=StatusAndHeaders(
                    f"{exchange.status} {exchange.reason}",
                    _stored_response_headers(exchange.response_headers),
                    protocol=http_version,
                ),
            )
            records.write_record(response)

        if exchange.status is None or exchange.error is not None:
            error = json.dumps({"error": exchange.error}).encode()
            metadata = records.create_warc_record(
                exchange.url,
                "metadata",
                payload=BytesIO(error),
                length=len(error),
                warc_content_type="application/json",
                warc_headers_dict={"WARC-Date": warc_date, "WARC-Concurrent-To": request_id},
            )
            records.write_record(metadata)


def _request_target(url: str) -> str:
    """The request line's target (RFC 9112 origin-form): path and query, never empty."""
    parts = urlsplit(url)
    target = parts.path or "/"
    return f"{target}?{parts.query}" if parts.query else target


def _stored_response_headers(headers: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """The response headers to archive: as received, less Transfer-Encoding.

    The body reaches us with its chunk framing already removed (the HTTP reader, h11 or
    the crawler's own, undoes it and does not keep the raw bytes), so the stored payload
    is not chunked. A header still saying ``Transfer-Encoding: chunked`` would make
    readers de-chunk it a second time. warcio's ``ArcWarcRecord.content_stream`` falls
    back to the raw bytes when they do not parse as chunks, but a body that happens to
    start like one (a hex number, CRLF) comes back garbled, and a strict reader rejects the
    record outright. Chunked is the only transfer coding either reader accepts, so the
    header never says anything else worth keeping.
    Content-Encoding stays: the body is stored still encoded, as the header says.
    """
    return [(name, value) for name, value in headers if name.lower() != "transfer-encoding"]


def cut_partial_record(path: str) -> None:
    """Cut off the end of a WARC file that is not a whole record (a killed process's
    last write), so that appending to it leaves every record readable.

    The records are walked with warcio's reader; the file is cut at the end of the last
    one read whole. A file that is not there, or empty, is left alone.
    """
    from warcio.archiveiterator import ArchiveIterator  # type: ignore[import-untyped]
    from warcio.exceptions import ArchiveLoadFailed  # type: ignore[import-untyped]

    try:
        size = os.path.getsize(path)
    except OSError:
        return
    if size == 0:
        return
    whole = 0
    with open(path, "rb") as stream:
        try:
            records = ArchiveIterator(stream)
            for record in records:
                record.content_stream().read()
                records.read_to_end(record)
                end = records.get_record_offset() + records.get_record_length()
                if end > size:
                    break
                whole = end
        except (ArchiveLoadFailed, OSError, ValueError, EOFError) as exc:
            LOGGER.warning("%s: cutting off a last WARC record that is not whole (%s)", path, exc)
    if whole < size:
        with open(path, "rb+") as stream:
            stream.truncate(whole)
