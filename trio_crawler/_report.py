"""The chapter's report (reporting.py), as text.

It returns strings and never prints, so the CLI decides where the report goes (stdout, or
stderr when ``-o -`` takes stdout) and tests read it directly. The layout and counter names
are the chapter's, which scripts written for it may parse; ``Finish reason`` is ours.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ._stats import FetchStatistic, count_records

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence


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
    """The whole report, newline-terminated.

    Args:
        records: Every record of the crawl; they are listed sorted by URL.
        elapsed: Seconds the crawl ran.
        max_tasks: The crawl's worker count, for the urls/sec/task figure.
        todo: URLs queued or in flight when the crawl ended.
        finish_reason: ``finished``, ``deadline``, ``interrupted`` (or a later reason).
        extra_counters: Counters the records cannot show (URLs that never got a record),
            printed among the chapter's, in the same sorted order.
        notes: Lines of the report's own after the counters (a shared crawl's totals).
        date: The ``Date:`` value; defaults to the local time now, as the chapter's.
        made: How many records this run made, for the rate line (``Finished N urls in S
            secs``), which is this run's; defaults to all of ``records``. A resumed crawl's
            report lists the whole crawl's records, but its rate line counts only the
            records made in the ``elapsed`` seconds of this run.
    """
    made = len(records) if made is None else made
    speed = made / elapsed / max_tasks if elapsed > 0 and max_tasks else 0.0
    counters = count_records(records)
    counters.update(extra_counters or {})
    lines = ["*** Report ***"]
    lines.extend(url_line(stat) for stat in sorted(records, key=lambda stat: stat.url))
    lines.append(
        f"Finished {made} urls in {elapsed:.3f} secs"
        f" (max_tasks={max_tasks}) ({speed:.3f} urls/sec/task)"
    )
    lines.extend(f"{count:10d} {key}" for key, count in sorted(counters.items()))
    lines.extend(notes)
    lines.append(f"Todo: {todo}")
    lines.append(f"Done: {len(records)}")
    lines.append(f"Date: {date if date is not None else time.ctime()} local time")
    lines.append(f"Finish reason: {finish_reason}")
    return "\n".join(lines) + "\n"
