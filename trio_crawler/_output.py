"""The outputs: the one road for records to ``-o``, items to ``--items`` and exchanges to
``--warc``.

Theory of operation
-------------------
Whatever the store, records reach the output files one way: the core makes a record (in
memory at once; with a state file or a shared frontier once its change is kept) and calls
``on_record``, which the command line points at :meth:`OutputFiles.write_record`. What
differs by store is only how a file is opened, and the store says which way through its
:class:`~trio_crawler._frontier.OutputMode`, never through its kind:

* NEW (memory): a new crawl; each file is written from the start.
* RECONCILE (``--state``): the store keeps the records; each file is cut back to what the
  store says it held and caught up from the store's records, and the store keeps its
  position with every transaction (see :mod:`trio_crawler._store_sqlite`).
* APPEND (``--frontier``): each process writes its share; a file is appended to and never
  truncated, so a process restarted with its own command keeps every record it wrote, and
  a partial last line (or WARC record) that a kill left is cut off first.

When files open. Every check that can refuse a run (options, the output paths, a state
file, a shared frontier's server and crawl) is made before the first file is opened for
writing: :meth:`OutputFiles.check` looks at the paths without opening them, and
:meth:`OutputFiles.open` runs once the store's session is open, before the first request.
So a refused run creates, truncates or appends to nothing.

JSON Lines.

Records reach the writer synchronously from the core, the moment a URL finishes, and each
is flushed before control returns to the event loop. So whatever ends the crawl (Ctrl-C,
SIGTERM, the deadline, a crash) the file holds every finished URL as a whole line. A page's
items (what the page handler returned, one JSON line each) take the same road at the same
moment, right after its record: so an items file is opened, cut back, caught up and
appended to by the same rules as ``-o``, and a ``--state`` crawl reconciles it from the
items it keeps with the records.

The write is a plain blocking ``write`` + ``flush``. A line is a few hundred bytes going to
a local file or a pipe; handing each to a worker thread (``trio.wrap_file``) would cost more
than the write and would let a record sit unwritten across a checkpoint where a
cancellation could strike.
"""

from __future__ import annotations

import errno
import logging
import os
import sys
from typing import TYPE_CHECKING, Protocol, TextIO, cast

