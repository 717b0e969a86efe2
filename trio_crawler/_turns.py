"""Requests before pages: a read page waits its turn while the dispatcher hands out requests.

Why: in a polite crawl, lateness is never made up. A host's next request may go no sooner
than the delay after its last one (as the server received it), so a request sent 50 ms late
pushes every later request to that host 50 ms later, and a crawl of many hosts ends when
its most delayed host does. Reading a page that has arrived (parsing it, resolving its
links, filling the frontier, writing the record) can wait: the host it came from is not
due again for a whole delay.

On one event loop both kinds of work share one CPU, and the loop is fair, not ordered: each
turn it runs every task that is ready, in no fixed order. When many hosts are due at once
(a broad crawl starts every host together, and the hosts stay in step), a due request
queued behind a few hundred page reads is sent a few hundred milliseconds late. Measured on
500 hosts x 20 pages with a delay of 1 s: the first page of each host went out 160 ms late
on average (235 ms at the 90th percentile) after its robots.txt, and the last host's last
request ended 0.7 s after the first host's.

So the core's reading of a page (``CrawlState.attempt_finished``) takes a turn:

* one page at a time, in the order the pages arrived, and the lock's own checkpoint makes
  it one page per pass of the event loop, so a task that becomes ready (a delay that ends,
  a connection that can be written) waits for one page's reading at most, not for all of
  them;
* and only while the dispatcher has no request in hand: it calls :meth:`Turns.handing_out`
  before it hands a request to a worker and :meth:`Turns.waiting` once it has none left to
  hand out now. The worker that took a request writes it in the loop's next pass, before
  the next page is read.

The dispatcher also calls :meth:`Turns.waiting` before it blocks because every worker is
busy: busy workers may be waiting for a turn, and none would come back to take a request
if pages waited for the dispatcher while the dispatcher waited for a worker. A turn is
therefore never kept waiting by anything that waits for turns, and pages are read
whenever no request is due: between two rounds of a broad crawl, the loop reads what the
round fetched.

Only a paced crawl takes turns: one with a delay (``--delay``), or from the moment any
origin has one (a ``Crawl-delay``) or a pace slowed by pushback (the store's ``paced``).
Until then no request ever waits for its time, so there is no lateness to keep off it,
while a page a pass costs a pass of the loop for every page: on one host with no delay
(3 000 pages, 100 workers) the turns took 13 % more CPU, median of 20 pairs. A crawl
becomes paced once, and stays so.

The Trio and AnyIO engines take turns; the asyncio engine keeps the chapter's design (a
queue any idle worker takes from, with no dispatcher to ask), so its turns are free.
"""

from __future__ import annotations

from contextlib import asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from contextlib import AbstractAsyncContextManager


class Flag(Protocol):
    """What Trio's and AnyIO's events have in common, and all a turn needs of one."""

    def is_set(self) -> bool: ...

    def set(self) -> None: ...

    async def wait(self) -> None: ...


class Turns:
    """The turns of one crawl's page reading (see the module docstring).

    ``lock`` must yield to the event loop when it is taken, as Trio's and AnyIO's locks
    do: that checkpoint is what lets ready tasks run between two pages. ``new_flag`` makes
    an event of the engine's library; one is made whenever the dispatcher starts handing
    out again, so that a wait for it is never woken by an old one. ``paced`` says whether
    the crawl is paced yet (asked at each hand-out and each turn; once true, it must stay
    true); until it is, every turn is free.
    """

    def __init__(
        self,
        lock: AbstractAsyncContextManager[object],
        new_flag: Callable[[], Flag],
        *,
        paced: Callable[[], bool] = lambda: True,
    ) -> None:
        self._lock = lock
        self._new_flag = new_flag
        self._paced = paced
        self._dispatcher_waits = new_flag()
        self._dispatcher_waits.set()

    def handing_out(self) -> None:
        """The dispatcher has a request in hand: pages wait until it has none (in a paced
        crawl: the others' turns never look, so no event is made for them)."""
        if self._dispatcher_waits.is_set() and self._paced():
            self._dispatcher_waits = self._new_flag()

    def waiting(self) -> None:
        """The dispatcher has nothing to hand out now, or waits for a worker: pages may go."""
        self._dispatcher_waits.set()

    def turn(self) -> AbstractAsyncContextManager[object]:
        """Hold the one turn, once the dispatcher has no request in hand; in a crawl that
        is not paced yet, go at once."""
        return self._taken_turn() if self._paced() else free_turn()

    @asynccontextmanager
    async def _taken_turn(self) -> AsyncIterator[None]:
        async with self._lock:
            while not self._dispatcher_waits.is_set():
                await self._dispatcher_waits.wait()
            yield


def free_turn() -> AbstractAsyncContextManager[None]:
    """The turn of an engine that does not take turns: it never waits."""
    return nullcontext()
