"""``--state FILE``: a crawl kept in one SQLite file, so that it outlives its process.

Theory of operation
-------------------
The core (:class:`~trio_crawler._state.CrawlState`) decides; a frontier stores. This module
is the durable store: :class:`StoredFrontier` keeps the crawl's queue and seen set in the
file, and only a *window* of the queue in memory, in the in-memory frontier it extends
(per-origin queues, robots.txt state, politeness clocks). So memory does not grow with the
frontier: a million queued URLs cost rows in the file, not objects in RAM.

What is committed when. Every change the core makes to the crawl arrives as a
:class:`~trio_crawler._frontier.Completion` (a URL done: its record, its links, what a
recrawl needs of it) or a small note (an origin's robots.txt rules, a ``Retry-After``
wait, a URL robots.txt turned away). They collect in a batch, and one transaction writes
a batch: the URL marked done, its record, its links ``INSERT OR IGNORE``d (whose changed
rows are the answer to "how many were new"), all at once. While one transaction runs in a
worker thread, the next batch collects, so under load a transaction carries many URLs and
the event loop never waits on the disk. A URL stays in flight, and the crawl unfinished,
until the transaction holding it has committed; only then is its record made and handed
on (``on_record``, ``-o``).

What a SIGKILL costs. The file is SQLite in WAL mode: a transaction is in it whole or not
at all. Nothing marks a URL as handed out, so a URL whose completion had not committed is
still queued in the file, and the next run fetches it again: only attempts in flight (or
finished in the last few milliseconds, whose transaction had not committed) are made
twice. Nothing committed is lost; with ``synchronous=NORMAL`` a power loss may lose the
last transactions (their URLs are fetched again), never corrupt the file.

Outputs. The ``-o`` file is a copy of the file's records, one line each, written after the
transaction that made them. Each transaction also stores how far each output had got
(its size and the last record written). On resume the output is cut back to that size and
the records after that one are written again, so it ends with exactly one line per record
however the last run ended. A WARC file is written before the transaction that completes
its URL, and cut back to its stored size on resume: a URL fetched again may appear twice
in it, as WARC allows, and the file stays valid.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import itertools
import json
import logging
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import anyio

from ._config import ConfigError
from ._events import FetchRequest, KnownPage, RobotsRequest
from ._frontier import (
    GROUP_SIZE,
    GROUP_WINDOW,
    Added,
    Completion,
    Disallowed,
    FrontierLost,
    MemoryFrontier,
    Resumed,
    RobotsState,
    Settled,
    Taken,
)
from ._robots import RobotsRules
from ._stats import FetchStatistic

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from ._config import CrawlConfig

LOGGER = logging.getLogger("trio_crawler")

T = TypeVar("T")
RunInThread = Callable[[Callable[[], T]], Awaitable[T]]

# Identifies the file as ours ("TCrw") and its layout; another SQLite file is refused.
APPLICATION_ID = 0x54437277
SCHEMA_VERSION = 1
SQLITE_HEADER = b"SQLite format 3\x00"

# URL states in the file.
QUEUED, DONE, DISALLOWED = 0, 1, 2

# Links known to be in the file, kept in memory so that the links a page shares with many
# others (navigation, mostly) are not looked up in the file again and again. Measured on
# the 10 000-page synthetic site (23 links a page, nearly all seen before): the lookups
# were three quarters of the file's CPU. 50 000 URLs cost about 6 MiB; when it is full the
# oldest half is forgotten (a forgotten URL is only looked up in the file again).
KNOWN_CACHE = 50_000
# How often the -o files' positions are stored (seconds): an older position only means
# that a resume writes more of the file's records again, so they need not go with every
# transaction; the WARC file's do (it is cut back to the position stored).
MARK_INTERVAL = 1.0

# The window: rows loaded into memory when fewer than LOW_WATER are queued there, a
# CHUNK at a time; up to MAX_WINDOW while every URL in memory has to wait (a host's delay,
# --max-per-host) and the file has more. Measured: a chunk of 500 rows loads in about a
# millisecond, and 10 000 queued URLs in memory cost about 1.5 MiB.
LOW_WATER = 256
CHUNK = 500
MAX_WINDOW = 10_000

_SCHEMA = """
CREATE TABLE crawl (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE urls (
    id INTEGER PRIMARY KEY,
    url TEXT NOT NULL UNIQUE,
    state INTEGER NOT NULL,
    depth INTEGER NOT NULL,
    redirects_left INTEGER NOT NULL,
    sitemap INTEGER NOT NULL,
    first INTEGER NOT NULL
);
CREATE TABLE pages (
    url TEXT PRIMARY KEY,
    etag TEXT,
    last_modified TEXT,
    num_urls INTEGER NOT NULL,
    links TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE records (
    id INTEGER PRIMARY KEY,
    pass INTEGER NOT NULL,
    failed INTEGER NOT NULL,
    json TEXT NOT NULL
);
CREATE TABLE origins (
    origin TEXT PRIMARY KEY,
    robots TEXT NOT NULL,
    rules TEXT,
    failure TEXT,
    delay REAL,
    wait_until REAL
) WITHOUT ROWID;
CREATE TABLE outputs (
    path TEXT NOT NULL,
    pass INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    last_record INTEGER NOT NULL,
    PRIMARY KEY (path, pass)
) WITHOUT ROWID;
"""


class StateFileError(ConfigError):
    """A ``--state`` file that cannot be used: not ours, another crawl's, in use, corrupt.

    Raised before anything in the file is changed; the CLI prints it as one line, exit 2.
    """

    def __init__(self, path: str, problem: str) -> None:
        super().__init__("state", f"{path}: {problem}")


@dataclass(frozen=True, slots=True)
class OriginNote:
    """An origin's state, to keep: robots.txt rules or failure, delay, Retry-After."""

    origin: str
    robots: str
    rules: str | None
    failure: str | None
    delay: float | None
    wait_until: float | None


@dataclass(slots=True)
class _Batch:
    """What one transaction writes."""

    completions: list[Completion] = field(default_factory=list)
    disallowed: list[str] = field(default_factory=list)
    damaged: list[int] = field(default_factory=list)  # URL rows that are no URL rows
    origins: list[OriginNote] = field(default_factory=list)
    marks: list[tuple[str, int, int]] = field(default_factory=list)  # path, bytes, last id
    limit_counts: dict[str, int] | None = None
    load: int = 0  # rows to load into the window after committing

    def __bool__(self) -> bool:
        return bool(
            self.completions or self.disallowed or self.damaged or self.origins or self.load
        )


@dataclass(slots=True)
class _Committed:
    """What one transaction answered."""

    settled: list[Settled]
    new_rows: int
    records: list[tuple[int, str]]  # record id, JSON line, in completion order
    loaded: list[tuple[Any, ...]]


# A completion waiting for its transaction, with what to call once it has committed.
_Waiting = tuple[Completion, "Callable[[Completion, Settled], object]"]


class RecordOutput(Protocol):
    """An output the store copies records to (``-o``): a text file it can cut back."""

    name: str

    def write_line(self, line: str) -> None: ...

    def position(self) -> int: ...

    def truncate(self, size: int) -> None: ...


class StateFile:
    """The SQLite file: opened, checked, and written one transaction at a time.

    Its methods block; the crawl runs :meth:`commit` in a worker thread, one at a time.
    """

    def __init__(self, path: str, *, roots: Sequence[str], options: Mapping[str, Any]) -> None:
        """Open ``path`` (creating it if absent or empty) for the crawl of ``roots``.

        ``roots`` may be empty to resume whatever crawl the file holds.

        Raises:
            StateFileError: The file cannot be used; nothing in it was changed.
        """
        self.path = path
        self._lock_fd = -1
        if os.path.isdir(path):
            raise StateFileError(path, "is a directory, not a state file")
        new = not os.path.exists(path) or os.path.getsize(path) == 0
        if not new:
            _check_header(path)
        self._lock(new)
        try:
            self._db = self._connect()
            if new:
                self._create(roots, options)
            else:
                self._check(roots)  # before anything is written, WAL mode included
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as exc:
            self.close()
            raise StateFileError(path, f"cannot use it as a state file ({exc})") from None
        except BaseException:
            self.close()
            raise
        self.roots: tuple[str, ...] = tuple(json.loads(self._get("roots")))
        self.pass_number = int(self._get("pass"))
        # URLs certainly in the file; touched only by commit(), one thread at a time.
        self._in_file: dict[str, None] = {}
        # This process is the file's only writer (the lock says so), so it numbers records.
        (last,) = self._db.execute("SELECT coalesce(max(id), 0) FROM records").fetchone()
        self._next_record: int = last
        # The highest URL row id: the rows a transaction's links add are the ones above it.
        (last_url,) = self._db.execute("SELECT coalesce(max(id), 0) FROM urls").fetchone()
        self._last_url: int = last_url

    # -- opening ---------------------------------------------------------------------------

    def _lock(self, new: bool) -> None:
        """Hold an exclusive lock on the file for this process's life (released by the OS
        when it dies, SIGKILL included), so a second crawl of the same file is refused."""
        try:
            flags = os.O_RDWR | (os.O_CREAT if new else 0)
            self._lock_fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            raise StateFileError(self.path, f"cannot open it: {exc.strerror}") from None
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise StateFileError(self.path, "in use by a running crawl") from None

    def _connect(self) -> sqlite3.Connection:
        try:
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise StateFileError(self.path, f"cannot open it as a state file ({exc})") from None
        return db

    def _create(self, roots: Sequence[str], options: Mapping[str, Any]) -> None:
        if not roots:
            raise StateFileError(self.path, "holds no crawl yet; give the ROOTs to start one")
        try:
            # One transaction: a process killed while creating leaves an empty file, which
            # the next run takes for a new crawl.
            self._db.executescript(
                "BEGIN IMMEDIATE;"
                f"PRAGMA application_id={APPLICATION_ID};"
                f"PRAGMA user_version={SCHEMA_VERSION};" + _SCHEMA
            )
            self._set("roots", json.dumps(list(roots)))
            self._set("options", json.dumps(dict(options), sort_keys=True, default=str))
            self._set("pass", "1")
            self._set("limit_counts", "{}")
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise StateFileError(self.path, f"cannot create it ({exc})") from None

    def _check(self, roots: Sequence[str]) -> None:
        try:
            (application_id,) = self._db.execute("PRAGMA application_id").fetchone()
            (version,) = self._db.execute("PRAGMA user_version").fetchone()
            if application_id != APPLICATION_ID:
                raise StateFileError(self.path, "not a trio-crawler state file")
            if version != SCHEMA_VERSION:
                raise StateFileError(
                    self.path, f"a state file of layout {version}; this version reads layout 1"
                )
            (verdict,) = self._db.execute("PRAGMA quick_check").fetchone()
            if verdict != "ok":
                raise StateFileError(self.path, f"corrupt state file ({verdict})")
            stored = tuple(json.loads(self._get("roots")))
        except sqlite3.Error as exc:
            raise StateFileError(self.path, f"corrupt state file ({exc})") from None
        if roots and tuple(roots) != stored:
            raise StateFileError(
                self.path,
                f"holds the crawl of {' '.join(stored)}; give those ROOTs or none to resume it",
            )

    # -- reading -------------------------------------------------------------------------

    def counts(self) -> tuple[int, int]:
        """URLs queued and URLs known (queued, done or disallowed) in the file."""
        queued = self._db.execute("SELECT count(*) FROM urls WHERE state = ?", (QUEUED,))
        known = self._db.execute("SELECT count(*) FROM urls")
        return queued.fetchone()[0], known.fetchone()[0]

    def resumed(self) -> Resumed:
        """This pass's record counts and limit counters so far."""
        records, failed = self._db.execute(
            "SELECT count(*), coalesce(sum(failed), 0) FROM records WHERE pass = ?",
            (self.pass_number,),
        ).fetchone()
        limits = json.loads(self._get("limit_counts"))
        return Resumed(records=records, failed=failed, limit_counts=limits)

    def origins(self) -> list[OriginNote]:
        """Every origin whose robots.txt or waits were kept."""
        rows = self._db.execute(
            "SELECT origin, robots, rules, failure, delay, wait_until FROM origins"
        )
        return [OriginNote(*row) for row in rows]

    def records(self, after: int = 0) -> Iterator[tuple[int, str]]:
        """This pass's records (id, JSON line) after record ``after``, in the order made."""
        with self._reading() as db:
            yield from db.execute(
                "SELECT id, json FROM records WHERE pass = ? AND id > ? ORDER BY id",
                (self.pass_number, after),
            )

    def seen(self) -> set[str]:
        """Every URL the file knows."""
        with self._reading() as db:
            return {url for (url,) in db.execute("SELECT url FROM urls")}

    @contextlib.contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """The open connection, or after :meth:`close` a read-only one (the crawl's
        records stay readable once it is over)."""
        if not self.closed:
            yield self._db
            return
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
        try:
            yield db
        finally:
            db.close()

    def load(self, after: int, limit: int) -> list[tuple[Any, ...]]:
        """Queued rows after id ``after``, with what a recrawl kept of each page (the
        rows are found by id: those before the window's cursor are done, or loaded)."""
        if self.pass_number == 1:
            query = (
                "SELECT id, url, depth, redirects_left, sitemap, first, NULL, NULL, NULL, NULL"
                " FROM urls WHERE id > ? AND state = ? ORDER BY id LIMIT ?"
            )
        else:
            query = (
                "SELECT u.id, u.url, u.depth, u.redirects_left, u.sitemap, u.first,"
                " p.etag, p.last_modified, p.num_urls, p.links"
                " FROM urls AS u LEFT JOIN pages AS p ON p.url = u.url"
                " WHERE u.id > ? AND u.state = ? ORDER BY u.id LIMIT ?"
            )
        return self._db.execute(query, (after, QUEUED, limit)).fetchall()

    def mark(self, path: str) -> tuple[int, int] | None:
        """How far the output ``path`` had got in this pass (bytes, last record id)."""
        row = self._db.execute(
            "SELECT bytes, last_record FROM outputs WHERE path = ? AND pass = ?",
            (path, self.pass_number),
        ).fetchone()
        return None if row is None else (row[0], row[1])

    # -- writing ---------------------------------------------------------------------------

    def new_pass(self) -> None:
        """Begin a recrawl: every URL done is queued again, for conditional requests."""
        with self._transaction():
            self._db.execute("UPDATE urls SET state = ? WHERE state = ?", (QUEUED, DONE))
            self.pass_number += 1
            self._set("pass", str(self.pass_number))
            self._set("limit_counts", "{}")

    def commit(self, batch: _Batch) -> _Committed:
        """Write one batch as one transaction; load the window's next rows after it.

        Each kind of row is written by one statement over a JSON array of all the batch's
        rows (``json_each``), not one statement per row: the sqlite3 module lets go of the
        GIL around every step of a statement and waits to take it back from the event
        loop's thread, so a step per row made the transaction's thread and the loop's trade
        the GIL tens of thousands of times a crawl (measured: 43 000 context switches for
        10 000 pages, and a third more CPU than the crawl in memory). Now a transaction is
        a few steps, whatever its size.
        """
        db = self._db
        pass_number = self.pass_number
        # Links to queue, each with the completion that offers it first (for its count).
        offered: list[list[Any]] = []
        offered_by: list[int] = []
        # Links only counted, not queued (beyond --max-depth, or sitemaps nested too deep).
        unseen: dict[int, int] = {}
        beyond: dict[int, int] = {}
        with self._transaction():
            for index, completion in enumerate(batch.completions):
                for offer in completion.offers:
                    if offer.queue:
                        row = [offer.depth, offer.redirects_left, offer.sitemap, offer.first]
                        for url in offer.urls:
                            if url not in self._in_file:
                                offered.append([url, *row])
                                offered_by.append(index)
                    else:
                        counted = _count_unseen(db, offer.urls)
                        unseen[index] = unseen.get(index, 0) + counted
                        if offer.over_depth:
                            beyond[index] = beyond.get(index, 0) + counted
            new_by = self._insert(offered, offered_by)
            settled: list[Settled] = []
            records: list[tuple[int, str]] = []
            done: list[str] = []
            record_rows: list[list[Any]] = []
            pages: list[list[Any]] = []
            new_rows = 0
            for index, completion in enumerate(batch.completions):
                inserted = new_by.get(index, 0)
                new_rows += inserted
                answer = Settled(new=inserted + unseen.get(index, 0), beyond=beyond.get(index, 0))
                settled.append(answer)
                request = completion.request
                if request is None or completion.record is None:
                    continue
                done.append(request.url)
                record = completion.final_record(answer)
                assert record is not None
                line = record.to_json()
                self._next_record += 1
                record_rows.append(
                    [self._next_record, pass_number, record.exception is not None, line]
                )
                records.append((self._next_record, line))
                if completion.links is not None:
                    pages.append(
                        [
                            request.url,
                            completion.etag,
                            completion.last_modified,
                            record.num_urls,
                            "\n".join(completion.links),
                        ]
                    )
            if done:
                db.execute(
                    f"UPDATE urls SET state = {DONE} WHERE url IN (SELECT value FROM json_each(?))",
                    (json.dumps(done),),
                )
            if record_rows:
                db.execute(
                    "INSERT INTO records SELECT json_extract(value, '$[0]'),"
                    " json_extract(value, '$[1]'), json_extract(value, '$[2]'),"
                    " json_extract(value, '$[3]') FROM json_each(?)",
                    (json.dumps(record_rows),),
                )
            if pages:
                db.execute(
                    "INSERT OR REPLACE INTO pages SELECT json_extract(value, '$[0]'),"
                    " json_extract(value, '$[1]'), json_extract(value, '$[2]'),"
                    " json_extract(value, '$[3]'), json_extract(value, '$[4]')"
                    " FROM json_each(?)",
                    (json.dumps(pages),),
                )
            if batch.disallowed:
                db.executemany(
                    "UPDATE urls SET state = ? WHERE url = ?",
                    [(DISALLOWED, url) for url in batch.disallowed],
                )
            if batch.damaged:  # set aside, so that they are not queued for ever
                db.executemany(
                    f"UPDATE urls SET state = {DISALLOWED} WHERE id = ?",
                    [(row_id,) for row_id in batch.damaged],
                )
            if batch.origins:
                db.executemany(
                    "INSERT OR REPLACE INTO origins VALUES (?, ?, ?, ?, ?, ?)",
                    [dataclasses.astuple(note) for note in batch.origins],
                )
            if batch.marks:
                db.executemany(
                    "INSERT OR REPLACE INTO outputs VALUES (?, ?, ?, ?)",
                    [(path, pass_number, size, last) for path, size, last in batch.marks],
                )
            if batch.limit_counts is not None:
                self._set("limit_counts", json.dumps(batch.limit_counts, sort_keys=True))
        return _Committed(settled, new_rows, records, [])

    @property
    def closed(self) -> bool:
        return getattr(self, "_db", None) is None

    def _insert(self, offered: list[list[Any]], offered_by: list[int]) -> dict[int, int]:
        """Queue the links that are new to the file, in one statement; say how many of
        them each completion offered first (by its index in the batch).

        The links are inserted in the order offered, so the rows new to the file are the
        ones above the highest id before, and one more statement reads them back as one
        JSON array: a link offered by two pages of a batch is new for the first.
        """
        if not offered:
            return {}
        db = self._db
        db.execute(
            "INSERT OR IGNORE INTO urls (url, state, depth, redirects_left, sitemap, first)"
            " SELECT json_extract(value, '$[0]'), 0, json_extract(value, '$[1]'),"
            " json_extract(value, '$[2]'), json_extract(value, '$[3]'),"
            " json_extract(value, '$[4]') FROM json_each(?)",
            (json.dumps(offered),),
        )
        last, new_urls = db.execute(
            "SELECT max(id), json_group_array(url) FROM urls WHERE id > ?", (self._last_url,)
        ).fetchone()
        new = set(json.loads(new_urls))
        if last is not None:
            self._last_url = last
        new_by: dict[int, int] = {}
        for (url, *_), index in zip(offered, offered_by, strict=True):
            if url in new:
                new.discard(url)  # counted once, for the first page that offers it
                new_by[index] = new_by.get(index, 0) + 1
        known = self._in_file
        if len(known) + len(offered) > KNOWN_CACHE:
            for url in list(itertools.islice(known, len(known) // 2)):
                del known[url]
        known.update(dict.fromkeys(url for url, *_ in offered))
        return new_by

    def close(self) -> None:
        """Close the database and release the lock."""
        db = getattr(self, "_db", None)
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()
            self._db = None  # type: ignore[assignment]
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = -1

    # -- helpers -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _get(self, key: str) -> str:
        row = self._db.execute("SELECT value FROM crawl WHERE key = ?", (key,)).fetchone()
        if row is None:
            raise StateFileError(self.path, f"corrupt state file (no {key!r})")
        return str(row[0])

    def _set(self, key: str, value: str) -> None:
        self._db.execute("INSERT OR REPLACE INTO crawl VALUES (?, ?)", (key, value))


def _check_header(path: str) -> None:
    try:
        with open(path, "rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StateFileError(path, f"cannot read it: {exc.strerror}") from None
    if header != SQLITE_HEADER:
        raise StateFileError(path, "not a trio-crawler state file")


def _count_unseen(db: sqlite3.Connection, urls: Iterable[str]) -> int:
    return sum(
        1
        for url in urls
        if db.execute("SELECT 1 FROM urls WHERE url = ?", (url,)).fetchone() is None
    )


class StoredFrontier(MemoryFrontier):
    """The frontier of a crawl kept in a :class:`StateFile`: a window in memory.

    The seen set and the queue are the file's; the in-memory frontier underneath holds the
    window of queued URLs loaded from it, the requests in flight, and every origin's
    robots.txt state and politeness clock (restored from the file on resume).

    Args:
        state_file: The open file.
        limit_counts: The core's limit counters, stored with every transaction.
        delay, obey_robots, max_per_host: As for :class:`MemoryFrontier`.
    """

    def __init__(
        self,
        state_file: StateFile,
        *,
        delay: float,
        obey_robots: bool,
        max_per_host: int | None,
    ) -> None:
        super().__init__(delay=delay, obey_robots=obey_robots, max_per_host=max_per_host)
        self.file = state_file
        self._unloaded, self._known = state_file.counts()
        self._cursor = 0  # the last row id loaded into the window
        self._batch = _Batch()
        self._waiting: list[_Waiting] = []
        self._unleased = 0  # completions not in flight (links alone, unfetchable URLs)
        self._flushing = False
        # Made by the first settle() that waits for the flush under way; set when it ends.
        self._flush_ended: anyio.Event | None = None
        self._outputs: list[RecordOutput] = []
        self._marks: dict[str, tuple[int, int]] = {}
        self._next_marks = 0.0  # when the -o files' marks are next written (monotonic)
        self._limits_written: dict[str, int] | None = None
        self.limit_counts: Mapping[str, int] | None = None
        self.lost: str | None = None
        self._restore_origins()

    # -- counts: the file's queue, the window's flights -----------------------------------

    @property
    def queued(self) -> int:
        """URLs waiting: in the window, and in the file beyond it."""
        return super().queued + self._unloaded

    @property
    def in_flight_count(self) -> int:
        """Requests in flight, and changes waiting for their transaction."""
        return super().in_flight_count + self._unleased

    @property
    def seen_count(self) -> int:
        return self._known

    def all_seen(self) -> set[str]:
        """Every URL the file knows: read from it, so for after the crawl."""
        return self.file.seen()

    def is_seen(self, url: str) -> bool:
        raise RuntimeError("the file holds the seen set: ask through finish()")

    def unseen(self, urls: Iterable[str]) -> int:
        raise RuntimeError("the file holds the seen set: ask through finish()")

    def add(
        self,
        urls: Iterable[str],
        *,
        depth: int,
        redirects_left: int,
        sitemap: int = 0,
        first: bool = False,
    ) -> Added:
        raise RuntimeError("the file holds the seen set: add links through finish()")

    # -- the core's changes ------------------------------------------------------------------

    def finish(self, completion: Completion, then: Callable[[Completion, Settled], object]) -> None:
        """Keep ``completion`` for the next transaction; ``then`` runs once it committed."""
        if not completion.leased:
            self._unleased += 1
        self._waiting.append((completion, then))

    def take(self, *, now: float, start_new: bool) -> Taken | None:
        if self._restored_waits:
            # Retry-After waits kept by the last run, on this run's clock.
            for key, remaining in self._restored_waits.items():
                self._wait_origin(key, now + remaining)
            self._restored_waits.clear()
        taken = super().take(now=now, start_new=start_new)
        if isinstance(taken, Disallowed):
            self._batch.disallowed.append(taken.request.url)
        return taken

    def retry_later(
        self, request: FetchRequest, *, not_before: float, now: float | None = None
    ) -> None:
        super().retry_later(request, not_before=not_before, now=now)
        # Kept as a time of day: the engine's clock starts again with the next process.
        wait = None if now is None else time.time() + max(0.0, not_before - now)
        self._note_origin(self._origin(request).key, wait_until=wait)

    def robots_settled(
        self,
        request: RobotsRequest,
        *,
        rules: RobotsRules | None = None,
        failure: str | None = None,
        delay: float | None = None,
        now: float,
    ) -> None:
        super().robots_settled(request, rules=rules, failure=failure, delay=delay, now=now)
        self._note_origin(request.origin)

    # -- the engine's side: transactions --------------------------------------------------

    def attach_output(self, output: RecordOutput) -> None:
        """Copy every record to ``output`` from now on, after cutting it back to what the
        file says it held and writing the records it missed (see the module docstring)."""
        mark = self.file.mark(output.name)
        size, last = mark if mark is not None else (0, 0)
        if output.position() < size:
            # Shorter than it was (a power loss lost its tail): write it again whole.
            size, last = 0, 0
        if output.position() < 0:  # stdout or a pipe: this run's records only
            self._outputs.append(output)
            return
        output.truncate(size)
        for record_id, line in self.file.records(after=last):
            if _record(line) is not None:  # a row that is no record is not copied
                output.write_line(str(line))
            last = record_id
        self._outputs.append(output)
        self._marks[output.name] = (output.position(), last)

    def warc_mark(self, name: str) -> int | None:
        """The size a WARC file had at the last commit, to cut it back to on resume."""
        mark = self.file.mark(name)
        return None if mark is None else mark[0]

    def track_warc(self, name: str, position: Callable[[], int]) -> None:
        """Store the WARC file's size with every transaction."""
        self._warc = (name, position)

    def has_work(self, *, starved: bool) -> bool:
        """Whether :meth:`flush` would do anything now: changes wait, or the window should
        grow. False while a flush runs (it takes what arrives meanwhile)."""
        if self._flushing or self.lost is not None:
            return False
        return bool(self._waiting or self._batch) or self._wants_rows(starved=starved) > 0

    def records(self) -> list[FetchStatistic]:
        """This pass's records, read from the file; a row that is not one is logged and
        skipped (the file is checked as SQLite when opened, not row by row)."""
        records = []
        for record_id, line in self.file.records():
            record = _record(line)
            if record is None:
                LOGGER.warning("state file: record %d is not a record; skipped", record_id)
            else:
                records.append(record)
        return records

    def close(self) -> None:
        """Commit what still waits, store how far the outputs got, and close the file.

        Blocks briefly: it runs once, after the crawl's tasks have ended. A crawl cut short
        (its deadline, a second Ctrl-C) may leave pages fetched whose transaction had not
        run yet; they are committed here, records and links, rather than fetched again by
        the next run.
        """
        if self.file.closed:
            return
        try:
            if self.lost is None:
                if self._waiting or self._batch:
                    batch, waiting = self._next_batch(starved=False)
                    batch.load = 0
                    self._after_commit(waiting, self.file.commit(batch))
                final = _Batch(marks=self._current_marks())
                if self.limit_counts is not None:
                    final.limit_counts = dict(self.limit_counts)
                self.file.commit(final)
        except sqlite3.Error as exc:
            LOGGER.error("cannot write the state file %s: %s", self.file.path, exc)
        finally:
            self.file.close()

    def _current_marks(self, *, outputs: bool = True) -> list[tuple[str, int, int]]:
        """How far the outputs have got: the WARC file always (a resume cuts it back to
        the size stored, so the size must be the last commit's), the ``-o`` files when
        ``outputs`` (a resume writes the records after the stored one again from the file,
        so an older mark only means more of them)."""
        marks = []
        if outputs:
            marks = [(name, size, last) for name, (size, last) in self._marks.items()]
        warc = getattr(self, "_warc", None)
        if warc is not None:
            marks.append((warc[0], warc[1](), 0))
        return marks

    def _wants_rows(self, *, starved: bool) -> int:
        in_window = super().queued
        if not self._unloaded:
            return 0
        if in_window < LOW_WATER or (starved and in_window < MAX_WINDOW):
            return min(CHUNK, self._unloaded)
        return 0

    async def settle(self, request: FetchRequest, run: RunInThread[Any]) -> None:
        """Return once the completion of ``request`` has committed and its record is made
        (and copied to the outputs): flushing, or waiting for the flush under way.

        Raises:
            FrontierLost: The file could not be written; the crawl must stop.
        """
        while request.url in self._in_flight and self.lost is None:
            if self._flushing:
                if self._flush_ended is None:
                    self._flush_ended = anyio.Event()
                await self._flush_ended.wait()
            else:
                await self.flush(run, group=GROUP_WINDOW)

    async def flush(
        self, run: RunInThread[Any], *, starved: bool = False, group: float = 0.0
    ) -> None:
        """Commit what waits, in as few transactions as the load allows, off the loop.

        One flush runs at a time; changes that arrive meanwhile join the next transaction
        of the same flush. ``run`` is the engine's shielded worker-thread call, so a
        transaction that started is always finished and applied, even in a cancelled crawl.
        With ``group`` seconds, a transaction waits that long first for more changes to
        join it (see GROUP_WINDOW), unless enough already wait or the dispatcher is
        ``starved`` for requests.

        Raises:
            FrontierLost: The file could not be written; the crawl must stop.
        """
        if self._flushing or self.lost is not None:
            return
        self._flushing = True
        try:
            while self._waiting or self._batch or self._wants_rows(starved=starved):
                if group and not starved and len(self._waiting) < GROUP_SIZE:
                    await anyio.sleep(group)  # let the pages finishing now join
                await self._one_transaction(run, starved)
                starved = False
        finally:
            self._flushing = False
            ended, self._flush_ended = self._flush_ended, None
            if ended is not None:
                ended.set()

    async def _one_transaction(self, run: RunInThread[Any], starved: bool) -> None:
        batch, waiting = self._next_batch(starved=starved)
        cursor = self._cursor

        def transaction() -> _Committed:
            committed = self.file.commit(batch)
            if batch.load:
                committed.loaded = self.file.load(cursor, batch.load)
            return committed

        try:
            committed: _Committed = await run(transaction)
        except sqlite3.Error as exc:
            self.lost = f"cannot write the state file {self.file.path}: {exc}"
            raise FrontierLost(self.lost) from exc
        self._after_commit(waiting, committed)
        if len(committed.loaded) < batch.load and self._unloaded:
            # The file has no more queued rows than it gave: the count had drifted from it
            # (a hand-edited file, or a bug). The file is the truth, and the count says
            # when the crawl is over, so it follows the file rather than asking for ever.
            LOGGER.warning("state file: %d queued rows were not there", self._unloaded)
            self._unloaded = 0

    def _next_batch(self, *, starved: bool) -> tuple[_Batch, list[_Waiting]]:
        """What the next transaction writes: the batch, and the completions it carries
        with their callbacks."""
        batch, self._batch = self._batch, _Batch()
        waiting, self._waiting = self._waiting, []
        batch.completions = [completion for completion, _ in waiting]
        batch.load = self._wants_rows(starved=starved)
        outputs_due = time.monotonic() >= self._next_marks
        batch.marks = self._current_marks(outputs=outputs_due)
        if outputs_due:
            self._next_marks = time.monotonic() + MARK_INTERVAL
        if self.limit_counts is not None and self.limit_counts != self._limits_written:
            batch.limit_counts = self._limits_written = dict(self.limit_counts)
        return batch, waiting

    def _after_commit(self, waiting: list[_Waiting], committed: _Committed) -> None:
        """After a transaction committed: its URLs leave the in-flight set, their records
        are made and copied to the outputs, and the rows it loaded join the window."""
        self._unloaded += committed.new_rows
        self._known += committed.new_rows
        records = iter(committed.records)
        for (completion, then), settled in zip(waiting, committed.settled, strict=True):
            if completion.leased:
                assert completion.request is not None
                self.complete(completion.request)
            else:
                self._unleased -= 1
            if completion.record is not None:
                record_id, line = next(records)
                for output in self._outputs:
                    output.write_line(line)
                    if output.name in self._marks:
                        self._marks[output.name] = (output.position(), record_id)
            then(completion, settled)
        self._window(committed.loaded)

    def _window(self, rows: list[tuple[Any, ...]]) -> None:
        """Queue rows loaded from the file in memory, in their order. A row that does not
        hold what this layout writes (a damaged or edited file) is logged and skipped."""
        for row in rows:
            self._cursor = row[0]
            request = _request(row)
            if request is None:
                LOGGER.warning("state file: URL row %s is damaged; skipped", row[0])
                self._batch.damaged.append(row[0])
                continue
            self._enqueue_one(request, first=bool(row[5]))
        self._unloaded -= len(rows)

    # -- origins ---------------------------------------------------------------------------

    def _note_origin(self, key: str, wait_until: float | None = None) -> None:
        origin = self._origins[key]
        text = None if origin.rules is None else origin.rules.as_text()
        self._batch.origins.append(
            OriginNote(
                key,
                origin.robots.value,
                text,
                origin.failure,
                origin.delay,
                wait_until,
            )
        )

    def _restore_origins(self) -> None:
        self._restored_waits: dict[str, float] = {}
        wall = time.time()
        for note in self.file.origins():
            if note.wait_until is not None and note.wait_until > wall:
                self._restored_waits[note.origin] = note.wait_until - wall
            try:
                state = RobotsState(note.robots)
            except ValueError:
                LOGGER.warning("state file: unknown robots state for %s; asking again", note.origin)
                continue
            if state is RobotsState.KNOWN and note.rules is not None:
                rules = RobotsRules.from_text(note.rules)
                self._restore_origin(note.origin, rules=rules, failure=None, delay=note.delay)
            elif state is RobotsState.FAILED:
                self._restore_origin(
                    note.origin,
                    rules=None,
                    failure=note.failure or "robots.txt failed",
                    delay=note.delay,
                )


def _record(line: object) -> FetchStatistic | None:
    try:
        fields = json.loads(line) if isinstance(line, str) else None
        return FetchStatistic(**fields) if isinstance(fields, dict) else None
    except (ValueError, TypeError):
        return None


def stored_roots(path: str) -> tuple[str, ...]:
    """The roots of the crawl in ``path``, for a command that resumes without them.

    Raises:
        StateFileError: The file holds no crawl, or cannot be used (as when opened).
    """
    if not os.path.isdir(path) and (not os.path.exists(path) or os.path.getsize(path) == 0):
        raise StateFileError(path, "holds no crawl yet; give the ROOTs to start one")
    state_file = StateFile(path, roots=(), options={})
    state_file.close()
    return state_file.roots


def open_store(config: CrawlConfig) -> StoredFrontier:
    """Open (or create) the crawl's state file and the frontier over it.

    A finished crawl is left as it is, unless ``recrawl`` starts its next pass.

    Raises:
        StateFileError: The file cannot be used; nothing in it was changed.
    """
    assert config.state is not None
    options = {
        name: value for name, value in config.keywords().items() if name not in ("state", "recrawl")
    }
    state_file = StateFile(config.state, roots=config.roots, options=options)
    try:
        queued, _ = state_file.counts()
        if config.recrawl and queued == 0:
            state_file.new_pass()
        return StoredFrontier(
            state_file,
            delay=config.delay,
            obey_robots=config.obey_robots,
            max_per_host=config.max_per_host,
        )
    except BaseException:
        state_file.close()
        raise


def _request(row: tuple[Any, ...]) -> FetchRequest | None:
    """The request a queued row describes, or None if the row is not one."""
    _, url, depth, redirects_left, sitemap, _, etag, last_modified, num_urls, links = row
    if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        return None
    if not all(
        isinstance(number, int) and number >= 0 for number in (depth, redirects_left, sitemap)
    ):
        return None
    known = None
    if isinstance(links, str) and isinstance(num_urls, int):
        known = KnownPage(
            etag if isinstance(etag, str) else None,
            last_modified if isinstance(last_modified, str) else None,
            tuple(links.split("\n")) if links else (),
            num_urls,
        )
    return FetchRequest(
        url=url, redirects_left=redirects_left, depth=depth, sitemap=sitemap, known=known
    )
