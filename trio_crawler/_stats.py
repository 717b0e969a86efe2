"""The contract's record, FetchStatistic, and the report's counters.

One FetchStatistic is made per URL that finished, fetched or given up on. Its first nine
field names are the chapter's; they and the ones after them are part of the public contract
(the CLI writes them as JSON Lines; scripts read them), so the dataclass is frozen and its
field order fixed.

Every count of records by what became of them is made here, from one definition: a
record's :attr:`FetchStatistic.kind`. The report's counters (:func:`count_records`), the
progress line's ``error`` and ``fail`` (the core's
:class:`~trio_crawler._counts.CrawlCounts`) and a resumed crawl's counts read back from a
state file all classify records with it, so the numbers on one screen cannot disagree.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
        handler_error: None, or ``"ExceptionClassName: message"`` when the page handler
            raised for this page (its items were dropped; its links were still queued).
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
    handler_error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as the JSON object of the contract, keys in contract order."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def to_json(self) -> str:
        """One line of JSON, no trailing newline."""
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(", ", ": "))

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
    return counters
