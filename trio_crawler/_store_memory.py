"""The memory store: a crawl's frontier and seen set in RAM, the default.

Theory of operation
-------------------
The simplest store behind the two seams of :mod:`trio_crawler._frontier`: a seen set (a
Python ``set`` that every URL ever queued joins for good) beside an
:class:`~trio_crawler._scheduler.OriginScheduler` that holds the whole queue. A
:class:`~trio_crawler._frontier.Completion` is applied the moment the core hands it over
(links deduplicated against the seen set and queued, the URL completed), so ``then`` runs
before :meth:`MemoryFrontier.finish` returns, and the shell's side has nothing to await.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ._frontier import Completion, OutputMode, Resumed, Settled, Taken
from ._scheduler import OriginScheduler

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable, Iterator

    from ._events import FetchRequest, RobotsRequest
    from ._frontier import StoreRuntime
    from ._output import ArchiveOutput, RecordOutput
    from ._report import Listing
    from ._robots import RobotsRules
    from ._stats import FetchStatistic


@dataclass(frozen=True, slots=True)
class Added:
    """What :meth:`MemoryFrontier.add` did with the links it was given.

    Attributes:
        new: Links not seen before; they are now seen, and queued unless disallowed.
        disallowed: Of the new ones, how many the origin's known robots.txt rules turned away.
    """

    new: int
    disallowed: int


class MemoryFrontier:
    """The frontier of one crawl, in memory: the default store.

    Args:
        delay: Seconds between the starts of two requests to one origin, at least.
        obey_robots: Fetch each origin's robots.txt before its first URL.
        max_per_host: Requests to one origin in flight at once, at most (None: no limit).
    """

    output_mode = OutputMode.NEW

    def __init__(
        self, *, delay: float, obey_robots: bool, max_per_host: int | None, adapt: bool = True
    ) -> None:
        self.seen: set[str] = set()
        self.scheduler = OriginScheduler(
            delay=delay, obey_robots=obey_robots, max_per_host=max_per_host, adapt=adapt
        )

    # -- counts --------------------------------------------------------------------------

    @property
    def queued(self) -> int:
        """URLs waiting to be handed out."""
        return self.scheduler.queued

    @property
    def held_elsewhere(self) -> int:
        """0: no other process works on this crawl."""
        return 0

    @property
    def held_by_none(self) -> tuple[int, float] | None:
        """None: no other process works on this crawl."""
        return None

    @property
    def in_flight(self) -> frozenset[str]:
        """Page URLs handed out and not yet completed (robots.txt fetches not included)."""
        return self.scheduler.in_flight

    @property
    def in_flight_count(self) -> int:
        """Requests handed out and not yet completed, robots.txt fetches included."""
        return self.scheduler.in_flight_count

    @property
    def seen_count(self) -> int:
        """URLs ever added."""
        return len(self.seen)

    def seen_urls(self) -> set[str]:
        """Every URL ever added (the set itself, not a copy)."""
        return self.seen

    # -- links ---------------------------------------------------------------------------

    def add(
        self,
        urls: Iterable[str],
        *,
        depth: int,
        redirects_left: int,
        sitemap: int = 0,
        first: bool = False,
        referrer: str | None = None,
    ) -> Added:
        """Mark ``urls`` seen and queue the new ones (see
        :meth:`~trio_crawler._scheduler.OriginScheduler.enqueue`)."""
        seen = self.seen
        fresh = []
        for url in urls:
            if url not in seen:
                seen.add(url)
                fresh.append(url)
        disallowed = self.scheduler.enqueue(
            fresh,
            depth=depth,
            redirects_left=redirects_left,
            sitemap=sitemap,
            first=first,
            referrer=referrer,
        )
        return Added(new=len(fresh), disallowed=disallowed)

    def unseen(self, urls: Iterable[str]) -> int:
        """How many of ``urls`` were never added; asks, changes nothing."""
        seen = self.seen
        return sum(1 for url in urls if url not in seen)

    # -- the core's side -------------------------------------------------------------------

    def finish(self, completion: Completion, then: Callable[[Completion, Settled], object]) -> None:
        """Apply ``completion`` now, and call ``then`` before returning."""
        new = disallowed = beyond = 0
        for offer in completion.offers:
            if offer.queue:
                added = self.add(
                    offer.urls,
                    depth=offer.depth,
                    redirects_left=offer.redirects_left,
                    sitemap=offer.sitemap,
                    first=offer.first,
                    referrer=offer.referrer,
                )
                new += added.new
                disallowed += added.disallowed
            else:
                unseen = self.unseen(offer.urls)
                new += unseen
                beyond += unseen if offer.over_depth else 0
        if completion.leased:
            assert completion.request is not None
            self.scheduler.complete(completion.request)
        then(completion, Settled(new=new, disallowed=disallowed, beyond=beyond))

    # The core's seam (Frontier), mostly handed to the store's OriginScheduler. The three
    # stores and the scheduler repeat the protocol's signatures here, alike on purpose: the
    # protocol in _frontier.py is where each is defined and checked.
    def take(self, *, now: float, start_new: bool) -> Taken | None:
        return self.scheduler.take(now=now, start_new=start_new)

    def next_wakeup(self) -> float | None:
        return self.scheduler.next_wakeup()

    def started(self, request: FetchRequest, *, now: float) -> bool:
        return self.scheduler.started(request, now=now)

    def answered(
        self,
        request: FetchRequest,
        *,
        pushback: bool,
        started: float,
        now: float,
        ended: float | None = None,
    ) -> None:
        self.scheduler.answered(request, pushback=pushback, started=started, now=now, ended=ended)

    @property
    def slowed(self) -> tuple[int, int]:
        return self.scheduler.slowed

    @property
    def paced(self) -> bool:
        return self.scheduler.paced

    def retry(self, request: FetchRequest, *, at_once: bool = False) -> bool:
        return self.scheduler.retry(request, at_once=at_once)

    def retry_later(self, request: FetchRequest, *, not_before: float, now: float) -> None:
        self.scheduler.retry_later(request, not_before=not_before)

    def give_back(self, request: FetchRequest) -> None:
        self.scheduler.give_back(request)

    def held_back(self, request: FetchRequest, *, now: float) -> bool:
        return self.scheduler.held_back(request, now=now)

    def is_leased(self, request: FetchRequest) -> bool:
        return self.scheduler.is_leased(request)

    def robots_settled(
        self,
        request: RobotsRequest,
        *,
        rules: RobotsRules | None = None,
        failure: str | None = None,
        delay: float | None = None,
        now: float,
    ) -> None:
        self.scheduler.robots_settled(request, rules=rules, failure=failure, delay=delay, now=now)

    # -- the shell's side: nothing to wait for -----------------------------------------------

    def resumed(self) -> Resumed | None:
        return None

    @asynccontextmanager
    async def session(self, runtime: StoreRuntime) -> AsyncIterator[None]:
        yield

    def attach_output(self, output: RecordOutput) -> None:
        """Nothing to reconcile: a new crawl writes its files from the start."""

    def attach_archive(self, archive: ArchiveOutput) -> None:
        """Nothing to reconcile: a new crawl writes its files from the start."""

    async def request_sent(self, request: FetchRequest) -> None:
        return

    def has_work(self, *, starved: bool) -> bool:
        return False

    async def flush(self, *, starved: bool = False) -> None:
        return

    async def settle(self, request: FetchRequest) -> None:
        return

    def records(self) -> Iterator[FetchStatistic] | None:
        return None

    def listing(self) -> Listing | None:
        return None

    def report_notes(self) -> list[str]:
        return []

    def close(self) -> None:
        return
