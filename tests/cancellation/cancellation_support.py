"""The crawls that the cancellation tests compare, one per runtime, and their shared limits.

Every scenario in ``test_cancellation_*.py`` runs the same small crawl on each runtime, so
a difference in the outcome is a difference in the runtime, not in the code around it:

* :class:`ChapterCrawler` is the chapter's design on today's asyncio: an ``asyncio.Queue``,
  ``max_tasks`` workers made with ``create_task``, ``await queue.join()``, then
  ``task.cancel()`` for each worker. As in the chapter, ``task_done()`` is not in a
  ``finally``. :meth:`ChapterCrawler.crawl_in_task_group` is the same crawl with its workers
  in an ``asyncio.TaskGroup``.
* :func:`crawl_on_a_nursery` (Trio) and :func:`crawl_on_a_task_group` (AnyIO) are the same
  crawl with structured concurrency: the workers live in a nursery, a count of pending URLs
  replaces ``join()``, and cancelling the nursery's scope replaces the ``cancel()`` loop.

None of them does HTTP itself: each takes a ``fetch`` function, so a test decides what a
URL costs (nothing, a virtual second, a real request to the test server) and which URL
raises. ``tests/`` and this directory are on ``sys.path`` (pytest's rootdir conftest and
"prepend" import mode), so the tests import this module by its bare name.
"""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from urllib.parse import urljoin

import anyio
import httpx
import trio
from trio.testing import MockClock

from conftest import AUTOJUMP_THRESHOLD
from httpserver import Reply, Request
from support import page

# Seconds a hang detector waits before a test concludes that the hang it set up is a hang
# (real on asyncio, virtual on Trio's clock). Before the detector starts, each test either
# sequences the crawl with events to the point where nothing can make progress, or the
# work before that point is a few in-memory steps (microseconds), which the test checks
# afterwards. So any positive figure would do; a fifth of a second keeps the suite fast.
EXPECTED_HANG = 0.2
# The child processes that get a real Ctrl-C, or are left to print their warnings at exit.
CHILDREN = Path(__file__).resolve().parent
PYTHON = sys.executable

Fetch = Callable[[str], Awaitable[Iterable[str]]]


def links_of(url: str, html: str) -> set[str]:
    """The chapter's link extraction: a regex over the text, then ``urljoin``."""
    return {urljoin(url, href) for href in re.findall(r'href="([^"]*)"', html)}


def http_fetch(client: httpx.AsyncClient) -> Fetch:
    """A ``fetch`` that GETs the URL with ``client`` and returns the page's links."""

    async def fetch(url: str) -> set[str]:
        response = await client.get(url)
        return links_of(url, response.text)

    return fetch


def fan_out_links(path: str, *, width: int = 6, depth: int = 2) -> list[str]:
    """The links on page ``path`` of a site where every page links to ``width`` new pages.

    ``/`` links to ``/0`` ... ``/5``, ``/0`` to ``/0/0`` ... ``/0/5``, and so on; pages
    ``depth`` levels down link nowhere, so the site has 1 + 6 + 36 = 43 pages.
    """
    level = 0 if path == "/" else path.count("/")
    if level >= depth:
        return []
    return [f"{path.rstrip('/')}/{number}" for number in range(width)]


class GatedSite:
    """A root page linking to six leaves, where the root answers only when a test says so.

    The deadline tests let a crawl's deadline pass while the root is in flight
    (``root_requested``), then open the gate (``root_may_answer``) and look at the requests
    the server receives after the deadline. ``all_requested`` is set when every page has
    been requested. Serve it with ``server.fallback(site.handle)``; make it inside the event
    loop (AnyIO events need one).
    """

    LEAVES = tuple(f"/p{number}" for number in range(1, 7))

    def __init__(self) -> None:
        self.root_requested = anyio.Event()
        self.root_may_answer = anyio.Event()
        self.all_requested = anyio.Event()
        self.requested: list[str] = []

    async def handle(self, request: Request) -> Reply:
        self.requested.append(request.target)
        if len(self.requested) == 1 + len(self.LEAVES):
            self.all_requested.set()
        if request.target != "/":
            return page()
        self.root_requested.set()
        await self.root_may_answer.wait()
        return page(*self.LEAVES)


async def crawl_until_the_root_is_requested(
    crawl: Callable[[], Awaitable[None]], site: GatedSite
) -> None:
    """Run ``crawl()`` under ``asyncio.timeout``, whose deadline passes as soon as the
    server receives the request for ``/`` (so it passes while ``/`` is in flight)."""
    async with asyncio.timeout(None) as deadline:

        async def expire() -> None:
            await site.root_requested.wait()
            deadline.reschedule(asyncio.get_running_loop().time())

        expiring = asyncio.create_task(expire())
        try:
            await crawl()
        finally:
            await expiring


def anyio_backend_spec(name: str) -> tuple[str, dict[str, object]]:
    """What AnyIO's pytest plugin needs to run a test on backend ``name``.

    Trio runs on a virtual clock, so a hang detector on it costs no real time; its idle
    threshold is the ``virtual_clock`` fixture's (see ``tests/conftest.py``). asyncio has
    no virtual clock and runs on real time.
    """
    if name == "trio":
        return ("trio", {"clock": MockClock(autojump_threshold=AUTOJUMP_THRESHOLD)})
    return ("asyncio", {})


# -- asyncio: the chapter's design ---------------------------------------------------------


