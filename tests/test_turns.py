"""Requests before pages: reading a fetched page waits while the dispatcher hands out.

A polite crawl never makes up a request's lateness (the host's next request is due a delay
after it), while a page that has arrived can wait to be read. ``_turns.py`` orders the two
on one event loop; here its rules are checked one by one on both of AnyIO's backends, and
then on each engine that hands requests out through a dispatcher: every request that is
due goes out before any page is read.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from trio_crawler._stats import FetchStatistic
from trio_crawler._turns import Turns

from conftest import Engine
from mock_http import streamed
from support import HANG_LIMIT

BACKENDS = ["trio", "asyncio"]


def new_turns() -> Turns:
    return Turns(anyio.Lock(), anyio.Event)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_page_waits_while_the_dispatcher_holds_a_request(backend: str) -> None:
    async def scenario() -> None:
        turns, read = new_turns(), []

        async def reader() -> None:
            async with turns.turn():
                read.append("page")

        turns.handing_out()
        with anyio.fail_after(HANG_LIMIT):
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(reader)
                await anyio.wait_all_tasks_blocked()
                assert read == []
                turns.handing_out()  # a second request in hand: still none
                await anyio.wait_all_tasks_blocked()
                assert read == []
                turns.waiting()
        assert read == ["page"]

    anyio.run(scenario, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_page_is_read_at_once_while_the_dispatcher_waits(backend: str) -> None:
    async def scenario() -> None:
        turns, read = new_turns(), []
        with anyio.fail_after(HANG_LIMIT):
            async with turns.turn():  # before the dispatcher's first request, too
                read.append("first")
            turns.handing_out()
            turns.waiting()
            async with turns.turn():
                read.append("second")
        assert read == ["first", "second"]

    anyio.run(scenario, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_crawl_without_a_delay_reads_its_pages_at_once(backend: str) -> None:
    """No request waits for its time, so there is nothing to read pages after: a page goes
    even while a request is in hand, and two pages may be read at once."""

    async def scenario() -> None:
        turns, read = Turns(anyio.Lock(), anyio.Event, paced=lambda: False), []
        turns.handing_out()
        with anyio.fail_after(HANG_LIMIT):
            async with turns.turn(), turns.turn():
                read.append("page")
        assert read == ["page"]

    anyio.run(scenario, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_crawl_takes_turns_from_when_it_becomes_paced(backend: str) -> None:
    """A crawl with no delay of its own becomes paced when an origin gets one (a
    Crawl-delay, a pace slowed by pushback): pages go at once before, and wait for the
    requests in hand after."""

    async def scenario() -> None:
        paced = False
        turns, read = Turns(anyio.Lock(), anyio.Event, paced=lambda: paced), []

        async def reader() -> None:
            async with turns.turn():
                read.append("page")

        with anyio.fail_after(HANG_LIMIT):
            turns.handing_out()
            await reader()
            assert read == ["page"]
            paced = True
            turns.handing_out()
            async with anyio.create_task_group() as task_group:
                task_group.start_soon(reader)
                await anyio.wait_all_tasks_blocked()
                assert read == ["page"]  # a request is in hand
                turns.waiting()
        assert read == ["page", "page"]

    anyio.run(scenario, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pages_are_read_one_at_a_time_in_the_order_they_came(backend: str) -> None:
    """The first reader holds its turn until told to let go; the others, arriving one by
    one meanwhile, wait outside, and then go in the order they arrived."""

    async def scenario() -> None:
        turns, order, inside, most = new_turns(), [], set(), 0
        let_go = anyio.Event()

        async def reader(name: int) -> None:
            nonlocal most
            async with turns.turn():
                inside.add(name)
                most = max(most, len(inside))
                if name == 0:
                    await let_go.wait()
                await anyio.lowlevel.checkpoint()
                order.append(name)
                inside.remove(name)

        with anyio.fail_after(HANG_LIMIT):
            async with anyio.create_task_group() as task_group:
                for name in range(5):
                    task_group.start_soon(reader, name)
                    await anyio.wait_all_tasks_blocked()
                let_go.set()
        assert most == 1
        assert order == [0, 1, 2, 3, 4]

    anyio.run(scenario, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_turn_is_one_pass_of_the_loop_so_ready_tasks_run_between_pages(backend: str) -> None:
    """Three pages queued for their turns, and a task that is ready at every pass of the
    loop (a worker writing requests, say): it runs in each pass, so at least twice before
    the last page is read, where free turns would read all three in the first pass."""

    async def scenario() -> None:
        turns, events = new_turns(), []

        async def reader(name: str) -> None:
            async with turns.turn():
                events.append(name)

        async def ready_task() -> None:
            for _ in range(4):
                events.append("tick")
                await anyio.lowlevel.checkpoint()

        turns.handing_out()
        with anyio.fail_after(HANG_LIMIT):
            async with anyio.create_task_group() as task_group:
                for name in ["page 1", "page 2", "page 3"]:
                    task_group.start_soon(reader, name)
                await anyio.wait_all_tasks_blocked()
                turns.waiting()
                task_group.start_soon(ready_task)
        third = max(at for at, event in enumerate(events) if event.startswith("page"))
        assert events[:third].count("tick") >= 2

    anyio.run(scenario, backend=backend)


HOSTS = 20


async def crawl_hosts(
    engine: Engine, *, robots: bytes | None = None, **options: Any
) -> tuple[Any, list[tuple[str, str]]]:
    """Crawl HOSTS hosts of one page each, every answer coming back at once (robots.txt
    too, when ``robots`` is given; else it is not asked for): the crawler, and each page
    request sent and page read, in order, with its host."""
    events: list[tuple[str, str]] = []

    async def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/robots.txt":
            assert robots is not None
            return streamed(200, robots, [("content-type", "text/plain")])
        events.append(("sent", request.url.host))
        return streamed(200, b"<p>no links</p>", [("content-type", "text/html")])

    def on_record(record: FetchStatistic) -> None:
        events.append(("read", httpx.URL(record.url).host))

    roots = [f"http://h{host}.test/" for host in range(HOSTS)]
    options = {"max_tasks": HOSTS, "obey_robots": robots is not None, **options}
    async with httpx.AsyncClient(transport=httpx.MockTransport(handle)) as client:
        crawler = engine.crawler(roots, client=client, on_record=on_record, **options)
        with anyio.fail_after(HANG_LIMIT):
            await crawler.crawl()
    return crawler, events


def last_sent(kinds: list[str]) -> int:
    """Where the last request was sent, among the crawl's events."""
    return len(kinds) - 1 - kinds[::-1].index("sent")


