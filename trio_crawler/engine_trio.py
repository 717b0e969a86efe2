"""The crawler on Trio: one nursery, a dispatcher, ``max_tasks`` workers, one channel.

Theory of operation
-------------------
The whole concurrency of a crawl::

    async with trio.open_nursery() as nursery:          # no task outlives crawl()
        sender, receiver = trio.open_memory_channel(0)  # a request goes to an idle worker
        for _ in range(max_tasks):
            nursery.start_soon(worker, receiver.clone())
        nursery.start_soon(dispatch, sender)

    async def dispatch(sender):                         # the only sender
        async with sender:                              # closing it ends every worker
            while not state.finished:                   # replaces Queue.join()
                request = state.next_request()
                if request is None:
                    await progress.wait()               # a worker finished a URL
                else:
                    await sender.send(request)          # blocks until a worker is idle

    async def worker(receiver):
        async for request in receiver:
            with trio.move_on_after(timeout):           # bounds one attempt
                outcome = await fetch(client, request.url)
            state.attempt_finished(request, outcome)    # may queue links; wakes dispatch

Why the channel's buffer is 0. Workers discover the work they consume: every page can add
links. If workers sent new URLs into the channel they receive from, a bounded buffer would
fill while every worker sat in ``send()`` and nobody was left to ``receive()``: a deadlock.
So the frontier is data in :class:`~trio_crawler._state.CrawlState` (its size is bounded
by the site, and it holds small frozen requests), the dispatcher is the channel's only
sender, and the channel only ever carries one request to one idle worker. With no buffer,
a request leaves the frontier only when a worker is ready for it, so the frontier stays
ordered and ``Todo`` in the report is exact.

Ending the crawl needs no ``task.cancel()``: when the core reports it is finished, the
dispatcher closes the send side, each worker's ``async for`` ends, and the nursery exits.
A deadline (``max_time``) or :meth:`Crawler.stop` cancels the crawl's cancel scope instead,
which cancels every worker wherever it is; cleanup that must await (closing the HTTP client)
is shielded and bounded so it neither dies at its first checkpoint nor hangs.

Errors: failures from the web are records, made by the core. An unexpected exception while
fetching one URL is logged with its traceback and recorded for that URL, so it neither
kills the crawl nor hangs it. Only a bug in the crawler itself (the core raising) escapes
the nursery, as an ExceptionGroup that cancels the other workers.
"""

from __future__ import annotations

import logging
import ssl
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import TYPE_CHECKING, Literal

import trio

from ._config import (
    DEFAULT_MAX_REDIRECT,
    DEFAULT_MAX_TASKS,
    DEFAULT_MAX_TRIES,
    DEFAULT_TIMEOUT,
    CrawlConfig,
)
from ._events import FetchError, FetchRequest, Outcome, describe_exception
from ._fetch import fetch, open_client
from ._state import CrawlState, CrawlStatistics

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable

    import httpx

    from ._stats import FetchStatistic

LOGGER = logging.getLogger("trio_crawler")

FinishReason = Literal["finished", "deadline", "interrupted"]

# Closing clients and their connections takes microseconds on a healthy loop; five seconds
# only bounds a pathological close (a peer that never acknowledges), after which the
# sockets are dropped by the garbage collector rather than hanging Ctrl-C.
CLEANUP_TIMEOUT = 5.0


