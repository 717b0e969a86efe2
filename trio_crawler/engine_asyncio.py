"""The chapter's own design on modern asyncio: a Queue, ``join()``, then ``cancel()``.

Theory of operation
-------------------
This engine is here for contrast, and keeps the chapter's shape on purpose::

    queue = asyncio.Queue()                          # unbounded: workers put what they find
    workers = [create_task(work()) for _ in range(max_tasks)]
    await queue.join()                               # until every put has its task_done()
    for w in workers:
        w.cancel()                                   # a request, not a guarantee

    async def work():
        while True:
            request = await queue.get()
            ...fetch, record, queue.put_nowait(new links)...
            queue.task_done()

It runs on the same core as the Trio and AnyIO engines, so it finds the same URLs, but the
queue is the frontier here: workers move every URL the core hands out into it at once.
With no dispatcher handing requests out, there is nobody for a page to wait for, so pages
are read as they come, not in turns after the requests due (``_turns.py``): a broad crawl
drifts later on this engine than on the others.
Where it departs from the chapter, the code says so:

- ``task_done()`` is called in ``finally``: in the chapter, a URL whose handling raised
  never called it, so ``join()`` waited forever, silently.
- The cancelled workers are awaited: the chapter cancelled them and returned, leaving
  them to be finished (or destroyed, "Task was destroyed but it is pending!") by the loop.
- The workers are cancelled in ``finally``, so a deadline or Ctrl-C that ends ``crawl()``
  early does not leave them fetching in the background; asyncio's ``timeout()`` around
  ``join()`` cancels only the task that awaits it.
- An exception a worker died of is raised from ``crawl()`` (as an ExceptionGroup, like the
  other engines) instead of being lost with the task.

docs/cancellation.md and the tests in tests/cancellation/ show what asyncio does when
each of these is left out, and how Trio's nurseries and cancel scopes make them moot.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import TYPE_CHECKING, Any, TypeVar

from ._crawler import CLEANUP_TIMEOUT, CrawlerBase, FinishReason

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ._clients import Client
    from ._events import FetchRequest, Outcome
    from ._fetch import MaySend, OnSent
    from ._transport import Unanswered

__all__ = ["Crawler", "FinishReason"]


_T = TypeVar("_T")


class Crawler(CrawlerBase):
    """Crawl the web from ``roots`` with asyncio tasks and an ``asyncio.Queue``.

    Its signature, options and attributes are :class:`~trio_crawler._crawler.CrawlerBase`'s.
    """

    def _init_engine(self) -> None:
        # Unbounded, as in the chapter: workers put the links they find, and a bounded
        # queue would deadlock once every worker blocked in put(). Memory is bounded by
        # the site, as the Trio engine's frontier is. (An asyncio.Queue binds to the loop
        # only when first awaited, so it can be made here.)
        self._queue: asyncio.Queue[FetchRequest] = asyncio.Queue()
        # Set by stop(): ends the wait for join(). Futures need the running loop.
        self._stopped: asyncio.Future[None] | None = None
        self._deadline: asyncio.Timeout | None = None
        # Set by the shared frontier when work comes or the crawl ends (made in crawl()).
        self._nudged: asyncio.Event | None = None

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _cut_short(self, grace: float) -> None:
        """End the wait for the workers now, or after ``grace`` seconds.

        The URLs already moved into the queue go back to the core, so only the requests
        being fetched remain for ``join()`` to wait for; the grace period moves the crawl's
        ``asyncio.timeout()`` closer.
        """
        assert self._stopped is not None
        while not self._queue.empty():
            self.state.put_back(self._queue.get_nowait())
            self._queue.task_done()
        if grace > 0 and self._deadline is not None:
            loop = asyncio.get_running_loop()
            when = self._deadline.when()
            self._deadline.reschedule(min(loop.time() + grace, when or math.inf))
        elif not self._stopped.done():
            self._stopped.set_result(None)

    async def crawl(self) -> None:
        """Workers on a queue until ``join()`` (see :meth:`CrawlerBase.crawl`)."""
        start = self._begin()
        self._stopped = asyncio.get_running_loop().create_future()
        self._nudged = asyncio.Event()
        if self._stopping:  # stop() came before crawl()
            self._stopped.set_result(None)
        deadline_passed = None
        outcomes: list[object] = []
        try:
            async with self._store_session():  # a shared crawl is joined and left here
                workers = [asyncio.create_task(self._work()) for _ in range(self.config.max_tasks)]
                if self._on_progress is not None:
                    workers.append(asyncio.create_task(self._report_progress()))
                try:
                    try:
                        async with asyncio.timeout(self.config.max_time) as self._deadline:
                            await self._join()
                    except TimeoutError:
                        deadline_passed = True
                    else:
                        deadline_passed = False
                finally:
                    # The chapter: ``for w in workers: w.cancel()`` after join(), not in
                    # finally, and never awaited.
                    for worker in workers:
                        worker.cancel()
                    outcomes = await asyncio.gather(*workers, return_exceptions=True)
        finally:
            self._end(start, deadline_passed=deadline_passed)
        bugs = [
            outcome
            for outcome in outcomes
            if isinstance(outcome, Exception) and not isinstance(outcome, asyncio.CancelledError)
        ]
        if bugs:
            raise ExceptionGroup("a crawler worker failed", bugs)

    async def _join(self) -> None:
        """The chapter's ``await queue.join()``, for a core that can make work wait.

        Departure: ``join()`` returns as soon as the queue is drained, but a host waiting
        out its ``--delay`` still has URLs in the core. So this waits for ``join()``, or
        for the next host to be ready, or for :meth:`stop`, and then moves what the core
        hands out into the queue, until the core says the crawl is finished.
        """
        assert self._stopped is not None
        loop = asyncio.get_running_loop()
        join_waiter: asyncio.Future[None] | None = None
        try:
            while True:
                self._queue_frontier()
                if self._store_needs() and not self._stopped.done():
                    await self._flush_store(starved=True)  # write, or load more queue
                    continue
                if self.state.finished:
                    await self._fetcher.close_idle()  # in one go, not worker by worker
                    return
                if self._stopped.done():
                    return
                waiters: set[asyncio.Future[Any]] = {self._stopped}
                if self.state.statistics().in_flight:
                    if join_waiter is None or join_waiter.done():
                        join_waiter = asyncio.ensure_future(self._queue.join())
                    waiters.add(join_waiter)
                assert self._nudged is not None
                nudged = asyncio.ensure_future(self._nudged.wait())
                waiters.add(nudged)
                wakeup = self.state.next_wakeup()
                timeout = None if wakeup is None else max(0.0, wakeup - loop.time())
                try:
                    await asyncio.wait(
                        waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    nudged.cancel()
                # Cleared before the core is asked again, so no nudge is lost.
                self._nudged.clear()
        finally:
            if join_waiter is not None:
                join_waiter.cancel()

    def _queue_frontier(self) -> None:
        """Move every URL the core will hand out now into the asyncio queue."""
        now = asyncio.get_running_loop().time()
        while (request := self.state.next_request(now=now)) is not None:
            self._queue.put_nowait(request)

    async def _work(self) -> None:
        shared = self._fetcher.client
        client = shared if shared is not None else self._fetcher.new_client()
        try:
            while True:
                request = await self._queue.get()
                try:
                    await self._crawl_url(client, request)
                    self._queue_frontier()
                finally:
                    # Departure from the chapter: in finally, so that one URL whose
                    # handling raised cannot leave join() waiting forever.
                    self._queue.task_done()
        finally:
            if client is not shared:
                # The worker is being cancelled; asyncio delivers that once, so this
                # await runs, but it is bounded in case the peer never answers.
                async with asyncio.timeout(CLEANUP_TIMEOUT):
                    await client.aclose()

    async def _report_progress(self) -> None:
        """Call ``on_progress`` every interval, until cancelled with the workers."""
        assert self._on_progress is not None
        while True:
            self._on_progress(self.statistics())
            await asyncio.sleep(self._progress_interval)

    async def _in_thread(self, function: Callable[[], _T]) -> _T:
        """A worker thread, shielded as the other engines' are: a cancellation that
        arrives meanwhile is taken, the call finished, and the task cancelled again."""
        future = asyncio.get_running_loop().run_in_executor(None, function)
        cancelled = False
        while True:
            try:
                result = await asyncio.shield(future)
                break
            except asyncio.CancelledError:
                if future.done() and future.cancelled():
                    raise
                cancelled = True
        if cancelled:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()  # delivered at the caller's next await
        return result

    async def _shielded(self, function: Callable[[], Awaitable[_T]]) -> _T:
        """A task of its own, shielded as :meth:`_in_thread`'s thread is."""
        task = asyncio.ensure_future(function())
        cancelled = False
        while True:
            try:
                result = await asyncio.shield(task)
                break
            except asyncio.CancelledError:
                if task.done() and task.cancelled():
                    raise
                cancelled = True
        if cancelled:
            current = asyncio.current_task()
            assert current is not None
            current.cancel()  # delivered at the caller's next await
        return result

    def _wake_dispatcher(self) -> None:
        if self._nudged is not None:
            self._nudged.set()

    async def _attempt(
        self,
        client: Client,
        request: FetchRequest,
        on_sent: OnSent | None = None,
        may_send: MaySend | None = None,
        unanswered: Unanswered | None = None,
    ) -> Outcome:
        """One attempt, bounded by ``timeout``; never raises except CancelledError."""
        try:
            async with asyncio.timeout(self.config.timeout):
                try:
                    return await self._fetcher.fetch(client, request, on_sent, may_send, unanswered)
                except Exception as exc:
                    return self._fetcher.unexpected(request.url, exc)
        except TimeoutError:
            return self._fetcher.timed_out(request)

    async def _at_most(self, seconds: float, function: Callable[[], Awaitable[object]]) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await function()
