"""Connections and names at scale: the crawl-wide cap on idle connections, and the
host-name cache (``_connections.py``, ``_lookups.py``, ``_lru.py``).

The cap is shown where it matters, on a real crawl: the command line, in a process whose
file limit is 256, crawls 300 hosts (loopback addresses 127.0.1.1 and up, which Linux
routes to ``lo``, each served by a test server in this process) with 100 workers. With
the cap every page is recorded; without it (``TRIO_CRAWLER_MAX_IDLE=none``) the idle
connections of the workers use up the descriptors and connections fail with ``EMFILE``.

The cache is shown by crawls of host names that a fake ``getaddrinfo`` answers (so that
Trio's virtual clock never sees a thread), counting the lookups it is asked for, and by a
crawl of ``localhost`` through the system's resolver on the real clock.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import json
import os
import resource
import socket
import ssl
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest
import trio
import trustme
from trio.testing import MockClock

from trio_crawler._cli import ENGINES
from trio_crawler._clients import TransportClient, choose_http_library, open_client
from trio_crawler._connections import (
    MAX_IDLE_CONNECTIONS,
    CrawlConnections,
    IdleConnections,
    default_idle_limit,
    idle_limit_from_environment,
    open_connection,
)
from trio_crawler._events import FetchError, Response
from trio_crawler._fetch import fetch
from trio_crawler._lookups import (
    FAILED_LOOKUP_SECONDS,
    MIN_LOOKUP_THREADS,
    HostLookupError,
    HostLookups,
    happy_eyeballs_order,
    lookup_threads,
)
from trio_crawler._lru import LRU
from trio_crawler._options import ConfigError
from trio_crawler._transport import _keep_alive_timeout, close_idle

from conftest import AUTOJUMP_THRESHOLD, Engine
from httpserver import Reply, open_test_server
from support import HANG_LIMIT, by_url, crawl, open_descriptors, page

if TYPE_CHECKING:
    from trio_crawler._clients import Client

BOTH_BACKENDS = pytest.mark.parametrize("anyio_backend", ["trio", "asyncio"])
NO_SUCH_NAME = "[Errno -2] Name or service not known"


class FakeResolver:
    """``getaddrinfo`` for the names in ``names`` (each to its addresses), failing for any
    other as the system does for a name that does not exist; it counts the names it is
    asked for, and each answer takes ``delay`` seconds, so that lookups overlap."""

    def __init__(self, names: dict[str, Sequence[str]], *, delay: float = 0.0) -> None:
        self.names = names
        self.delay = delay
        self.asked: collections.Counter[str] = collections.Counter()

    async def __call__(
        self, host: str, port: object, **options: object
    ) -> list[tuple[int, int, int, str, tuple[str, int]]]:
        self.asked[host] += 1
        await anyio.sleep(self.delay)
        if host not in self.names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [
            (
                socket.AF_INET6 if ":" in address else socket.AF_INET,
                socket.SOCK_STREAM,
                socket.IPPROTO_TCP,
                "",
                (address, 0),
            )
            for address in self.names[host]
        ]


@pytest.fixture
def lean(monkeypatch: pytest.MonkeyPatch) -> None:
    """The crawler's own transport, whatever TRIO_CRAWLER_TRANSPORT the run has: what is
    tested here is that transport's (httpx's own has neither the cap nor the cache)."""
    monkeypatch.setenv("TRIO_CRAWLER_TRANSPORT", "lean")


def fake_resolver(
    monkeypatch: pytest.MonkeyPatch, names: dict[str, Sequence[str]], *, delay: float = 0.0
) -> FakeResolver:
    resolver = FakeResolver(names, delay=delay)
    monkeypatch.setattr("trio_crawler._lookups.getaddrinfo", resolver)
    return resolver


def lean_client(connections: CrawlConnections, ssl_context: ssl.SSLContext | None = None) -> Client:
    return open_client(
        library=choose_http_library(),
        max_connections=1,
        transport="lean",
        connections=connections,
        ssl_context=ssl_context,
    )


# The LRU on its own.


def test_the_lru_evicts_the_least_recently_used_and_says_what() -> None:
    lru: LRU[str, int] = LRU(2)
    assert lru.put("a", 1) == []
    assert lru.put("b", 2) == []
    assert lru.get("a") == 1  # now "b" is the least recently used
    assert lru.put("c", 3) == [("b", 2)]
    assert lru.keys() == ["a", "c"]
    assert lru.put("a", 10) == []  # a new value for a key kept moves it to the end
    assert lru.keys() == ["c", "a"]
    assert lru.pop("c") == 3
    assert lru.pop("c") is None
    assert lru.get("missing") is None
    assert len(lru) == 1
    assert "a" in lru
    assert "c" not in lru


def test_an_lru_of_capacity_zero_keeps_nothing_and_none_keeps_everything() -> None:
    nothing: LRU[str, int] = LRU(0)
    assert nothing.put("a", 1) == [("a", 1)]
    assert len(nothing) == 0
    everything: LRU[int, int] = LRU(None)
    for number in range(1000):
        assert everything.put(number, number) == []
    assert len(everything) == 1000
    with pytest.raises(ValueError, match="capacity must be >= 0 or None, not -1"):
        LRU(-1)


# The cap, on its own and through the transport.


def test_idle_connections_are_one_pool_by_origin_across_transports() -> None:
    idle: IdleConnections[str] = IdleConnections(3)
    first, second = object(), object()  # two transports
    assert idle.keep(first, "a", "a1") == []
    assert idle.keep(second, "a", "a2") == []
    assert idle.keep(second, "b", "b1") == []
    # Any transport takes an origin's connection, the most recently kept first.
    assert idle.take("a") == "a2"
    assert idle.take("a") == "a1"
    assert idle.take("a") is None
    assert (len(idle), idle.reused) == (1, 2)
    # In use, a connection is not counted; kept again, it is the most recently used.
    assert idle.keep(first, "a", "a2") == []
    assert idle.keep(first, "c", "c1") == []
    assert idle.keep(second, "d", "d1") == ["b1"]  # the oldest, whatever its origin
    assert idle.take("b") is None
    assert idle.closed == 1
    # A transport that closes takes out what it kept, and nothing else.
    assert sorted(idle.drop(first)) == ["a2", "c1"]
    assert (idle.take("a"), idle.take("c")) == (None, None)
    assert idle.drop(first) == []
    assert idle.take("d") == "d1"
    assert len(idle) == 0
    assert (idle._by_origin, idle._by_owner) == ({}, {})  # nothing left per host


def test_a_cap_of_zero_keeps_nothing() -> None:
    idle: IdleConnections[str] = IdleConnections(0)
    assert idle.keep(object(), "a", "a1") == ["a1"]
    assert (idle.take("a"), len(idle), idle.closed) == (None, 0, 1)


def test_the_default_cap_leaves_room_for_requests_and_everything_else() -> None:
    assert default_idle_limit(1024) == 480
    assert default_idle_limit(256) == 96
    assert default_idle_limit(64) == 0
    assert default_idle_limit(1_048_576) == MAX_IDLE_CONNECTIONS
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert default_idle_limit() == default_idle_limit(soft)


def test_the_cap_from_the_environment() -> None:
    assert idle_limit_from_environment({}) == default_idle_limit()
    assert idle_limit_from_environment({"TRIO_CRAWLER_MAX_IDLE": "7"}) == 7
    assert idle_limit_from_environment({"TRIO_CRAWLER_MAX_IDLE": "None"}) is None
    with pytest.raises(ConfigError, match="TRIO_CRAWLER_MAX_IDLE must be a number >= 0 or"):
        idle_limit_from_environment({"TRIO_CRAWLER_MAX_IDLE": "-1"})


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_the_crawls_least_recently_used_idle_connection_is_closed_first() -> None:
    shared = CrawlConnections(idle_limit=2)
    routes = {"/": Reply.html("ok")}
    async with (
        open_test_server(routes, host="127.0.0.2") as one,
        open_test_server(routes, host="127.0.0.3") as two,
        open_test_server(routes, host="127.0.0.4") as three,
        lean_client(shared) as first,
        lean_client(shared) as second,
    ):
        with anyio.fail_after(HANG_LIMIT):
            for client, server in [(first, one), (first, two), (second, three)]:
                assert isinstance(await fetch(client, server.url()), Response)
            # Three idle connections, two allowed: the one to `one`, the oldest, went.
            assert (shared.statistics().idle, shared.statistics().idle_closed) == (2, 1)
            assert isinstance(await fetch(first, two.url()), Response)  # still kept
            assert isinstance(await fetch(first, one.url()), Response)  # a new one
            # Keeping that one evicted the one to `three`, now the least recently used.
            assert isinstance(await fetch(second, three.url()), Response)
    assert (one.connections, two.connections, three.connections) == (2, 1, 2)


def test_draining_takes_every_idle_connection_out() -> None:
    """What a crawl that has ended closes: every idle connection, whoever kept it, least
    recently kept first, and none is left to take or to drop."""
    idle: IdleConnections[str] = IdleConnections(limit=None)
    idle.keep("worker-1", "http://a.test", "a1")
    idle.keep("worker-2", "http://b.test", "b1")
    idle.keep("worker-1", "http://a.test", "a2")
    assert idle.drain() == ["a1", "b1", "a2"]
    assert len(idle) == 0
    assert idle.take("http://a.test") is None
    assert idle.drop("worker-1") == []
    assert idle.drain() == []
    idle.keep("worker-2", "http://b.test", "b2")  # the pool works on
    assert idle.take("http://b.test") == "b2"


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_the_idle_connections_are_closed_at_once_when_asked() -> None:
    """``close_idle`` closes every idle connection of the crawl in the caller's task, as
    the servers see (each hangs up), and the clients work on with new ones."""
    shared = CrawlConnections(idle_limit=None)
    routes = {"/": Reply.html("ok")}
    async with (
        open_test_server(routes, host="127.0.0.2") as one,
        open_test_server(routes, host="127.0.0.3") as two,
        lean_client(shared) as first,
        lean_client(shared) as second,
    ):
        with anyio.fail_after(HANG_LIMIT):
            for client, server in [(first, one), (first, two), (second, one)]:
                assert isinstance(await fetch(client, server.url()), Response)
            assert (one.connections, two.connections, shared.statistics().idle) == (1, 1, 2)
            async with first.stream("GET", two.url()) as a, second.stream("GET", two.url()) as b:
                assert (await a.aread(), await b.aread()) == (b"ok", b"ok")  # two at once
            assert (one.connections, two.connections, shared.statistics().idle) == (1, 2, 3)
            assert await close_idle(shared) == 3
            assert shared.statistics().idle == 0
            await one.wait_hung_up(1)
            await two.wait_hung_up(2)
            assert isinstance(await fetch(second, two.url()), Response)
    assert (one.connections, two.connections) == (1, 3)


@pytest.mark.anyio
@pytest.mark.usefixtures("lean")
async def test_a_crawl_that_ends_closes_its_idle_connections_before_its_workers_end(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dispatcher closes the idle connections as it finds the crawl done, so that no
    worker's transport has one left to close as the worker ends, and every server sees
    each of its connections closed."""
    dropped: list[int] = []
    drop = IdleConnections.drop

    def counted_drop(self: IdleConnections[object], owner: object) -> list[object]:
        connections = drop(self, owner)
        dropped.append(len(connections))
        return connections

    monkeypatch.setattr(IdleConnections, "drop", counted_drop)
    links = [f"/{number}" for number in range(6)]
    routes = {"/": page(*links), **{link: page("/") for link in links}}
    async with contextlib.AsyncExitStack() as stack:
        servers = [
            await stack.enter_async_context(open_test_server(routes, host=f"127.0.0.{n}"))
            for n in (2, 3, 4)
        ]
        crawler = await crawl(engine, [server.url() for server in servers], max_tasks=4)
        with anyio.fail_after(HANG_LIMIT):
            for server in servers:
                await server.wait_hung_up(server.connections)
    assert len(crawler.done) == 3 * len(routes)
    assert dropped == [0] * 4, "each worker's transport found its connections closed"


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_a_worker_takes_the_connection_another_worker_left() -> None:
    """On a broad crawl consecutive requests to a host come from different workers: each
    finds the connection the last one left, so the server sees one connection, not one per
    worker; two requests at once need two, and both are kept for the next."""
    shared = CrawlConnections(idle_limit=None)
    async with (
        open_test_server({"/": Reply.html("ok")}, host="127.0.0.2") as server,
        lean_client(shared) as first,
        lean_client(shared) as second,
        lean_client(shared) as third,
    ):
        with anyio.fail_after(HANG_LIMIT):
            for client in (first, second, third, first, third):
                assert isinstance(await fetch(client, server.url()), Response)
            assert (server.connections, shared.statistics().idle) == (1, 1)
            assert shared.statistics().idle_reused == 4  # every request after the first
            async with (
                first.stream("GET", server.url()) as one,
                second.stream("GET", server.url()) as two,
            ):
                assert (await one.aread(), await two.aread()) == (b"ok", b"ok")
            assert (server.connections, shared.statistics().idle) == (2, 2)
            for client in (third, third, second):
                assert isinstance(await fetch(client, server.url()), Response)
    assert server.connections == 2


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_a_request_lost_on_a_reused_connection_is_tried_again_on_a_new_one() -> None:
    """A server that closes an idle connection as the next request arrives (its keep-alive
    timeout ran out, or it closes after each response without saying so) loses that
    request before any byte of an answer. It is a failed attempt, as any other: the server
    saw it, so it is not sent again behind the caller's back. But its next try goes on a new
    connection, and the origin's other idle connections, kept by the same rule from the
    same server, are closed with the lost one."""
    shared = CrawlConnections(idle_limit=None)
    async with (
        open_test_server({"/": Reply.html("ok"), "/other": Reply.html("ok")}) as server,
        lean_client(shared) as first,
        lean_client(shared) as second,
    ):
        with anyio.fail_after(HANG_LIMIT):
            async with (
                first.stream("GET", server.url()) as one,
                second.stream("GET", server.url()) as two,
            ):
                assert (await one.aread(), await two.aread()) == (b"ok", b"ok")
            assert (server.connections, shared.statistics().idle) == (2, 2)
            server.drop_first("/", 1)  # read, then hung up on, unanswered
            lost = await fetch(first, server.url())
            assert isinstance(lost, FetchError), lost
            assert (shared.statistics().idle_lost, shared.statistics().idle) == (1, 0)
            assert isinstance(await fetch(second, server.url("/other")), Response)
            assert (server.connections, shared.statistics().idle) == (3, 1)
            again = await fetch(first, server.url())
            assert isinstance(again, Response), again
            assert server.connections == 4  # the try after the loss, on a new connection
            # A loss changes that one retry: the next request reuses as before.
            assert isinstance(await fetch(second, server.url()), Response)
            assert (server.connections, shared.statistics().idle_reused) == (4, 2)
    assert server.hits["/"] == 5  # two at once, the lost one, its retry, the last: no resend


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_a_request_hung_up_on_over_a_new_connection_is_no_loss_to_the_pool() -> None:
    shared = CrawlConnections(idle_limit=None)
    async with (
        open_test_server({"/": Reply.html("ok")}, host="127.0.0.2") as server,
        lean_client(shared) as client,
    ):
        server.drop_first("/", 1)
        with anyio.fail_after(HANG_LIMIT):
            assert isinstance(await fetch(client, server.url()), FetchError)
            assert isinstance(await fetch(client, server.url()), Response)
            assert isinstance(await fetch(client, server.url()), Response)
    assert shared.statistics().idle_lost == 0
    assert server.connections == 2  # the one hung up on, then one reused


