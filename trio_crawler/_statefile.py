"""The ``--state`` file: a crawl kept in one SQLite file, so that it outlives its process.

Theory of operation
-------------------
This module is the file and nothing else: :class:`StateFile` opens a file (creating it, or
checking that it is ours and holds the crawl asked for, before writing a byte), reads what a
resumed crawl needs, and writes one :class:`Batch` as one transaction. What the file holds
(its tables, and what a row read back means) is :mod:`trio_crawler._statefile_rows`'s; what
makes a file ours, and the read-only looks a later run takes before the crawl opens it,
are :mod:`trio_crawler._statefile_checks`'s. How a crawl uses the file (a window of its
queue in memory, group commit, when a URL counts as done) is the SQLite store's,
:mod:`trio_crawler._store_sqlite`.

What a transaction holds. A batch carries the URLs done with their records (and the items a
page handler made of each page) and their links ``INSERT OR IGNORE``d (whose new rows are the
answer to "how many were new"), the origins' robots.txt rules and waits, the URLs robots.txt
turned away, and how far each output file had got; all of it commits together or not at
all. A page's items are thus kept exactly when its record is. The file is SQLite in WAL mode
with ``synchronous=NORMAL``: a SIGKILL loses no committed transaction, and a power loss may
lose the last few (their URLs are fetched again), never corrupt the file.

Outputs. Each transaction can store how far each output had got (its size and the last
record written to it). On resume an output is cut back to that size and the records (or,
for an ``--items`` file, the items of the records) after that one are written again (see
:mod:`trio_crawler._output`), so it ends with exactly one line per record (each page's
items once) however the last run ended. A WARC file is cut back to its stored size: a URL
fetched again may appear twice in it, as WARC allows, and the file stays valid.
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
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._frontier import Completion, Resumed, Settled
from ._report import url_line
from ._statefile_checks import StateFileError, check_header, check_layout, other_crawl
from ._statefile_rows import (
    APPLICATION_ID,
    DISALLOWED,
    DONE,
    LISTING,
    ORIGIN_SQL,
    QUEUED,
    QUEUED_BY_ORIGIN,
    SCHEMA,
    SCHEMA_VERSION,
    OriginNote,
    origin_sql,
)
from ._stats import FetchStatistic, count_record

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence

LOGGER = logging.getLogger("trio_crawler")

# Whether a record's row in ``listing`` (l) is one this layout writes, for the report to
# take its line and counters; a damaged one is listed from the record's JSON instead.
_LISTED = (
    "(typeof(l.url) = 'text' AND typeof(l.line) = 'text'"
    " AND json_valid(l.counts) AND json_type(l.counts) = 'object')"
)


# A record's URL, read from its JSON; NULL for a row whose JSON is not valid.
_URL_OF_JSON = "CASE WHEN json_valid(json) THEN json_extract(json, '$.url') END"


# Links known to be in the file, kept in memory so that the links a page shares with many
# others (navigation, mostly) are not looked up in the file again and again. Measured on
# the 10 000-page synthetic site (23 links a page, nearly all seen before): the lookups
# were three quarters of the file's CPU. 50 000 URLs cost about 6 MiB; when it is full the
# oldest half is forgotten (a forgotten URL is only looked up in the file again).
KNOWN_CACHE = 50_000


@dataclass(slots=True)
class Batch:
    """What one transaction writes."""

    completions: list[Completion] = field(default_factory=list)
    disallowed: list[str] = field(default_factory=list)
    # Links offered that their origin's known robots.txt rules forbid: kept as seen, not
    # queued (the store checks them when it takes the completion, as memory does).
    turned_away: set[str] = field(default_factory=set)
    damaged: list[int] = field(default_factory=list)  # URL rows that are no URL rows
    origins: list[OriginNote] = field(default_factory=list)
    marks: list[tuple[str, int, int]] = field(default_factory=list)  # path, bytes, last id
    limit_counts: dict[str, int] | None = None
    load: int = 0  # rows to load into the window after committing
    # Origins whose next queued rows to load after committing, each after a row id.
    reach: list[tuple[str, int]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return self.beyond_notes() or bool(self.origins)

    def beyond_notes(self) -> bool:
        """Whether it holds more than origin notes, which may wait for company."""
        return bool(self.completions or self.disallowed or self.damaged or self.load or self.reach)


@dataclass(slots=True)
class Committed:
    """What one transaction answered."""

    settled: list[Settled]
    new_rows: int  # new rows queued
    turned_away: list[str]  # new rows that robots.txt rules forbid
    records: list[tuple[int, str]]  # record id, JSON line, in completion order
    loaded: list[tuple[Any, ...]]
    # The rows of origins reached beyond the window (StateFile.reach), and the origins
    # (as ORIGIN_SQL spells them) of the rows this transaction queued.
    reached: list[tuple[Any, ...]] = field(default_factory=list)
    new_origins: list[str] = field(default_factory=list)


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
            check_header(path)
        self._lock(new)
        try:
            self._db = self._connect()
            if new:
                self._create(roots, options)
            else:
                self._check(roots)  # before anything is written, WAL mode included
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            if not new:  # a file from before the index, or the listing
                self._db.execute(QUEUED_BY_ORIGIN)
                self._db.execute(LISTING)
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
                f"PRAGMA user_version={SCHEMA_VERSION};"
                + SCHEMA
                + QUEUED_BY_ORIGIN
                + ";"
                + LISTING
                + ";"
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
            check_layout(self._db, self.path)
            (verdict,) = self._db.execute("PRAGMA quick_check").fetchone()
            if verdict != "ok":
                raise StateFileError(self.path, f"corrupt state file ({verdict})")
            stored = tuple(json.loads(self._get("roots")))
        except sqlite3.Error as exc:
            raise StateFileError(self.path, f"corrupt state file ({exc})") from None
        if roots and tuple(roots) != stored:
            raise other_crawl(self.path, stored)

    # -- reading -------------------------------------------------------------------------

    def counts(self) -> tuple[int, int]:
        """URLs queued and URLs known (queued, done or disallowed) in the file."""
        queued = self._db.execute("SELECT count(*) FROM urls WHERE state = ?", (QUEUED,))
        known = self._db.execute("SELECT count(*) FROM urls")
        return queued.fetchone()[0], known.fetchone()[0]

    def resumed(self) -> Resumed:
        """This pass's record counts and limit counters so far."""
        groups = self._db.execute(
            "SELECT json_extract(json, '$.status'), json_extract(json, '$.content_type'),"
            " json_extract(json, '$.exception') IS NOT NULL,"
            " json_extract(json, '$.next_url') IS NOT NULL, count(*)"
            " FROM records WHERE pass = ?"
            " AND CASE WHEN json_valid(json) THEN json_type(json) = 'object' END"
            " GROUP BY 1, 2, 3, 4",
            (self.pass_number,),
        )
        kinds: Counter[str] = Counter()
        for status, content_type, failed, redirected, count in groups:
            shape = FetchStatistic(
                url="",
                status=status,
                content_type=content_type,
                exception="?" if failed else None,
                next_url="?" if redirected else None,
            )
            kinds[shape.kind] += count
        limits = json.loads(self._get("limit_counts"))
        return Resumed(records=sum(kinds.values()), kinds=kinds, limit_counts=limits)

    def origins(self) -> list[OriginNote]:
        """Every origin whose robots.txt or waits were kept."""
        rows = self._db.execute(
            "SELECT origin, robots, rules, failure, delay, wait_until, robots_at, pace FROM origins"
        )
        return [OriginNote(*row) for row in rows]

    def records(self, after: int = 0) -> Iterator[tuple[int, str]]:
        """This pass's records (id, JSON line) after record ``after``, in the order made,
        read one at a time, however many there are."""
        with self._reading() as db:
            yield from db.execute(
                "SELECT id, json FROM records WHERE pass = ? AND id > ? ORDER BY id",
                (self.pass_number, after),
            )

    def listing(self) -> Iterator[tuple[int, str | None, str | None]]:
        """This pass's records sorted by URL, for the report, each as (id, its line, None),
        or as (id, None, its JSON) where the file has no line for it (see
        :data:`~trio_crawler._statefile_rows.LISTING`): :meth:`listed_counts` counts the
        former, and the caller the latter, from their JSON.

        SQLite sorts them (in its own bounded memory, spilling to a temporary file), and
        the rows are read one at a time, however many there are. Its BINARY collation
        compares UTF-8 bytes, which orders text as Python orders ``str``. A row whose JSON
        is not valid sorts first (its URL unknown); the caller skips it.
        """
        with self._reading() as db:  # the table is there: opening the file made sure
            yield from db.execute(
                f"SELECT r.id, CASE WHEN {_LISTED} THEN l.line END,"
                f" CASE WHEN {_LISTED} THEN NULL ELSE r.json END"
                " FROM records AS r LEFT JOIN listing AS l ON l.record = r.id"
                f" WHERE r.pass = ? ORDER BY CASE WHEN {_LISTED} THEN l.url"
                f" ELSE {_URL_OF_JSON} END, r.id",
                (self.pass_number,),
            )

    def listed_counts(self) -> Counter[str]:
        """The counters of the records that :meth:`listing` gives as lines."""
        with self._reading() as db:
            sums = db.execute(
                "SELECT j.key, sum(j.value) FROM records AS r"
                " JOIN listing AS l ON l.record = r.id, json_each(l.counts) AS j"
                f" WHERE r.pass = ? AND {_LISTED} AND j.type = 'integer' GROUP BY j.key",
                (self.pass_number,),
            )
            return Counter(dict(sums))

    def items(self, after: int = 0) -> Iterator[tuple[int, str]]:
        """This pass's items (record id, the page's lines joined by newlines) after record
        ``after``, in the order the records were made."""
        with self._reading() as db:
            yield from db.execute(
                "SELECT i.record, i.lines FROM items AS i JOIN records AS r ON r.id = i.record"
                " WHERE r.pass = ? AND i.record > ? ORDER BY i.record",
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
        """Queued rows after id ``after``, with what a recrawl kept of each page and, last,
        the row's origin (ORIGIN_SQL). The rows are found by id: those before the
        window's cursor are done, or loaded."""
        query = self._select_rows("id > ? AND state = ? ORDER BY id LIMIT ?")
        return self._db.execute(query, (after, QUEUED, limit)).fetchall()

    def queued_origins(self) -> list[str]:
        """The origins (ORIGIN_SQL) with queued rows, read from the origins' index."""
        query = f"SELECT DISTINCT {ORIGIN_SQL} FROM urls WHERE state = {QUEUED}"
        return [origin for (origin,) in self._db.execute(query)]

    def reach(self, origins: Sequence[tuple[str, int]], limit: int) -> list[tuple[Any, ...]]:
        """For each (origin, after): up to ``limit`` of its queued rows after id ``after``,
        in order, as :meth:`load` gives them. One look-up in the origins' index each."""
        # The state as a literal, which the partial index's own condition matches.
        query = self._select_rows(
            f"{{origin}} = ? AND id > ? AND state = {QUEUED} ORDER BY id LIMIT ?"
        )
        db = self._db
        rows: list[tuple[Any, ...]] = []
        for origin, after in origins:
            rows += db.execute(query, (origin, after, limit)).fetchall()
        return rows

    def _select_rows(self, where: str) -> str:
        """The query of :meth:`load` and :meth:`reach`: ``where`` over the urls table, in
        which ``{origin}`` stands for the row's origin (the index's expression, so that
        the index serves it)."""
        if self.pass_number == 1:
            origin = ORIGIN_SQL
            columns = "id, url, depth, redirects_left, sitemap, first, NULL, NULL, NULL, NULL"
            tables = "urls"
        else:
            origin = origin_sql("urls.url")
            columns = (
                "id, urls.url, depth, redirects_left, sitemap, first,"
                " pages.etag, pages.last_modified, pages.num_urls, pages.links"
            )
            tables = "urls LEFT JOIN pages ON pages.url = urls.url"
        return (
            f"SELECT {columns}, referrer, {origin} FROM {tables}"
            f" WHERE {where.format(origin=origin)}"
        )

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

    def commit(self, batch: Batch) -> Committed:
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
        # Links to queue, each with the completion that offers it first (for its count):
        # [url, depth, redirects_left, sitemap, first, state, referrer].
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
                        referrer = offer.referrer
                        for url in offer.urls:
                            if url not in self._in_file:
                                state = DISALLOWED if url in batch.turned_away else QUEUED
                                offered.append([url, *row, state, referrer])
                                offered_by.append(index)
                    else:
                        counted = _count_unseen(db, offer.urls)
                        unseen[index] = unseen.get(index, 0) + counted
                        if offer.over_depth:
                            beyond[index] = beyond.get(index, 0) + counted
            new_by, turned_away, new_origins = self._insert(offered, offered_by)
            settled: list[Settled] = []
            records: list[tuple[int, str]] = []
            done: list[str] = []
            record_rows: list[list[Any]] = []
            listed: list[list[Any]] = []
            item_rows: list[list[Any]] = []
            pages: list[list[Any]] = []
            new_rows = 0
            for index, completion in enumerate(batch.completions):
                inserted, away = new_by.get(index, (0, 0))
                new_rows += inserted - away
                answer = Settled(
                    new=inserted + unseen.get(index, 0),
                    disallowed=away,
                    beyond=beyond.get(index, 0),
                )
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
                counts: Counter[str] = Counter()
                count_record(counts, record)
                listed.append([self._next_record, record.url, url_line(record), counts])
                if completion.items:
                    item_rows.append([self._next_record, "\n".join(completion.items)])
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
            if listed:
                db.execute(
                    "INSERT INTO listing SELECT json_extract(value, '$[0]'),"
                    " json_extract(value, '$[1]'), json_extract(value, '$[2]'),"
                    " json_extract(value, '$[3]') FROM json_each(?)",
                    (json.dumps(listed),),
                )
            if item_rows:
                db.execute(
                    "INSERT INTO items SELECT json_extract(value, '$[0]'),"
                    " json_extract(value, '$[1]') FROM json_each(?)",
                    (json.dumps(item_rows),),
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
                    "INSERT OR REPLACE INTO origins VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [dataclasses.astuple(note) for note in batch.origins],
                )
            if batch.marks:
                db.executemany(
                    "INSERT OR REPLACE INTO outputs VALUES (?, ?, ?, ?)",
                    [(path, pass_number, size, last) for path, size, last in batch.marks],
                )
            if batch.limit_counts is not None:
                self._set("limit_counts", json.dumps(batch.limit_counts, sort_keys=True))
        return Committed(settled, new_rows, turned_away, records, [], new_origins=new_origins)

    @property
    def last_record(self) -> int:
        """The id of the last record written to the file (0 for none)."""
        return self._next_record

    @property
    def closed(self) -> bool:
        return getattr(self, "_db", None) is None

    def _insert(
        self, offered: list[list[Any]], offered_by: list[int]
    ) -> tuple[dict[int, tuple[int, int]], list[str], list[str]]:
        """Queue the links that are new to the file, in one statement; say how many of
        them each completion offered first (by its index in the batch), and of those how
        many robots.txt turned away (rows kept as seen, not queued), and which; and the
        origins of the rows it queued.

        The links are inserted in the order offered, so the rows new to the file are the
        ones above the highest id before, and one more statement reads them back as one
        JSON array: a link offered by two pages of a batch is new for the first.
        """
        if not offered:
            return {}, [], []
        db = self._db
        db.execute(
            "INSERT OR IGNORE INTO urls"
            " (url, state, depth, redirects_left, sitemap, first, referrer)"
            " SELECT json_extract(value, '$[0]'), json_extract(value, '$[5]'),"
            " json_extract(value, '$[1]'),"
            " json_extract(value, '$[2]'), json_extract(value, '$[3]'),"
            " json_extract(value, '$[4]'), json_extract(value, '$[6]') FROM json_each(?)",
            (json.dumps(offered),),
        )
        last, new_urls, new_origins = db.execute(
            "SELECT max(id), json_group_array(url),"
            f" json_group_array(DISTINCT CASE WHEN state = {QUEUED} THEN {ORIGIN_SQL} END)"
            " FROM urls WHERE id > ?",
            (self._last_url,),
        ).fetchone()
        new = set(json.loads(new_urls))
        if last is not None:
            self._last_url = last
        new_by: dict[int, tuple[int, int]] = {}
        turned_away = []
        for (url, _, _, _, _, state, _), index in zip(offered, offered_by, strict=True):
            if url in new:
                new.discard(url)  # counted once, for the first page that offers it
                inserted, away = new_by.get(index, (0, 0))
                if state == DISALLOWED:
                    turned_away.append(url)
                    away += 1
                new_by[index] = (inserted + 1, away)
        known = self._in_file
        if len(known) + len(offered) > KNOWN_CACHE:
            for url in list(itertools.islice(known, len(known) // 2)):
                del known[url]
        known.update(dict.fromkeys(url for url, *_ in offered))
        origins = [origin for origin in json.loads(new_origins) if origin is not None]
        return new_by, turned_away, origins

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


def _count_unseen(db: sqlite3.Connection, urls: Iterable[str]) -> int:
    return sum(
        1
        for url in urls
        if db.execute("SELECT 1 FROM urls WHERE url = ?", (url,)).fetchone() is None
    )
