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

docs/cancellation.md and tests/test_cancellation_semantics.py show what asyncio does when
each of these is left out, and how Trio's nurseries and cancel scopes make them moot.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ._crawler import CLEANUP_TIMEOUT, CrawlerBase, FinishReason
from ._fetch import fetch

if TYPE_CHECKING:
    import httpx

    from ._events import FetchRequest, Outcome

__all__ = ["Crawler", "FinishReason"]


class Crawler(CrawlerBase):
    """Crawl the web from ``roots`` with asyncio tasks and an ``asyncio.Queue``.

    Takes the options of :class:`~trio_crawler._crawler.CrawlerBase`; construction raises
    :class:`~trio_crawler.ConfigError` for an unusable one.
    """

    def _prepare(self) -> None:
        self._join_waiter: asyncio.Future[None] | None = None

    def stop(self) -> None:
        """Cancel the wait for ``join()`` (see :meth:`CrawlerBase.stop`)."""
        if self.finish_reason is None:
            self.finish_reason = "interrupted"
        if self._join_waiter is not None:
            self._join_waiter.cancel()

    async def crawl(self) -> None:
        """Workers on a queue until ``join()`` (see :meth:`CrawlerBase.crawl`)."""
        self._start()
        loop = asyncio.get_running_loop()
        start = loop.time()
        # Unbounded, as in the chapter: workers put the links they find, and a bounded
        # queue would deadlock once every worker blocked in put(). Memory is bounded by
        # the site, as the Trio engine's frontier is.
        self._queue: asyncio.Queue[FetchRequest] = asyncio.Queue()
        self._queue_frontier()
        workers = [asyncio.create_task(self._work()) for _ in range(self.config.max_tasks)]
        self._join_waiter = asyncio.ensure_future(self._queue.join())
        if self.finish_reason == "interrupted":  # stop() came before crawl()
            self._join_waiter.cancel()
        try:
            try:
                async with asyncio.timeout(self.config.max_time):
                    await self._join_waiter
            except TimeoutError:
                self._finish(deadline_passed=True)
            except asyncio.CancelledError:
                # stop() cancels the join waiter, not this task; a cancel of this task
                # (cancelling() > 0) must propagate.
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
            else:
                self._finish(deadline_passed=False)
        except BaseException:
            self.finish_reason = "interrupted"
            raise
        finally:
            # The chapter: ``for w in workers: w.cancel()`` after join(), not in finally,
            # and never awaited.
            self._join_waiter.cancel()
            for worker in workers:
                worker.cancel()
            outcomes = await asyncio.gather(*workers, return_exceptions=True)
            self.elapsed = loop.time() - start
        bugs = [
            outcome
            for outcome in outcomes
            if isinstance(outcome, Exception) and not isinstance(outcome, asyncio.CancelledError)
        ]
        if bugs:
            raise ExceptionGroup("a crawler worker failed", bugs)

    def _queue_frontier(self) -> None:
        """Move every URL the core has queued into the asyncio queue."""
        while (request := self.state.next_request()) is not None:
            self._queue.put_nowait(request)

    async def _work(self) -> None:
        client = self._client if self._client is not None else self._new_worker_client()
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
            if client is not self._client:
                # The worker is being cancelled; asyncio delivers that once, so this
                # await runs, but it is bounded in case the peer never answers.
                async with asyncio.timeout(CLEANUP_TIMEOUT):
                    await client.aclose()

    async def _attempt(self, client: httpx.AsyncClient, request: FetchRequest) -> Outcome:
        """One attempt, bounded by ``timeout``; never raises except CancelledError."""
        try:
            async with asyncio.timeout(self.config.timeout):
                try:
                    return await fetch(client, request.url)
                except Exception as exc:
                    return self._unexpected_failure(request.url, exc)
        except TimeoutError:
            return self._timeout_failure()