@pytest.mark.anyio
@pytest.mark.parametrize(
    "anyio_backend", [("trio", {"clock": MockClock(autojump_threshold=AUTOJUMP_THRESHOLD)})]
)
async def test_a_connection_is_not_reused_past_the_idle_time_its_server_announced() -> None:
    """Apache and Node.js say how long they keep an idle connection (``Keep-Alive:
    timeout=5``): a request sent near that moment would meet the server's close, so the
    connection is given up a second before it, and one announced for a second or less is
    not kept at all."""
    shared = CrawlConnections(idle_limit=None)

    def announcing(seconds: str) -> Reply:
        return Reply(headers=(("keep-alive", f"timeout={seconds}, max=100"),), body=b"ok")

    routes = {"/3": announcing("3"), "/1": announcing("1"), "/plain": Reply.html("ok")}
    async with (
        open_test_server(routes, host="127.0.0.2") as server,
        lean_client(shared) as client,
    ):
        with anyio.fail_after(HANG_LIMIT):
            for path, idle, connections in [
                ("/3", 0, 1),
                ("/3", 1.9, 1),  # within 3 s less the margin: reused
                ("/3", 2.1, 2),  # past it: a new connection
                ("/plain", 0, 2),
                ("/plain", 2.5, 2),  # the last answer announced nothing: no limit now
                ("/1", 0, 2),
                ("/plain", 0, 3),  # "/1"'s connection was closed at once
                ("/plain", 100, 3),  # no announcement: kept for as long as it is open
            ]:
                await anyio.sleep(idle)
                assert isinstance(await fetch(client, server.url(path)), Response)
                assert server.connections == connections, (path, idle)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (b"timeout=5, max=100", 5.0),
        (b"max=100,timeout=7", 7.0),
        (b"Timeout = 3", 3.0),
        (b"timeout=-1", None),
        (b"timeout=soon", None),
        (b"max=100", None),
        (b"", None),
    ],
)
def test_the_keep_alive_header_is_read_leniently(value: bytes, seconds: float | None) -> None:
    headers = [(b"content-type", b"text/html"), (b"keep-alive", value)]
    assert _keep_alive_timeout(headers) == seconds
    assert _keep_alive_timeout(headers[:1]) is None


