"""The ``--state`` file's layout: its tables, and what a row read back from them means.

Theory of operation
-------------------
:mod:`trio_crawler._statefile` handles the file (opens and locks it, checks that it is ours,
writes one transaction at a time); this module is what the file holds. They are apart
because a change here is of another kind: it changes the layout, which files written by
earlier runs still have, so it goes with a new :data:`SCHEMA_VERSION` (a file of another
layout is refused, not misread). Here every such decision is on one page: the tables, the
states of a URL row, the columns of an origin's row, and how a row becomes a request or a
record again.

A row read back is checked, not trusted: the file outlives the process that wrote it and
may have been edited or damaged since. :func:`request_from_row` and
:func:`record_from_line` answer None for a row that is not what this layout writes, and
the SQLite store sets such a row aside (logged, not fetched, not copied to ``-o``) rather
than let one bad row end a resumed crawl. Neither touches a connection.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ._events import FetchRequest, KnownPage
from ._stats import FetchStatistic, record_from_fields

# Identifies the file as ours ("TCrw") and its layout; another SQLite file is refused.
APPLICATION_ID = 0x54437277
# Layout 2 over 1: each URL's referrer (its record carries it), the items table (a page
# handler's items, kept with their page's record), the origins' robots_at and pace.
SCHEMA_VERSION = 2

# URL states in the file.
QUEUED, DONE, DISALLOWED = 0, 1, 2


# A URL row's origin, as SQL reads it: the URL up to the "/" that begins its path. The URLs
# are normalised, so that is ``scheme://host[:port]``, what origin_of() gives, but for a
# userinfo part, which origin_of() drops (the store then finds such URLs only in turn).
def origin_sql(column: str = "url") -> str:
    """The origin of the URL in ``column``, as an SQL expression."""
    return f"substr({column}, 1, instr(substr({column}, 9), '/') + 7)"


ORIGIN_SQL = origin_sql()

# The queued URLs of an origin, in the order found: how the store reaches the next URLs of
# a host whose URLs lie beyond the window (see _store_sqlite.py). An index, not a column,
# so a file from before it is the same layout: opening it for a crawl adds the index.
QUEUED_BY_ORIGIN = (
    f"CREATE INDEX IF NOT EXISTS urls_queued_by_origin ON urls ({ORIGIN_SQL}, id)"
    f" WHERE state = {QUEUED}"
)

# Each record's line in the report and the counters it adds (a JSON object), written with
# the record: the report at the end of every run lists every record of the pass, and reading
# these is several times cheaper than rebuilding each record from its JSON (10 000 records:
# 20 ms against 90 ms, measured). A table of its own, not columns of ``records``, so a file
# from before it is the same layout: opening it for a crawl adds the table, and a record
# without a row here (written before, or by a version that does not know the table) is
# listed from its JSON as before. Record ids are never reused, so a row here is never taken
# for another record's.
LISTING = """CREATE TABLE IF NOT EXISTS listing (
    record INTEGER PRIMARY KEY,
    url TEXT NOT NULL,
    line TEXT NOT NULL,
    counts TEXT NOT NULL
)"""

SCHEMA = """
CREATE TABLE crawl (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE urls (
    id INTEGER PRIMARY KEY,
    url TEXT NOT NULL UNIQUE,
    state INTEGER NOT NULL,
    depth INTEGER NOT NULL,
    redirects_left INTEGER NOT NULL,
    sitemap INTEGER NOT NULL,
    first INTEGER NOT NULL,
    referrer TEXT
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
CREATE TABLE items (
    record INTEGER PRIMARY KEY,
    lines TEXT NOT NULL
);
CREATE TABLE origins (
    origin TEXT PRIMARY KEY,
    robots TEXT NOT NULL,
    rules TEXT,
    failure TEXT,
    delay REAL,
    wait_until REAL,
    robots_at REAL,
    pace TEXT
) WITHOUT ROWID;
CREATE TABLE outputs (
    path TEXT NOT NULL,
    pass INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    last_record INTEGER NOT NULL,
    PRIMARY KEY (path, pass)
) WITHOUT ROWID;
"""


@dataclass(frozen=True, slots=True)
class OriginNote:
    """An origin's state, to keep: robots.txt rules or failure, delay, Retry-After, when
    its robots.txt was decided (a time of day) and its learnt pace (``gap window
    ceiling``, see :mod:`trio_crawler._pace`; None while it never pushed back).

    A row of the ``origins`` table, column for column (it is written and read as a tuple).
    ``delay`` is the origin's own (its ``Crawl-delay``), never a run's ``--delay``, which
    is each run's; files written before kept the delay in force there, so a resumed crawl
    reads the ``Crawl-delay`` from ``rules`` instead.
    """

    origin: str
    robots: str
    rules: str | None
    failure: str | None
    delay: float | None
    wait_until: float | None
    robots_at: float | None = None
    pace: str | None = None


def items_from_text(text: object) -> str | None:
    """A row of the items table as the lines it writes to ``--items`` (joined by
    newlines), or None if any of them is not the JSON object a handler's item is."""
    if not isinstance(text, str) or not text:
        return None
    try:
        if all(isinstance(json.loads(line), dict) for line in text.split("\n")):
            return text
    except ValueError:
        pass
    return None


def record_from_line(line: object) -> FetchStatistic | None:
    try:
        fields = json.loads(line) if isinstance(line, str) else None
        return record_from_fields(fields) if isinstance(fields, dict) else None
    except (ValueError, TypeError):
        return None


def request_from_row(row: tuple[Any, ...]) -> FetchRequest | None:
    """The request a queued row describes, or None if the row is not one."""
    _, url, depth, redirects_left, sitemap, _, etag, last_modified, num_urls, links, referrer = row[
        :11
    ]  # then its origin, which the store reads
    if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        return None
    if not (referrer is None or isinstance(referrer, str)):
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
        url=url,
        redirects_left=redirects_left,
        depth=depth,
        sitemap=sitemap,
        known=known,
        referrer=referrer,
    )
