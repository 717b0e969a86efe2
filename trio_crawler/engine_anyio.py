"""The crawler on AnyIO: the Trio engine's design, on either backend (asyncio or Trio).

Theory of operation
-------------------
This module is :mod:`trio_crawler.engine_trio` written against AnyIO's API, line for line,
so it runs unchanged under ``anyio.run(..., backend="asyncio")`` and ``backend="trio"``.
Read the two side by side: a nursery is a task group, a memory channel a memory object
stream, ``trio.move_on_after`` ``anyio.move_on_after``. The design is the same:

- a task group owns a dispatcher and ``max_tasks`` workers; no task outlives ``crawl()``;
- the dispatcher is the only sender on a zero-buffer stream, so one request goes to one
  idle worker, and the frontier stays data in :class:`~trio_crawler._state.CrawlState`
  (a worker that sent new URLs into the stream it reads from would deadlock once a bounded
  buffer filled);
- when the core reports it is finished, the dispatcher closes its send stream and every
  worker's ``async for`` ends: no task is ever cancelled to end a finished crawl;
- in a paced crawl (a delay, a Crawl-delay, a slowed pace), a worker reads its page in a turn
  (:class:`~trio_crawler._turns.Turns`, on an AnyIO lock and events): one page a pass of
  the loop, while the dispatcher has no request in hand, so that a request due goes out
  before the pages waiting to be parsed;
- with nothing to hand out, the dispatcher starts the store's flush (a transaction, a call
  to the shared frontier) in a task beside it, one at a time, and goes on handing out the
  hosts that come due meanwhile;
- one cancel scope bounds the crawl (``max_time``, :meth:`Crawler.stop`), another each
  attempt; client cleanup is shielded and bounded.

AnyIO gives asyncio code Trio's level-triggered cancellation: inside a cancelled AnyIO scope
every checkpoint raises, even a native ``asyncio.sleep``, so a library that swallows one
``CancelledError`` cannot keep a worker alive past the deadline (see
docs/cancellation.md). Unlike Trio's, AnyIO's scopes and events can only be made inside a
running event loop, so they are made in :meth:`Crawler.crawl`.
"""

from __future__ import annotations

import math
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeVar

import anyio

from ._crawler import CLEANUP_TIMEOUT, CrawlerBase, FinishReason
from ._events import FetchRequest, Outcome
from ._turns import Turns

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

    from anyio.abc import TaskGroup
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

    from ._clients import Client
    from ._fetch import MaySend, OnSent
    from ._transport import Unanswered

__all__ = ["Crawler", "FinishReason"]


_T = TypeVar("_T")


