"""What a crawl counts, named once: the report's limit counters and the progress snapshot.

The core (:mod:`trio_crawler._state`) keeps the counts; the report (:mod:`trio_crawler._report`),
the progress line (:mod:`trio_crawler._progress`) and ``--status`` show them. Each count has
one name and one meaning here, so that no two of them can disagree about it.
"""

from __future__ import annotations

from dataclasses import dataclass

# The report's counters for URLs that never got a record, or links that were never queued.
LINKS_TOO_LONG = "links_too_long"
BEYOND_MAX_DEPTH = "beyond_max_depth"
ROBOTS_DISALLOWED = "robots_disallowed"
# Pages whose <meta name="robots"> or X-Robots-Tag says nofollow (or none): read, not followed.
NOFOLLOW_PAGES = "nofollow_pages"
# Retries after an HTTP answer (one of RETRY_STATUSES), with a Retry-After or a backoff.
RETRIED_STATUS = "retried_status"
# Origins whose pace slowed them (a 429, a 503, a timeout, slow answers) at any point.
SLOWED_ORIGINS = "slowed_origins"


@dataclass(frozen=True, slots=True, kw_only=True)
class CrawlCounts:
    """A snapshot of a crawl's progress, for progress displays and the report, whose
    ``Done``, ``Todo``, ``error`` and ``fail`` it counts (records classified by
    :attr:`~trio_crawler._stats.FetchStatistic.kind`, as the report's counters are).

    Attributes:
        queued: URLs waiting to be handed out (not those ``leased_elsewhere``).
        in_flight: URLs handed to an engine and not yet finished (robots.txt included).
        leased_elsewhere: URLs other processes of a shared crawl hold (in ``--status``'s
            ``leased``); they come back if their process dies. 0 for one process.
        leased_by_none: Of those, the leases of processes that stopped renewing them
            (``--status``'s ``leased by no live process``).
        back_by: The time of day (seconds since the epoch) by which those come back to
            the queue; None when there are none.
        done: URLs with a record.
        seen: URLs queued, in flight or done.
        error: Records of an HTTP error status (404, 500, ...): the report's ``error``.
        fail: Records whose every try failed: the report's ``fail``, ``--status``'s
            ``failed``.
        slowed: Origins whose learnt pace holds them below the crawl's own limits now.
    """

    queued: int
    in_flight: int
    leased_elsewhere: int = 0
    leased_by_none: int = 0
    back_by: float | None = None
    done: int
    seen: int
    error: int = 0
    fail: int = 0
    slowed: int = 0

    @property
    def todo(self) -> int:
        """URLs queued but not finished, wherever they are held: the report's ``Todo``."""
        return self.queued + self.in_flight + self.leased_elsewhere
