"""Scenario g: what ``asyncio.TaskGroup`` (Python 3.11) fixes among a-j, and what it cannot.

A TaskGroup gives asyncio the nursery's shape: no task outlives the ``async with``, and a
failing task cancels its siblings. So it fixes a (a forgotten shutdown becomes a hang, not
a leak), b (the error cancels the siblings and arrives at once, grouped), and the part of d
and e that is about waiting: a deadline around the group ends every worker before it
raises, and the group waits for the workers' cleanup before the caller leaves.

It does not change asyncio's cancellation itself, which stays edge-triggered: the group
cancels each child once. A child that swallows that one CancelledError keeps the group
waiting for it. The timeout that started it has spent its one cancellation, and on 3.11 an
enclosing ``asyncio.timeout`` cannot break the wait either: it cancels the task that waits
for the group again, but the group, already aborting, does not cancel its children again.
Nor does it change j: a child cancelled before its first step never runs. Ctrl-C under
``asyncio.run`` with a TaskGroup is in ``test_cancellation_ctrl_c.py``; i (a bounded queue
the workers feed) is the queue's doing, and a TaskGroup does not change it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import httpx
import pytest

from cancellation_support import (
    EXPECTED_HANG,
    ChapterCrawler,
    GatedSite,
    crawl_until_the_root_is_requested,
    fan_out_links,
    http_fetch,
)
from httpserver import open_test_server
from support import HANG_LIMIT


async def fetch_nothing(url: str) -> Iterable[str]:
    return ()


def test_g_taskgroup_forgotten_shutdown_is_a_hang_not_a_leak() -> None:
    """a. With the workers in a TaskGroup, forgetting to cancel them after ``join()`` makes
    ``crawl()`` wait for them for ever, as a Trio nursery would; the hang detector's
    cancellation then reaches every worker, so nothing is left in the loop."""

    async def scenario() -> None:
        chapter = ChapterCrawler(["/", "/a"], fetch_nothing, max_tasks=3)
        # The crawl's own work is two in-memory fetches; everything after them is the hang.
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(EXPECTED_HANG):
                await chapter.crawl_in_task_group(cancel_workers=False)
        assert chapter.fetched == ["/", "/a"]
        assert all(worker.cancelled() for worker in chapter.workers)
        assert not set(chapter.workers) & asyncio.all_tasks()

    asyncio.run(scenario())


# Intended twin of shutdown's scenario b on AnyIO: the same steps with asyncio.TaskGroup.
def test_g_taskgroup_worker_error_cancels_siblings_and_raises_at_once() -> None:
    """b. A worker's error cancels the sibling in the middle of its fetch and comes out of
    the group at once as an ExceptionGroup, where the chapter's ``join()`` would hang."""

    async def scenario() -> ChapterCrawler:
        sibling_fetching = asyncio.Event()

        async def fetch(url: str) -> Iterable[str]:
            if url == "/bad":
                await sibling_fetching.wait()
                raise ZeroDivisionError(f"bug while parsing {url}")
            sibling_fetching.set()
            await asyncio.Event().wait()  # a page that never answers
            return ()

        chapter = ChapterCrawler(["/slow", "/bad"], fetch, max_tasks=2)
        with pytest.RaisesGroup(
            pytest.RaisesExc(ZeroDivisionError, match="^bug while parsing /bad$")
        ):
            async with asyncio.timeout(HANG_LIMIT):
                await chapter.crawl_in_task_group()
        return chapter

    chapter = asyncio.run(scenario())
    assert chapter.fetched == []
    assert sorted(worker.cancelled() for worker in chapter.workers) == [False, True]


def test_g_taskgroup_deadline_ends_every_worker_before_it_raises() -> None:
    """d. ``asyncio.timeout`` around the TaskGroup crawl: when the deadline passes (while
    ``/`` is in flight) the group cancels both workers and waits for them, so when
    TimeoutError arrives no worker is left to make another request."""

    async def scenario() -> list[str]:
        site = GatedSite()
        async with (
            asyncio.timeout(HANG_LIMIT),
            open_test_server() as server,
            httpx.AsyncClient() as client,
        ):
            server.fallback(site.handle)
            chapter = ChapterCrawler([server.url()], http_fetch(client), max_tasks=2)
            with pytest.raises(TimeoutError):
                await crawl_until_the_root_is_requested(chapter.crawl_in_task_group, site)
            assert all(worker.done() for worker in chapter.workers)
            return list(server.requests)

    assert asyncio.run(scenario()) == ["/"]