class Crawler:
    """Crawl the web from ``roots`` on Trio, the chapter's ``Crawler`` with cancel scopes.

    Args:
        roots: Start URLs. A root without ``://`` gets ``http://``; repeats are dropped.
        exclude: A regex; URLs where ``re.search`` matches are not followed.
        strict: Host matching: strict (equal, or modulo one ``www.``) or lenient (last
            two labels).
        max_redirect: Redirects followed from any one URL.
        max_tries: Attempts per URL on network errors.
        max_tasks: Concurrent workers, and so concurrent requests.
        client: An ``httpx.AsyncClient`` to share between the workers; it is left open.
            Without it each worker gets a client of its own, closed when the crawl ends.
        timeout: Seconds for one whole attempt, connect to last byte.
        max_time: Seconds for the whole crawl; when they pass, the crawl stops cleanly.
        on_record: Called with each record the moment it is made (see
            :class:`~trio_crawler._state.CrawlState`).

    Raises:
        ConfigError: At construction, for an unusable option.
    """

    def __init__(
        self,
        roots: Iterable[str],
        *,
        exclude: str | None = None,
        strict: bool = True,
        max_redirect: int = DEFAULT_MAX_REDIRECT,
        max_tries: int = DEFAULT_MAX_TRIES,
        max_tasks: int = DEFAULT_MAX_TASKS,
        client: httpx.AsyncClient | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_time: float | None = None,
        on_record: Callable[[FetchStatistic], None] | None = None,
    ) -> None:
        self.config = CrawlConfig.create(
            roots,
            exclude=exclude,
            strict=strict,
            max_redirect=max_redirect,
            max_tries=max_tries,
            max_tasks=max_tasks,
            timeout=timeout,
            max_time=max_time,
        )
        self.state = CrawlState(self.config, on_record=on_record)
        self.finish_reason: FinishReason | None = None
        self.elapsed = 0.0
        self._client = client
        self._crawl_scope = trio.CancelScope()
        self._progress = trio.Event()
        self._started = False

    # The chapter's attribute names, read from the core so they survive the crawl.
    @property
    def roots(self) -> tuple[str, ...]:
        return self.config.roots

    @property
    def max_tasks(self) -> int:
        return self.config.max_tasks

    @property
    def seen_urls(self) -> set[str]:
        """Every URL queued or fetched."""
        return self.state.seen_urls

    @property
    def done(self) -> list[FetchStatistic]:
        """The records, in the order URLs finished."""
        return self.state.done

    def statistics(self) -> CrawlStatistics:
        """A frozen snapshot of the crawl's progress."""
        return self.state.statistics()

    def stop(self) -> None:
        """End the crawl now, as Ctrl-C does: in-flight requests are cancelled.

        Safe to call from any task in the crawl's Trio run, before or during ``crawl()``;
        ``crawl()`` then returns with ``finish_reason == "interrupted"``.
        """
        if self.finish_reason is None:
            self.finish_reason = "interrupted"
        self._crawl_scope.cancel("crawl interrupted")

    async def crawl(self) -> None:
        """Run the crawl until nothing is left to fetch, the deadline, or :meth:`stop`.

        Afterwards ``done``, ``seen_urls``, ``finish_reason`` and ``elapsed`` describe it,
        whichever way it ended. A Crawler crawls once.

        Raises:
            RuntimeError: If this Crawler has crawled before.
            ExceptionGroup: Only for a bug in the crawler; failures of the web are records.
        """
        if self._started:
            raise RuntimeError("a Crawler crawls once; make a new Crawler for another crawl")
        self._started = True
        start = trio.current_time()
        if self.config.max_time is not None:
            self._crawl_scope.deadline = start + self.config.max_time
        try:
            with self._crawl_scope:
                async with (
                    self._open_shared_client() as shared_client,
                    trio.open_nursery() as nursery,
                ):
                    request_sender, request_receiver = trio.open_memory_channel[FetchRequest](0)
                    async with request_receiver:
                        for _ in range(self.config.max_tasks):
                            nursery.start_soon(
                                self._worker, request_receiver.clone(), shared_client
                            )
                    nursery.start_soon(self._dispatch, request_sender)
            if self.finish_reason is None:
                self.finish_reason = (
                    "deadline" if self._crawl_scope.cancelled_caught else "finished"
                )
        except BaseException:
            self.finish_reason = "interrupted"
            raise
        finally:
            self.elapsed = trio.current_time() - start

    # -- the tasks --------------------------------------------------------------------

    async def _dispatch(self, request_sender: trio.MemorySendChannel[FetchRequest]) -> None:
        """Hand queued requests to idle workers until the core says the crawl is done."""
        async with request_sender:
            while not self.state.finished:
                request = self.state.next_request()
                if request is not None:
                    await request_sender.send(request)
                    continue
                # Nothing to hand out yet: wait until a worker finishes a URL (which may
                # queue links or end the crawl). A fresh Event is made right after the old
                # one fires, with no checkpoint in between, so no wake-up is lost.
                await self._progress.wait()
                self._progress = trio.Event()

    async def _worker(
        self,
        request_receiver: trio.MemoryReceiveChannel[FetchRequest],
        shared_client: httpx.AsyncClient | None,
    ) -> None:
        client_context: AbstractAsyncContextManager[httpx.AsyncClient] = (
            nullcontext(shared_client) if shared_client is not None else self._open_worker_client()
        )
        async with request_receiver, client_context as client:
            async for request in request_receiver:
                retry: FetchRequest | None = request
                while retry is not None:
                    outcome = await self._attempt(client, retry)
                    retry = self.state.attempt_finished(retry, outcome)
                self._progress.set()

    async def _attempt(self, client: httpx.AsyncClient, request: FetchRequest) -> Outcome:
        """One attempt, bounded by ``timeout``; never raises except Cancelled."""
        with trio.move_on_after(self.config.timeout):
            try:
                return await fetch(client, request.url)
            except Exception as exc:
                LOGGER.exception("unexpected error fetching %s", request.url)
                return FetchError(error=describe_exception(exc), retryable=False)
        return FetchError(
            error=f"TimeoutError: attempt took longer than {self.config.timeout:g} s",
            retryable=True,
        )

    # -- HTTP clients -----------------------------------------------------------------

    @asynccontextmanager
    async def _open_shared_client(self) -> AsyncIterator[httpx.AsyncClient | None]:
        """The client all workers share: the caller's, or None for a client per worker."""
        if self._client is not None:
            yield self._client
            return
        self._ssl_context = ssl.create_default_context()
        yield None

    @asynccontextmanager
    async def _open_worker_client(self) -> AsyncIterator[httpx.AsyncClient]:
        # A client per worker: httpx's shared pool costs more than twice the CPU per
        # request at C=100 (its bookkeeping scans every connection), see the README's
        # "How it works". One SSL context is shared, since building one per client costs
        # about a megabyte each.
        client = open_client(max_connections=1, ssl_context=self._ssl_context)
        try:
            yield client
        finally:
            with trio.move_on_after(CLEANUP_TIMEOUT, shield=True):
                await client.aclose()


__all__ = ["Crawler", "FinishReason"]
