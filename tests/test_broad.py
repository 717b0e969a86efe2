"""A broad crawl on every engine and store: many hosts, each kept to its delay as its own
server sees it, every page fetched once.

Each host is a test server on its own loopback address (127.0.0.2, 127.0.0.3, ...: Linux
routes all of 127/8 to ``lo``), which notes the time each request reaches it. The crawl
runs with ``--max-per-host 1``, where the delay runs from each answer's end
(docs/manners.md), so no two requests reach one server closer than the delay, whatever
the client's or the server's scheduling: that is what is checked, on the server's clock.
On the Trio engines the crawl runs on the virtual clock; on the others, a tenth of it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import heapq
import os
import signal
from collections import defaultdict
from collections.abc import Awaitable, Callable
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from redis_server import RedisServer

from trio_crawler import _store_redis
from trio_crawler._config import CrawlConfig
from trio_crawler._events import Committing, FetchRequest, Response
from trio_crawler._frontier import FrontierLost, StoreRuntime
from trio_crawler._state import CrawlState
from trio_crawler._store_redis import RedisFrontier
from trio_crawler._store_sqlite import StoredFrontier
from trio_crawler._stores import open_store

from conftest import Engine
from httpserver import Reply, Request, open_hosts
from support import crawl, page, store_options

pytestmark = pytest.mark.anyio

T = TypeVar("T")

HOSTS = 10
PAGES = 4  # a host's pages link in a chain, the last one to the next host's root


async def crawl_hosts(engine: Engine, **options: Any) -> tuple[Any, dict[str, list[float]], float]:
    """Crawl HOSTS servers of PAGES pages from their roots; the crawler, each server's
    arrival times by target, and the delay used."""
    delay = engine.seconds(1.0)
    arrivals: dict[str, list[float]] = defaultdict(list)
    async with contextlib.AsyncExitStack() as stack:
        servers = await open_hosts(stack, HOSTS)
        for index, server in enumerate(servers):
            after = servers[(index + 1) % HOSTS].url()

            async def handle(
                request: Request, host: str = server.url(), next_root: str = after
            ) -> Reply:
                if request.target in ("/robots.txt", "/p1"):
                    # As if these requests reached the server late (a new connection in a
                    # crawl's first burst, say): timed from their start, the next request
                    # would reach the server half a delay after them.
                    await anyio.sleep(delay / 2)
                arrivals[host].append(anyio.current_time())
                if request.target == "/robots.txt":
                    return Reply(status=404, body=b"")
                number = 0 if request.target == "/" else int(request.target.removeprefix("/p"))
                if number + 1 < PAGES:
                    return page(f"/p{number + 1}")
                return page(next_root)

            server.fallback(handle)
        roots = [server.url() for server in servers]
        crawler = await crawl(
            engine, roots, delay=delay, max_per_host=1, max_tasks=4, hang_limit=300, **options
        )
    return crawler, arrivals, delay


@pytest.mark.parametrize("store", ["memory", "sqlite", "redis"])
async def test_every_host_keeps_its_delay_as_its_server_sees_it(
    engine: Engine, store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    options = store_options(store, tmp_path, request, f"broad-{engine.name}")
    crawler, arrivals, delay = await crawl_hosts(engine, **options)
    urls = [record.url for record in crawler.done]
    assert len(urls) == len(set(urls)) == HOSTS * PAGES
    assert all(record.status == 200 for record in crawler.done)
    assert len(arrivals) == HOSTS
    for host, times in arrivals.items():
        assert len(times) == PAGES + 1, (host, times)  # its robots.txt and its pages
        gaps = [later - earlier for earlier, later in pairwise(times)]
        assert min(gaps) >= delay - 1e-6, (host, gaps)
    # Fewer workers (4) than hosts (10): every host still got its turn, and the crawl
    # took about what the delay allows, not a host after another.
    if engine.virtual_time:
        assert crawler.elapsed < 2 * PAGES * delay + HOSTS * delay


async def test_no_wakeup_already_past_while_a_call_is_under_way(
    engine: Engine, redis_server: RedisServer
) -> None:
    """While a call to the server is under way, the dispatcher can lease nothing more, so
    the time the server said work would be ready must not wake it, even once past: it would
    look again at once, find nothing, and loop without a pause until the answer came (the
    call's end wakes it). In a broad crawl of several processes such calls run most of
    the time. The call is held here by stopping the server (SIGSTOP) until the checks
    are made."""
    config = CrawlConfig.create(
        ["http://a.test/"],
        frontier=redis_server.url(),
        crawl_id=f"past-wakeup-{engine.name}",
        max_tasks=4,
    )
    frontier = RedisFrontier(config)
    woken = 0

    def wake() -> None:
        nonlocal woken
        woken += 1

    runtime = _runtime(wake=wake)
    with anyio.fail_after(10):
        async with frontier.session(runtime), anyio.create_task_group() as task_group:
            frontier.link.idle_until = anyio.current_time() - 1.0  # "ready at", now past
            wakeup = frontier.next_wakeup()
            assert wakeup is not None
            assert wakeup <= anyio.current_time()  # lease it now
            assert frontier.has_work(starved=True)
            os.kill(redis_server.pid, signal.SIGSTOP)
            try:
                task_group.start_soon(partial(frontier.flush, starved=True))
                await anyio.wait_all_tasks_blocked()
                frontier.link.idle_until = anyio.current_time() - 1.0  # as an answer may leave it
                assert not frontier.has_work(starved=True)
                wakeup = frontier.next_wakeup()
                assert wakeup is None or wakeup > anyio.current_time()
                woken = 0
            finally:
                os.kill(redis_server.pid, signal.SIGCONT)
            await frontier.sync()  # returns once the call under way has ended
            assert woken >= 1  # and its end woke the dispatcher


def _runtime(
    *,
    run_in_thread: Any = None,
    wake: Callable[[], None] = lambda: None,
    state: CrawlState | None = None,
) -> StoreRuntime:
    """A runtime on the engine's real clock, for a store driven by a test's own tasks."""
    return StoreRuntime(
        clock=anyio.current_time,
        wall_offset=0.0,
        run_in_thread=run_in_thread or _never,
        shielded=_shielded,
        wake=wake,
        on_lost=_never_lost,
        scheduling=lambda: True,
        limit_counts=(lambda: state.limit_counts) if state is not None else dict,
    )


def _never(*_: object) -> Any:
    raise AssertionError("not used by a shared frontier's calls")


async def _shielded(function: Callable[[], Awaitable[T]]) -> T:
    with anyio.CancelScope(shield=True):
        result = await function()
    return result


def _never_lost(exc: FrontierLost) -> None:
    raise exc


async def test_a_process_at_the_delays_pace_sends_several_pages_a_call(
    engine: Engine, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a shared crawl that the delay paces, each page ends alone, some milliseconds
    after the last, and with its 5 ms window empty its calls (links, then done) carry it
    alone. While a process holds hosts leased ahead, a call waits longer for company (up
    to a tenth of the delay, at most LINGER): here, 8 hosts whose pages end 10 ms apart
    made about 35 calls against 80 without it (fewer than 3 in 5 is asked). The end of
    the crawl is not held back: once no host is leased ahead, a call goes at once.

    On the real clock (the asyncio engines) a loaded machine merges calls without the
    linger too: pages end late and join a call already going. With four busy loops on
    the two CPUs, the crawl without it made 55-87 calls and with it 26-40, so there the
    ratio is no steady measure, and the bound is per page: fewer than 1.5 calls a page
    (a page alone needs two, its links and then its done), and fewer than without."""
    import coredis

    hosts, pages, spacing = 8, 4, 0.01
    delay = 1.0 if engine.virtual_time else 0.5  # the same rounds' length on every engine

    async def crawl_and_count(name: str) -> tuple[Any, int]:
        async with contextlib.AsyncExitStack() as stack:
            servers = await open_hosts(stack, hosts)
            for index, server in enumerate(servers):

                async def handle(request: Request, index: int = index) -> Reply:
                    target = request.target
                    if target == "/robots.txt":
                        return Reply(status=404, body=b"")
                    if target == "/":  # each host's pages end this much after the last's
                        await anyio.sleep(index * spacing)
                    number = 0 if target == "/" else int(target.removeprefix("/p"))
                    return page(f"/p{number + 1}") if number + 1 < pages else page()

                server.fallback(handle)
            url = redis_server.url()
            async with coredis.Redis.from_url(url, decode_responses=True) as client:

                async def script_calls() -> int:
                    stats = await client.info("commandstats")
                    return int(stats.get("cmdstat_evalsha", {}).get("calls", 0))

                before = await script_calls()
                crawler = await crawl(
                    engine,
                    [server.url() for server in servers],
                    delay=delay,
                    max_per_host=1,
                    max_tasks=hosts,
                    frontier=url,
                    crawl_id=f"pace-calls-{name}-{engine.name}",
                    hang_limit=300,
                )
                calls = await script_calls() - before
        assert len(crawler.done) == hosts * pages
        return crawler, calls

    crawler, calls = await crawl_and_count("linger")
    with monkeypatch.context() as patch:
        patch.setattr(_store_redis, "LINGER", 0.0)
        _, alone = await crawl_and_count("alone")
    if engine.virtual_time:
        assert 5 * calls < 3 * alone, (calls, alone)
        assert crawler.elapsed < pages * delay + hosts * spacing + 0.02, crawler.elapsed
    else:
        assert 2 * calls < 3 * hosts * pages, (calls, alone)
        assert calls < alone, (calls, alone)


class _Held:
    """Holds a store's writes (transactions, calls) until released, the first at one gate
    and the others at a second, and tells when each has begun; the writes before
    :attr:`armed` pass at once."""

    def __init__(self) -> None:
        self.armed = False
        self.entered = [anyio.Event(), anyio.Event()]
        self.gates = [anyio.Event(), anyio.Event()]
        self._count = 0

    async def hold(self) -> None:
        if not self.armed:
            return
        number = min(self._count, len(self.gates) - 1)
        self._count += 1
        self.entered[number].set()
        await self.gates[number].wait()


async def _three_pages_settle(
    state: CrawlState, frontier: StoredFrontier | RedisFrontier, held: _Held
) -> None:
    """X's settle() writes and Y waits for it; Y's page is settled with X's in the first
    write that settles pages, Z's finishes meanwhile and goes in the second, which is held:
    Y must be back by then."""
    settled: set[str] = set()

    def finish(request: FetchRequest) -> None:
        now = anyio.current_time()
        state.attempt_started(request, now=now)
        result = state.attempt_finished(
            request, Response(status=200, content_type="text/html", body=b"<p>"), now=now
        )
        assert isinstance(result, Committing), result

    async def settle(request: FetchRequest) -> None:
        await frontier.settle(request)
        settled.add(request.url)

    async with anyio.create_task_group() as task_group:
        await frontier.flush(starved=True)  # the roots, into memory (or leased)
        held.armed = True
        now = anyio.current_time()
        x, y, z = (state.next_request(now=now) for _ in range(3))
        assert x is not None
        assert y is not None
        assert z is not None
        finish(x)
        task_group.start_soon(settle, x)  # X writes: its group window first
        await anyio.wait_all_tasks_blocked()
        finish(y)
        task_group.start_soon(settle, y)  # Y waits for X's flush
        await held.entered[0].wait()  # the first write: X's page and Y's
        finish(z)
        task_group.start_soon(settle, z)
        await anyio.wait_all_tasks_blocked()
        held.gates[0].set()
        await held.entered[1].wait()  # the second, Z's, is held
        await anyio.wait_all_tasks_blocked()
        assert settled == {y.url}  # X runs the flush; Y is free
        held.gates[1].set()
    assert settled == {x.url, y.url, z.url}


ROOTS = ["http://x.test/", "http://y.test/", "http://z.test/"]


async def test_a_page_settles_with_its_own_transaction_not_the_flushs_last(
    tmp_path: Path,
) -> None:
    """While pages keep finishing (a broad crawl's round of hosts), one flush of the state
    file runs a transaction after another. A worker whose page was in the first is free
    once that one committed, not when the last one has: held until then, the workers were
    missing from the next round of hosts."""
    config = CrawlConfig.create(
        ROOTS, state=str(tmp_path / "crawl.db"), obey_robots=False, max_tasks=3
    )
    frontier = open_store(config)
    assert isinstance(frontier, StoredFrontier)
    state = CrawlState(config, frontier=frontier, on_record=lambda record: None)
    held = _Held()

    async def transaction(function: Callable[[], T]) -> T:
        await held.hold()
        return function()  # in the loop's thread: a test's file, a few rows

    try:
        with anyio.fail_after(10):
            async with frontier.session(_runtime(run_in_thread=transaction, state=state)):
                await _three_pages_settle(state, frontier, held)
    finally:
        frontier.close()


async def test_a_page_settles_with_its_own_call_not_the_flushs_last(
    engine: Engine, redis_server: RedisServer
) -> None:
    """The same on a shared frontier, whose flush makes one call after another."""
    config = CrawlConfig.create(
        ROOTS,
        frontier=redis_server.url(),
        crawl_id=f"own-call-{engine.name}",
        obey_robots=False,
        max_tasks=3,
    )
    frontier = RedisFrontier(config)
    state = CrawlState(config, frontier=frontier, on_record=lambda record: None)
    held = _Held()
    call = frontier.link.call

    async def held_call(ops: list[dict[str, Any]]) -> Any:
        if any(op["k"] == "done" for op in ops):  # the writes that settle pages
            await held.hold()
        return await call(ops)

    frontier.link.call = held_call  # type: ignore[method-assign]
    with anyio.fail_after(10):
        async with frontier.session(_runtime(state=state)):
            await _three_pages_settle(state, frontier, held)


async def test_a_request_leased_ahead_coming_due_as_a_call_lingers_ends_the_wait(
    engine: Engine, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call lingers while a request leased ahead waits for its time, until the first
    one is due. Whether one waits is read on the clock more than once: the last request
    leased ahead may come due between two readings, and then none is left to wait for.
    The wait ends there; it looked for the first one anyway and raised IndexError in the
    worker that settled its page, ending that process's crawl with a traceback (three
    processes started at once on a loaded machine, once in about 1 200 crawls)."""
    config = CrawlConfig.create(
        ["http://a.test/"],
        frontier=redis_server.url(),
        crawl_id=f"linger-due-{engine.name}",
        max_tasks=4,
        delay=1.0,
    )
    frontier = RedisFrontier(config)
    now = [anyio.current_time()]
    runtime = dataclasses.replace(_runtime(), clock=lambda: now[0])
    due, url = now[0] + 0.01, "http://a.test/next"
    with anyio.fail_after(10):
        async with frontier.session(runtime):
            heapq.heappush(frontier._ahead, (due, url))
            frontier._waiting_ahead.add(url)
            frontier.link.idle_until = now[0] + 10  # nothing else to lease before then
            assert frontier._lingers()
            room = frontier._room

            def room_as_the_clock_moves(*, ahead: bool = False) -> int:
                now[0] = due  # between _lingers()'s readings of the clock
                return room(ahead=ahead)

            monkeypatch.setattr(frontier, "_room", room_as_the_clock_moves)
            await frontier._linger()
            assert frontier._next_ahead() is None


async def test_a_window_with_many_idle_workers_leases_a_step_a_call(
    engine: Engine, redis_server: RedisServer
) -> None:
    """A process with more idle workers than LEASE_STEP (one that starts a broad crawl, or
    takes over hundreds of hosts at once) leases LEASE_STEP requests a call, so that its
    first requests can start while the next are leased, and calls again until every
    worker has one. Asked for all at once, the server's script for 500 robots.txt leases
    took 11-17 ms, and none of them started before it ended."""
    step = _store_redis.LEASE_STEP
    origins = 2 * step + 10
    config = CrawlConfig.create(
        [f"http://h{index}.test/" for index in range(origins)],
        frontier=redis_server.url(),
        crawl_id=f"lease-step-{engine.name}",
        max_tasks=origins,
    )
    frontier = RedisFrontier(config)
    asked: list[int] = []
    held: list[int] = []
    call = frontier.link.call

    async def noted_call(ops: list[dict[str, Any]]) -> Any:
        asked.extend(op["n"] for op in ops if op["k"] == "lease")
        return await call(ops)

    frontier.link.call = noted_call  # type: ignore[method-assign]
    with anyio.fail_after(10):
        async with frontier.session(_runtime()):
            for _ in range(origins):
                if not frontier.has_work(starved=True):
                    break
                await frontier.flush(starved=True)
                held.append(len(frontier._robots_tickets))  # each origin's robots.txt first
    assert asked == [step, step, 10]
    assert held == [step, 2 * step, origins]


STAR = 6  # the root links to /p1 ... /p5


@pytest.mark.parametrize("store", ["sqlite", "redis"])
async def test_a_host_due_while_the_dispatchers_flush_runs_goes_on_time(
    engine: Engine,
    store: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With nothing to hand out, the dispatcher has the store write what waits and load
    (or lease) more: a transaction, a call to the shared frontier. Its requests already
    in memory keep coming due meanwhile, and a dispatcher that awaited the flush handed
    none of them out until it returned: lateness its hosts kept, the rounds of a broad
    crawl with --state up to 0.18 s wider. Here the dispatcher's flush is held (as a slow disk
    or a far server would hold it) from the host's first page on, until the host's third
    has reached the server: it must reach it a delay after the second, not when the
    flush is let go ten delays later."""
    if engine.name == "asyncio":
        pytest.skip("the chapter's queue: its join() loop awaits the flush itself")
    delay = engine.seconds(1.0)
    frontier_class = StoredFrontier if store == "sqlite" else RedisFrontier
    armed, entered, gate = False, anyio.Event(), anyio.Event()
    flush, has_work = frontier_class.flush, frontier_class.has_work

    def wants_a_flush(self: Any, *, starved: bool) -> bool:
        # Once armed, the store asks the dispatcher for a flush (as a broad crawl's
        # window, short of rows, or a process with room for more leases does all the time).
        if armed and starved and not entered.is_set():
            return True
        return has_work(self, starved=starved)

    async def held_flush(self: Any, *, starved: bool = False) -> None:
        if armed and starved and not gate.is_set():
            entered.set()
            await gate.wait()
        await flush(self, starved=starved)

    monkeypatch.setattr(frontier_class, "has_work", wants_a_flush)
    monkeypatch.setattr(frontier_class, "flush", held_flush)
    arrivals: dict[str, float] = {}
    released_by: list[str] = []

    async def let_go_after(seconds: float) -> None:
        await anyio.sleep(seconds)
        if not gate.is_set():
            released_by.append("timer")
            gate.set()

    options = store_options(store, tmp_path, request, f"flush-beside-{engine.name}")
    async with contextlib.AsyncExitStack() as stack:
        task_group = await stack.enter_async_context(anyio.create_task_group())
        (server,) = await open_hosts(stack, 1)

        async def handle(request: Request) -> Reply:
            nonlocal armed
            arrivals[request.target] = anyio.current_time()
            if request.target == "/":
                return page(*(f"/p{number}" for number in range(1, STAR)))
            if request.target == "/p1":
                armed = True
                task_group.start_soon(let_go_after, 10 * delay)
            if request.target == "/p3" and not gate.is_set():
                released_by.append("third page")
                gate.set()
            return page()

        server.fallback(handle)
        crawler = await crawl(
            engine,
            server.url(),
            delay=delay,
            max_per_host=1,
            obey_robots=False,
            max_tasks=2,
            hang_limit=300,
            **options,
        )
    assert len(crawler.done) == STAR
    assert entered.is_set()  # the dispatcher's flush was held
    assert released_by == ["third page"], (released_by, arrivals)
    gaps = [arrivals[f"/p{n + 1}"] - arrivals[f"/p{n}"] for n in (1, 2)]
    assert max(gaps) < 1.5 * delay, (gaps, arrivals)
