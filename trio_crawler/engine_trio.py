"""The crawler on Trio: one nursery, a dispatcher, ``max_tasks`` workers, one channel.

Theory of operation
-------------------
The whole concurrency of a crawl::

    async with store.session(runtime):                  # a shared crawl joined here
        async with trio.open_nursery() as nursery:      # no task outlives crawl()
            sender, receiver = trio.open_memory_channel(0)  # a request to an idle worker
            for _ in range(max_tasks):
                nursery.start_soon(worker, receiver.clone())
            nursery.start_soon(dispatch, sender)

    async def dispatch(sender):                         # the only sender
        async with sender:                              # closing it ends every worker
            while True:
                request = state.next_request(now=trio.current_time())
                if request is not None:
                    turns.handing_out()                 # pages wait (see below)
                    await sender.send(request)          # blocks until a worker is idle
                    continue                            # (and lets pages go meanwhile)
                turns.waiting()
                if store.has_work(starved=True):        # a state file to write, a lease:
                    nursery.start_soon(store.flush)     # beside (one at a time), as hosts
                if state.finished:                      # come due meanwhile
                    break                               # replaces Queue.join()
                with trio.move_on_at(state.next_wakeup()):  # a worker finished a URL,
                    await progress.wait()               # a flush ended, or a delay is over

    async def worker(receiver):
        async for request in receiver:
            state.attempt_started(request, now=trio.current_time(), sent_later=True)
            with trio.move_on_after(timeout):           # bounds one attempt
                outcome = await fetch(client, request.url, on_sent=sent)  # written: the
                                                        # host's delay runs from then
            async with turns.turn():                    # after the requests due
                result = state.attempt_finished(request, outcome, now=trio.current_time())
            if isinstance(result, Committing):          # a durable store keeps it first
                await store.settle(request)             # ... and then the record is made
            progress.set()                              # may have queued links

Why the channel's buffer is 0. Workers discover the work they consume: every page can add
links. If workers sent new URLs into the channel they receive from, a bounded buffer would
fill while every worker sat in ``send()`` and nobody was left to ``receive()``: a deadlock.
So the frontier is data in :class:`~trio_crawler._state.CrawlState` (bounded by the site,
holding small frozen requests), the dispatcher is the channel's only sender, and the
channel only ever carries one request to one idle worker. With no buffer, a request leaves
the frontier only when a worker is ready for it, so ``Todo`` in the report is exact.

Why pages take turns. A polite crawl never makes up a late request: the host's next one is
due a delay after it. A page that has arrived can wait to be read, since its host is not due
again for a whole delay. Trio runs every ready task once a pass, in no set order, so a
request that falls due while hundreds of pages wait to be parsed would go out behind them.
So, in a paced crawl (a delay, a Crawl-delay, a slowed pace), a worker reads its page
(``attempt_finished``: parse, links, record) in a turn of :class:`~trio_crawler._turns.Turns`:
one page a pass of the loop, and only while the dispatcher has no request in hand. The
dispatcher lets pages go before it blocks for a worker, since the busy workers may be the
ones waiting for a turn.

Why the store's flush runs beside the dispatcher. With nothing to hand out, the dispatcher
may ask the store to write what waits and to load (or lease) more work: a transaction of
the state file in a thread, or a call to the shared frontier. That takes milliseconds, and
in a broad crawl hosts come due all the time, so it runs in a task of its own in the
nursery, one at a time (``_store_errand``), and wakes the dispatcher when it ends. A
dispatcher that awaited it handed out nothing meanwhile, and each host's lateness stays.

Ending the crawl needs no ``task.cancel()``: when the core reports it is finished, the
dispatcher closes the send side, each worker's ``async for`` ends, and the nursery exits.
A deadline (``max_time``) or :meth:`Crawler.stop` cancels the crawl's cancel scope instead,
which cancels every worker wherever it is; cleanup that must await (closing the HTTP
clients) is shielded and bounded so it neither dies at its first checkpoint nor hangs.
``stop(grace)`` (the first Ctrl-C) is the gentle form: the core stops handing out URLs, so
the crawl ends by itself once the requests in flight finish, and the crawl scope's
deadline, moved to ``grace`` seconds from now, cancels whatever is still running then.

Errors: failures from the web are records, made by the core. An unexpected exception while
fetching one URL is logged with its traceback and recorded for that URL, so it neither
kills the crawl nor hangs it. Only a bug in the crawler itself (the core raising) escapes
the nursery, as an ExceptionGroup that cancels the other workers.
"""

from __future__ import annotations

import math
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, TypeVar

import trio

from ._crawler import CLEANUP_TIMEOUT, CrawlerBase, FinishReason
from ._events import FetchRequest, Outcome
from ._turns import Turns

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

    from ._clients import Client
    from ._fetch import MaySend, OnSent
    from ._transport import Unanswered

__all__ = ["Crawler", "FinishReason"]

_T = TypeVar("_T")


