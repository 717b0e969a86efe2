"""Connections and names at scale: the host-name cache (``_lookups.py``, ``_lru.py``) that
the crawler's own transports share (``_connections.py``).

The cache is shown by crawls of host names that a fake ``getaddrinfo`` answers (so that
Trio's virtual clock never sees a thread), counting the lookups it is asked for, and by a
crawl of ``localhost`` through the system's resolver on the real clock.
"""

from __future__ import annotations

import collections
import socket
import ssl
from collections.abc import Sequence

import anyio
import pytest
import trustme
from trio.testing import MockClock

from trio_crawler._clients import Client, TransportClient, choose_http_library, open_client
from trio_crawler._connections import CrawlConnections
from trio_crawler._events import FetchError, Response
from trio_crawler._fetch import fetch
from trio_crawler._lookups import (
    FAILED_LOOKUP_SECONDS,
    HostLookupError,
    HostLookups,
    happy_eyeballs_order,
)
from trio_crawler._lru import LRU

from conftest import AUTOJUMP_THRESHOLD, Engine
from httpserver import Reply, open_test_server
from support import HANG_LIMIT, by_url, crawl, page

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
        lean_client(CrawlConnections(), trusting) as client,
    ):
        assert isinstance(client, TransportClient)
        with anyio.fail_after(HANG_LIMIT):
            by_name = await fetch(client, server.url().replace("127.0.0.1", "site-a.test"))
            by_address = await fetch(client, server.url())
    assert isinstance(by_name, Response), by_name
    assert by_name.status == 200
    assert isinstance(by_address, FetchError)  # the certificate names site-a.test only
    assert "CERTIFICATE_VERIFY_FAILED" in by_address.error
