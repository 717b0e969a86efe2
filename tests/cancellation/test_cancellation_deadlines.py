"""Scenarios d and i: a deadline around the whole crawl, and the circular-flow deadlock.

d. ``asyncio.timeout`` (or ``wait_for``) around the chapter's crawl cancels one task, the
   one awaiting ``join()``. The workers were made with ``create_task`` and nobody awaits
   them, so they keep fetching after the deadline: the test server counts their requests.
   A Trio or AnyIO deadline cancels a scope, and every task in the nursery inside it, and
   waits for them: after the deadline the server hears nothing more.
i. Workers that send the links they find into the bounded channel they receive from
   deadlock as soon as the buffer is full and every worker is sending: Trio channels,
   AnyIO streams and ``asyncio.Queue(maxsize=...)`` alike. The engine's channel carries
   requests one way only (the frontier is data in ``CrawlState``), so a site where every
   page links to many new pages is crawled to the end with two workers.

asyncio.TaskGroup's version of d is in ``test_cancellation_taskgroup.py``.
"""

from __future__ import annotations

import asyncio

import anyio
import httpx
import pytest
import trio
from trio.testing import MockClock

from trio_crawler import Crawler

from cancellation_support import (
    EXPECTED_HANG,
    ChapterCrawler,
    GatedSite,
    anyio_backend_spec,
    cancel_and_wait,
    crawl_on_a_task_group,
    crawl_until_the_root_is_requested,
    fan_out_links,
    http_fetch,
)
from httpserver import Reply, Request, open_test_server
from support import HANG_LIMIT, page


# Imports and fixture alike in test_cancellation_shutdown.py on purpose: the same scenario tools.
@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    return anyio_backend_spec(request.param)


# -- d. A deadline around the whole crawl ---------------------------------------------------


def test_d_asyncio_deadline_cancels_only_the_main_task() -> None:
    """asyncio: the deadline passes while ``/`` is in flight and ``crawl()`` raises
    TimeoutError, yet both workers are alive and go on to fetch all six pages ``/`` links
    to: every one of them is requested after the deadline."""

    async def scenario() -> tuple[list[str], list[str]]:
        site = GatedSite()
        async with (
            asyncio.timeout(HANG_LIMIT),
            open_test_server() as server,
            httpx.AsyncClient() as client,
        ):
            server.fallback(site.handle)
            chapter = ChapterCrawler([server.url()], http_fetch(client), max_tasks=2)
            with pytest.raises(TimeoutError):
                await crawl_until_the_root_is_requested(chapter.crawl, site)
            before_deadline = list(server.requests)
            assert not any(worker.done() for worker in chapter.workers)
            site.root_may_answer.set()
            await site.all_requested.wait()  # the workers crawl on
            after_deadline = server.requests[len(before_deadline) :]
            await cancel_and_wait(chapter.workers)
        return before_deadline, after_deadline

    before_deadline, after_deadline = asyncio.run(scenario())
    assert before_deadline == ["/"]
    assert sorted(after_deadline) == list(GatedSite.LEAVES)


@pytest.mark.trio
async def test_d_trio_crawler_deadline_ends_every_request_at_once(
    virtual_clock: MockClock,
) -> None:
    """Trio, the engine: with ``max_time=2.5`` and pages that take 1 s (virtual), requests
    go out at 0, 1, 1, 2 and 2 s; at 2.5 s every worker is cancelled and ``crawl()`` returns,
    and in the 10 s after it the server receives nothing more."""
    arrivals: list[float] = []

    async def slow_page(request: Request) -> Reply:
        arrivals.append(trio.current_time() - start)
        await trio.sleep(1)
        return page(*GatedSite.LEAVES) if request.target == "/" else page()

    async with open_test_server() as server:
        server.fallback(slow_page)
        # No robots.txt fetch: the arrival times below are the pages' own.
        crawler = Crawler([server.url()], max_tasks=2, max_time=2.5, obey_robots=False)
        start = trio.current_time()
        with trio.fail_after(HANG_LIMIT):
            await crawler.crawl()
        assert trio.current_time() - start == pytest.approx(2.5)
        requests_by_the_deadline = list(server.requests)
        await trio.sleep(10)  # virtual: a surviving worker would have fetched the rest by now
        assert server.requests == requests_by_the_deadline
    assert arrivals == pytest.approx([0, 1, 1, 2, 2])
    assert crawler.finish_reason == "deadline"
    assert len(crawler.done) == 3
    assert crawler.statistics().todo == 4  # two cancelled in flight, two never sent