class Crawler(CrawlerBase):
    """Crawl the web from ``roots`` on Trio: the chapter's ``Crawler`` with cancel scopes.

    Its signature, options and attributes are :class:`~trio_crawler._crawler.CrawlerBase`'s.
    """

    def _init_engine(self) -> None:
        # Trio's primitives can be made outside a run, so they are made here, once.
        self._crawl_scope = trio.CancelScope()
        self._progress = trio.Event()
        self._progress_scope = trio.CancelScope()
        self._turns = Turns(trio.Lock(), trio.Event, paced=self._paced)

    def _now(self) -> float:
        return trio.current_time()

    def _cut_short(self, grace: float) -> None:
        """Cancel the crawl's scope now, or move its deadline to ``grace`` seconds from now.

        In-flight requests that finish within the grace period end the crawl as usual (the
        core is finished once nothing is in flight), and the deadline cancels the rest.
        """
        if grace > 0:
            self._crawl_scope.deadline = min(
                self._crawl_scope.deadline, trio.current_time() + grace
            )
            self._progress.set()  # the dispatcher may be waiting for work that won't come
        else:
            self._crawl_scope.cancel("crawl interrupted")

    async def crawl(self) -> None:
        """A nursery of workers fed by a dispatcher (see :meth:`CrawlerBase.crawl`)."""
        start = self._begin()
        if self.config.max_time is not None:
            self._crawl_scope.deadline = start + self.config.max_time
        if self._stopping:  # stop() came before crawl()
            self._crawl_scope.cancel("crawl interrupted")
        deadline_passed = None
        try:
            async with self._store_session():  # a shared crawl is joined and left here
                with self._crawl_scope:
                    async with trio.open_nursery() as nursery:
                        request_sender, request_receiver = trio.open_memory_channel[FetchRequest](0)
                        async with request_receiver:
                            for _ in range(self.config.max_tasks):
                                nursery.start_soon(self._worker, request_receiver.clone())
                        if self._on_progress is not None:
                            nursery.start_soon(self._report_progress)
                        nursery.start_soon(self._dispatch, request_sender, nursery)
                deadline_passed = self._crawl_scope.cancelled_caught
        finally:
            self._end(start, deadline_passed=deadline_passed)

    async def _dispatch(
        self, request_sender: trio.MemorySendChannel[FetchRequest], nursery: trio.Nursery
    ) -> None:
        """Hand queued requests to idle workers until the core says the crawl is done."""
        async with request_sender:
            while True:
                request = self.state.next_request(now=trio.current_time())
                if request is not None:
                    self._turns.handing_out()
                    try:
                        request_sender.send_nowait(request)
                    except trio.WouldBlock:
                        # Every worker is busy, and some may wait for a turn to read
                        # their page: it must come, or none would be free to take this.
                        self._turns.waiting()
                        await request_sender.send(request)
                    else:
                        await trio.lowlevel.checkpoint()  # the worker writes it first
                    continue
                self._turns.waiting()  # pages may be read until a request is due
                errand = self._store_errand()  # a state file to write, its queue to load:
                if errand is not None:  # beside, as hosts come due meanwhile
                    nursery.start_soon(errand)
                if self.state.finished:  # asked after next_request(), which can finish it
                    await self._fetcher.close_idle()  # in one go, not worker by worker
                    break
                # Nothing to hand out yet: wait until a worker finishes a URL (which may
                # queue links or end the crawl), or until a host's delay is over. A fresh
                # Event is made right after the old one fires, with no checkpoint in
                # between, so no wake-up is lost.
                wakeup = self.state.next_wakeup()
                with trio.move_on_at(math.inf if wakeup is None else wakeup):
                    await self._progress.wait()
                self._progress = trio.Event()
        self._progress_scope.cancel("crawl complete")

    async def _worker(self, request_receiver: trio.MemoryReceiveChannel[FetchRequest]) -> None:
        async with request_receiver, self._open_client() as client:
            async for request in request_receiver:
                if self._stopping:
                    # stop() came while this request waited in send(): it was never
                    # started, so it goes back rather than starting during the grace period.
                    self.state.put_back(request)
                else:
                    await self._crawl_url(client, request)
                self._progress.set()

    def _wake_dispatcher(self) -> None:
        self._progress.set()

    def _page_turn(self) -> AbstractAsyncContextManager[object]:
        return self._turns.turn()

    async def _report_progress(self) -> None:
        """Call ``on_progress`` every interval: one more task beside the workers.

        It would run forever, so the dispatcher cancels its scope when the crawl is done.
        """
        assert self._on_progress is not None
        with self._progress_scope:
            while True:
                self._on_progress(self.statistics())
                await trio.sleep(self._progress_interval)

    async def _in_thread(self, function: Callable[[], _T]) -> _T:
        with trio.CancelScope(shield=True):
            result = await trio.to_thread.run_sync(function)
        return result

    async def _shielded(self, function: Callable[[], Awaitable[_T]]) -> _T:
        with trio.CancelScope(shield=True):
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
        """One attempt, bounded by ``timeout``; never raises except Cancelled."""
        with trio.move_on_after(self.config.timeout):
            try:
                return await self._fetcher.fetch(client, request, on_sent, may_send, unanswered)
            except Exception as exc:
                return self._fetcher.unexpected(request.url, exc)
        return self._fetcher.timed_out(request)

    async def _at_most(self, seconds: float, function: Callable[[], Awaitable[object]]) -> None:
        with trio.move_on_after(seconds):
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
            with trio.move_on_after(CLEANUP_TIMEOUT, shield=True):
                await client.aclose()