class ChapterCrawler:
    """The chapter's ``Crawler.crawl`` and ``work`` on today's asyncio.

    ``workers`` keeps the worker tasks, so a test can look at them after ``crawl()`` and
    clean up what the chapter's design leaves behind (see :func:`cancel_and_wait`).
    """

    def __init__(self, roots: Iterable[str], fetch: Fetch, *, max_tasks: int) -> None:
        self.queue: asyncio.Queue[str] = asyncio.Queue()
        self.seen_urls: set[str] = set()
        self.fetched: list[str] = []
        self.fetch = fetch
        self.max_tasks = max_tasks
        self.workers: list[asyncio.Task[None]] = []
        for root in roots:
            self.add_url(root)

    def add_url(self, url: str) -> None:
        if url not in self.seen_urls:
            self.seen_urls.add(url)
            self.queue.put_nowait(url)

    async def crawl(self, *, cancel_workers: bool = True) -> None:
        """The chapter's ``crawl``: start the workers, ``join()``, cancel the workers.

        With ``cancel_workers=False`` the shutdown is forgotten, as in scenario a.
        """
        self.workers = [
            asyncio.create_task(self.work(), name=f"worker {number}")
            for number in range(self.max_tasks)
        ]
        await self.queue.join()
        if cancel_workers:
            for worker in self.workers:
                worker.cancel()

    async def crawl_in_task_group(self, *, cancel_workers: bool = True) -> None:
        """The same crawl with the workers in an ``asyncio.TaskGroup``."""
        async with asyncio.TaskGroup() as task_group:
            self.workers = [
                task_group.create_task(self.work(), name=f"worker {number}")
                for number in range(self.max_tasks)
            ]
            await self.queue.join()
            if cancel_workers:
                for worker in self.workers:
                    worker.cancel()

    async def work(self) -> None:
        """The chapter's ``work``: ``task_done()`` only after a fetch that did not raise."""
        while True:
            url = await self.queue.get()
            for link in await self.fetch(url):
                self.add_url(link)
            self.fetched.append(url)
            self.queue.task_done()


async def cancel_and_wait(tasks: Iterable[asyncio.Task[object]]) -> list[object]:
    """End tasks a scenario leaked: cancel each, then wait for all of them to finish.

    Returns each task's result or exception, which also marks every exception retrieved, so
    nothing is logged when the tasks are garbage-collected.
    """
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    return await asyncio.gather(*tasks, return_exceptions=True)


# -- Trio and AnyIO: the same crawl with structured concurrency ----------------------------


async def crawl_on_a_nursery(
    roots: Iterable[str],
    fetch: Fetch,
    *,
    max_tasks: int,
    cancel_when_done: bool = True,
    worker_exits: list[str] | None = None,
) -> list[str]:
    """The chapter's crawl on a Trio nursery; returns the URLs in the order fetched.

    The count of queued plus in-flight URLs replaces ``join()``; cancelling the nursery's
    scope when it reaches zero replaces the ``cancel()`` loop (``cancel_when_done=False``
    forgets it, as in scenario a). Each worker appends to ``worker_exits`` as it ends.
    """
    roots = list(dict.fromkeys(roots))
    seen_urls, fetched, pending = set(roots), [], len(roots)
    crawl_done = trio.Event()
    # Unbounded, unlike the engine's channel: this crawl is only ever a few URLs long and its
    # workers send the links they find into the channel they receive from, which a bounded
    # buffer would turn into a deadlock (scenario i; the engine keeps its frontier as data).
    url_sender, url_receiver = trio.open_memory_channel[str](float("inf"))

    async def worker(name: str) -> None:
        nonlocal pending
        try:
            async for url in url_receiver:
                for link in await fetch(url):
                    if link not in seen_urls:
                        seen_urls.add(link)
                        pending += 1
                        url_sender.send_nowait(link)
                fetched.append(url)
                pending -= 1
                if pending == 0:
                    crawl_done.set()
        finally:
            if worker_exits is not None:
                worker_exits.append(name)

    with url_sender, url_receiver:
        for root in roots:
            url_sender.send_nowait(root)
        async with trio.open_nursery() as nursery:
            for number in range(max_tasks):
                nursery.start_soon(worker, f"worker {number}")
            await crawl_done.wait()
            if cancel_when_done:
                nursery.cancel_scope.cancel("crawl complete")
    return fetched


# Intended twin of crawl_on_a_nursery: the same crawl on AnyIO, to compare line by line.
async def crawl_on_a_task_group(
    roots: Iterable[str],
    fetch: Fetch,
    *,
    max_tasks: int,
    cancel_when_done: bool = True,
    worker_exits: list[str] | None = None,
) -> list[str]:
    """:func:`crawl_on_a_nursery`, written on AnyIO so it runs on asyncio and on Trio."""
    roots = list(dict.fromkeys(roots))
    seen_urls, fetched, pending = set(roots), [], len(roots)
    crawl_done = anyio.Event()
    # Unbounded for the reason given in crawl_on_a_nursery.
    url_sender, url_receiver = anyio.create_memory_object_stream[str](float("inf"))

    async def worker(name: str) -> None:
        nonlocal pending
        try:
            async for url in url_receiver:
                for link in await fetch(url):
                    if link not in seen_urls:
                        seen_urls.add(link)
                        pending += 1
                        url_sender.send_nowait(link)
                fetched.append(url)
                pending -= 1
                if pending == 0:
                    crawl_done.set()
        finally:
            if worker_exits is not None:
                worker_exits.append(name)

    with url_sender, url_receiver:
        for root in roots:
            url_sender.send_nowait(root)
        async with anyio.create_task_group() as task_group:
            for number in range(max_tasks):
                task_group.start_soon(worker, f"worker {number}")
            await crawl_done.wait()
            if cancel_when_done:
                task_group.cancel_scope.cancel("crawl complete")
    return fetched
