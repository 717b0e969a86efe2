"""One origin's share of the frontier: its queue of batches, robots.txt state and clock.

:class:`~trio_crawler._scheduler.OriginScheduler` keeps one :class:`Origin` per origin
(scheme, host and port) and moves them between its heaps; these classes are the data it
moves, apart so that the scheduler's module holds its decisions and little else. A
:class:`Batch` is the unit of the queue: the new links of one page, which share what a
request carries besides its URL, so that a million queued URLs cost a list slot each, not
an object each. :class:`OriginState` is what a store keeps of an origin for good.

Nothing here reads a clock or decides anything: the scheduler does both (and an origin's
:class:`~trio_crawler._pace.Pace` learns its own pace).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._frontier import RobotsState
from ._pace import PaceSignal

if TYPE_CHECKING:
    from ._events import FetchRequest, KnownPage
    from ._pace import Pace
    from ._robots import RobotsRules

__all__ = ["Batch", "Origin", "OriginState"]


@dataclass(frozen=True, slots=True)
class OriginState:
    """What a store keeps of an origin for good: its robots.txt and its delay.

    Attributes:
        robots: Where its robots.txt stands.
        rules: Its rules, when KNOWN.
        failure: The error, when FAILED.
        delay: Seconds between two request starts (``--delay`` or a longer
            ``Crawl-delay``).
    """

    robots: RobotsState
    rules: RobotsRules | None
    failure: str | None
    delay: float


class Batch:
    """URLs queued together (one page's new links), handed out from ``next_index`` on.

    They share what a request carries besides its URL, the referrer too (the page that
    offered them all), so a queued URL costs a list slot whatever it was found through.
    """

    __slots__ = (
        "depth",
        "known",
        "next_index",
        "redirects_left",
        "referrer",
        "sequence",
        "sitemap",
        "urls",
    )

    def __init__(
        self,
        sequence: int,
        urls: list[str],
        *,
        depth: int,
        redirects_left: int,
        sitemap: int,
        referrer: str | None,
    ):
        self.sequence = sequence
        self.urls = urls
        self.depth = depth
        self.redirects_left = redirects_left
        self.sitemap = sitemap
        self.referrer = referrer
        self.next_index = 0
        # A recrawl's pages, by URL: what the last pass kept (stored frontiers only).
        self.known: dict[str, KnownPage] | None = None


class Origin:
    """One origin's queue, robots.txt state and politeness clock."""

    __slots__ = (
        "batches",
        "delay",
        "failure",
        "in_flight",
        "key",
        "next_start",
        "pace",
        "queued",
        "ready",
        "requeued",
        "robots",
        "robots_at",
        "rules",
        "sleeping",
        "unstarted",
        "wait_until",
    )

    def __init__(self, key: str, *, delay: float, rules: RobotsRules | None) -> None:
        self.key = key
        self.batches: deque[Batch] = deque()
        # Requests put back (a Retry-After wait, a retry waiting out the delay, an engine
        # handing work back): they go first, and keep their attempt count.
        self.requeued: deque[FetchRequest] = deque()
        self.queued = 0
        self.in_flight = 0  # pages and robots.txt of this origin handed out, not yet done
        self.delay = delay
        self.next_start = 0.0  # the earliest time the next request may start
        # The end of the last wait the server asked for (Retry-After): a request handed
        # out before it was learnt does not start before it either.
        self.wait_until = 0.0
        self.robots = RobotsState.UNKNOWN if rules is None else RobotsState.KNOWN
        self.rules = rules
        self.failure: str | None = None  # the error, when robots is FAILED
        # With a delay: requests handed out whose attempt has not started yet. The delay
        # runs from a request's start, so none follows until the one before it has started.
        self.unstarted: set[str] = set()
        self.ready = False  # has an entry in the ready heap
        self.sleeping = False  # has an entry in the sleeping heap
        self.pace: Pace | None = None  # what its answers taught (None: --no-adapt)
        self.robots_at: float | None = None  # when its robots.txt was decided

    def learn(
        self, pushback: bool, started: float, now: float, max_per_host: int | None
    ) -> tuple[PaceSignal, str | None]:
        """Its pace takes an answer to a request of its own in flight (see
        :meth:`~trio_crawler._pace.Pace.answered`): what the answer said, and the change."""
        pace = self.pace
        assert pace is not None
        signal = PaceSignal.PUSHBACK if pushback else pace.classify(now - started)
        change = pace.answered(
            signal,
            started=started,
            now=now,
            in_flight=self.in_flight - 1,
            user_gap=self.delay,
            user_window=max_per_host,
        )
        return signal, change

    def spacing(self) -> float:
        """Seconds between two request starts in force: the delay, or the learnt gap."""
        pace = self.pace
        if pace is not None and pace.gap > self.delay:
            return pace.gap
        return self.delay

    def head_sequence(self) -> int:
        return -1 if self.requeued else self.batches[0].sequence

    def head_is_new(self) -> bool:
        """Whether the next request handed out would be a URL's first attempt."""
        return not self.requeued or self.requeued[0].attempt == 1
