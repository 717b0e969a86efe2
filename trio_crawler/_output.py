"""JSON Lines output: one object per finished URL, written and flushed as it finishes.

Records reach the writer synchronously from the core, the moment a URL finishes, and each
is flushed before control returns to the event loop. So whatever ends the crawl (Ctrl-C,
SIGTERM, the deadline, a crash) the file holds every finished URL as a whole line.

The write is a plain blocking ``write`` + ``flush``. A line is a few hundred bytes going to
a local file or a pipe; handing each to a worker thread (``trio.wrap_file``) would cost more
than the write and would let a record sit unwritten across a checkpoint where a
cancellation could strike.
"""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, TextIO, cast

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._stats import FetchStatistic

LOGGER = logging.getLogger("trio_crawler")


class JsonLinesWriter:
    """Writes records to a text stream, one JSON object per line.

    A write error (a full disk) is logged once and further records are dropped from the
    output, not raised: the crawl and its report go on, since the output is one consumer of
    the records and the in-memory ``done`` list keeps them all.

    A pipe whose reader went away (``trio-crawler -o - ... | head -1``) is different: nobody
    wants the rest. With :attr:`on_reader_gone` set, that callback is called (once) instead
    of logging an error, so that the caller can end the crawl; the records are dropped as
    for any write error.
    """

    def __init__(self, stream: TextIO, *, name: str, owns_stream: bool) -> None:
        self._stream = stream
        self._owns_stream = owns_stream
        self.name = name
        self.failed = False
        # Called, from inside write_line, when the reader of a pipe went away (EPIPE). It
        # runs inside the core's decisions: it may take note, not act on the crawl.
        self.on_reader_gone: Callable[[], None] | None = None

    @classmethod
    def open(cls, path: str, *, append: bool = False) -> JsonLinesWriter:
        """Open ``path`` for writing (``-`` is stdout). Raises OSError if it cannot be.

        ``append`` keeps what the file holds: a resumed crawl (``--state``) cuts it back
        to what its state file says it held, and goes on from there.
        """
        if path == "-":
            return cls(sys.stdout, name="<stdout>", owns_stream=False)
        stream = open(path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115
        return cls(cast("TextIO", stream), name=path, owns_stream=True)

    def write(self, stat: FetchStatistic) -> None:
        """Write one record as a whole line and flush it."""
        self.write_line(stat.to_json())

    def write_line(self, line: str) -> None:
        """Write one record's JSON (without its newline) as a whole line, and flush it."""
        if self.failed:
            return
        try:
            self._stream.write(line + "\n")
            self._stream.flush()
        except (OSError, ValueError) as exc:  # ValueError: the stream was closed
            self.failed = True
            if isinstance(exc, BrokenPipeError) and self.on_reader_gone is not None:
                self.on_reader_gone()
                return
            LOGGER.error("cannot write to %s (%s); further records are not written", self.name, exc)

    def position(self) -> int:
        """Bytes in the file so far; -1 for a stream that is not a file (stdout, a pipe)."""
        if not self._owns_stream:
            return -1
        try:
            return self._stream.buffer.tell() if hasattr(self._stream, "buffer") else -1
        except (OSError, ValueError):
            return -1

    def truncate(self, size: int) -> None:
        """Cut the file back to ``size`` bytes (a resumed crawl's output); writes go on at
        its end."""
        self._stream.flush()
        self._stream.truncate(size)
        self._stream.seek(0, 2)

    def close(self) -> None:
        """Close the file, if this writer opened it."""
        if self._owns_stream:
            self._stream.close()