@contextlib.contextmanager
def descriptors_past(number: int) -> Iterator[None]:
    """Hold open descriptors until the next one opened is numbered past ``number``, raising
    the soft open-file limit to the hard one for it (skipping when the hard one is lower)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    needed = number + 64
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"the hard open-file limit {hard} is below {needed}")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    held: list[int] = []
    try:
        while not held or held[-1] <= number:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for descriptor in held:
            os.close(descriptor)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_an_idle_connection_numbered_past_1024_is_reused() -> None:
    """select() takes no descriptor numbered 1024 or more: checked with it, every idle
    connection of a crawl holding that many sockets looked closed, and a crawl of 5000
    hosts opened a new connection for 4 of every 5 requests."""
    shared = CrawlConnections(idle_limit=None)
    with descriptors_past(1024):
        async with (
            open_test_server({"/": Reply.html("ok")}, host="127.0.0.2") as server,
            lean_client(shared) as client,
        ):
            with anyio.fail_after(HANG_LIMIT):
                for _ in range(3):
                    assert isinstance(await fetch(client, server.url()), Response)
    assert server.connections == 1


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_a_connection_in_use_is_neither_counted_nor_closed_by_the_cap() -> None:
    shared = CrawlConnections(idle_limit=1)
    body = b"x" * 300_000
    async with (
        open_test_server({"/": Reply(body=body)}, host="127.0.0.2") as busy,
        open_test_server({"/": Reply.html("ok")}, host="127.0.0.3") as one,
        open_test_server({"/": Reply.html("ok")}, host="127.0.0.4") as two,
        lean_client(shared) as reader,
        lean_client(shared) as other,
    ):
        with anyio.fail_after(HANG_LIMIT):
            async with reader.stream("GET", busy.url()) as response:
                for server in (one, two, one):
                    assert isinstance(await fetch(other, server.url()), Response)
                assert shared.statistics().idle == 1  # the other client's; not ours
                assert await response.aread() == body
            assert shared.statistics().idle == 1  # ours, kept; the other's evicted
            assert isinstance(await fetch(reader, busy.url()), Response)
    assert busy.connections == 1
    assert one.connections == 2  # evicted by the other client's connection to `two`


# The cap on a real crawl.

HOSTS = 300
PAGES = {"/": page("/1", "/2"), "/1": page("/2"), "/2": page("/")}


def limit_descriptors_to_256() -> None:
    """In the child, before it runs Python: the file limit of a small container."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


