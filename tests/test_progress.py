"""The live progress line (``_progress.py``), drawn from a snapshot of the crawl's counts.

Its numbers are the report's, under the report's names; the command drawing it on a real
terminal after a crawl, beside that crawl's report, is test_cli.py's.
"""

from __future__ import annotations

import io
import time

from rich.console import Console

from trio_crawler._counts import CrawlCounts
from trio_crawler._progress import ProgressDisplay


def line(stats: CrawlCounts) -> str:
    display = ProgressDisplay(Console(file=io.StringIO(), width=200))
    return display.render(stats).plain


def test_the_line_names_its_counts_as_the_report_does() -> None:
    drawn = line(CrawlCounts(queued=4, in_flight=2, done=12, seen=18, error=3, fail=1))
    assert drawn.startswith("12 done  4 queued  2 in flight  0.0 pages/s  3 error  1 fail  ")
    assert "leased elsewhere" not in drawn  # a crawl of one process has none


def test_urls_other_processes_hold_are_not_shown_as_queued() -> None:
    """A shared crawl whose peer died holding 17 leases: nothing is queued, 17 are
    leased elsewhere (``--status`` says ``queued: 0``, ``leased: 17``)."""
    stats = CrawlCounts(queued=0, in_flight=0, leased_elsewhere=17, done=5, seen=22)
    assert stats.todo == 17
    assert line(stats).startswith("5 done  0 queued  0 in flight  17 leased elsewhere  0.0 pages/s")


def test_leases_of_no_live_process_say_until_when() -> None:
    """After a peer was killed holding 17 leases, the line says why nothing moves and when
    they come back, as --status does (``leased by no live process: 17 (back by ...)``)."""
    back_by = time.mktime((2026, 11, 25, 14, 3, 41, 0, 0, -1))
    stats = CrawlCounts(
        queued=0,
        in_flight=0,
        leased_elsewhere=17,
        leased_by_none=17,
        back_by=back_by,
        done=5,
        seen=22,
    )
    assert "17 leased elsewhere  (17 by no live process, back by 14:03:41)" in line(stats)
    assert "no live process" not in line(
        CrawlCounts(queued=0, in_flight=0, leased_elsewhere=17, done=5, seen=22)
    )


def test_origins_slowed_by_their_pace_are_counted_only_when_there_are_some() -> None:
    assert "slowed" not in line(CrawlCounts(queued=1, in_flight=1, done=1, seen=3))
    drawn = line(CrawlCounts(queued=1, in_flight=1, done=1, seen=3, slowed=2))
    assert "0 error  0 fail  2 slowed  " in drawn