class Crawler(CrawlerBase):
    """Crawl the web from ``roots`` on AnyIO (asyncio or Trio), as the Trio engine does.

    Its signature, options and attributes are :class:`~trio_crawler._crawler.CrawlerBase`'s.
    """

    # This class repeats engine_trio.Crawler in AnyIO's names, method for method, on
    # purpose: the two are read side by side (see the module docstring).

    def _init_engine(self) -> None:
        # AnyIO's scopes and events need a running event loop: crawl() makes them.
        self._crawl_scope: anyio.CancelScope | None = None
        self._progress: anyio.Event | None = None
        self._progress_scope: anyio.CancelScope | None = None
        self._turns: Turns | None = None

    def _now(self) -> float:
        return anyio.current_time()

    def _cut_short(self, grace: float) -> None:
        """Cancel the crawl's scope now, or move its deadline to ``grace`` seconds from now,
        as the Trio engine does."""
        assert self._crawl_scope is not None
        if grace > 0:
            self._crawl_scope.deadline = min(
                self._crawl_scope.deadline, anyio.current_time() + grace
            )
            self._wake_dispatcher()  # it may be waiting for work that won't come
        else:
            self._crawl_scope.cancel("crawl interrupted")

    async def crawl(self) -> None:
        """A task group of workers fed by a dispatcher (see :meth:`CrawlerBase.crawl`)."""
        start = self._begin()
        self._crawl_scope = anyio.CancelScope()
        self._progress_scope = anyio.CancelScope()
        self._progress = anyio.Event()
        self._turns = Turns(anyio.Lock(), anyio.Event, paced=self._paced)
        if self.config.max_time is not None:
            self._crawl_scope.deadline = start + self.config.max_time
        if self._stopping:  # stop() came before crawl()
            self._crawl_scope.cancel("crawl interrupted")
        deadline_passed = None
        try:
            async with self._store_session():  # a shared crawl is joined and left here
                with self._crawl_scope:
                    async with anyio.create_task_group() as task_group:
                        request_sender, request_receiver = anyio.create_memory_object_stream[
                            FetchRequest
                        ](0)
                        async with request_receiver:
                            for _ in range(self.config.max_tasks):
                                task_group.start_soon(self._worker, request_receiver.clone())
                        if self._on_progress is not None:
                            task_group.start_soon(self._report_progress)
                        task_group.start_soon(self._dispatch, request_sender, task_group)
                deadline_passed = self._crawl_scope.cancelled_caught
        finally:
            self._end(start, deadline_passed=deadline_passed)

    async def _dispatch(
        self, request_sender: MemoryObjectSendStream[FetchRequest], task_group: TaskGroup
    ) -> None:
        """Hand queued requests to idle workers until the core says the crawl is done."""
        turns = self._turns
        assert turns is not None
        async with request_sender:
            while True:
                request = self.state.next_request(now=anyio.current_time())
                if request is not None:
                    turns.handing_out()
                    try:
                        request_sender.send_nowait(request)
                    except anyio.WouldBlock:
                        # Every worker is busy, and some may wait for a turn to read
                        # their page: it must come, or none would be free to take this.
                        turns.waiting()
                        await request_sender.send(request)
                    else:
                        await anyio.lowlevel.checkpoint()  # the worker writes it first
                    continue
                turns.waiting()  # pages may be read until a request is due
                errand = self._store_errand()  # a state file to write, its queue to load:
                if errand is not None:  # beside, as hosts come due meanwhile
                    task_group.start_soon(errand)
                if self.state.finished:  # asked after next_request(), which can finish it
                    await self._fetcher.close_idle()  # in one go, not worker by worker
                    break
                # Nothing to hand out yet: wait until a worker finishes a URL (which may
                # queue links or end the crawl), or until a host's delay is over. A fresh
                # Event is made right after the old one fires, with no checkpoint in
                # between, so no wake-up is lost.
                wakeup = self.state.next_wakeup()
                assert self._progress is not None
                with anyio.CancelScope(deadline=math.inf if wakeup is None else wakeup):
                    await self._progress.wait()
                self._progress = anyio.Event()
        assert self._progress_scope is not None
        self._progress_scope.cancel("crawl complete")

    async def _worker(self, request_receiver: MemoryObjectReceiveStream[FetchRequest]) -> None:
        async with request_receiver, self._open_client() as client:
            async for request in request_receiver:
                if self._stopping:
                    # stop() came while this request waited in send(): it was never
                    # started, so it goes back rather than starting during the grace period.
                    self.state.put_back(request)
                else:
                    await self._crawl_url(client, request)
                self._wake_dispatcher()

    def _wake_dispatcher(self) -> None:
        """A URL is finished (or went back): the dispatcher may have work, or be done."""
        if self._progress is not None:
            self._progress.set()

    def _page_turn(self) -> AbstractAsyncContextManager[object]:
        assert self._turns is not None
        return self._turns.turn()

    async def _report_progress(self) -> None:
        """Call ``on_progress`` every interval: one more task beside the workers.

        It would run forever, so the dispatcher cancels its scope when the crawl is done.
        """
        assert self._on_progress is not None
        assert self._progress_scope is not None
        with self._progress_scope:
            while True:
                self._on_progress(self.statistics())
                await anyio.sleep(self._progress_interval)

    async def _in_thread(self, function: Callable[[], _T]) -> _T:
        with anyio.CancelScope(shield=True):
            result = await anyio.to_thread.run_sync(function)
        return result

    async def _shielded(self, function: Callable[[], Awaitable[_T]]) -> _T:
        with anyio.CancelScope(shield=True):
            result = await function()
        return result

    async def _attempt(
        self,
        client: Client,
        request: FetchRequest,
        on_sent: OnSent | None = None,
        may_send: MaySend | None = None,
        unanswered: Unanswered | None = None,
    ) -> Outcome:
        """One attempt, bounded by ``timeout``; never raises except cancellation."""
        with anyio.move_on_after(self.config.timeout):
            try:
                return await self._fetcher.fetch(client, request, on_sent, may_send, unanswered)
            except Exception as exc:
                return self._fetcher.unexpected(request.url, exc)
        return self._fetcher.timed_out(request)

    async def _at_most(self, seconds: float, function: Callable[[], Awaitable[object]]) -> None:
        with anyio.move_on_after(seconds):
            await function()

    @asynccontextmanager
    async def _open_client(self) -> AsyncIterator[Client]:
        """The caller's shared client, or a client of this worker's own."""
        if self._fetcher.client is not None:
            yield self._fetcher.client
            return
        client = self._fetcher.new_client()
        try:
            yield client
        finally:
            with anyio.move_on_after(CLEANUP_TIMEOUT, shield=True):
                await client.aclose()