async def crawl_many_hosts(
    tmp_path: Path, engine_name: str, environment: dict[str, str]
) -> tuple[int, str, list[dict[str, object]]]:
    """Crawl :data:`HOSTS` hosts of :data:`PAGES` each with the command line, limited to
    256 descriptors: its exit status, its stderr and its records."""
    output = tmp_path / "records.jsonl"
    async with contextlib.AsyncExitStack() as servers:
        roots = []
        for number in range(HOSTS):
            host = f"127.0.{1 + number // 250}.{1 + number % 250}"
            server = await servers.enter_async_context(open_test_server(PAGES, host=host))
            roots.append(server.url())
        with anyio.fail_after(HANG_LIMIT):
            done = await trio.run_process(
                [
                    *(sys.executable, "-m", "trio_crawler", "--engine", engine_name),
                    *("--ignore-robots", "--no-progress", "-q", "--max-tasks", "100"),
                    *("-o", str(output), *roots),
                ],
                env={**os.environ, **environment},
                preexec_fn=limit_descriptors_to_256,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    lines = output.read_text(encoding="utf-8").splitlines() if output.exists() else []
    return done.returncode, done.stderr.decode(errors="replace"), [json.loads(x) for x in lines]


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.parametrize("engine_name", list(ENGINES))
async def test_a_crawl_of_300_hosts_fits_in_256_descriptors(
    tmp_path: Path, engine_name: str
) -> None:
    status, stderr, records = await crawl_many_hosts(tmp_path, engine_name, {})
    assert status == 0, stderr
    assert "Too many open files" not in stderr
    assert len(records) == HOSTS * len(PAGES), stderr
    failed = [record for record in records if record["status"] != 200]
    assert failed == []


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_without_the_cap_the_same_crawl_runs_out_of_descriptors(tmp_path: Path) -> None:
    status, stderr, records = await crawl_many_hosts(
        tmp_path, "trio", {"TRIO_CRAWLER_MAX_IDLE": "none", "TRIO_CRAWLER_TRANSPORT": "lean"}
    )
    failed = [record for record in records if record["status"] != 200]
    assert failed, (status, stderr)
    assert {record["exception"] for record in failed} == {
        "ConnectError: [Errno 24] Too many open files"
    }


# The lookup cache on its own.


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_lookups_under_way_are_shared_and_answers_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolver = fake_resolver(
        monkeypatch, {"dual.test": ["127.0.0.5", "::1", "127.0.0.6", "::2"]}, delay=0.01
    )
    lookups = HostLookups()
    answers: list[tuple[str, ...]] = []

    async def look_up() -> None:
        answers.append(await lookups.addresses("dual.test"))

    with anyio.fail_after(HANG_LIMIT):
        async with anyio.create_task_group() as task_group:
            for _ in range(5):
                task_group.start_soon(look_up)
        answers.append(await lookups.addresses("dual.test"))
        assert await lookups.addresses("127.0.0.9") == ("127.0.0.9",)
        assert await lookups.addresses("::3") == ("::3",)
    assert resolver.asked == {"dual.test": 1}  # neither the waiting nor the literals asked
    assert answers == [("::1", "127.0.0.5", "127.0.0.6", "::2")] * 6
    statistics = lookups.statistics()
    assert (statistics.lookups, statistics.hits, statistics.failures) == (1, 5, 0)


def test_addresses_are_tried_ipv6_then_ipv4_then_the_rest() -> None:
    v4, v6 = socket.AF_INET, socket.AF_INET6
    assert happy_eyeballs_order([(v4, "1.1.1.1"), (v4, "2.2.2.2"), (v6, "::1")]) == (
        "::1",
        "1.1.1.1",
        "2.2.2.2",
    )
    assert happy_eyeballs_order([(v4, "1.1.1.1"), (v4, "1.1.1.1")]) == ("1.1.1.1",)
    assert happy_eyeballs_order([]) == ()


@pytest.mark.anyio
@pytest.mark.parametrize(
    "anyio_backend", [("trio", {"clock": MockClock(autojump_threshold=AUTOJUMP_THRESHOLD)})]
)
async def test_a_failed_lookup_is_kept_for_a_while(monkeypatch: pytest.MonkeyPatch) -> None:
    resolver = fake_resolver(monkeypatch, {})
    lookups = HostLookups()
    reason = f"cannot resolve 'nowhere.test': {NO_SUCH_NAME}"
    with anyio.fail_after(HANG_LIMIT):
        for _ in range(3):
            with pytest.raises(HostLookupError, match=reason.replace("[", r"\[")):
                await lookups.addresses("nowhere.test")
        assert resolver.asked == {"nowhere.test": 1}
        await anyio.sleep(FAILED_LOOKUP_SECONDS)
        with pytest.raises(HostLookupError):
            await lookups.addresses("nowhere.test")
    assert resolver.asked == {"nowhere.test": 2}
    statistics = lookups.statistics()
    assert (statistics.lookups, statistics.hits, statistics.failures) == (2, 2, 2)


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_a_cancelled_lookup_leaves_the_name_to_whoever_waited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolver = fake_resolver(monkeypatch, {"slow.test": ["127.0.0.1"]}, delay=0.05)
    lookups = HostLookups()
    answers: list[tuple[str, ...]] = []

    async def first(scope: anyio.CancelScope) -> None:
        with scope:
            await lookups.addresses("slow.test")
        answers.append(())  # cancelled, with nothing

    async def waiter() -> None:
        answers.append(await lookups.addresses("slow.test"))

    first_scope = anyio.CancelScope()
    with anyio.fail_after(HANG_LIMIT):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(first, first_scope)
            await anyio.wait_all_tasks_blocked()  # the first lookup is under way
            task_group.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()  # the waiter waits for it
            first_scope.cancel()
    assert answers == [(), ("127.0.0.1",)]
    assert resolver.asked == {"slow.test": 2}
    assert lookups.statistics().cached == 1


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_names_the_resolver_hangs_on_leave_threads_for_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each of a crawl's workers gave up on a lookup that the resolver never answers (its
    attempt timed out): the threads run on, blocked, as ``getaddrinfo``'s do while glibc
    waits for a DNS server. More of them than the event loop's shared pool holds (40 on
    Trio, fewer on asyncio), and yet the next name is looked up at once, in a thread of
    the crawl's own; in the shared pool it waited for the hung ones to give up."""
    workers = MIN_LOOKUP_THREADS + 10
    hung = threading.Event()  # the DNS server that never answers, until the test ends
    blocked: list[str] = []
    lock = threading.Lock()
    all_blocked = anyio.Event()

    def system_getaddrinfo(host: str, port: object, *args: object, **options: object) -> object:
        if host == "live.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.7", 0))]
        with lock:
            blocked.append(host)
            if len(blocked) == workers:
                anyio.from_thread.run_sync(all_blocked.set)
        hung.wait()
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", system_getaddrinfo)
    lookups = HostLookups(threads=lookup_threads(workers))
    try:
        with anyio.fail_after(HANG_LIMIT):
            async with anyio.create_task_group() as attempts:
                for number in range(workers):
                    attempts.start_soon(lookups.addresses, f"dead{number}.test")
                await all_blocked.wait()
                attempts.cancel_scope.cancel()  # every attempt gives up; the threads run on
            assert await lookups.addresses("live.test") == ("127.0.0.7",)
    finally:
        hung.set()
    assert len(blocked) == workers
    assert lookups.threads == 2 * workers
    assert lookup_threads(1) == MIN_LOOKUP_THREADS