def test_g_taskgroup_waits_for_the_workers_cleanup_before_the_caller_leaves() -> None:
    """e. When a deadline cancels the group, a worker's cleanup await completes (one
    cancellation, already delivered) and the group waits for it: the caller leaves last,
    the reverse of ``asyncio.shield``'s order. Nothing bounds that cleanup, though."""

    async def scenario() -> list[str]:
        events: list[str] = []
        worker_waiting = asyncio.Event()

        async def worker() -> None:
            try:
                worker_waiting.set()
                await asyncio.Event().wait()
            finally:
                events.append("worker cleanup started")
                await asyncio.sleep(0)  # flushing the last records
                events.append("worker cleanup finished")

        async def crawl() -> None:
            async with asyncio.timeout(None) as deadline:
                try:
                    async with asyncio.TaskGroup() as task_group:
                        task_group.create_task(worker())
                        await worker_waiting.wait()
                        deadline.reschedule(asyncio.get_running_loop().time())
                        await asyncio.Event().wait()  # the crawl's join()
                finally:
                    events.append("caller left")

        with pytest.raises(TimeoutError):
            async with asyncio.timeout(HANG_LIMIT):
                await crawl()
        return events

    assert asyncio.run(scenario()) == [
        "worker cleanup started",
        "worker cleanup finished",
        "caller left",
    ]


def test_g_taskgroup_task_cancelled_before_its_first_step_never_runs() -> None:
    """j. As with a bare task: a child the group cancels before its first step (here the
    group's body fails at once) never runs, not even its ``finally``."""

    async def scenario() -> list[str]:
        events: list[str] = []

        async def worker() -> None:
            events.append("body started")
            try:
                await asyncio.sleep(0)
            finally:
                events.append("finally")

        async def crawl() -> None:
            async with asyncio.TaskGroup() as task_group:
                task_group.create_task(worker())
                raise ZeroDivisionError("bug before the first await")

        with pytest.RaisesGroup(ZeroDivisionError):
            async with asyncio.timeout(HANG_LIMIT):
                await crawl()
        return events

    assert asyncio.run(scenario()) == []


# Intended twin of deadlines' asyncio scenario i: the same deadlock, workers in a TaskGroup.
def test_g_taskgroup_workers_feeding_their_own_bounded_queue_still_deadlock() -> None:
    """i. The circular-flow deadlock is the bounded queue's doing: with the workers in a
    TaskGroup they still end up both waiting in ``put()`` on a full queue. The hang
    detector's TimeoutError comes out of the group's body, so it arrives grouped, and the
    group has cancelled both workers by then."""

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

        async def crawl() -> None:
            async with asyncio.TaskGroup() as task_group:
                for number in range(2):
                    task_group.create_task(worker(f"worker {number}"))
                await queue.put("/")
                async with asyncio.timeout(HANG_LIMIT):
                    await both_stuck.wait()
                async with asyncio.timeout(EXPECTED_HANG):
                    await queue.join()

        with pytest.RaisesGroup(TimeoutError):
            await crawl()
        return sending

    assert sorted(asyncio.run(scenario())) == ["worker 0", "worker 1"]


def test_g_taskgroup_a_swallowed_cancel_hangs_the_group_despite_two_timeouts() -> None:
    """Edge-triggered still: the crawl's deadline passes, the group cancels its worker once,
    the worker swallows that and goes on waiting, and the group waits for the worker. The
    deadline's one cancellation is spent, so the crawl hangs; an enclosing timeout that
    passes later cancels the crawl's task again, but on 3.11 the group does not pass a
    second cancellation on to its children, so that cannot break the wait either. The hang
    detector (``asyncio.wait`` with a timeout, which cancels nothing) sees the crawl still
    pending both times. Letting the worker finish ends it, and only then TimeoutError."""

    async def scenario() -> list[str]:
        events: list[str] = []
        worker_waiting = asyncio.Event()
        worker_swallowed = asyncio.Event()
        may_finish = asyncio.Event()
        enclosing_deadlines: list[asyncio.Timeout] = []

        async def stubborn_worker() -> None:
            try:
                worker_waiting.set()
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                events.append("worker swallowed the cancel")
                worker_swallowed.set()
            await may_finish.wait()
            events.append("worker finished")

        async def crawl() -> None:
            async with asyncio.timeout(None) as enclosing, asyncio.timeout(None) as deadline:
                enclosing_deadlines.append(enclosing)
                async with asyncio.TaskGroup() as task_group:
                    task_group.create_task(stubborn_worker())
                    await worker_waiting.wait()
                    deadline.reschedule(asyncio.get_running_loop().time())
                    await asyncio.Event().wait()  # the crawl's join()

        crawling = asyncio.create_task(crawl())
        async with asyncio.timeout(HANG_LIMIT):
            await worker_swallowed.wait()
        _, still_running = await asyncio.wait([crawling], timeout=EXPECTED_HANG)
        assert still_running == {crawling}  # the deadline has passed; the crawl hangs
        [enclosing] = enclosing_deadlines
        enclosing.reschedule(asyncio.get_running_loop().time())
        _, still_running = await asyncio.wait([crawling], timeout=EXPECTED_HANG)
        assert still_running == {crawling}  # so has the enclosing one; it still hangs
        assert crawling.cancelling() == 2
        may_finish.set()  # clean up: let the stubborn worker finish
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(HANG_LIMIT):
                await crawling
        return events

    assert asyncio.run(scenario()) == ["worker swallowed the cancel", "worker finished"]
