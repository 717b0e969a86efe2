"""The contract's record, FetchStatistic, and the report's counters.

One FetchStatistic is made per URL that finished, fetched or given up on. Its first nine
field names are the chapter's, and the five after them say where the URL was found and
when it was fetched; all fourteen are part of the public contract (the CLI writes them as
JSON Lines; scripts read them), so the dataclass is frozen and its field order fixed.

Every count of records by what became of them is made here, from one definition: a
record's :attr:`FetchStatistic.kind`. The report's counters (:func:`count_records`), the
progress line's ``error`` and ``fail`` (the core's
:class:`~trio_crawler._counts.CrawlCounts`) and a resumed crawl's counts read back from a
state file all classify records with it, so the numbers on one screen cannot disagree.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Iterable


# HTTP's "not modified" (RFC 9110 section 15.4.5): the answer to a recrawl's conditional
# request for a page unchanged since the last pass.
NOT_MODIFIED_STATUS = 304


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchStatistic:
    """What happened to one URL.

    Attributes:
        url: The URL fetched (absolute, no fragment).
        next_url: The absolute redirect target for a redirect, else None.
        status: The HTTP status code, or None when every try failed.
        exception: None, or ``"ExceptionClassName: message"`` for the last error.
        size: Body bytes after Content-Encoding is undone (0 for redirects and failures).
        content_type: The media type without parameters for status 200, else None.
        encoding: For status 200, the charset used to decode the page, else None.
        num_urls: Distinct in-scope links on the page.
        num_new_urls: Of those, how many had not been seen before this page.
        depth: Link hops from a root (a root is 0; a redirect target keeps its source's
            depth; a sitemap's ``<loc>`` is 1).
        referrer: The URL of the page, sitemap or redirect through which this URL was
            first queued; None for a root.
        fetched_at: When the last attempt started, UTC, ISO 8601 with milliseconds
            (``2026-11-25T08:30:00.123Z``); None if no attempt was made.
        elapsed: Seconds from the start of the last attempt to its last byte or failure;
            None if no attempt was made.
        handler_error: ``"ExceptionClassName: message"`` when the page handler raised for
            this page, else None.
    """

    url: str
    next_url: str | None = None
    status: int | None = None
    exception: str | None = None
    size: int = 0
    content_type: str | None = None
    encoding: str | None = None
    num_urls: int = 0
    num_new_urls: int = 0
    depth: int = 0
    referrer: str | None = None
    fetched_at: str | None = None
    elapsed: float | None = None
    handler_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as the JSON object of the contract, keys in contract order."""
        return {name: getattr(self, name) for name in _RECORD_KEYS}

    def to_json(self) -> str:
        """One line of JSON, no trailing newline: exactly what ``json.dumps`` makes of
        :meth:`to_dict` (``ensure_ascii=False``, ``", "`` and ``": "``), written out by
        hand because it runs once per record, in half the encoder's time."""
        return (
            f'{{"url": {_string(self.url)}, "next_url": {_text(self.next_url)}, '
            f'"status": {_number(self.status)}, "exception": {_text(self.exception)}, '
            f'"size": {_number(self.size)}, "content_type": {_text(self.content_type)}, '
            f'"encoding": {_text(self.encoding)}, "num_urls": {_number(self.num_urls)}, '
            f'"num_new_urls": {_number(self.num_new_urls)}, "depth": {_number(self.depth)}, '
            f'"referrer": {_text(self.referrer)}, "fetched_at": {_text(self.fetched_at)}, '
            f'"elapsed": {_number(self.elapsed)}, '
            f'"handler_error": {_text(self.handler_error)}}}'
        )

    @property
    def kind(self) -> str:
        """The record's class, the name of the report's counter that counts it.

        The chapter's classes (reporting.py), in its order: ``fail`` (every try failed:
        no status), ``redirect``, ``html``, ``other`` (any other 200), and ``error`` for
        every other status (404, 500, a 3xx without a Location). One class is ours:
        ``not_modified``, a 304, which a recrawl asks for (``If-None-Match``) and which
        says the page is unchanged since the last pass, whose links it follows: no error.
        """
        if self.exception is not None:
            return "fail"
        if self.next_url is not None:
            return "redirect"
        if self.content_type == "text/html":
            return "html"
        if self.status == 200:
            return "other"
        if self.status == NOT_MODIFIED_STATUS:
            return "not_modified"
        return "error"


# The record's keys, in contract order: read once, not from dataclasses.fields() per record.
_RECORD_KEYS = tuple(field.name for field in dataclasses.fields(FetchStatistic))
_RECORD_KEY_SET = frozenset(_RECORD_KEYS)
# Each field's slot, set directly (the member descriptor's __set__): see record_from_fields.
_SLOT_SETTERS = tuple((name, getattr(FetchStatistic, name).__set__) for name in _RECORD_KEYS)


def record_from_fields(fields: dict[str, Any]) -> FetchStatistic:
    """The record a decoded JSON object holds: ``FetchStatistic(**fields)``, faster.

    A state file's report decodes every record of the crawl (a million for a crawl of a
    million pages), and a frozen dataclass's ``__init__`` sets each of the 14 fields through
    ``object.__setattr__``: 5.6 µs a record, more than ``json.loads`` of its line. An object
    with exactly the record's keys, as this crawler writes them, has its slots set directly
    instead, in a third of that; any other goes through ``__init__``, which fills in the
    defaults of missing fields and refuses the rest.

    Raises:
        TypeError: A key that is no field, or no ``url`` (as ``__init__`` would).
    """
    if fields.keys() != _RECORD_KEY_SET:
        return FetchStatistic(**fields)
    record = object.__new__(FetchStatistic)
    for name, set_slot in _SLOT_SETTERS:
        set_slot(record, fields[name])
    return record


# What json.dumps(..., ensure_ascii=False, separators=(", ", ": ")) makes anew on every call:
# made once. FetchStatistic.to_json writes the same by hand, with the encoder's own pieces.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(", ", ": "))
_string = json.encoder.encode_basestring  # a JSON string, as ensure_ascii=False writes it


def _text(value: str | None) -> str:
    return "null" if value is None else _string(value)


def _number(value: float | None) -> str:
    if value is None:
        return "null"
    if value.__class__ is int or (value.__class__ is float and math.isfinite(value)):
        return value.__repr__()  # what the encoder writes for an int and a finite float
    return _ENCODER.encode(value)  # NaN, Infinity, a bool, an int or float subclass


class Stamp(NamedTuple):
    """When a URL's last attempt started and how long it took: a record's ``fetched_at``
    and ``elapsed``."""

    fetched_at: str
    elapsed: float

    @classmethod
    def of_attempt(cls, started: float, ended: float, wall_offset: float) -> Stamp:
        """The stamp of an attempt from ``started`` to ``ended`` on the engine's clock,
        which ``wall_offset`` turns into the time of day; ``elapsed`` to the microsecond."""
        return cls(utc_timestamp(started + wall_offset), round(ended - started, 6))


def utc_timestamp(seconds: float) -> str:
    """A time of day (seconds since the epoch) as a record's ``fetched_at``: UTC, ISO 8601
    with milliseconds, cut (not rounded) to the millisecond: ``2026-11-25T08:30:00.123Z``.

    A pure function of its argument: the core stamps records with it and reads no clock.
    It runs once per record, so it is kept cheap: the seconds are formatted once per
    second of the crawl (``time.strftime`` and ``gmtime``, a microsecond; a ``datetime``
    takes more), and each record adds its milliseconds (a third of that).
    """
    whole, millis = divmod(math.floor(seconds * 1000), 1000)
    return f"{_utc_second(whole)}.{millis:03d}Z"


@functools.lru_cache(maxsize=1)
def _utc_second(whole: int) -> str:
    """The time of day ``whole`` (whole seconds since the epoch) as :func:`utc_timestamp`
    writes it, to the second; the last one is kept, for the records of that second."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))


def exception_name(exception: str) -> str:
    """The class name from a record's ``exception`` string."""
    return exception.split(":", 1)[0]


def count_records(records: Iterable[FetchStatistic]) -> Counter[str]:
    """The chapter's counters for a set of records.

    One counter per :attr:`~FetchStatistic.kind`, and under it: ``fail_<Exception>`` for
    failures; ``<kind>_bytes`` for ``html``, ``other`` and ``error``; ``status_<code>``
    for ``error`` and ``not_modified`` (always 304: its own counter, ``status_304``, is
    kept as the chapter would have counted it). Only counters that were counted appear,
    as in the chapter, so a Counter (which keeps no zero entries from ``+=``) is the
    natural container.
    """
    counters: Counter[str] = Counter()
    for stat in records:
        count_record(counters, stat)
    return counters


def count_record(counters: Counter[str], stat: FetchStatistic) -> None:
    """Add one record to ``counters`` (see :func:`count_records`), for a caller that
    reads the records one at a time and keeps none."""
    kind = stat.kind
    counters[kind] += 1
    if kind == "fail":
        assert stat.exception is not None
        counters[f"fail_{exception_name(stat.exception)}"] += 1
    elif kind in ("html", "other", "error"):
        counters[f"{kind}_bytes"] += stat.size
    if kind in ("error", "not_modified"):
        counters[f"status_{stat.status}"] += 1
    if stat.handler_error is not None:
        counters["handler_error"] += 1