def test_a_crawl_gives_its_lookups_two_threads_a_worker(engine: Engine) -> None:
    crawler = engine.crawler(["http://127.0.0.1:1/"], max_tasks=120)
    connections = crawler._fetcher.connections
    assert connections is not None
    assert connections.lookups.threads == 240


# Connecting to the addresses a lookup gave.


@contextlib.contextmanager
def listener_on(address: str = "127.0.0.1", backlog: int = 16) -> Iterator[socket.socket]:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family) as listener:
        listener.bind((address, 0))
        listener.listen(backlog)
        yield listener


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_a_refused_connection_says_so_with_the_address(anyio_backend: str) -> None:
    with listener_on() as listener:
        port = listener.getsockname()[1]
    before = open_descriptors()
    with pytest.raises(ConnectionRefusedError) as raised:
        await open_connection(["127.0.0.1"], port)
    assert raised.value.errno == errno.ECONNREFUSED
    if anyio_backend == "trio":  # connected by the crawler itself, worded as Trio words it
        assert str(raised.value) == (
            f"[Errno 111] Error connecting to ('127.0.0.1', {port}): Connection refused"
        )
    assert str(raised.value).startswith("[Errno 111] ")
    assert open_descriptors() == before


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_the_next_address_is_tried_as_soon_as_one_refuses() -> None:
    # A listener bound to 127.0.0.1 does not answer on 127.0.0.2: that one refuses.
    with listener_on() as listener, anyio.fail_after(HANG_LIMIT):
        port = listener.getsockname()[1]
        stream = await open_connection(["127.0.0.2", "127.0.0.1"], port)
        async with stream:
            assert stream.extra(anyio.abc.SocketAttribute.remote_address) == ("127.0.0.1", port)
            accepted, _ = listener.accept()
            accepted.close()


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_a_connection_cancelled_before_the_server_answers_leaves_no_socket() -> None:
    # A listener with a full accept queue drops the next SYN: a connect to it waits.
    with listener_on(backlog=0) as listener:
        port = listener.getsockname()[1]
        fillers = []
        try:
            for _ in range(2):
                filler = socket.socket()
                filler.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    filler.connect(("127.0.0.1", port))
                fillers.append(filler)
            before = open_descriptors()
            with anyio.move_on_after(0.2) as waited:
                await open_connection(["127.0.0.1"], port)
            assert waited.cancelled_caught
            assert open_descriptors() == before
        finally:
            for filler in fillers:
                filler.close()


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_an_ipv6_address_is_connected_to() -> None:
    with contextlib.ExitStack() as stack:
        try:
            listener = stack.enter_context(listener_on("::1"))
        except OSError as exc:
            pytest.skip(f"no IPv6 loopback here: {exc}")
        port = listener.getsockname()[1]
        with anyio.fail_after(HANG_LIMIT):
            async with await open_connection(["::1"], port) as stream:
                remote = stream.extra(anyio.abc.SocketAttribute.remote_address)
                assert remote[:2] == ("::1", port)


