"""Scenarios a and b: ending the workers when the crawl is done, and a worker that raises.

a. The chapter ends its crawl with ``await queue.join()`` and then ``worker.cancel()`` for
   each worker. ``cancel()`` only asks; forget it and the workers stay pending in the loop
   for as long as the loop lives, and asyncio complains only when they are collected. Under
   Trio (and AnyIO) a task cannot outlive its nursery, so the same mistake is a crawl that
   never returns: a hang, which a deadline (``fail_after``) turns into an error.
b. The chapter calls ``task_done()`` after a fetch that returned, not in a ``finally``. A
   worker that raises therefore leaves ``join()`` waiting for ever, silently: its exception
   sits in the dead task until someone asks for it or the task is collected. A nursery
   cancels the siblings and raises an ExceptionGroup at once. The engine goes one step
   further for per-URL errors: it makes them records and keeps crawling.

asyncio.TaskGroup's version of both is in ``test_cancellation_taskgroup.py``.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import traceback
from collections.abc import Iterable

import anyio
import httpx
import pytest
import trio
from trio.testing import MockClock

from trio_crawler import Crawler

from cancellation_support import (
    CHILDREN,
    EXPECTED_HANG,
    PYTHON,
    ChapterCrawler,
    anyio_backend_spec,
    cancel_and_wait,
    crawl_on_a_nursery,
    crawl_on_a_task_group,
)
from mock_http import streaming_transport
from support import HANG_LIMIT


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    return anyio_backend_spec(request.param)


async def fetch_nothing(url: str) -> Iterable[str]:
    """A page with no links that costs nothing."""
    return ()


def run_child(mode: str) -> list[str]:
    """Run ``child_asyncio_gc.py MODE``; its stdout and stderr as one list of lines."""
    result = subprocess.run(
        [PYTHON, str(CHILDREN / "child_asyncio_gc.py"), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=HANG_LIMIT,
        check=False,
    )
    assert result.returncode == 0, result.stdout
    return result.stdout.splitlines()


# -- a. Shutdown when the work is done ------------------------------------------------------


def test_a_asyncio_cancel_only_requests_and_a_forgotten_cancel_leaks_the_workers() -> None:
    """asyncio: ``cancel()`` returns before the worker has stopped, and without it the
    workers outlive ``crawl()`` in the running loop, still waiting on ``queue.get()``."""

    async def scenario() -> None:
        async with asyncio.timeout(HANG_LIMIT):
            chapter = ChapterCrawler(["/", "/a"], fetch_nothing, max_tasks=3)
            await chapter.crawl()
            # The chapter's shutdown: cancel() was called on each worker, but it only asked.
            assert [task.done() for task in chapter.workers] == [False] * 3
            assert [task.cancelling() for task in chapter.workers] == [1] * 3
            await asyncio.wait(chapter.workers)
            assert all(task.cancelled() for task in chapter.workers)

            forgetful = ChapterCrawler(["/", "/a"], fetch_nothing, max_tasks=3)
            await forgetful.crawl(cancel_workers=False)
            assert forgetful.fetched == ["/", "/a"]
            assert set(forgetful.workers) <= asyncio.all_tasks()  # leaked into the loop
            assert not any(task.done() for task in forgetful.workers)
            await cancel_and_wait(forgetful.workers)  # what the crawl forgot

    asyncio.run(scenario())


def test_a_asyncio_forgotten_cancel_is_reported_only_at_exit() -> None:
    """asyncio with ``run_until_complete`` and ``close()``: the program "succeeds"; the
    workers are reported as "Task was destroyed but it is pending!" when the interpreter
    collects them, and only then do their ``finally`` blocks run, on a closed loop."""
    lines = run_child("forgotten-cancel")
    assert lines[:2] == ["crawl returned; workers pending: 2", "loop closed"]
    rest = lines[2:]
    assert rest.count("Task was destroyed but it is pending!") == 2
    assert {"worker 0 finally", "worker 1 finally"} <= set(rest)
    assert "RuntimeError: Event loop is closed" in rest


@pytest.mark.trio
async def test_a_trio_forgotten_shutdown_is_a_hang_not_a_leak(virtual_clock: MockClock) -> None:
    """Trio: without ``cancel_scope.cancel()`` the nursery waits for its idle workers, so
    ``crawl()`` never returns. ``fail_after`` detects the hang (virtual time) and, by
    cancelling the nursery, ends every worker: nothing outlives the call."""
    worker_exits: list[str] = []
    with pytest.raises(trio.TooSlowError), trio.fail_after(HANG_LIMIT):
        await crawl_on_a_nursery(
            ["/", "/a"],
            fetch_nothing,
            max_tasks=3,
            cancel_when_done=False,
            worker_exits=worker_exits,
        )
    assert trio.current_time() == HANG_LIMIT  # the crawl itself took no time
    assert sorted(worker_exits) == ["worker 0", "worker 1", "worker 2"]


@pytest.mark.anyio
async def test_a_anyio_forgotten_shutdown_is_a_hang_not_a_leak(
    anyio_backend: tuple[str, dict[str, object]],
) -> None:
    """AnyIO, both backends: as on Trio, a forgotten shutdown is a hang that
    ``anyio.fail_after`` detects (TimeoutError), and every worker has ended afterwards."""
    worker_exits: list[str] = []
    fetched: list[str] = []

    async def fetch(url: str) -> Iterable[str]:
        fetched.append(url)
        return ()

    # The hang is set up by the time every URL is fetched; no tasks can run after that.
    with pytest.raises(TimeoutError), anyio.fail_after(EXPECTED_HANG):
        await crawl_on_a_task_group(
            ["/", "/a"], fetch, max_tasks=3, cancel_when_done=False, worker_exits=worker_exits
        )
    assert fetched == ["/", "/a"]
    assert sorted(worker_exits) == ["worker 0", "worker 1", "worker 2"]


# -- b. A worker raises an unexpected error -------------------------------------------------


def test_b_asyncio_worker_error_leaves_join_waiting_silently() -> None:
    """asyncio, the chapter's pattern: the failed worker's URL is never ``task_done()``, so
    ``join()`` hangs (the hang detector fires) while the other worker finishes the rest. The
    exception is kept in the dead task; nothing reports it until someone asks."""
    others_fetched = asyncio.Event()

    async def fetch(url: str) -> Iterable[str]:
        if url == "/bad":
            raise ZeroDivisionError(f"bug while parsing {url}")
        if url == "/c":
            others_fetched.set()
        return ()

    async def scenario() -> None:
        chapter = ChapterCrawler(["/a", "/bad", "/b", "/c"], fetch, max_tasks=2)
        crawl = asyncio.create_task(chapter.crawl())
        await asyncio.sleep(0)  # crawl() starts its workers, then waits in join()
        async with asyncio.timeout(HANG_LIMIT):
            failed, _ = await asyncio.wait(chapter.workers, return_when=asyncio.FIRST_COMPLETED)
            await others_fetched.wait()
        assert chapter.fetched == ["/a", "/b", "/c"]
        assert chapter.queue.empty()
        # Nothing is left to do, yet join() has not returned, and never will.
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(EXPECTED_HANG):
                await crawl
        [dead] = failed
        assert isinstance(dead.exception(), ZeroDivisionError)  # only if someone asks
        [alive] = set(chapter.workers) - failed
        assert not alive.done()  # the other worker waits on queue.get() for ever
        await cancel_and_wait(chapter.workers)

    asyncio.run(scenario())


def test_b_asyncio_unretrieved_exception_is_reported_when_the_task_is_collected() -> None:
    """asyncio: the exception of a worker nobody awaited is logged as "Task exception was
    never retrieved" when the last reference to the task goes, not when it happened."""
    lines = run_child("unretrieved-exception")
    dropping = lines.index("dropping the last references to the failed task")
    assert lines[:dropping] == ["worker 0 finally", "worker failed; join done: False"]
    assert lines[dropping + 1] == "Task exception was never retrieved"
    assert lines[dropping + 1 : lines.index("dropped")][-1] == (
        "ZeroDivisionError: bug while parsing /bad"
    )