@pytest.mark.anyio
async def test_d_anyio_deadline_ends_every_worker_at_once(
    anyio_backend: tuple[str, dict[str, object]],
) -> None:
    """AnyIO, both backends: the deadline passes while ``/`` is in flight; by the time the
    scope exits every worker has ended, so opening the gate brings no further request."""
    site = GatedSite()
    worker_exits: list[str] = []

    async def expire_scope_when(event: anyio.Event, scope: anyio.CancelScope) -> None:
        await event.wait()
        scope.deadline = anyio.current_time()

    with anyio.fail_after(HANG_LIMIT):
        async with (
            open_test_server() as server,
            httpx.AsyncClient() as client,
            anyio.create_task_group() as watchers,
        ):
            server.fallback(site.handle)
            with anyio.CancelScope() as deadline:
                watchers.start_soon(expire_scope_when, site.root_requested, deadline)
                await crawl_on_a_task_group(
                    [server.url()], http_fetch(client), max_tasks=2, worker_exits=worker_exits
                )
            assert deadline.cancelled_caught
            assert sorted(worker_exits) == ["worker 0", "worker 1"]
            site.root_may_answer.set()
            await anyio.wait_all_tasks_blocked()
            assert server.requests == ["/"]


# -- i. The circular-flow deadlock ------------------------------------------------------------


@pytest.mark.trio
async def test_i_trio_workers_sending_into_their_own_bounded_channel_deadlock(
    virtual_clock: MockClock,
) -> None:
    """Trio: two workers, a buffer of 1, each page sending its six links back into the
    channel: both workers end up in ``send()`` with the buffer full and nobody receiving.
    ``fail_after`` fires (virtual time)."""
    sending: dict[str, str] = {}  # worker -> the link it is blocked sending
    link_sender, link_receiver = trio.open_memory_channel[str](1)

    async def worker(name: str) -> None:
        async for url in link_receiver:
            for link in fan_out_links(url):
                sending[name] = link
                await link_sender.send(link)
                del sending[name]

    async def crawl() -> None:
        async with link_sender, link_receiver, trio.open_nursery() as nursery:
            for number in range(2):
                nursery.start_soon(worker, f"worker {number}")
            await link_sender.send("/")

    with pytest.raises(trio.TooSlowError), trio.fail_after(HANG_LIMIT):
        await crawl()
    assert sorted(sending) == ["worker 0", "worker 1"]


def test_i_asyncio_workers_putting_into_their_own_bounded_queue_deadlock() -> None:
    """asyncio: the same with ``asyncio.Queue(maxsize=1)``: both workers wait in ``put()``,
    the queue is full, and ``join()`` never returns (the hang detector fires)."""

    async def scenario() -> dict[str, str]:
        sending: dict[str, str] = {}
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=1)
        both_stuck = asyncio.Event()

        async def worker(name: str) -> None:
            while True:
                url = await queue.get()
                for link in fan_out_links(url):
                    sending[name] = link
                    if len(sending) == 2 and queue.full():
                        both_stuck.set()  # this put() blocks too, and nobody is left to get()
                    await queue.put(link)
                    del sending[name]
                queue.task_done()

        workers = [asyncio.create_task(worker(f"worker {number}")) for number in range(2)]
        await queue.put("/")
        async with asyncio.timeout(HANG_LIMIT):
            await both_stuck.wait()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(EXPECTED_HANG):
                await queue.join()
        stuck = dict(sending)
        await cancel_and_wait(workers)
        return stuck

    assert sorted(asyncio.run(scenario())) == ["worker 0", "worker 1"]


# Intended twin of the Trio test above: scenario i on AnyIO, compared in the docs' table.
@pytest.mark.anyio
async def test_i_anyio_workers_sending_into_their_own_bounded_stream_deadlock(
    anyio_backend: tuple[str, dict[str, object]],
) -> None:
    """AnyIO, both backends: the same with a memory object stream of buffer 1."""
    sending: dict[str, str] = {}
    link_sender, link_receiver = anyio.create_memory_object_stream[str](1)

    async def worker(name: str) -> None:
        async for url in link_receiver:
            for link in fan_out_links(url):
                sending[name] = link
                await link_sender.send(link)
                del sending[name]

    async def crawl() -> None:
        with link_sender, link_receiver:
            async with anyio.create_task_group() as task_group:
                for number in range(2):
                    task_group.start_soon(worker, f"worker {number}")
                await link_sender.send("/")

    with pytest.raises(TimeoutError), anyio.fail_after(EXPECTED_HANG):
        await crawl()
    assert sorted(sending) == ["worker 0", "worker 1"]


@pytest.mark.trio
async def test_i_trio_crawler_crawls_a_fan_out_site_with_two_workers() -> None:
    """The engine (Trio): every page links to six new ones, 43 pages in all; with
    ``max_tasks=2`` the crawl finishes, fetching each page once, two at a time at most.
    (Real time: nothing here sleeps, and the virtual clock's idle checks only slow it.)"""

    async def fan_out_page(request: Request) -> Reply:
        return page(*fan_out_links(request.target))

    async with open_test_server() as server:
        server.fallback(fan_out_page)
        crawler = Crawler([server.url()], max_tasks=2, obey_robots=False)
        with trio.fail_after(HANG_LIMIT):
            await crawler.crawl()
    assert crawler.finish_reason == "finished"
    assert len(crawler.done) == 43
    assert set(server.hits.values()) == {1}
    assert server.max_in_flight <= 2
