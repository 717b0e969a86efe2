"""The chapter's report (reporting.py), as text.

It returns strings and never prints, so the CLI decides where the report goes (stdout, or
stderr when ``-o -`` takes stdout) and tests read it directly. The layout and counter names
are the chapter's, which scripts written for it may parse; ``Finish reason`` is ours.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._stats import FetchStatistic, count_record

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence


def url_line(stat: FetchStatistic) -> str:
    """One record's line, in the chapter's four shapes."""
    kind = stat.kind
    if kind == "fail":
        return f"{stat.url} error {stat.exception}"
    if kind == "redirect":
        return f"{stat.url} {stat.status} redirect {stat.next_url}"
    line = f"{stat.url} {stat.status} {stat.content_type} {stat.encoding} {stat.size}"
    if kind == "html":
        line += f" {stat.num_new_urls}/{stat.num_urls}"
    return line


@dataclass
class Listing:
    """The report's URL lines, made already, with the counters of the records they list.

    A state file keeps each record's line and counters beside its JSON, so that the report
    at the end of a long crawl reads them rather than rebuilding every record (see
    :meth:`trio_crawler._statefile.StateFile.listing`). ``lines`` (without newlines, in
    URL order) are read once; ``counters`` holds every record's once they have been.
    """

    lines: Iterable[str]
    counters: Counter[str]

    @classmethod
    def of(cls, by_url: Iterable[FetchStatistic]) -> Listing:
        """The listing of records read one at a time (held in memory, or read back)."""
        counters: Counter[str] = Counter()
        return cls(_lines_counted(by_url, counters), counters)


def _lines_counted(by_url: Iterable[FetchStatistic], counters: Counter[str]) -> Iterator[str]:
    for stat in by_url:
        count_record(counters, stat)
        yield url_line(stat)


def format_report(
    records: Sequence[FetchStatistic],
    *,
    elapsed: float,
    max_tasks: int,
    todo: int,
    finish_reason: str,
    extra_counters: Mapping[str, int] | None = None,
    notes: Sequence[str] = (),
    date: str | None = None,
    made: int | None = None,
) -> str:
    """The whole report, newline-terminated: :func:`report_lines` of ``records`` sorted
    by URL, joined."""
    lines = report_lines(
        sorted_by_url(records),
        elapsed=elapsed,
        max_tasks=max_tasks,
        todo=todo,
        finish_reason=finish_reason,
        extra_counters=extra_counters,
        notes=notes,
        date=date,
        made=made,
    )
    return "".join(lines)


def sorted_by_url(records: Iterable[FetchStatistic]) -> list[FetchStatistic]:
    """Records held in memory in the report's order, as :func:`report_lines` takes them
    (a state file's come sorted from the file instead)."""
    return sorted(records, key=lambda stat: stat.url)


def report_lines(
    by_url: Iterable[FetchStatistic] | Listing,
    *,
    elapsed: float,
    max_tasks: int,
    todo: int,
    finish_reason: str,
    extra_counters: Mapping[str, int] | None = None,
    notes: Sequence[str] = (),
    date: str | None = None,
    made: int | None = None,
) -> Iterator[str]:
    """The report, one newline-terminated line at a time.

    The records are read once, in the order given, and none is kept: a state file's
    records can come straight from the file, so the report of a crawl of millions of pages
    takes no more memory than one of ten.

    Args:
        by_url: Every record of the crawl, sorted by URL (the order they are listed in),
            or their :class:`Listing`.
        elapsed: Seconds the crawl ran.
        max_tasks: The crawl's worker count, for the urls/sec/task figure.
        todo: URLs queued or in flight when the crawl ended.
        finish_reason: ``finished``, ``deadline``, ``interrupted`` (or a later reason).
        extra_counters: Counters the records cannot show (URLs that never got a record),
            printed among the chapter's, in the same sorted order.
        notes: Lines of the report's own after the counters (a shared crawl's totals).
        date: The ``Date:`` value; defaults to the local time now, as the chapter's.
        made: How many records this run made, for the rate line (``Finished N urls in S
            secs``), which is this run's; defaults to all of the records. A resumed
            crawl's report lists the whole crawl's records, but its rate line counts only
            the records made in the ``elapsed`` seconds of this run.
    """
    yield "*** Report ***\n"
    listing = by_url if isinstance(by_url, Listing) else Listing.of(by_url)
    listed = 0
    for line in listing.lines:
        listed += 1
        yield line + "\n"
    counters = Counter(listing.counters)
    made = listed if made is None else made
    speed = made / elapsed / max_tasks if elapsed > 0 and max_tasks else 0.0
    yield (
        f"Finished {made} urls in {elapsed:.3f} secs"
        f" (max_tasks={max_tasks}) ({speed:.3f} urls/sec/task)\n"
    )
    counters.update(extra_counters or {})
    for key, count in sorted(counters.items()):
        yield f"{count:10d} {key}\n"
    for note in notes:
        yield note + "\n"
    yield f"Todo: {todo}\n"
    yield f"Done: {listed}\n"
    yield f"Date: {date if date is not None else time.ctime()} local time\n"
    yield f"Finish reason: {finish_reason}\n"