@pytest.mark.trio
async def test_b_trio_worker_error_cancels_siblings_and_raises_at_once(
    virtual_clock: MockClock,
) -> None:
    """Trio: the nursery cancels the sibling (mid-fetch) and raises an ExceptionGroup at the
    moment of the error (virtual time 0, not after the sibling's 10 s fetch), carrying the
    worker's traceback."""
    worker_exits: list[str] = []

    async def fetch(url: str) -> Iterable[str]:
        if url == "/bad":
            raise ZeroDivisionError(f"bug while parsing {url}")
        await trio.sleep(10)
        return ()

    with (
        trio.fail_after(HANG_LIMIT),
        pytest.RaisesGroup(
            pytest.RaisesExc(ZeroDivisionError, match="^bug while parsing /bad$")
        ) as group,
    ):
        await crawl_on_a_nursery(["/slow", "/bad"], fetch, max_tasks=2, worker_exits=worker_exits)
    assert trio.current_time() == 0
    assert sorted(worker_exits) == ["worker 0", "worker 1"]
    [error] = group.value.exceptions
    frames = [frame.name for frame in traceback.extract_tb(error.__traceback__)]
    assert frames[-2:] == ["worker", "fetch"]


@pytest.mark.anyio
async def test_b_anyio_worker_error_cancels_siblings_and_raises_at_once(
    anyio_backend: tuple[str, dict[str, object]],
) -> None:
    """AnyIO, both backends: as on Trio, the sibling is cancelled mid-fetch and the error
    arrives at once in an ExceptionGroup (its message differs by backend: see scenario h)."""
    worker_exits: list[str] = []
    sibling_fetching = anyio.Event()

    async def fetch(url: str) -> Iterable[str]:
        if url == "/bad":
            await sibling_fetching.wait()
            raise ZeroDivisionError(f"bug while parsing {url}")
        sibling_fetching.set()
        await anyio.sleep_forever()
        return ()

    with (
        anyio.fail_after(HANG_LIMIT),
        pytest.RaisesGroup(pytest.RaisesExc(ZeroDivisionError, match="^bug while parsing /bad$")),
    ):
        await crawl_on_a_task_group(
            ["/slow", "/bad"], fetch, max_tasks=2, worker_exits=worker_exits
        )
    assert sorted(worker_exits) == ["worker 0", "worker 1"]


@pytest.mark.trio
async def test_b_trio_crawler_turns_an_unexpected_error_into_a_record(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The engine (Trio): an unexpected exception while fetching one URL becomes that URL's
    record, with its traceback logged, and the crawl goes on to finish."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/bad":
            raise ZeroDivisionError("bug while fetching /bad")
        links = '<a href="/bad">bad</a> <a href="/ok">ok</a>' if request.url.path == "/" else ""
        return httpx.Response(200, html=links)

    async with httpx.AsyncClient(transport=streaming_transport(handler)) as client:
        crawler = Crawler(["http://example.com/"], client=client, max_tasks=2, obey_robots=False)
        with trio.fail_after(HANG_LIMIT), caplog.at_level(logging.ERROR, "trio_crawler"):
            await crawler.crawl()
    records = {record.url: record for record in crawler.done}
    assert records["http://example.com/bad"].exception == (
        "ZeroDivisionError: bug while fetching /bad"
    )
    assert records["http://example.com/ok"].status == 200
    assert crawler.finish_reason == "finished"
    assert "unexpected error fetching http://example.com/bad" in caplog.text
    assert "ZeroDivisionError" in caplog.text