from ._frontier import OutputMode
from ._options import ConfigError

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._events import Exchange
    from ._frontier import StoreShell
    from ._stats import FetchStatistic
    from ._warc import WarcWriter

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

    def __init__(
        self, stream: TextIO, *, name: str, owns_stream: bool, kind: str = "records"
    ) -> None:
        self._stream = stream
        self._owns_stream = owns_stream
        self.name = name
        # What its lines are, "records" or "items": a store that reconciles the file
        # catches it up from the one or the other.
        self.kind = kind
        self.failed = False
        # Called, from inside write_line, when the reader of a pipe went away (EPIPE). It
        # runs inside the core's decisions: it may take note, not act on the crawl.
        self.on_reader_gone: Callable[[], None] | None = None

    @classmethod
    def open(cls, path: str, *, append: bool = False, kind: str = "records") -> JsonLinesWriter:
        """Open ``path`` for writing (``-`` is stdout). Raises OSError if it cannot be.

        ``append`` keeps what the file holds: a resumed crawl (``--state``) cuts it back
        to what its state file says it held, and goes on from there. ``kind`` says what
        its lines are (:attr:`kind`).
        """
        if path == "-":
            return cls(sys.stdout, name="<stdout>", owns_stream=False, kind=kind)
        stream = open(path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115
        return cls(cast("TextIO", stream), name=path, owns_stream=True, kind=kind)

    def write(self, stat: FetchStatistic) -> None:
        """Write one record as a whole line and flush it."""
        self.write_line(stat.to_json())

    def write_lines(self, lines: tuple[str, ...]) -> None:
        """Write lines of JSON (without their newlines), each whole, and flush them."""
        self.write_line("\n".join(lines))

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


class RecordOutput(Protocol):
    """An ``-o`` or ``--items`` file as a store that reconciles it sees it: a text file it
    can cut back, of records or of items (:attr:`JsonLinesWriter.kind`)."""

    name: str
    kind: str

    def write_line(self, line: str) -> None: ...

    def position(self) -> int: ...

    def truncate(self, size: int) -> None: ...


class ArchiveOutput(Protocol):
    """A ``--warc`` file as a store that reconciles it sees it."""

    name: str

    def position(self) -> int: ...

    def cut_back(self, size: int | None) -> None: ...


class OutputFiles:
    """The files a run writes, opened the way its store says (see the module docstring).

    Args:
        output: The ``-o`` path (``-`` for stdout), or None.
        warc: The ``--warc`` path, or None.
        items: The ``--items`` path (``-`` for stdout), or None.
    """

    def __init__(
        self, *, output: str | None = None, warc: str | None = None, items: str | None = None
    ) -> None:
        self.output_path = output
        self.warc_path = warc
        self.items_path = items
        self.records: JsonLinesWriter | None = None
        self.items: JsonLinesWriter | None = None
        self.archive: WarcWriter | None = None
        # For the -o and --items files: called when the reader of a pipe went away (see
        # JsonLinesWriter).
        self.on_reader_gone: Callable[[], None] | None = None

    def check(self) -> None:
        """Refuse a path that cannot be written, without opening (or creating) it.

        Raises:
            ConfigError: A path is a directory, or its directory does not exist or cannot
                be written, or the file exists and cannot be written.
        """
        for option, path in (
            ("output", self.output_path),
            ("warc", self.warc_path),
            ("items", self.items_path),
        ):
            if path is None or path == "-":
                continue
            problem = _unwritable(path)
            if problem is not None:
                raise ConfigError(option, f"{path!r}: {problem}")

    def open(self, store: StoreShell) -> None:
        """Open the files as ``store.output_mode`` says, and let the store reconcile them.

        Raises:
            ConfigError: A file cannot be opened after all (its directory went away).
        """
        mode = store.output_mode
        keep = mode is not OutputMode.NEW
        option, path = "output", self.output_path
        try:
            if self.output_path is not None:
                self.records = self._open_lines(store, self.output_path, "records")
            option, path = "items", self.items_path
            if self.items_path is not None:
                self.items = self._open_lines(store, self.items_path, "items")
            option, path = "warc", self.warc_path
            if self.warc_path is not None:
                from ._warc import WarcWriter, cut_partial_record

                if mode is OutputMode.APPEND:
                    cut_partial_record(self.warc_path)
                self.archive = WarcWriter.open(self.warc_path, append=keep)
                store.attach_archive(self.archive)
        except OSError as exc:
            raise ConfigError(option, f"{path!r}: {exc.strerror or exc}") from None

    def _open_lines(self, store: StoreShell, path: str, kind: str) -> JsonLinesWriter:
        """Open a JSON Lines file as the store's mode says, and let the store reconcile it."""
        mode = store.output_mode
        if mode is OutputMode.APPEND and path != "-":
            _cut_partial_line(path)
        writer = JsonLinesWriter.open(path, append=mode is not OutputMode.NEW, kind=kind)
        writer.on_reader_gone = self.on_reader_gone
        store.attach_output(writer)
        return writer

    def write_record(self, record: FetchStatistic) -> None:
        """``on_record``: one record, as a whole line."""
        if self.records is not None:
            self.records.write(record)

    def write_items(self, lines: tuple[str, ...]) -> None:
        """``on_items``: one page's items, each a whole line, right after its record."""
        if self.items is not None:
            self.items.write_lines(lines)

    def write_exchange(self, exchange: Exchange) -> None:
        """``on_exchange``: one attempt's WARC records."""
        if self.archive is not None:
            self.archive.write_exchange(exchange)

    def close(self) -> None:
        """Close what was opened."""
        for opened in (self.records, self.items, self.archive):
            if opened is not None:
                opened.close()


def _unwritable(path: str) -> str | None:
    """Why ``path`` could not be written, or None; looks, opens nothing."""
    if os.path.isdir(path):
        return os.strerror(errno.EISDIR)
    if os.path.exists(path):
        return None if os.access(path, os.W_OK) else os.strerror(errno.EACCES)
    directory = os.path.dirname(path) or "."
    if not os.path.isdir(directory):
        return os.strerror(errno.ENOENT)
    return None if os.access(directory, os.W_OK | os.X_OK) else os.strerror(errno.EACCES)


def _cut_partial_line(path: str) -> None:
    """Cut off a last line that a killed process left without its newline."""
    try:
        with open(path, "rb+") as file:
            size = file.seek(0, os.SEEK_END)
            if size == 0:
                return
            end = size
            while end > 0:
                start = max(0, end - 65536)
                file.seek(start)
                chunk = file.read(end - start)
                newline = chunk.rfind(b"\n")
                if newline >= 0:
                    whole = start + newline + 1
                    break
                end = start
            else:
                whole = 0
            if whole < size:
                file.truncate(whole)
    except FileNotFoundError:
        return