@pytest.mark.anyio
@pytest.mark.real_time
async def test_every_due_request_goes_out_before_a_page_is_read(engine: Engine) -> None:
    """Twenty hosts are due at once, and each answer comes back at once. The engines that
    hand requests out through a dispatcher send all twenty before they read a page; the
    asyncio engine, the chapter's queue, has no dispatcher to wait for.

    One page may come first: if the dispatcher runs before any worker is waiting for a
    request, it blocks for one and lets pages go meanwhile (a busy worker may be waiting
    for a turn), and the first worker can read its page before the dispatcher is back."""
    if engine.name == "asyncio":
        pytest.skip("the chapter's queue: no dispatcher, no turns (see _turns.py)")
    _, events = await crawl_hosts(engine, delay=1.0)
    kinds = [kind for kind, _ in events]
    assert sorted(kinds) == ["read"] * HOSTS + ["sent"] * HOSTS
    assert kinds[: last_sent(kinds)].count("read") <= 1
    assert {host for _, host in events} == {f"h{host}.test" for host in range(HOSTS)}


@pytest.mark.anyio
async def test_a_crawl_delay_makes_every_due_request_go_before_a_page_is_read(
    engine: Engine,
) -> None:
    """No --delay, but every host's robots.txt sets a Crawl-delay: the crawl is paced from
    the first, so the twenty pages, due together a delay after their robots.txt, are all
    requested before one is read (the same allowance as above for the dispatcher's start).

    On Trio's virtual clock every answer comes back at the same instant, so the twenty
    are due at the same instant too; on the real clock they would be due apart, and pages
    rightly read between them."""
    if not engine.virtual_time:
        pytest.skip("needs the virtual clock to make the hosts due together")
    crawler, events = await crawl_hosts(engine, robots=b"User-agent: *\nCrawl-delay: 1\n")
    assert crawler.store.paced
    kinds = [kind for kind, _ in events]
    assert sorted(kinds) == ["read"] * HOSTS + ["sent"] * HOSTS
    assert kinds[: last_sent(kinds)].count("read") <= 1


@pytest.mark.anyio
@pytest.mark.real_time
async def test_without_a_delay_a_page_is_read_before_every_request_has_gone(
    engine: Engine,
) -> None:
    """The same twenty hosts with no delay: pages are read as they come, so the first is
    read while the dispatcher still hands out the others' requests."""
    _, events = await crawl_hosts(engine)
    kinds = [kind for kind, _ in events]
    assert sorted(kinds) == ["read"] * HOSTS + ["sent"] * HOSTS
    assert kinds.index("read") < last_sent(kinds)