# The lookup cache on a crawl, and TLS to a name.


@pytest.mark.anyio
@pytest.mark.usefixtures("lean")
async def test_a_crawl_looks_each_host_name_up_once(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    resolver = fake_resolver(
        monkeypatch,
        {"site-a.test": ["127.0.0.1"], "site-b.test": ["127.0.0.1"]},
        delay=engine.seconds(1),
    )
    links = [f"/{number}" for number in range(8)]
    routes = {"/": page(*links), **{link: page("/") for link in links}}
    async with (
        open_test_server(routes) as site_a,
        open_test_server(routes) as site_b,
        open_test_server(routes) as literal,
    ):

        def named(url: str, name: str) -> str:
            return url.replace("127.0.0.1", name)

        roots = [named(site_a.url(path), "site-a.test") for path in ("/", *links[:3])]
        roots += [named(site_b.url(), "site-b.test"), literal.url()]
        missing = [f"http://nowhere.test:{site_a.port}{path}" for path in ("/x", "/y")]
        crawler = await crawl(engine, roots + missing, max_tasks=4, obey_robots=False)
    assert resolver.asked == {"site-a.test": 1, "site-b.test": 1, "nowhere.test": 1}
    assert site_a.connections > 1  # several workers connected, one lookup
    records = by_url(crawler)
    assert len(records) == 3 * len(routes) + len(missing)
    reason = f"cannot resolve 'nowhere.test': {NO_SUCH_NAME}"
    for url in missing:
        assert records[url].status is None
        assert records[url].exception == f"ConnectError: {reason}"
    assert {stat.status for url, stat in records.items() if url not in missing} == {200}
    assert crawler._fetcher.connections is not None
    statistics = crawler._fetcher.connections.statistics()
    assert (statistics.lookups, statistics.lookup_failures) == (3, 1)
    assert statistics.lookup_hits >= site_a.connections - 1


@pytest.mark.anyio
@pytest.mark.real_time  # a real lookup runs in a worker thread
@pytest.mark.usefixtures("lean")
async def test_a_crawl_of_localhost_looks_it_up_once(engine: Engine) -> None:
    links = [f"/{number}" for number in range(6)]
    routes = {"/": page(*links), **{link: page("/") for link in links}}
    async with open_test_server(routes) as server:
        roots = [server.url(path).replace("127.0.0.1", "localhost") for path in ("/", *links)]
        crawler = await crawl(engine, roots, max_tasks=4, obey_robots=False)
    assert {stat.status for stat in crawler.done} == {200}
    assert len(crawler.done) == len(routes)
    assert server.connections > 1
    assert crawler._fetcher.connections is not None
    assert crawler._fetcher.connections.statistics().lookups == 1


@pytest.mark.anyio
@BOTH_BACKENDS
async def test_tls_to_a_resolved_address_checks_the_host_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("site-a.test").configure_cert(server_context)
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    fake_resolver(monkeypatch, {"site-a.test": ["127.0.0.1"]})
    async with (
        open_test_server({"/": Reply.html("ok")}, ssl_context=server_context) as server,
        lean_client(CrawlConnections(idle_limit=4), trusting) as client,
    ):
        assert isinstance(client, TransportClient)
        with anyio.fail_after(HANG_LIMIT):
            by_name = await fetch(client, server.url().replace("127.0.0.1", "site-a.test"))
            by_address = await fetch(client, server.url())
    assert isinstance(by_name, Response), by_name
    assert by_name.status == 200
    assert isinstance(by_address, FetchError)  # the certificate names site-a.test only
    assert "CERTIFICATE_VERIFY_FAILED" in by_address.error
